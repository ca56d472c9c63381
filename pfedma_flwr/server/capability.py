"""What one query's answers teach the routing state: each client's quality signal ``g_i``.

DESIGN §3.8 (revised): a client's ``g_i`` compares its retained answer with ``z`` formed
**without** its own votes (leave-one-out). With its own vote inside ``z`` an answer agreed with
``z`` by construction and ``C`` reinforced itself (an off-domain client ended with a higher math
``C`` than the mathematician). An answer with nothing to be compared with is handled when its
query ends, as ``routing.lone_answers`` says (:mod:`pfedma_flwr.routing.lone`).

Pure functions over a :class:`Consensus` (the engine's aggregator, routing table, settings and
embedder at the time of the call), so the engine keeps only the bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.anomaly.scores import similarity_to
from pfedma_flwr.data.profiles import knowledge_domain
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.lone import lone_qualities
from pfedma_flwr.routing.state import RoutingTable, quality_signal
from pfedma_flwr.server.query_state import EngineSettings, QueryState


@dataclass(frozen=True)
class Consensus:
    """How ``z`` is formed from a set of answers of one query (the engine's components)."""

    aggregate: Callable[..., CollabState]
    routing: RoutingTable
    settings: EngineSettings
    embedder: Embedder

    def z(self, q: QueryState, replies: Sequence[Any], domain: str) -> CollabState:
        """``z`` of ``replies`` (``RoundResponse``s of ``q``) at ``q``'s current round."""
        return self.aggregate(replies, kind=q.task.answer_kind, domain=domain,
                              routing=self.routing, round=q.t,
                              use_capability=self.settings.use_capability,
                              use_reliability=self.settings.use_reliability,
                              options=q.task.options or None)

    def similarity(self, q: QueryState, answer: str, z: CollabState) -> float:
        """Similarity of ``answer`` to ``z``'s answer, by ``q``'s answer kind."""
        return float(similarity_to([answer], z.answer, q.task.answer_kind, self.embedder,
                                   options=q.task.options or None)[0])


def leave_one_out_quality(
    c: Consensus, q: QueryState, client: str, response: Any, assessment: Any, domain: str,
) -> float | None:
    """``g_i`` of ``client``'s answer against ``z`` of the other clients' answers of ``q``.

    0 for a filtered answer; ``None`` (nothing to learn now) for no answer, or when the
    others hold no retained answer yet.
    """
    if response is None:
        return None
    if not assessment.retained:
        return 0.0
    others = [h for h in q.history if h.client_id != client]
    if not any(h.retained and h.response is not None for h in others):
        return None
    z_minus = c.z(q, others, domain)
    if z_minus.empty or not z_minus.answer:
        return None
    return quality_signal(assessment.score, c.similarity(q, response.final_answer, z_minus),
                          True)


def lone_answer_signals(c: Consensus, q: QueryState) -> list[tuple[tuple[str, str], float]]:
    """``((client, domain), g)`` for the answers of finished ``q`` that were never compared."""
    domain = knowledge_domain(q.task.domain)

    def sim(answer: str, others: Sequence[Any]) -> float | None:
        z = c.z(q, others, domain)
        if z.empty or not z.answer:
            return None
        return c.similarity(q, answer, z)

    return [((client, domain), g) for client, g in
            lone_qualities(q.history, mode=c.settings.lone_answers, similarity=sim)]
