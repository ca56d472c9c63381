"""KABB: knowledge-aware Bayesian bandit over the experts (Thompson sampling, time decay).

Each expert ``i`` has per domain ``d`` a Beta posterior over "its answer agrees with the final
answer". After ``n`` finished queries, with ``a_ij ∈ {0, 1}`` its agreement on query ``j`` of
domain ``d`` and ``γ`` the decay::

    α_{i,d} = α_0 + Σ_j γ^(n-1-j) · a_ij          β_{i,d} = β_0 + Σ_j γ^(n-1-j) · (1 - a_ij)

(``j`` counts every finished query, so old evidence fades whatever its domain). Selection draws
``θ_i ~ Beta(α_{i,d} · exp(-δ_i), β_{i,d})`` with knowledge distance ``δ_i = 1 − match`` (0 for
an expert of the query's domain, 1 for one of other domains, 0.5 for one without declared
domains) and asks the top K_max; the answer is their majority vote.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.baselines.base import (
    BaselineOrchestrator,
    agreement,
    as_mapping,
    query_rng,
)
from pfedma_flwr.baselines.hooks import QueryOutcome
from pfedma_flwr.baselines.scoring import domain_match
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery, Selection

#: One finished query: (query id, domain, expert -> agreement in {0, 1}).
Outcome = tuple[str, str, Mapping[str, float]]


def posterior(outcomes: Sequence[Outcome], client: str, domain: str, *, decay: float,
              alpha0: float = 1.0, beta0: float = 1.0) -> tuple[float, float]:
    """``(α, β)`` of ``client`` on ``domain`` after ``outcomes`` (oldest first)."""
    a, b, n = alpha0, beta0, len(outcomes)
    for j, (_q, d, agree) in enumerate(outcomes):
        if d == domain and client in agree:
            w = decay ** (n - 1 - j)
            a += w * agree[client]
            b += w * (1.0 - agree[client])
    return a, b


def knowledge_distance(query_domain: str, client_domains: Sequence[str]) -> float:
    """``δ = 1 − match`` (:func:`~pfedma_flwr.baselines.scoring.domain_match`)."""
    return 1.0 - domain_match(query_domain, client_domains)


def beta_params(alpha: float, beta: float, distance: float) -> tuple[float, float]:
    """The sampling distribution ``Beta(α·exp(−δ), β)``."""
    return alpha * math.exp(-distance), beta


def thompson_top_k(params: Mapping[str, tuple[float, float]], k: int,
                   rng: np.random.Generator) -> list[str]:
    """One draw per expert (in id order), the ``k`` largest (ties by id)."""
    ids = sorted(params)
    theta = [float(rng.beta(*params[c])) for c in ids]
    return [c for _, c in sorted(zip(theta, ids, strict=True), key=lambda t: (-t[0], t[1]))][:k]


class KABBOrchestrator(BaselineOrchestrator):
    """Thompson sampling of the top K_max experts; posteriors learned from outcomes.

    Parameters
    ----------
    k_max : int
        Experts per query.
    seed : int
        Run seed (draws depend on ``(seed, query_id)``, not on query order).
    decay : float
        Time decay ``γ`` in (0, 1].
    alpha0, beta0 : float
        Prior pseudo-counts (> 0).
    embedder : Embedder, optional
        Unused.
    """

    def __init__(self, *, k_max: int, seed: int = 0, decay: float = 0.9, alpha0: float = 1.0,
                 beta0: float = 1.0, embedder: Embedder | None = None) -> None:
        super().__init__(k_max=k_max, embedder=embedder)
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        if not (alpha0 > 0 and beta0 > 0):
            raise ValueError(f"alpha0 and beta0 must be > 0, got {alpha0}, {beta0}")
        self.seed, self.decay, self.alpha0, self.beta0 = seed, decay, alpha0, beta0
        # query id -> (domain, agreement); insertion order is finishing order and a repeated
        # observe of a query (a re-absorbed round) replaces its entry in place
        self._outcomes: dict[str, tuple[str, dict[str, float]]] = {}

    def outcomes(self) -> list[Outcome]:
        """The finished queries, oldest first."""
        return [(q, d, a) for q, (d, a) in self._outcomes.items()]

    def params(self, query: OrchestratorQuery,
               candidates: Sequence[CandidateState]) -> dict[str, tuple[float, float]]:
        """The sampling ``Beta`` of each candidate for ``query``."""
        past = self.outcomes()
        return {c.client_id: beta_params(
            *posterior(past, c.client_id, query.domain, decay=self.decay, alpha0=self.alpha0,
                       beta0=self.beta0), knowledge_distance(query.domain, c.domains))
            for c in candidates}

    one_round = "KABB: one selection per query"

    def choose(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int, k: int) -> Selection:
        """See :meth:`BaselineOrchestrator.choose`."""
        rng = query_rng(self.seed, query.query_id, round)
        return self._pick(thompson_top_k(self.params(query, candidates), k, rng), candidates, k)

    def observe(self, outcome: QueryOutcome) -> None:
        """Each expert's agreement with the final answer updates its posterior."""
        self._outcomes[outcome.query_id] = (outcome.domain, agreement(
            outcome.history, outcome.z, outcome.answer_kind, as_mapping(outcome.options)))

    def state_dict(self) -> dict[str, Any]:
        """The outcomes in finishing order (the posteriors follow from them)."""
        return {"outcomes": [[q, d, a] for q, d, a in self.outcomes()]}

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self._outcomes = {str(q): (str(dom), {str(c): float(v) for c, v in a.items()})
                          for q, dom, a in d.get("outcomes", [])}
