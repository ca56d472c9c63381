"""The client's experience X_i and the candidate answer as a structured field (issue 31 item 7).

A verified lesson is learned when the agent's answer confirms the candidate answer the server
sends beside its refinement (``RoutedQuery.candidate``), whatever a refiner wrote: the client
never reads the candidate out of the refinement's wording.
"""

from __future__ import annotations

import numpy as np

from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client import memory
from pfedma_flwr.client.agent import ClientAgent
from pfedma_flwr.config import load_config
from pfedma_flwr.data.profiles import AgentProfile
from pfedma_flwr.data.split import sample_eval_tasks
from pfedma_flwr.protocol.schema import (
    CANDIDATE_CHARS,
    ClientReply,
    ProcessedResponse,
    RespondInstruction,
    RoutedQuery,
    StructuredResponse,
)
from pfedma_flwr.protocol.wire import ClientDescription
from pfedma_flwr.rules.pii import get_recognizer
from pfedma_flwr.server.components import build_engine

HERE = "tests.unit.test_client_memory"


def terse(z) -> str:  # noqa: ANN001 - a plug-in refiner that quotes no answer
    return "Some agents disagreed. Think again." if z.answer else ""


def _q(**kw) -> RoutedQuery:  # noqa: ANN003
    base = {"query_id": "q1", "text": "A shop sells 6 eggs a day. How many in 7 days?",
            "domain": "math", "round": 2, "answer_kind": "number"}
    return RoutedQuery(**{**base, **kw})


def test_a_lesson_needs_the_structured_candidate_and_an_answer_that_confirms_it():
    lessons: list[str] = []
    assert memory.learn_lesson(lessons, _q(candidate="42"), "42", capacity=4)
    assert lessons == ["A shop sells 6 eggs a day. How many in 7 days? -> verified answer 42"]
    assert not memory.learn_lesson(lessons, _q(candidate="42"), "41", capacity=4)
    # the old wording alone no longer teaches anything: only the field counts
    assert not memory.learn_lesson(
        lessons, _q(refinement="answers given: '42' (100%)."), "42", capacity=4)
    for k in range(5):
        memory.learn_lesson(lessons, _q(candidate=str(k)), str(k), capacity=3)
    assert [ls.rsplit(" ", 1)[1] for ls in lessons] == ["2", "3", "4"]  # the newest 3


def test_the_candidate_travels_on_the_wire_only_when_set():
    assert "candidate" not in _q().to_dict()  # a node of the previous version takes round 1
    d = _q(candidate="42", refinement="x").to_dict()
    assert d["candidate"] == "42" and RoutedQuery.from_dict(d) == _q(candidate="42",
                                                                     refinement="x")
    long = RoutedQuery.from_dict({**d, "candidate": "9" * 5000})
    assert long.candidate == "9" * CANDIDATE_CHARS


def test_a_plug_in_refiner_no_longer_switches_lessons_off():
    agent = ClientAgent(profile=AgentProfile(name="m", domains=("math",), prompt="Math."),
                        backend=MockBackend(lambda msgs: "6 * 7 = 42.\nThe answer is 42."),
                        private_data=[], embedder=_Emb(), recognizer=get_recognizer("regex"),
                        few_shot=0, lessons=1)
    state = agent.new_state()
    q = _q(refinement=terse(_Z("42")), candidate="42")
    agent.respond(RespondInstruction(server_round=2, queries=(q,)), state)
    assert state.lessons == [
        "A shop sells 6 eggs a day. How many in 7 days? -> verified answer 42"]


def _engine(*overrides: str):  # noqa: ANN202
    cfg = load_config({"config-name": "tiny", "overrides": " ".join(
        ("strategy.k_max=2", "strategy.t_max=2", "strategy.batch_size=1", *overrides))})
    tasks = sample_eval_tasks(["gsm8k"], 1, cfg.seed, None,
                              dev_pool_per_benchmark=cfg.data.dev_pool_per_benchmark)
    engine = build_engine(cfg, tasks)
    engine.register_clients({c: ClientDescription(f"agent {c}", ("math",), f"Agent {c}.",
                                                  client_key=c) for c in ("p0", "p1", "p2")})
    return engine


def _second_round(engine) -> list[RoutedQuery]:  # noqa: ANN001
    plan = engine.plan_round(1)
    assert all(q.candidate == "" for ins in plan.values() for q in ins.queries)  # round 1
    answers = iter(("7", "8"))  # a split vote: the query goes on to round 2
    engine.absorb_round(1, {c: ClientReply(responses=tuple(
        ProcessedResponse(q.query_id, StructuredResponse(next(answers)), tokens=3)
        for q in ins.queries)) for c, ins in plan.items()}, {})
    return [q for ins in engine.plan_round(2).values() for q in ins.queries]


def test_the_engine_sends_z_s_answer_as_the_candidate_beside_any_refinement():
    for overrides in ((), (f"routing.refine_style={HERE}:terse",)):
        second = _second_round(_engine(*overrides))
        assert second, "the split vote should have gone to a second round"
        for q in second:
            assert q.candidate in ("7", "8") and q.refinement
            if not overrides:  # the built-in wording lists the candidate first
                assert f"answers given: '{q.candidate}'" in q.refinement
            else:
                assert q.refinement == "Some agents disagreed. Think again."
    # -RQ: no refinement, so nothing to confirm
    assert all(q.candidate == "" and q.refinement == ""
               for q in _second_round(_engine("routing.refine_query=false")))


class _Emb:
    dim = 2

    def encode(self, texts):  # noqa: ANN001, ANN201
        return np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2)


class _Z:
    def __init__(self, answer: str) -> None:
        self.answer = answer


def test_a_runaway_number_in_one_answer_is_absorbed_like_any_other():
    """A 40-digit answer once raised in canonical_answer and the round rolled the client back."""
    engine = _engine()
    plan = engine.plan_round(1)
    big = "9" * 40
    answers = iter((big, "7"))
    log = engine.absorb_round(1, {c: ClientReply(responses=tuple(
        ProcessedResponse(q.query_id, StructuredResponse(next(answers)), tokens=3)
        for q in ins.queries)) for c, ins in plan.items()}, {})
    assert engine.totals.answers == 2 and engine.totals.answers_failed == 0
    assert log["queries"] and engine.totals.retained + engine.totals.filtered == 2
    second = [q for ins in engine.plan_round(2).values() for q in ins.queries]
    assert {q.candidate for q in second} <= {big, "7"}
