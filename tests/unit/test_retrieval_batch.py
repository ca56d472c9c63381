"""Batch-scope few-shot retrieval: one shared set of demonstrations per answer format."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client.agent import ClientAgent
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.profiles import AgentProfile
from pfedma_flwr.data.retrieval import FewShotRetriever, clear_retrieval_cache
from pfedma_flwr.protocol.schema import RespondInstruction, RoutedQuery


class TableEmbedder:
    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    @property
    def dim(self) -> int:
        return 2

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray([self.table.get(t, [0.0, 0.0]) for t in texts], dtype=np.float32)


def _task(i: int, question: str, kind: str = "number") -> Task:
    if kind == "number":
        return Task(task_id=f"t{i}", benchmark="synth", domain="math", question=question,
                    gold=str(i), answer_kind="number")
    return Task(task_id=f"t{i}", benchmark="synth", domain="medicine", question=question,
                gold="A", answer_kind="option", options={"A": "yes", "B": "no"})


@pytest.fixture(autouse=True)
def _fresh():
    clear_retrieval_cache()
    yield
    clear_retrieval_cache()


def test_batch_retrieval_ranks_by_mean_cosine_and_excludes_batch_questions():
    emb = TableEmbedder({"p1": [1, 0], "p2": [0, 1], "p3": [0.6, 0.8],
                         "q1": [1, 0], "q2": [0, 1]})
    r = FewShotRetriever([_task(1, "p1"), _task(2, "p2"), _task(3, "p3")], emb)
    # mean(q1, q2) = (0.5, 0.5): p1 0.5, p2 0.5, p3 0.3 + 0.4 = 0.7 -> p3 first, then pool order.
    assert [t.question for t in r.retrieve_for_batch(["q1", "q2"], 3)] == ["p3", "p1", "p2"]
    # per query the nearest differ (q1 -> p1, q2 -> p2): batch scope trades that for one prefix
    assert r.retrieve("q1", 1)[0].question == "p1" and r.retrieve("q2", 1)[0].question == "p2"
    # a pool task asking one of the batch's own questions is never a demonstration
    assert [t.question for t in r.retrieve_for_batch(["p3", "q1"], 1)] == ["p1"]
    assert r.retrieve_for_batch([], 2) == [] and r.retrieve_for_batch(["q1"], 0) == []
    with pytest.raises(ValueError, match="k must be >= 0"):
        r.retrieve_for_batch(["q1"], -1)


@pytest.mark.parametrize("scope", ["batch", "query"])
def test_agent_demonstrations_by_scope_and_answer_format(scope: str):
    emb = TableEmbedder({"p1": [1, 0], "p2": [0, 1], "m1": [0.6, 0.8],
                         "q1": [1, 0], "q2": [0, 1], "qm": [0.6, 0.8]})
    backend = MockBackend()
    agent = ClientAgent(
        profile=AgentProfile(name="x", domains=("math",), prompt="You are X."), backend=backend,
        private_data=[_task(1, "p1"), _task(2, "p2"), _task(3, "m1", "option")],
        embedder=emb, recognizer=None, few_shot=1, few_shot_scope=scope,
        response_format="json")
    ins = RespondInstruction(server_round=1, queries=(
        RoutedQuery(query_id="a", text="q1", domain="math", round=1, answer_kind="number"),
        RoutedQuery(query_id="b", text="q2", domain="math", round=1, answer_kind="number"),
        RoutedQuery(query_id="c", text="qm", domain="medicine", round=1, answer_kind="option"),
    ), global_rules=())
    agent.respond(ins, agent.new_state())
    demos = [p[1]["content"] for p in backend.prompts]  # the demonstration's question
    # number queries: batch -> both get p1 (mean (0.5,0.5): p1 = p2 = 0.5, pool order);
    # query -> each its nearest. The option query only ever sees the option example.
    assert demos == (["p1", "p1", "m1"] if scope == "batch" else ["p1", "p2", "m1"])


def test_agent_rejects_unknown_scope():
    with pytest.raises(ValueError, match="few_shot_scope"):
        ClientAgent(profile=AgentProfile(name="x", domains=("math",), prompt="p"),
                    backend=MockBackend(), private_data=[], embedder=TableEmbedder({}),
                    recognizer=None, few_shot_scope="round")


def test_reasoning_agents_show_only_worked_demonstrations():
    # response_format=reasoning: a D_i task with a rationale becomes a worked demonstration
    # ("... The answer is N."); one without (MedQA-style) is never shown, the reasoning is
    # instructed instead.
    import dataclasses

    emb = TableEmbedder({"p1": [1, 0], "m1": [0.6, 0.8], "q1": [1, 0], "qm": [0.6, 0.8]})
    backend = MockBackend()
    worked = dataclasses.replace(_task(1, "p1"), rationale="2 + 3 = 5")
    agent = ClientAgent(
        profile=AgentProfile(name="x", domains=("math",), prompt="You are X."), backend=backend,
        private_data=[worked, _task(3, "m1", "option")], embedder=emb, recognizer=None,
        few_shot=1, few_shot_scope="query")
    ins = RespondInstruction(server_round=1, queries=(
        RoutedQuery(query_id="a", text="q1", domain="math", round=1, answer_kind="number"),
        RoutedQuery(query_id="c", text="qm", domain="medicine", round=1, answer_kind="option"),
    ), global_rules=())
    agent.respond(ins, agent.new_state())
    number, option = backend.prompts
    assert [m["role"] for m in number] == ["system", "user", "assistant", "user"]
    assert number[2]["content"] == f"2 + 3 = 5\nThe answer is {worked.gold}."
    assert [m["role"] for m in option] == ["system", "user"]
