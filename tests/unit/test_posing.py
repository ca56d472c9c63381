"""``q̃`` of a query's next round (server/posing.py): P_in, refinement, candidate."""

from __future__ import annotations

import pytest

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.protocol.schema import CANDIDATE_CHARS, GlobalRule
from pfedma_flwr.protocol.validation import DEFAULT_LIMITS
from pfedma_flwr.rules.pii import RegexPiiRecognizer
from pfedma_flwr.server.posing import pose
from pfedma_flwr.server.query_state import QueryState

TASK = Task(task_id="t1", benchmark="gsm8k", domain="math",
            question="Mail ann@example.org: how much is 3 + 4?", gold="7",
            answer_kind="number")
EMAIL_RULE = GlobalRule(rule_id="g1", text="redact e-mail addresses in queries",
                        category="contact information", scope="query",
                        entity_types=("EMAIL_ADDRESS",))


def _q(t: int = 0, answer: str = "") -> QueryState:
    q = QueryState(task=TASK)
    q.t = t
    if answer:
        q.z = CollabState(answer=answer, canonical=answer, support=0.5, round=t,
                          n_agreeing=1, n_retained=2, dissent=(("6", 0.5),))
    return q


def test_round_one_is_the_redacted_task_without_refinement():
    posed = pose(_q(), "math", [EMAIL_RULE], recognizer=RegexPiiRecognizer(),
                 quarantine=None, refine=lambda z: "never asked")
    assert "ann@example.org" not in posed.query.text and "3 + 4" in posed.query.text
    assert posed.fired == ("g1",)
    assert (posed.query.round, posed.query.refinement, posed.query.candidate) == (1, "", "")
    # P_in itself, for what an orchestrator composes per client
    assert "bob@example.org" not in posed.pin("cc bob@example.org")


def test_later_rounds_carry_the_refiner_s_text_and_z_s_answer_as_candidate():
    seen = []

    def refiner(z):  # noqa: ANN001, ANN202
        seen.append(z)
        return "Agents split. Reply to ann@example.org."

    posed = pose(_q(t=1, answer="7"), "math", [EMAIL_RULE], recognizer=RegexPiiRecognizer(),
                 quarantine=None, refine=refiner)
    assert posed.query.round == 2 and posed.query.candidate == "7"
    # P_in applies to the refinement too, and both firings are counted
    assert "ann@example.org" not in posed.query.refinement and posed.fired == ("g1", "g1")
    assert seen[0].answer == "7"  # the refiner saw z's public form


def test_no_refiner_means_no_refinement_and_no_candidate():
    posed = pose(_q(t=1, answer="7"), "math", [], recognizer=None, quarantine=None,
                 refine=None)
    assert (posed.query.refinement, posed.query.candidate, posed.fired) == ("", "", ())


def test_an_empty_refinement_sends_no_candidate():
    posed = pose(_q(t=1, answer="7"), "math", [], recognizer=None, quarantine=None,
                 refine=lambda z: "  ")
    assert (posed.query.refinement, posed.query.candidate) == ("", "")


def test_long_texts_are_cut_to_the_wire_caps():
    long_answer = "9" * (CANDIDATE_CHARS + 50)
    posed = pose(_q(t=1, answer=long_answer), "math", [], recognizer=None, quarantine=None,
                 refine=lambda z: "x" * (DEFAULT_LIMITS.max_text_chars + 10))
    assert len(posed.query.refinement) == DEFAULT_LIMITS.max_text_chars
    assert posed.query.candidate == "9" * CANDIDATE_CHARS


def test_a_refiner_returning_no_string_is_named():
    def bad(z):  # noqa: ANN001, ANN202
        return 42

    with pytest.raises(TypeError, match=r"refiner '.*bad' returned int for t1, expected str"):
        pose(_q(t=1, answer="7"), "math", [], recognizer=None, quarantine=None, refine=bad)
