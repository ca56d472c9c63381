"""Per-query trajectory state of the server engine, its records and checkpoint form."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pfedma_flwr.aggregation import CollabState, RoundResponse
from pfedma_flwr.answers import is_correct
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.schema import RoutedQuery, StructuredResponse


@dataclass(frozen=True)
class EngineSettings:
    """Knobs of the engine (each maps to a config key in ``conf/``)."""

    t_max: int = 2
    k_max: int = 3
    batch_size: int = 10
    min_replies: int = 1
    lambda_pool: float = 0.3
    alpha_con: float = 0.3
    tolerance: float = 0.5
    ablation: str = "none"
    use_capability: bool = True
    use_reliability: bool = True
    refine_query: bool = True
    rule_mode: str = "full"
    sim_threshold: float = 0.9
    seed: int = 0


@dataclass
class QueryState:
    """One query's trajectory: rounds done, z, every evaluated response, cost counters."""

    task: Task
    t: int = 0
    z: CollabState | None = None
    history: list[RoundResponse] = field(default_factory=list)
    asked: set[str] = field(default_factory=set)
    selections: list[list[str]] = field(default_factory=list)
    routed: dict[str, RoutedQuery] = field(default_factory=dict)
    tokens: int = 0
    backend_calls: float = 0.0
    query_rules_fired: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Checkpoint form (between rounds, so ``routed`` is empty and not stored)."""
        return {
            "task_id": self.task.task_id, "t": self.t,
            "z": None if self.z is None else self.z.to_dict(),
            "history": [{"client_id": r.client_id, "round": r.round, "retained": r.retained,
                         "anomaly": r.anomaly,
                         "response": None if r.response is None else r.response.to_dict()}
                        for r in self.history],
            "asked": sorted(self.asked), "selections": self.selections, "tokens": self.tokens,
            "backend_calls": self.backend_calls, "query_rules_fired": self.query_rules_fired,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], task: Task) -> QueryState:
        """Inverse of :meth:`to_dict` given the task (looked up by ``task_id``)."""
        return cls(
            task=task, t=int(d["t"]),
            z=None if d.get("z") is None else CollabState.from_dict(d["z"]),
            history=[RoundResponse(
                client_id=str(h["client_id"]), round=int(h["round"]),
                retained=bool(h["retained"]), anomaly=float(h["anomaly"]),
                response=None if h["response"] is None
                else StructuredResponse.from_dict(h["response"]))
                for h in d.get("history", [])],
            asked=set(d.get("asked", [])), selections=[list(s) for s in d.get("selections", [])],
            tokens=int(d.get("tokens", 0)), backend_calls=float(d.get("backend_calls", 0.0)),
            query_rules_fired=int(d.get("query_rules_fired", 0)),
        )


def finish_record(q: QueryState, reason: str) -> dict[str, Any]:
    """The ``queries.jsonl`` record of a finished query (answer scored against the gold)."""
    answer = q.z.answer if q.z is not None else ""
    return {
        "query_id": q.task.task_id, "benchmark": q.task.benchmark, "domain": q.task.domain,
        "gold": q.task.gold, "answer": answer,
        "correct": bool(answer) and is_correct(answer, q.task.gold, q.task.answer_kind,
                                               options=q.task.options or None),
        "rounds": q.t, "stop_reason": reason, "selections": q.selections,
        "support": q.z.support if q.z is not None else 0.0, "tokens": q.tokens,
        "backend_calls": round(float(q.backend_calls), 3),
        "query_rules_fired": q.query_rules_fired,
        # z's claims: what the analysis judges besides the answer (attack success, leakage)
        "z_claims": list(q.z.claims) if q.z is not None else [],
    }


def count(items: Iterable[str]) -> dict[str, int]:
    """Occurrences of each item."""
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def query_metrics(finished: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Accuracy (overall and per benchmark), rounds, tokens and backend calls per query."""
    n = max(1, len(finished))
    per_bench: dict[str, list[bool]] = {}
    for r in finished:
        per_bench.setdefault(str(r["benchmark"]), []).append(bool(r["correct"]))
    return {
        "num_queries": len(finished),
        "accuracy": sum(bool(r["correct"]) for r in finished) / n,
        "accuracy_by_benchmark": {b: sum(v) / len(v) for b, v in sorted(per_bench.items())},
        "rounds_per_query": sum(r["rounds"] for r in finished) / n,
        "tokens_per_query": sum(r["tokens"] for r in finished) / n,
        "backend_calls_per_query": sum(r["backend_calls"] for r in finished) / n,
        "stop_reasons": count(str(r["stop_reason"]) for r in finished),
    }
