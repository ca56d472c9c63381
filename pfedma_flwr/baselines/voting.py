"""Equal-weight majority votes: the baselines' aggregation (no capability or reliability state).

Both votes are :func:`pfedma_flwr.aggregation.consensus.aggregate` with every weight 1, so
answers are grouped and ties broken exactly as PFedMA's ``z`` (more responses, then the
smallest canonical answer). They take ``aggregate``'s keywords, so either can be the engine's
``aggregator``; the routing state and ablation switches they are given are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pfedma_flwr.aggregation.consensus import CollabState, RoundResponse, aggregate
from pfedma_flwr.answers import Options


def _vote(history: Sequence[RoundResponse], kind: str, round: int | None,
          options: Options) -> CollabState:
    return aggregate(history, kind=kind, domain="", routing={}, round=round,
                     use_capability=False, use_reliability=False, options=options,
                     per_client=False, use_anomaly=False)


def vote_all(
    history: Sequence[RoundResponse], *, kind: str, round: int | None = None,
    options: Options = None, **_ignored: Any,
) -> CollabState:
    """Majority vote over the retained responses of every round so far (one vote each)."""
    return _vote(history, kind, round, options)


def latest_voted_round(history: Sequence[RoundResponse]) -> int:
    """The last round with a retained response (0 when none)."""
    return max((r.round for r in history if r.retained and r.response is not None), default=0)


def vote_latest(
    history: Sequence[RoundResponse], *, kind: str, round: int | None = None,
    options: Options = None, **_ignored: Any,
) -> CollabState:
    """Majority vote over the latest round that holds a retained response.

    Debate, refinement and layered methods answer from their last round; a last round in which
    every answer failed falls back to the round before, so an earlier answer is not lost.
    ``z.round`` is the latest round of ``history`` (or ``round``), as for PFedMA.
    """
    t = round if round is not None else max((r.round for r in history), default=0)
    last = latest_voted_round(history)
    return _vote([r for r in history if r.round == last], kind, t, options)
