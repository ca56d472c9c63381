"""Per-query trajectory state of the server engine, its records, checkpoint form and counts."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pfedma_flwr.aggregation.consensus import CollabState, RoundResponse
from pfedma_flwr.answers import is_correct
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.protocol.schema import ProcessedResponse, RoutedQuery, StructuredResponse
from pfedma_flwr.protocol.validation import short_id
from pfedma_flwr.server.totals import GENERATION_FAILED

#: Rejected responses listed per client and round in ``rounds.jsonl`` (the rest: one entry).
MAX_REJECTED_LOGGED = 16
#: EngineSettings field -> the config key it is a view of: the one place the mapping lives
#: (:meth:`EngineSettings.from_config` reads it, the field defaults are the keys' defaults).
ENGINE_KEYS: dict[str, str] = {
    "t_max": "strategy.t_max", "k_max": "strategy.k_max", "batch_size": "strategy.batch_size",
    "min_replies": "strategy.min_replies", "max_failed_share": "strategy.max_failed_share",
    "lambda_pool": "anomaly.lambda_pool", "alpha_con": "anomaly.alpha_con",
    "tolerance": "anomaly.tolerance", "intent_tolerance": "anomaly.intent_tolerance",
    "consensus": "anomaly.consensus",
    "ablation": "anomaly.ablation", "use_capability": "routing.use_capability",
    "use_reliability": "routing.use_reliability", "refine_query": "routing.refine_query",
    "refine_style": "routing.refine_style", "prices": "routing.prices",
    "lone_answers": "routing.lone_answers", "rule_mode": "rules.mode",
    "sim_threshold": "rules.sim_threshold", "seed": "seed",
    "max_queries_per_client": "protocol.max_items",
    "max_answer_tokens": "protocol.max_answer_tokens",
}


def _at(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


@functools.cache
def _config_defaults() -> Any:
    from pfedma_flwr.config import PFedMAConfig

    return PFedMAConfig()


def _default(field_name: str) -> Any:
    """The config default of ``field_name``'s key (the config dataclasses are the source)."""
    return _at(_config_defaults(), ENGINE_KEYS[field_name])


@dataclass(frozen=True)
class EngineSettings:
    """Knobs of the engine: a view of config keys (:data:`ENGINE_KEYS`), not a copy of them.

    Every default is its key's default in :mod:`pfedma_flwr.config` (read, not restated), and
    ``server.components.build_engine`` builds the run's settings with :meth:`from_config`.
    """

    t_max: int = _default("t_max")
    k_max: int = _default("k_max")
    batch_size: int = _default("batch_size")
    min_replies: int = _default("min_replies")
    lambda_pool: float = _default("lambda_pool")
    alpha_con: float = _default("alpha_con")
    tolerance: float = _default("tolerance")
    intent_tolerance: float = _default("intent_tolerance")
    consensus: str = _default("consensus")
    ablation: str = _default("ablation")
    use_capability: bool = _default("use_capability")
    use_reliability: bool = _default("use_reliability")
    refine_query: bool = _default("refine_query")
    refine_style: str = _default("refine_style")
    rule_mode: str = _default("rule_mode")
    sim_threshold: float = _default("sim_threshold")
    seed: int = _default("seed")
    max_failed_share: float = _default("max_failed_share")
    # USD per million tokens by backbone ("default": the configured agent backend)
    prices: Mapping[str, float] = field(default_factory=dict)
    # queries one client gets per Flower round: the protocol's per-message cap
    # (protocol.max_items), which a client enforces on the instruction it decodes
    max_queries_per_client: int = _default("max_queries_per_client")
    # what C learns from an answer with nothing to compare it with (routing/lone.py)
    lone_answers: str = _default("lone_answers")
    # the protocol's cap on a client-reported token count (summary "cost_basis")
    max_answer_tokens: int = _default("max_answer_tokens")

    @classmethod
    def from_config(cls, cfg: Any) -> EngineSettings:
        """The settings of a :class:`~pfedma_flwr.config.PFedMAConfig` (every mapped key)."""
        # __post_init__ copies prices into a plain dict
        return cls(**{name: _at(cfg, key) for name, key in ENGINE_KEYS.items()})

    def __post_init__(self) -> None:
        if self.max_queries_per_client < 1:
            raise ValueError("max_queries_per_client (protocol.max_items) must be >= 1, got "
                             f"{self.max_queries_per_client}")
        if not 0.0 <= self.max_failed_share <= 1.0:
            raise ValueError("max_failed_share (share of failed answers above which a run "
                             f"ends {GENERATION_FAILED!r}) must be in [0, 1], got "
                             f"{self.max_failed_share}")
        bad = {k: v for k, v in self.prices.items()
               if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < 1e9}
        if bad:
            raise ValueError(f"routing.prices must map backbone names to USD per million tokens "
                             f">= 0, got {bad}")
        object.__setattr__(self, "prices", {str(k): float(v) for k, v in self.prices.items()})

    def price(self, backbone: str) -> float:
        """USD per million tokens of ``backbone`` (unlisted: the ``default`` price, else 0)."""
        return self.prices.get(backbone, self.prices.get("default", 0.0))


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
    # the policy's reasons for the round in flight (Selection.why), for rounds.jsonl only
    why: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0
    backend_calls: float = 0.0
    query_rules_fired: int = 0
    # USD of the query's tokens at the routing.prices of each answering client's backbone,
    # plus the routing policy's own tokens (an LLM orchestrator) at prices["orchestrator"]
    cost: float = 0.0
    # tokens the orchestrator spent deciding this query's rounds (0 for a heuristic policy)
    orchestrator_tokens: int = 0
    # of ``tokens``, those of answers the clients' generation caches served
    cached_tokens: int = 0

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
            "cost": self.cost, "orchestrator_tokens": self.orchestrator_tokens,
            "cached_tokens": self.cached_tokens,
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
            cost=float(d.get("cost", 0.0)),
            orchestrator_tokens=int(d.get("orchestrator_tokens", 0)),
            cached_tokens=int(d.get("cached_tokens", 0)),
        )


def finish_record(q: QueryState, reason: str) -> dict[str, Any]:
    """The ``queries.jsonl`` record of a finished query (answer scored against the gold)."""
    answer = q.z.answer if q.z is not None else ""
    return {
        "query_id": q.task.task_id, "benchmark": q.task.benchmark, "domain": q.task.domain,
        "gold": q.task.gold, "answer": answer,
        # None for judged answers (AlpacaEval): a judge scores them, not the gold
        "correct": _correct(answer, q),
        "rounds": q.t, "stop_reason": reason, "selections": q.selections,
        "support": q.z.support if q.z is not None else 0.0, "tokens": q.tokens,
        "backend_calls": round(float(q.backend_calls), 3), "cost": round(q.cost, 8),
        "orchestrator_tokens": q.orchestrator_tokens, "query_rules_fired": q.query_rules_fired,
        "cached_tokens": q.cached_tokens,
        # z's claims: what the analysis judges besides the answer (attack success, leakage)
        "z_claims": list(q.z.claims) if q.z is not None else [],
    }


def _correct(answer: str, q: QueryState) -> bool | None:
    verdict = is_correct(answer, q.task.gold, q.task.answer_kind, options=q.task.options or None)
    return None if verdict is None else bool(answer) and verdict


def count(items: Iterable[str]) -> dict[str, int]:
    """Occurrences of each item."""
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def query_metrics(finished: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Accuracy (overall and per benchmark), rounds, tokens and backend calls per query.

    Accuracy is over the queries with a gold verdict; judged ones (``correct`` None, e.g.
    AlpacaEval) are left out of it, not counted wrong (the experiments' analysis judges them).
    """
    n = max(1, len(finished))
    per_bench: dict[str, list[bool]] = {}
    for r in finished:
        if r["correct"] is not None:
            per_bench.setdefault(str(r["benchmark"]), []).append(bool(r["correct"]))
    scored = [v for vs in per_bench.values() for v in vs]
    return {
        "num_queries": len(finished),
        # NaN (null in summary.json) when no query had a gold verdict
        "accuracy": sum(scored) / len(scored) if scored else math.nan,
        "accuracy_by_benchmark": {b: sum(v) / len(v) for b, v in sorted(per_bench.items())},
        "rounds_per_query": sum(r["rounds"] for r in finished) / n,
        "tokens_per_query": sum(r["tokens"] for r in finished) / n,
        "backend_calls_per_query": sum(r["backend_calls"] for r in finished) / n,
        "cost_per_query": sum(float(r.get("cost", 0.0)) for r in finished) / n,
        "orchestrator_tokens_per_query": sum(int(r.get("orchestrator_tokens", 0))
                                             for r in finished) / n,
        "stop_reasons": count(str(r["stop_reason"]) for r in finished),
        "cached_share": cached_share(finished),
    }


def cached_share(finished: Sequence[Mapping[str, Any]]) -> float:
    """Share of the queries' answer tokens that clients' generation caches served (0 if none)."""
    tokens = sum(int(r.get("tokens", 0)) for r in finished)
    return sum(int(r.get("cached_tokens", 0)) for r in finished) / tokens if tokens else 0.0


# ---------------------------------------------------------------------- failed answers


#: What ``rounds.jsonl`` keeps of each response the server received (its own view ``r̃``).
VIEW_ANSWER_CHARS, VIEW_CLAIMS, VIEW_CLAIM_CHARS = 200, 4, 300


def response_views(cids: Sequence[str], grp: Sequence[StructuredResponse | None]
                   ) -> dict[str, dict[str, Any]]:
    """Per client, the answer and first claims of the response the server received (clipped).

    What RR and client-level ASR read: an attacked agent's own reply, not only ``z``.
    """
    return {c: {"answer": r.final_answer[:VIEW_ANSWER_CHARS],
                "claims": [cl.claim[:VIEW_CLAIM_CHARS] for cl in r.claims[:VIEW_CLAIMS]]}
            for c, r in zip(cids, grp, strict=True) if r is not None}


def round_record(
    server_round: int, query_logs: list[dict[str, Any]], groups: Sequence[Sequence[Any]],
    results: Sequence[Sequence[Any]], replies: Mapping[str, Any], failures: Mapping[str, str],
    rejected: list[dict[str, Any]], rules_log: Mapping[str, Any], *, num_global: int,
    num_finished: int,
) -> dict[str, Any]:
    """One line of ``rounds.jsonl``: per-query logs, failures, rules, per-client cost, metrics.

    ``groups[k][j]`` is the response (or ``None``) of the ``j``-th selected client of the
    ``k``-th query in flight and ``results[k][j]`` its anomaly result; ``replies`` are the
    round's validated :class:`~pfedma_flwr.protocol.schema.ClientReply` objects.
    """
    pairs = [(r, a) for grp, res in zip(groups, results, strict=True)
             for r, a in zip(grp, res, strict=True)]
    return {
        "round": server_round, "queries": query_logs, "failures": dict(failures),
        "rejected": rejected, "rules": dict(rules_log),
        "clients": {c: client_cost(r) for c, r in replies.items()},
        "metrics": {
            "select/num_queries": len(query_logs),
            "select/num_messages": len(replies) + len(failures),
            "replies/num_ok": len(replies), "replies/num_failed": len(failures),
            "anomaly/num_retained": sum(a.retained for _, a in pairs),
            "anomaly/num_filtered": sum(r is not None and not a.retained for r, a in pairs),
            "rules/num_promoted": rules_log.get("promoted", 0),
            "rules/num_global": num_global,
            "cost/tokens": sum(r.tokens for r in replies.values()),
            "cost/backend_calls": sum(r.backend_calls for r in replies.values()),
            "queries/num_finished": num_finished,
        },
    }


#: backend timing counters a client reports in ``ClientReply.extra`` (the run profile)
TIMING_KEYS = ("respond_s", "prefill_s", "decode_s", "prefill_tokens", "decode_tokens")


def client_cost(r: Any) -> dict[str, Any]:
    """A client's cost line of a round: calls, tokens (cached among them), time split."""
    return {"backend_calls": r.backend_calls, "tokens": r.tokens, "gen_seconds": r.gen_seconds,
            "cached_tokens": sum(min(p.cached_tokens, p.tokens) for p in r.responses),
            **{k: r.extra[k] for k in TIMING_KEYS if k in r.extra}}


def collect_replies(
    replies: Mapping[str, Any], lookup: Callable[[str], QueryState | None],
) -> tuple[dict[str, dict[str, ProcessedResponse]], list[dict[str, Any]]]:
    """Sort a round's responses by query: ``({query_id: {client: ProcessedResponse}}, rejected)``.

    A response to a query that is not active or was not routed to its client, a second one to
    the same query, or one bound to another round than the routed query's (``stale round``), is
    rejected with its reason, never counted (the first :data:`MAX_REJECTED_LOGGED` per client
    are listed, ids as bounded excerpts, then one ``more`` entry with their number ``n``). Each
    kept response's query gets its share of the client's backend calls (one batched call
    serves all its queries).
    """
    rejected: list[dict[str, Any]] = []
    by_query: dict[str, dict[str, ProcessedResponse]] = {}
    for cid, rep in replies.items():
        seen: set[str] = set()
        share = rep.backend_calls / max(1, len(rep.responses))
        n_logged = 0
        for pr in rep.responses:
            q = lookup(pr.query_id)
            stale = q is not None and cid in q.routed and pr.round not in (0, q.routed[cid].round)
            if q is None or cid not in q.routed or pr.query_id in seen or stale:
                why = ("duplicate" if pr.query_id in seen else
                       "stale round" if stale else "not routed to this client")
                # ids as bounded excerpts, at most MAX_REJECTED_LOGGED per client and round
                n_logged += 1
                if n_logged <= MAX_REJECTED_LOGGED:
                    rejected.append({"client": cid, "query_id": short_id(pr.query_id),
                                     "reason": why})
                continue
            seen.add(pr.query_id)
            q.backend_calls += share
            by_query.setdefault(pr.query_id, {})[cid] = pr
        if n_logged > MAX_REJECTED_LOGGED:
            rejected.append({"client": cid, "query_id": "\u2026", "reason": "more",
                             "n": n_logged - MAX_REJECTED_LOGGED})
    return by_query, rejected
