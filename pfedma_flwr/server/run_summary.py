"""``summary.json`` of a run: accuracy, cost per query, rules, routing state, failures, status."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pfedma_flwr.baselines import hooks
from pfedma_flwr.protocol.schema import GlobalRule
from pfedma_flwr.protocol.wire import ClientDescription
from pfedma_flwr.routing.base import BaseOrchestrator
from pfedma_flwr.routing.state import RoutingTable
from pfedma_flwr.server.query_state import EngineSettings, query_metrics
from pfedma_flwr.server.totals import EngineTotals, generation_summary, run_status


def run_summary(
    *, finished: Sequence[Mapping[str, Any]], clients: Mapping[str, ClientDescription],
    rules: Sequence[GlobalRule], routing: RoutingTable, orchestrator: BaseOrchestrator,
    totals: EngineTotals, settings: EngineSettings, wall_seconds: float = 0.0,
) -> dict[str, Any]:
    """Run summary: accuracy, rounds/tokens/calls per query, rule repository size, status.

    ``finished`` holds the finished queries' records, ``rules`` every global rule. The
    ``generation`` block counts the answers asked of agents and those that failed, by reason
    code and client; ``status`` is ``failed:generation`` when the agents did not produce
    more than ``settings.max_failed_share`` of them, ``failed:no_answers`` when no agent was
    asked anything, else ``completed`` (:func:`~.totals.run_status`).
    """
    counted = totals.to_dict()
    out = {
        **query_metrics(finished),
        "num_clients": len(clients),
        "clients": {k: d.to_dict() for k, d in clients.items()},
        "rules": {"global_total": len(rules), "global_active": sum(r.active for r in rules)},
        "routing": routing.to_dict(),
        # e.g. the LLM orchestrator's format-failure rate, KABB's posterior
        "orchestrator": {"name": orchestrator.name,
                         "state": hooks.orchestrator_state(orchestrator)},
        "totals": {k: v for k, v in counted.items() if k != "failed_by_client"},
        "generation": generation_summary(counted, settings.max_failed_share),
        "wall_seconds": wall_seconds,
        # tokens, backend calls and what they cost are the clients' own counts (bounded by
        # protocol.max_answer_tokens per answer), not measured by the server (issue 30)
        "cost_basis": {"tokens": "client-reported", "backend_calls": "client-reported",
                       "max_answer_tokens": settings.max_answer_tokens},
    }
    return {**out, "status": run_status(out)}


def describe_run(settings: EngineSettings, *, tasks: int, orchestrator: str,
                 judge: str) -> dict[str, Any]:
    """The loop constants a run logs at its start (the strategy's ``summary()``)."""
    s = settings
    return {
        "tasks": tasks, "T_max": s.t_max, "K_max": s.k_max, "batch": s.batch_size,
        "orchestrator": orchestrator, "judge": judge,
        "anomaly": (s.lambda_pool, s.alpha_con, s.tolerance, s.intent_tolerance, s.consensus,
                    s.ablation),
        "rules": (s.rule_mode, s.sim_threshold),
        "ablations": {"RQ": not s.refine_query, "IA": not s.use_capability,
                      "RT": not s.use_reliability},
    }
