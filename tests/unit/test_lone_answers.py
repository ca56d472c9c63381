"""What C learns from answers that had nothing to be compared with (routing/lone.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from pfedma_flwr.aggregation.consensus import RoundResponse
from pfedma_flwr.protocol.schema import StructuredResponse
from pfedma_flwr.routing.lone import had_reference, lone_qualities


def _h(client: str, rnd: int, answer: str | None, retained: bool = True, a: float = 0.2
       ) -> RoundResponse:
    resp = None if answer is None else StructuredResponse(final_answer=answer)
    return RoundResponse(client_id=client, round=rnd, response=resp, retained=retained,
                         anomaly=a)


def _majority(answer: str, others: Sequence[Any]) -> float | None:
    """z of the others = their most common retained answer; sim = canonical equality."""
    votes = [o.response.final_answer for o in others if o.retained and o.response is not None]
    if not votes:
        return None
    return 1.0 if max(set(votes), key=votes.count) == answer else 0.0


def test_round_one_alone_is_credited_by_later_agreement():
    # round 1: only "x" answered (its partner failed); round 2: "y" agrees, "w" does not
    hist = [_h("x", 1, "7", a=0.2), _h("p", 1, None, retained=False),
            _h("y", 2, "7", a=0.1)]
    assert not had_reference(hist, "x", 1) and had_reference(hist, "y", 2)
    # y had a reference in its own round (its g was computed then): only x is deferred,
    # g = (1 - 0.2) * sim(7, z_others = 7) = 0.8
    assert lone_qualities(hist, mode="defer", similarity=_majority) == [("x", 0.8)]
    hist2 = [_h("x", 1, "7", a=0.2), _h("w", 2, "9", a=0.0)]
    assert lone_qualities(hist2, mode="prior", similarity=_majority) == [("x", 0.0)]


def test_an_answer_alone_to_the_end_gets_the_prior_only_under_prior():
    hist = [_h("x", 1, "7", a=0.3), _h("p", 1, "8", retained=False, a=0.9)]
    assert lone_qualities(hist, mode="prior", similarity=_majority) == [
        ("x", pytest.approx(0.35))]  # (1 - 0.3) * 0.5
    assert lone_qualities(hist, mode="defer", similarity=_majority) == []
    assert lone_qualities(hist, mode="skip", similarity=_majority) == []
    # a filtered answer is never deferred: its g was 0 in its round
    assert all(c != "p" for c, _ in lone_qualities(hist, mode="prior", similarity=_majority))


def test_two_answers_of_one_round_are_not_lone():
    hist = [_h("x", 1, "7"), _h("y", 1, "9")]
    assert lone_qualities(hist, mode="prior", similarity=_majority) == []
    with pytest.raises(ValueError, match="lone_answers"):
        lone_qualities(hist, mode="always", similarity=_majority)
