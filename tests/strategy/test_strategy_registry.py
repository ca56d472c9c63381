"""``strategy.name``: built-in methods and an outside ``module:Class`` over the FakeGrid."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from client_apps.agent_app import app as client_app
from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client import components as client_components
from pfedma_flwr.config import ConfigError, PFedMAConfig, load_config
from pfedma_flwr.protocol.codec import QUERY_RESPOND, decode_instruction
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery, Selection
from pfedma_flwr.server_app import run_server
from pfedma_flwr.testing import FakeGrid
from strategies.pfedma import PFedMA
from strategies.registry import METHODS, STRATEGIES
from tests.strategy.conftest import answer_json, read_jsonl

HERE = "tests.strategy.test_strategy_registry"


class LastClientOnly:
    """Asks only the client with the largest id, once."""

    def select(self, query: OrchestratorQuery, z: Any, candidates: Sequence[CandidateState], *,
               round: int, k_max: int | None = None) -> Selection:
        if round > 1:
            return Selection.stop_now("one round")
        return Selection((max(c.client_id for c in candidates),))


class OutsideStrategy(PFedMA):
    """A strategy from outside the registry: PFedMA's loop with its own orchestrator."""

    @classmethod
    def engine_parts(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> dict[str, Any]:
        return {"orchestrator": LastClientOnly()}


NOT_A_STRATEGY = object()


def _respond_instructions(grid: Any) -> list[tuple[int, Any]]:
    return [(m.metadata.dst_node_id, decode_instruction(m.content)) for m in grid.sent
            if m.metadata.message_type == QUERY_RESPOND]


def test_a_strategy_from_outside_the_repo_runs_through_strategy_name(federation, tmp_path):
    name = f"{HERE}:OutsideStrategy"
    summary, _ = federation(num_nodes=4, overrides=f"strategy.name={name}")
    assert summary["status"] == "completed"
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    # tiny: 6 queries; the outside orchestrator asked partition-3 alone, one round each
    assert len(queries) == 6
    assert all(q["selections"] == [["partition-3"]] and q["rounds"] == 1 for q in queries)
    assert f"name: {name}" in (tmp_path / "out" / "config.yaml").read_text()


def test_unknown_or_non_strategy_names_fail_clearly(federation):
    with pytest.raises(ConfigError, match=r"unknown strategy 'nope'; available: \['epeagents'"):
        federation(overrides="strategy.name=nope")
    with pytest.raises(ConfigError, match="has no from_config"):
        federation(overrides=f"strategy.name={HERE}:NOT_A_STRATEGY")
    with pytest.raises(ConfigError, match="cannot import strategy 'no_such_module:X'"):
        federation(overrides="strategy.name=no_such_module:X")


def test_every_method_of_the_tables_is_registered():
    assert set(METHODS) == set(STRATEGIES.names())
    assert METHODS[0] == "pfedma" and len(METHODS) == 8


@pytest.mark.parametrize("method", METHODS)
def test_each_method_runs_on_the_same_client_app(method: str, federation, tmp_path: Path):
    """Every agent answers 42; the shape of each method's rounds follows from its rules."""
    summary, grid = federation(num_nodes=4, responder=lambda msgs: answer_json("42"),
                               overrides=f"strategy.name={method}")
    assert summary["status"] == "completed" and summary["strategy"] == method
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert len(queries) == 6 and all(q["answer"] == "42" for q in queries)
    sels = [q["selections"] for q in queries]
    # tiny.yaml: T_max = 2, K_max = 2
    assert all(len(s) <= 2 and all(1 <= len(r) <= 2 for r in s) for s in sels)
    shape = {
        # one agent, one round
        "single-agent": [[1]],
        # two agents agree in round 1: PFedMA's stop rule, Fed-ICL's and the debate's unanimity
        "pfedma": [[2]], "fedicl": [[2]], "optagent": [[2]],
        # one round by design
        "epeagents": [[2]], "kabb": [[2]],
        # one agent per turn; "42" twice is a repeat, so turn 3 would stop (T_max = 2 first)
        "router-r1": [[1, 1]],
        # two proposers, then the aggregator alone
        "moa": [[2, 1]],
    }[method]
    assert {tuple(len(r) for r in s) for s in sels} == {tuple(shape[0])}, sels
    ckpt = json.loads((tmp_path / "out" / "checkpoint.json").read_text())
    if method == "kabb":  # the bandit's outcomes are in the checkpoint, one per finished query
        done = [r["query_id"] for r in ckpt["finished"]]
        assert [o[0] for o in ckpt["orchestrator"]["outcomes"]] == done and len(done) >= 4
    elif method == "pfedma":
        assert ckpt["orchestrator"] is None


def test_moa_sends_the_proposals_to_the_aggregator(federation):
    _, grid = federation(num_nodes=4, responder=lambda msgs: answer_json("42"),
                         overrides="strategy.name=moa")
    late = [q for _n, ins in _respond_instructions(grid) for q in ins.queries if q.round == 2]
    assert late and all("Proposals of other agents" in q.refinement
                        and "You are the aggregator" in q.refinement
                        and q.refinement.count("- Agent ") == 2 for q in late)


def test_router_turns_ask_a_new_expert_and_show_the_earlier_answer(federation, tmp_path):
    _, grid = federation(num_nodes=4, responder=lambda msgs: answer_json("42"),
                         overrides="strategy.name=router-r1")
    for q in read_jsonl(tmp_path / "out" / "queries.jsonl"):
        first, second = q["selections"]
        assert first != second  # not yet consulted first
    late = [q for _n, ins in _respond_instructions(grid) for q in ins.queries if q.round == 2]
    assert late and all("- Agent 1: '42'" in q.refinement for q in late)


def recheck_refiner(z: Any) -> str:
    """An outside refiner (``routing.refine_style=module:attr``)."""
    return f"Re-check {z.answer!r}." if z is not None and not z.empty else ""


def test_a_refiner_from_outside_the_repo_writes_the_round_two_refinement(federation):
    count = itertools.count()  # every answer differs: no consensus, so every query has round 2
    _, grid = federation(num_nodes=4, responder=lambda msgs: answer_json(str(next(count))),
                         overrides=f"routing.refine_style={HERE}:recheck_refiner")
    late = [q for _n, ins in _respond_instructions(grid) for q in ins.queries if q.round == 2]
    numbers = [q for q in late if q.answer_kind == "number"]
    assert numbers and all(re.fullmatch(r"Re-check '\d+'\.", q.refinement) for q in numbers)
    # a refiner sees only well-formed answers (issue 30): a number is no answer to an option
    # task, so the MedQA queries' z is empty to it and their refinement too
    assert all(q.refinement == "" for q in late if q.answer_kind == "option")
    early = [q for _n, ins in _respond_instructions(grid) for q in ins.queries if q.round == 1]
    assert early and all(q.refinement == "" for q in early)


def bad_refiner(z: Any) -> Any:
    return 42


def test_refiner_names_are_checked(federation):
    with pytest.raises(ConfigError, match=r"routing.refine_style must be one of "
                                          r"\('independent', 'verify'\) or a module:attr"):
        federation(overrides="routing.refine_style=nope")
    count = itertools.count()
    with pytest.raises(TypeError, match=r"refiner 'bad_refiner' returned int"):
        federation(responder=lambda msgs: answer_json(str(next(count))),
                   overrides=f"routing.refine_style={HERE}:bad_refiner")


class _CrashingGrid(FakeGrid):
    """Raises on the ``crash_at``-th ``send_and_receive`` (the handshake is call 1)."""

    def __init__(self, *a: Any, crash_at: int, **k: Any) -> None:
        super().__init__(*a, **k)
        self.calls, self.crash_at = 0, crash_at

    def send_and_receive(self, messages, *, timeout=None):
        self.calls += 1
        if self.calls == self.crash_at:
            raise RuntimeError("server killed")
        return super().send_and_receive(messages, timeout=timeout)


def test_kabb_resumes_with_the_posterior_it_had(tmp_path: Path, monkeypatch):
    """A crash in round 3 and ``--resume``: the bandit's outcomes equal an uninterrupted run's."""
    monkeypatch.setattr(client_components, "make_configured_backend",
                        lambda cfg: MockBackend(lambda m: answer_json(str(len(m[0]["content"])
                                                                          % 3))))

    def run(name: str, *, crash_at: int | None = None, resume: bool = False) -> dict:
        client_components.build_agent.cache_clear()
        rc = {"config-name": "tiny", "output-dir": str(tmp_path / name), "resume": resume,
              "overrides": "output.progress=false strategy.name=kabb strategy.batch_size=2"}
        grid = (_CrashingGrid(client_app, 4, rc, crash_at=crash_at) if crash_at
                else FakeGrid(client_app, 4, rc))
        run_server(grid, load_config(rc))
        return json.loads((tmp_path / name / "checkpoint.json").read_text())

    ref = run("ref")
    with pytest.raises(RuntimeError, match="server killed"):
        run("crash", crash_at=4)
    ckpt = json.loads((tmp_path / "crash" / "checkpoint.json").read_text())
    # batch 2, one round per query: queries 1-2 finished when round 2 was planned
    assert ckpt["server_round"] == 2 and len(ckpt["orchestrator"]["outcomes"]) == 2
    resumed = run("crash", resume=True)
    assert resumed["orchestrator"] == ref["orchestrator"]
    assert len(ref["orchestrator"]["outcomes"]) >= 4
    sel = {q["query_id"]: q["selections"] for q in read_jsonl(tmp_path / "ref" / "queries.jsonl")}
    for q in read_jsonl(tmp_path / "crash" / "queries.jsonl"):
        assert q["selections"] == sel[q["query_id"]]


def test_the_llm_policys_own_tokens_are_part_of_each_querys_cost(federation, tmp_path):
    # every backbone at 1 USD per million tokens: cost = (agent + orchestrator tokens) / 1e6
    summary, _ = federation(num_nodes=4, responder=lambda msgs: answer_json("42"),
                            overrides="routing.orchestrator=llm routing.llm_backend.name=mock "
                                      "routing.prices.default=1.0")
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert len(queries) == 6 and all(q["orchestrator_tokens"] > 0 for q in queries)
    for q in queries:
        assert q["cost"] == pytest.approx((q["tokens"] + q["orchestrator_tokens"]) / 1e6,
                                          abs=1e-8)
    spent = summary["orchestrator"]["state"]["tokens"]
    assert sum(q["orchestrator_tokens"] for q in queries) == spent
    assert summary["orchestrator_tokens_per_query"] == pytest.approx(spent / 6)


def test_a_heuristic_policy_costs_no_orchestrator_tokens(federation, tmp_path):
    federation(num_nodes=4, responder=lambda msgs: answer_json("42"),
               overrides="routing.prices.default=1.0")
    for q in read_jsonl(tmp_path / "out" / "queries.jsonl"):
        assert q["orchestrator_tokens"] == 0
        assert q["cost"] == pytest.approx(q["tokens"] / 1e6, abs=1e-8)
