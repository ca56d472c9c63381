"""Absorbing a round as a transaction (``pfedma_flwr.server.transaction``), without Flower.

The fault is planted through the public config (``strategy.aggregator``, a plug-in that raises
on one answer), never by patching engine internals; the engine is driven through its own API
(``register_clients``, ``plan_round``, ``absorb_round`` via :func:`absorb_isolated`).
"""

from __future__ import annotations

from typing import Any

import pytest

from pfedma_flwr.aggregation.consensus import aggregate
from pfedma_flwr.config import load_config
from pfedma_flwr.data.split import sample_eval_tasks
from pfedma_flwr.protocol.schema import ClientReply, ProcessedResponse, StructuredResponse
from pfedma_flwr.protocol.wire import ClientDescription
from pfedma_flwr.server.components import build_engine
from pfedma_flwr.server.transaction import absorb_isolated, restore, snapshot

POISON = "POISON"
HERE = "tests.unit.test_transaction"


def poisoned(history, **kw):  # noqa: ANN001, ANN003, ANN201 - a plug-in aggregator
    """PFedMA's vote, raising on any answer ``POISON`` (a plug-in bug one reply triggers)."""
    if any(r.response is not None and r.response.final_answer == POISON for r in history):
        raise ZeroDivisionError("planted fault")
    return aggregate(history, **kw)


def pair_poisoned(history, **kw):  # noqa: ANN001, ANN003, ANN201
    """Raises only when ``PA`` and ``PB`` meet (a fault two replies provoke together)."""
    answers = {r.response.final_answer for r in history if r.response is not None}
    if {"PA", "PB"} <= answers:
        raise OverflowError("planted fault")
    return aggregate(history, **kw)


def _engine(aggregator: str, sink: list[dict[str, Any]]):  # noqa: ANN202
    cfg = load_config({"config-name": "tiny", "overrides": (
        f"strategy.aggregator={HERE}:{aggregator} strategy.k_max=3 strategy.t_max=1 "
        "strategy.batch_size=2")})
    tasks = sample_eval_tasks(cfg.data.benchmarks, cfg.data.queries_per_benchmark, cfg.seed,
                              None, dev_pool_per_benchmark=cfg.data.dev_pool_per_benchmark)
    engine = build_engine(cfg, tasks, on_query_end=sink.append)
    engine.register_clients({c: ClientDescription(f"agent {c}", ("math", "medical"),
                                                  f"Agent {c}.", client_key=c)
                             for c in ("p0", "p1", "p2")})
    return engine


def _replies(plan, answers: dict[str, str]) -> dict[str, ClientReply]:  # noqa: ANN001
    return {c: ClientReply(responses=tuple(
        ProcessedResponse(q.query_id, StructuredResponse(answers[c]), tokens=3)
        for q in ins.queries)) for c, ins in plan.items()}


def test_one_faulty_reply_is_rolled_back_and_recorded_as_its_client_s_failure():
    sink: list[dict[str, Any]] = []
    engine = _engine("poisoned", sink)
    plan = engine.plan_round(1)
    assert sorted(plan) == ["p0", "p1", "p2"]  # k_max 3 of 3: every client answers
    parsed = _replies(plan, {"p0": "7", "p1": POISON, "p2": "7"})
    failures: dict[str, str] = {}
    absorb_isolated(engine, 1, parsed, failures)
    assert failures == {"p1": "engine_error: ZeroDivisionError while absorbing this client's reply"}
    assert sorted(parsed) == ["p0", "p2"]  # the culprit's reply is gone from what was absorbed
    # t_max 1: both queries of the batch finished once each, on the honest answers
    assert len(sink) == 2 and len({r["query_id"] for r in sink}) == 2
    assert all(r["answer"] == "7" for r in sink)
    assert engine.finished == sink


def test_a_fault_needing_two_replies_costs_the_first_whose_removal_lets_the_round_through():
    sink: list[dict[str, Any]] = []
    engine = _engine("pair_poisoned", sink)
    parsed = _replies(engine.plan_round(1), {"p0": "PA", "p1": "PB", "p2": "7"})
    failures: dict[str, str] = {}
    absorb_isolated(engine, 1, parsed, failures)
    assert failures == {"p0": "engine_error: OverflowError while absorbing this client's reply"}
    assert sorted(parsed) == ["p1", "p2"] and len(sink) == 2


def test_a_fault_no_reply_provokes_propagates_and_nothing_is_emitted():
    sink: list[dict[str, Any]] = []
    engine = _engine("poisoned", sink)
    parsed = _replies(engine.plan_round(1), {"p0": "7", "p1": "7", "p2": "7"})
    engine.aggregate = lambda *a, **k: 1 / 0  # an engine bug, whatever the replies
    with pytest.raises(ZeroDivisionError):
        absorb_isolated(engine, 1, parsed, {})
    assert sink == [] and engine.finished == []


def test_snapshot_and_restore_round_trip_keep_shared_parts_by_reference():
    sink: list[dict[str, Any]] = []
    engine = _engine("poisoned", sink)
    plan = engine.plan_round(1)
    snap = snapshot(engine)
    assert engine.orchestrator in snap.shared and engine.judge in snap.shared
    engine.absorb_round(1, _replies(plan, {"p0": "7", "p1": "7", "p2": "7"}), {})
    assert len(engine.finished) == 2
    restore(engine, snap)
    assert engine.finished == [] and engine.num_active() == 2
    assert engine.orchestrator is snap.shared[0]  # plug-ins are not copied
