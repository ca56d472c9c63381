"""The server's global rule repository ``Ω_global``: H-score feedback, promotion and Resolve.

DESIGN §3.1–3.5, seed App. F. ``RuleUpdate`` = :meth:`GlobalRuleRepository.apply_feedback`
(H-scores from ``F^t``) followed by :meth:`GlobalRuleRepository.update` (promote ``G^t`` from the
pool and :func:`resolve` the union). The pure formulas live in
:mod:`pfedma_flwr.rules.promotion` and are re-exported here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.rules.promotion import (
    SIM_EPS,
    CandidatePool,
    SimilarityStats,
    _support_from_sims,
    build_candidate_pool,
    feedback_score,
    promote,
    support_proportions,
    update_h_score,
)
from pfedma_flwr.schema import GlobalRule, RuleFeedback

logger = logging.getLogger(__name__)

REPO_VERSION = 1

__all__ = [
    "CandidatePool",
    "FeedbackReport",
    "GlobalRuleRepository",
    "ResolveResult",
    "SimilarityStats",
    "UpdateReport",
    "build_candidate_pool",
    "feedback_score",
    "promote",
    "resolve",
    "support_proportions",
    "update_h_score",
]


# --------------------------------------------------------------------------- Resolve


@dataclass(frozen=True)
class ResolveResult:
    """Output of :func:`resolve`, indexed like its input rows.

    ``rep[i]`` is the row that row ``i`` merged into (itself for a representative); ``h``/``n``
    hold the merged scores at representative rows; ``active`` is True for exactly one
    representative per cluster; ``cluster[i]`` is the leader row of ``i``'s cluster.
    """

    rep: np.ndarray
    h: np.ndarray
    n: np.ndarray
    active: np.ndarray
    cluster: np.ndarray

    @property
    def representatives(self) -> list[int]:
        """Rows that survive, in input (age) order."""
        return [int(i) for i in np.flatnonzero(self.rep == np.arange(len(self.rep)))]


def resolve(
    embeddings: np.ndarray,
    spec_keys: Sequence[Hashable],
    h: Sequence[float],
    n: Sequence[int],
    *,
    threshold: float = 0.9,
) -> ResolveResult:
    """``Resolve`` (DESIGN §3.5): cluster, merge equivalents, pick one active rule per cluster.

    Rows must be in age order (oldest first). One similarity matrix is computed. Clusters are
    formed leader-first in age order: each unassigned row claims every unassigned row with
    cos ≥ ``threshold``. Within a cluster, rows with the same ``spec_keys`` (action + detector
    spec) merge into the oldest: ``N`` summed, ``H`` the ``N``-weighted mean (the
    representative's ``H`` when all ``N`` are 0). The active representative is ``argmax H``,
    ties going to the older rule; the others stay, inactive.
    """
    e = np.asarray(embeddings, dtype=np.float32)
    m = e.shape[0] if e.ndim == 2 else -1
    if m < 0 or len(spec_keys) != m or len(h) != m or len(n) != m:
        raise ValueError("resolve: embeddings (m, d), spec_keys, h and n must all have m rows")
    hh = np.asarray(h, dtype=np.float64)
    nn = np.asarray(n, dtype=np.int64)
    if m == 0:
        empty = np.zeros(0, dtype=np.int64)
        return ResolveResult(empty, hh, nn, np.zeros(0, dtype=bool), empty)
    similar = (e @ e.T) >= threshold - SIM_EPS
    cluster = np.full(m, -1, dtype=np.int64)
    for i in range(m):
        if cluster[i] < 0:
            members = similar[i] & (cluster < 0)
            members[i] = True
            cluster[members] = i
    # Merge equivalents: the oldest row of each (cluster, spec) group represents it.
    first: dict[tuple[int, Hashable], int] = {}
    rep = np.array([first.setdefault((int(cluster[i]), spec_keys[i]), i) for i in range(m)])
    n_sum = np.bincount(rep, weights=nn, minlength=m)
    hn_sum = np.bincount(rep, weights=hh * nn, minlength=m)
    is_rep = rep == np.arange(m)
    new_h = np.where(is_rep & (n_sum > 0), hn_sum / np.maximum(n_sum, 1), hh)
    new_n = np.where(is_rep, n_sum, nn).astype(np.int64)
    # argmax H per cluster, ties -> older: sort reps by (cluster, -H, age) and take the first.
    reps = np.flatnonzero(is_rep)
    order = reps[np.lexsort((reps, -new_h[reps], cluster[reps]))]
    head = np.ones(len(order), dtype=bool)
    head[1:] = cluster[order][1:] != cluster[order][:-1]
    active = np.zeros(m, dtype=bool)
    active[order[head]] = True
    return ResolveResult(rep=rep, h=new_h, n=new_n, active=active, cluster=cluster)


def _spec_key(r: GlobalRule) -> tuple[Any, ...]:
    return (
        r.scope,
        r.action,
        tuple(sorted(set(r.entity_types))),
        tuple(sorted(set(r.patterns))),
    )


# --------------------------------------------------------------------------- repository


@dataclass(frozen=True)
class FeedbackReport:
    """What :meth:`GlobalRuleRepository.apply_feedback` did (for the round log)."""

    n_clients: int
    n_rows: int
    n_scores: int
    updated: tuple[str, ...]
    unknown: tuple[str, ...]
    ignored_zero: int


@dataclass(frozen=True)
class UpdateReport:
    """What :meth:`GlobalRuleRepository.update` did (for the round log)."""

    server_round: int
    pool_size: int
    zeta_max: float
    promoted: int
    added: tuple[str, ...]
    merged: int
    n_rules: int
    n_active: int
    n_clusters: int
    activated: tuple[str, ...]
    deactivated: tuple[str, ...]
    pool_similarity: SimilarityStats


class GlobalRuleRepository:
    """``Ω_global`` with H-scores, evaluation counts and one active rule per constraint.

    Parameters
    ----------
    embedder : Embedder
        Encodes rule texts (each text once; embeddings are kept with the rules).
    sim_threshold : float
        Cosine at or above which two rules address the same constraint (seed: 0.9).
    id_prefix : str
        Prefix of assigned rule ids (``<prefix><n>``).
    """

    def __init__(
        self, *, embedder: Embedder, sim_threshold: float = 0.9, id_prefix: str = "g"
    ) -> None:
        if not -1.0 <= sim_threshold <= 1.0:
            raise ValueError(f"sim_threshold must be in [-1, 1], got {sim_threshold}")
        if not id_prefix or ":" in id_prefix:
            raise ValueError(f"id_prefix must be non-empty without ':', got {id_prefix!r}")
        self.embedder = embedder
        self.sim_threshold = float(sim_threshold)
        self.id_prefix = id_prefix
        self._rules: list[GlobalRule] = []  # age order
        self._emb = np.zeros((0, embedder.dim), dtype=np.float32)
        self._aliases: dict[str, str] = {}  # merged-away id -> surviving id
        self._next_id = 0
        self.last_pool_similarity = SimilarityStats(n=0)

    def summary(self) -> None:
        """Log the configuration and contents."""
        logger.info(
            "GlobalRuleRepository\n\t├──> sim_threshold: %s\n\t├──> rules: %d (%d active)"
            "\n\t└──> embedder: %s",
            self.sim_threshold, len(self._rules), len(self.active_rules()),
            type(self.embedder).__name__,
        )

    def __len__(self) -> int:
        return len(self._rules)

    def rules(self) -> list[GlobalRule]:
        """Every rule (active and inactive alternatives), oldest first."""
        return list(self._rules)

    def active_rules(self) -> list[GlobalRule]:
        """The active rule of each constraint, oldest first."""
        return [r for r in self._rules if r.active]

    def resolve_id(self, rule_id: str) -> str | None:
        """Current id of ``rule_id`` after merges, or ``None`` if unknown."""
        rid = self._aliases.get(rule_id, rule_id)
        return rid if any(r.rule_id == rid for r in self._rules) else None

    # ------------------------------------------------------------------ feedback (§3.3–3.4)

    def apply_feedback(
        self, feedback_by_client: Mapping[str, Sequence[RuleFeedback]]
    ) -> FeedbackReport:
        """Update H-scores from ``F^t`` (DESIGN §3.3–3.4).

        Each client counts once per rule: its rows for one id (after merge aliases) are summed
        before scoring. Rows with ``Δn_trigger = 0`` are not evaluable and are ignored; unknown
        ids are reported, not fatal. Rules without evaluable feedback keep ``(H, N)``.
        """
        index = {r.rule_id: k for k, r in enumerate(self._rules)}
        scores: dict[str, list[float]] = {}
        unknown: set[str] = set()
        n_rows = ignored = 0
        for client in sorted(feedback_by_client):
            per_rule: dict[str, list[int]] = {}
            for row in feedback_by_client[client]:
                n_rows += 1
                rid = self._aliases.get(row.rule_id, row.rule_id)
                if rid not in index:
                    unknown.add(row.rule_id)
                    continue
                acc = per_rule.setdefault(rid, [0, 0, 0])
                acc[0] += row.d_trigger
                acc[1] += row.d_valid
                acc[2] += row.d_conflict
            for rid, (dt, dv, dc) in per_rule.items():
                if dt <= 0:
                    ignored += 1
                    continue
                scores.setdefault(rid, []).append(feedback_score(dt, dv, dc))
        for rid, s in scores.items():
            k = index[rid]
            h, n = update_h_score(self._rules[k].h_score, self._rules[k].n_evals, s)
            self._rules[k] = dataclasses.replace(self._rules[k], h_score=h, n_evals=n)
        if unknown:
            logger.warning("feedback for %d unknown global rule id(s) ignored", len(unknown))
        return FeedbackReport(
            n_clients=len(feedback_by_client),
            n_rows=n_rows,
            n_scores=sum(len(s) for s in scores.values()),
            updated=tuple(sorted(scores)),
            unknown=tuple(sorted(unknown)),
            ignored_zero=ignored,
        )

    # ------------------------------------------------------------------ promotion + Resolve

    def update(self, server_round: int, pool: CandidatePool) -> UpdateReport:
        """Promote ``G^t`` from ``pool`` (§3.2) and ``Resolve`` the repository (§3.5).

        New rules start at ``H = 0, N = 0``; a promoted candidate equivalent to an existing rule
        merges into it (no new id). Nothing is removed; only active flags change.
        """
        if pool.embeddings.shape[1] != self._emb.shape[1]:
            raise ValueError(
                f"pool embedding dim {pool.embeddings.shape[1]} != "
                f"embedder dim {self._emb.shape[1]}"
            )
        pool_emb = np.asarray(pool.embeddings, dtype=np.float32)
        pool_sims = pool_emb @ pool_emb.T  # the pool's one similarity matrix: ζ and the stats
        zeta = _support_from_sims(pool_sims, self.sim_threshold)
        chosen = promote(zeta)
        self.last_pool_similarity = SimilarityStats.of(pool_sims)

        n_old = len(self._rules)
        new_rules = [
            GlobalRule(
                rule_id="",  # assigned below, only if the rule survives the merge
                text=c.text,
                category=c.category,
                scope=c.scope,
                action=c.action,
                entity_types=tuple(sorted(set(c.entity_types))),
                patterns=tuple(sorted(set(c.patterns))),
                created_round=server_round,
            )
            for c in (pool.candidates[i] for i in chosen)
        ]
        rows = self._rules + new_rules
        emb = np.vstack([self._emb, pool_emb[chosen]]) if chosen else self._emb
        res = resolve(
            emb,
            [_spec_key(r) for r in rows],
            [r.h_score for r in rows],
            [r.n_evals for r in rows],
            threshold=self.sim_threshold,
        )

        was_active = {r.rule_id for r in self._rules if r.active}
        kept: list[GlobalRule] = []
        added: list[str] = []
        for i in res.representatives:
            rid = rows[i].rule_id
            if i >= n_old:
                self._next_id += 1
                rid = f"{self.id_prefix}{self._next_id}"
                added.append(rid)
            kept.append(
                dataclasses.replace(
                    rows[i],
                    rule_id=rid,
                    h_score=float(res.h[i]),
                    n_evals=int(res.n[i]),
                    active=bool(res.active[i]),
                )
            )
        for i in range(n_old):  # existing rules merged into an older equivalent
            if res.rep[i] != i:
                self._aliases[rows[i].rule_id] = rows[int(res.rep[i])].rule_id
        self._aliases = {a: self._aliases.get(b, b) for a, b in self._aliases.items()}
        self._rules = kept
        self._emb = emb[res.representatives]
        now_active = {r.rule_id for r in kept if r.active}
        report = UpdateReport(
            server_round=server_round,
            pool_size=len(pool),
            zeta_max=float(zeta.max()) if len(zeta) else 0.0,
            promoted=len(chosen),
            added=tuple(added),
            merged=len(rows) - len(kept),
            n_rules=len(kept),
            n_active=len(now_active),
            n_clusters=len(set(res.cluster.tolist())),
            activated=tuple(sorted(now_active - was_active)),
            deactivated=tuple(sorted(was_active - now_active)),
            pool_similarity=self.last_pool_similarity,
        )
        logger.debug("rule update %s", report)
        return report

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready checkpoint (embeddings are recomputed on load)."""
        return {
            "version": REPO_VERSION,
            "sim_threshold": self.sim_threshold,
            "id_prefix": self.id_prefix,
            "next_id": self._next_id,
            "aliases": dict(self._aliases),
            "rules": [r.to_dict() for r in self._rules],
        }

    @classmethod
    def from_dict(cls, d: Any, *, embedder: Embedder) -> GlobalRuleRepository:
        """Inverse of :meth:`to_dict`; ``ValueError`` on a malformed or other-version payload."""
        if not isinstance(d, dict) or d.get("version") != REPO_VERSION:
            got = d.get("version") if isinstance(d, dict) else type(d).__name__
            raise ValueError(
                f"global rule repository payload: expected version {REPO_VERSION}, got {got!r}"
            )
        try:
            repo = cls(
                embedder=embedder, sim_threshold=float(d["sim_threshold"]), id_prefix=d["id_prefix"]
            )
            repo._next_id = int(d["next_id"])
            repo._aliases = {str(a): str(b) for a, b in dict(d["aliases"]).items()}
            rules = [
                GlobalRule.from_dict(r, f"rules[{k}]") for k, r in enumerate(d["rules"])
            ]
        except (KeyError, TypeError) as e:
            raise ValueError(f"global rule repository payload is malformed: {e!r}") from None
        if len({r.rule_id for r in rules}) != len(rules):
            raise ValueError("global rule repository payload has duplicate rule ids")
        repo._rules = rules
        if rules:
            repo._emb = np.asarray(embedder.encode([r.text for r in rules]), dtype=np.float32)
        return repo
