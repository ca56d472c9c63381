"""Orchestrator ``π``: per query round, select 1..K_max clients or STOP (DESIGN §1 step 2, §3.12).

The contract (:class:`~pfedma_flwr.routing.base.BaseOrchestrator`, the query and candidate
types, :func:`validate_selection`) lives in :mod:`pfedma_flwr.routing.base` and is re-exported
here. :class:`HeuristicOrchestrator` is the default non-LLM policy of §3.12 and
:class:`RandomOrchestrator` a seeded baseline; the paper's trained LLM policy is
:mod:`pfedma_flwr.routing.llm_orchestrator`. A policy may return an invalid action, which
:func:`validate_selection` turns into a ``ValueError`` the caller records (``R_fmt``).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.registry import Registry
from pfedma_flwr.routing.base import (
    AgentView,
    BaseOrchestrator,
    CandidateState,
    Orchestrator,
    OrchestratorQuery,
    QueryOutcome,
    Selection,
    _check_k,
    as_orchestrator,
    round_budget,
    validate_selection,
)

if TYPE_CHECKING:  # aggregation imports routing.state: a runtime import here would be circular
    from pfedma_flwr.aggregation.consensus import CollabState

__all__ = [
    "ORCHESTRATORS", "SCORE_PARTS", "TIER_PARTS", "AgentView", "BaseOrchestrator", "CandidateState",
    "HeuristicOrchestrator", "Orchestrator", "OrchestratorQuery", "QueryOutcome",
    "RandomOrchestrator", "Selection", "as_orchestrator", "round_budget", "should_stop",
    "validate_selection", "votes_needed",
]

logger = logging.getLogger(__name__)


MIN_AGREEING = 2  # the stopping rule's "at least 2 agreeing retained responses"
# the parts of a candidate's tier, in the order the heuristic compares them (Selection.why)
TIER_PARTS = ("filtered", "off_domain", "asked_again", "way")
# the parts of a candidate's score (HeuristicOrchestrator.terms, Selection.why)
SCORE_PARTS = ("C", "sim", "S", "bonus", "cost", "score")


def should_stop(z: CollabState | None, round: int, stop_support: float) -> bool:
    """§3.12 stopping rule: after round 1, ``z.support ≥ stop_support`` with ≥ 2 agreeing."""
    return (round > 1 and z is not None and z.n_agreeing >= MIN_AGREEING
            and z.support >= stop_support)


def votes_needed(z: CollabState | None, k_max: int) -> int:
    """Clients to ask after round 1 so the stop rule can fire: ``2 − n_agreeing`` in [1, K_max].

    ``z`` aggregates every round's retained responses, so after two disagreeing answers one more
    agreeing vote already gives 2 agreeing; after none retained, two are needed.
    """
    agreeing = z.n_agreeing if z is not None else 0
    return min(k_max, max(1, MIN_AGREEING - agreeing))


class HeuristicOrchestrator(BaseOrchestrator):
    """Default non-LLM orchestrator (DESIGN §3.12).

    ``score_i = (C_{i,d} + cos(e(q), e(profile_i)))/2 · S_i + c·sqrt(ln(1 + n_total)/(1 + n_i))``
    with ``n_i`` the asks of client ``i`` for the query's domain and ``n_total`` their sum over
    the candidates. Round 1 takes the top K_max; later rounds STOP when ``z.support ≥
    stop_support`` with at least 2 agreeing retained responses, else take the top K_max among
    clients not yet asked for this query, filling up with asked ones, and with clients whose
    answer to this query the anomaly filter removed only when no one else is left. Ties go to
    the smaller client id. With ``adaptive_k`` later rounds ask only :func:`votes_needed`
    clients (at most K_max), which saves answers; the stopping rule itself is unchanged.

    Parameters
    ----------
    k_max : int
        Default K_max when :meth:`select` gets none.
    stop_support : float
        Winning weight share at which the query stops (config ``routing.stop_support``).
    exploration_c : float
        Exploration bonus weight ``c`` (``routing.exploration_c``).
    use_capability, use_reliability : bool
        False for the -IA / -RT ablations (``C := 1`` / ``S := 1``).
    embedder : Embedder, optional
        Embeds the query and profiles that come without an embedding.
    adaptive_k : bool
        After round 1 ask only as many clients as the stopping rule still needs
        (``routing.adaptive_k``).
    mix_reasoning : bool
        Within a tier, round 1 asks agents that compute the answer with a program first, and
        later rounds ask first a way of reasoning the query has not had (``routing.
        mix_reasoning``; DESIGN §3.12 revision in ``docs/accuracy.md``).
    cost_weight : float
        ``score_i −= cost_weight · price_i / max_j price_j`` over the candidates with a price
        (``routing.cost_weight``; needs ``routing.prices``): a cheaper backbone wins close calls.
    """

    def __init__(
        self,
        *,
        k_max: int,
        stop_support: float = 0.7,
        exploration_c: float = 0.1,
        use_capability: bool = True,
        use_reliability: bool = True,
        embedder: Embedder | None = None,
        adaptive_k: bool = False,
        mix_reasoning: bool = False,
        cost_weight: float = 0.0,
    ) -> None:
        _check_k(k_max, "k_max")
        if not (math.isfinite(cost_weight) and cost_weight >= 0.0):
            raise ValueError(f"cost_weight must be a finite number >= 0, got {cost_weight}")
        self.cost_weight = cost_weight
        if not 0.0 <= stop_support <= 1.0:
            raise ValueError(f"stop_support must be in [0, 1], got {stop_support}")
        if not (math.isfinite(exploration_c) and exploration_c >= 0.0):
            raise ValueError(f"exploration_c must be a finite number >= 0, got {exploration_c}")
        self.k_max = k_max
        self.stop_support = stop_support
        self.exploration_c = exploration_c
        self.use_capability = use_capability
        self.use_reliability = use_reliability
        self.embedder = embedder
        self.adaptive_k = adaptive_k
        self.mix_reasoning = mix_reasoning

    def _embed(self, text: str, given: np.ndarray | None, what: str) -> np.ndarray:
        if given is not None:
            return np.asarray(given, dtype=np.float32).reshape(-1)
        if self.embedder is None:
            raise ValueError(f"{what} has no embedding and the orchestrator has no embedder")
        return np.asarray(self.embedder.encode([text])[0], dtype=np.float32)

    def scores(
        self, query: OrchestratorQuery, candidates: Sequence[CandidateState]
    ) -> list[float]:
        """``score_i`` of each candidate, in order (§3.12)."""
        return [float(v) for v in self.terms(query, candidates)["score"]]

    def terms(
        self, query: OrchestratorQuery, candidates: Sequence[CandidateState]
    ) -> dict[str, np.ndarray]:
        """The parts of ``score_i`` of each candidate, in order (§3.12).

        ``C``, ``sim`` (query-profile cosine), ``S``, ``bonus``, ``cost`` (the price penalty)
        and ``score``; each an array over the candidates.
        """
        q = self._embed(query.text, query.embedding, f"query {query.query_id!r}")
        missing = [c.profile for c in candidates if c.profile_embedding is None]
        if missing and self.embedder is None:
            raise ValueError("a candidate profile has no embedding and there is no embedder")
        encoded = iter(self.embedder.encode(missing) if missing and self.embedder else [])
        rows = []
        for c in candidates:
            p = (np.asarray(c.profile_embedding, dtype=np.float32).reshape(-1)
                 if c.profile_embedding is not None else next(encoded))
            if p.shape != q.shape:
                raise ValueError(
                    f"profile embedding of {c.client_id!r} has shape {p.shape}, query {q.shape}"
                )
            rows.append(p)
        if not rows:
            return {k: np.zeros(0) for k in SCORE_PARTS}
        # one matrix-vector product and array arithmetic: at N = 1,000 candidates per query a
        # Python loop over them was the server's largest cost (bench/bench_server_scale.py)
        d = query.domain
        sims = (np.stack(rows) @ q).astype(np.float64)
        asked = np.array([c.state.asked(d) for c in candidates], dtype=np.float64)
        cap = (np.array([c.state.c(d) for c in candidates]) if self.use_capability
               else np.ones(len(rows)))
        rel = (np.array([c.state.reliability for c in candidates]) if self.use_reliability
               else np.ones(len(rows)))
        bonus = self.exploration_c * np.sqrt(math.log1p(asked.sum()) / (1.0 + asked))
        prices = np.array([c.price or 0.0 for c in candidates], dtype=np.float64)
        cost = (self.cost_weight * prices / prices.max() if self.cost_weight and prices.max() > 0
                else np.zeros(len(rows)))
        score = (cap + sims) / 2.0 * rel + bonus - cost
        return {"C": cap, "sim": sims, "S": rel, "bonus": bonus, "cost": cost, "score": score}

    def stop_before_routing(self, z: CollabState | None, *, round: int) -> str | None:
        """The STOP reason that needs no candidates (§3.12's stopping rule), else ``None``.

        The engine asks this first, so a query that stops costs no candidate list (O(N) per
        query); :meth:`select` applies the same rule, so both paths agree.
        """
        if z is not None and should_stop(z, round, self.stop_support):
            return f"support {z.support:.2f} >= {self.stop_support}"
        return None

    def select(
        self,
        query: OrchestratorQuery,
        z: CollabState | None,
        candidates: Sequence[CandidateState],
        *,
        round: int,
        k_max: int | None = None,
    ) -> Selection:
        """See :class:`Orchestrator`."""
        k = round_budget(k_max, self.k_max, round)
        if not candidates:
            return Selection.stop_now("no candidates")
        if (reason := self.stop_before_routing(z, round=round)) is not None:
            return Selection.stop_now(reason)
        parts = self.terms(query, candidates)
        index = {c.client_id: i for i, c in enumerate(candidates)}
        scored = sorted(zip(parts["score"].tolist(), candidates, strict=True),
                        key=lambda sc: (-sc[0], sc[1].client_id))
        # Stable sort, each part still by score: in-domain clients not yet asked, then in-domain
        # ones again (a fresh, independently sampled attempt), then off-domain ones (DESIGN
        # §3.12 revision). In every round, round 1 included: "not yet asked first" regardless of
        # domain sent every round-2 GSM8K query to the physician, and in round 1 an experienced
        # in-domain client whose C fell below the 0.5 prior (two agents splitting on a hard
        # question both learn g = 0) lost to never-asked off-domain ones, so from the second
        # batch of 20 questions on GSM8K went to the physician and the lawyer (docs/accuracy.md).
        # Unknown domains count as in-domain; C and S still rank within each tier.
        # With mix_reasoning a tier is ordered by way of reasoning too: in round 1 a program
        # first (about half the generation time of a chain of thought, and alone it solved
        # 13/20 GSM8K vs 8/20), later a way the query has not had yet, so the answer that
        # breaks a split is not the same way's correlated second try (docs/accuracy.md).
        seen = {c.reasoning for c in candidates if c.asked_for_this_query and c.reasoning}

        def way(c: CandidateState) -> int:
            if not self.mix_reasoning:
                return 0
            if round == 1:
                return 0 if c.reasoning == "program" else 1
            return 1 if c.reasoning in seen else 0

        # A client whose answer to this query the filter removed comes last: the adversary of
        # App. J is fixed per query, and re-asking it spent round 2 of robustness --size small
        # on the same colluder (docs/threat_model.md).
        def tier(c: CandidateState) -> tuple[bool, bool, bool, int]:
            off = bool(c.domains) and query.domain not in c.domains
            return c.filtered_for_this_query, off, round > 1 and c.asked_for_this_query, way(c)

        scored.sort(key=lambda sc: tier(sc[1]))
        n = k
        if round > 1 and self.adaptive_k:
            n = votes_needed(z, k)
        chosen = tuple(c.client_id for _, c in scored[:n])
        # the chosen and the first left out, with the parts of their scores and of their tier:
        # what decided the pick, per query (a tier is compared before the score)
        why = {c.client_id: {**{t: float(np.round(v[index[c.client_id]], 4))
                                for t, v in parts.items()},
                             **dict(zip(TIER_PARTS, map(float, tier(c)), strict=True))}
               for _, c in scored[:n + 1]}
        return validate_selection(Selection(chosen, why=why), [c.client_id for c in candidates],
                                  k)

    def summary(self) -> None:
        """Log the configuration."""
        logger.info(
            "HeuristicOrchestrator: k_max=%d, stop_support=%.2f, c=%.3f, C=%s, S=%s, "
            "adaptive_k=%s, mix_reasoning=%s", self.k_max, self.stop_support,
            self.exploration_c, self.use_capability, self.use_reliability, self.adaptive_k,
            self.mix_reasoning,
        )


class RandomOrchestrator(BaseOrchestrator):
    """Seeded baseline: uniformly random K_max clients, with the §3.12 stopping rule.

    The random stream is derived from ``(seed, query_id, round)``, so a selection does not
    depend on the order in which queries are processed.

    Parameters
    ----------
    k_max : int
        Default K_max.
    seed : int
        Run seed.
    stop_support : float or None
        As :class:`HeuristicOrchestrator`; ``None`` never stops early.
    embedder : Embedder, optional
        Unused; accepted so every built-in orchestrator takes the same factory arguments.
    """

    def __init__(
        self,
        *,
        k_max: int,
        seed: int = 0,
        stop_support: float | None = 0.7,
        embedder: Embedder | None = None,
    ) -> None:
        _check_k(k_max, "k_max")
        if stop_support is not None and not 0.0 <= stop_support <= 1.0:
            raise ValueError(f"stop_support must be in [0, 1] or None, got {stop_support}")
        self.k_max = k_max
        self.seed = seed
        self.stop_support = stop_support

    def select(
        self,
        query: OrchestratorQuery,
        z: CollabState | None,
        candidates: Sequence[CandidateState],
        *,
        round: int,
        k_max: int | None = None,
    ) -> Selection:
        """See :class:`Orchestrator`."""
        k = round_budget(k_max, self.k_max, round)
        if not candidates:
            return Selection.stop_now("no candidates")
        if self.stop_support is not None and should_stop(z, round, self.stop_support):
            return Selection.stop_now("support reached")
        qhash = int.from_bytes(hashlib.blake2b(query.query_id.encode(), digest_size=8).digest(),
                               "little")
        rng = np.random.default_rng([self.seed, qhash, round])
        ids = sorted(c.client_id for c in candidates)
        picked = rng.choice(len(ids), size=min(k, len(ids)), replace=False)
        chosen = tuple(ids[int(i)] for i in picked)
        return validate_selection(Selection(chosen), ids, k)

    def summary(self) -> None:
        """Log the configuration."""
        logger.info("RandomOrchestrator: k_max=%d, seed=%d, stop_support=%s",
                    self.k_max, self.seed, self.stop_support)


ORCHESTRATORS: Registry[Callable[..., BaseOrchestrator | Orchestrator]] = Registry("orchestrator")
ORCHESTRATORS.add("heuristic", HeuristicOrchestrator)
ORCHESTRATORS.add("random", RandomOrchestrator)
