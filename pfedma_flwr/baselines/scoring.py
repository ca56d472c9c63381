"""Expertise of an agent for a query from its public profile: domain match and profile cosine.

The baselines route without PFedMA's learned routing states (except where a method learns its
own: KABB's posterior, OPTAGENT's graph). ``match`` is 1 for an agent whose public domains hold
the query's domain, 0 for one whose domains do not, and 0.5 for an agent that declared none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery

UNKNOWN_MATCH = 0.5


def domain_match(query_domain: str, client_domains: Sequence[str]) -> float:
    """1.0 in-domain, 0.0 off-domain, :data:`UNKNOWN_MATCH` without declared domains."""
    if not client_domains:
        return UNKNOWN_MATCH
    return 1.0 if query_domain in client_domains else 0.0


def profile_cosine(query: OrchestratorQuery, c: CandidateState) -> float:
    """``e(q)·e(profile)`` (unit embeddings); 0 when either embedding is missing."""
    if query.embedding is None or c.profile_embedding is None:
        return 0.0
    q = np.asarray(query.embedding, dtype=np.float32).reshape(-1)
    p = np.asarray(c.profile_embedding, dtype=np.float32).reshape(-1)
    return float(q @ p) if q.shape == p.shape else 0.0


def expertise(query: OrchestratorQuery, c: CandidateState) -> float:
    """``match + cos``: the domain decides, the profile text breaks ties within it."""
    return domain_match(query.domain, c.domains) + profile_cosine(query, c)


def ranked(query: OrchestratorQuery, candidates: Sequence[CandidateState],
           scores: Sequence[float] | None = None) -> list[str]:
    """Candidate ids by score (default :func:`expertise`), highest first, ties by id."""
    s = [expertise(query, c) for c in candidates] if scores is None else list(scores)
    if len(s) != len(candidates):
        raise ValueError(f"{len(s)} scores for {len(candidates)} candidates")
    order = sorted(zip(s, candidates, strict=True), key=lambda sc: (-sc[0], sc[1].client_id))
    return [c.client_id for _, c in order]
