"""The registered clients as an orchestrator's candidates for the queries of one planning.

Candidate lists are O(N) per query, the server's largest cost at N = 1,000
(bench/bench_server_scale.py). A candidate differs between queries only by "asked for this
query", "filtered for this query" and its way of reasoning for the task, so each variant is
built once per planning and shared by every query that needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from pfedma_flwr.protocol.wire import ClientDescription, reasoning_way
from pfedma_flwr.routing.base import CandidateState
from pfedma_flwr.routing.state import RoutingTable


class CandidateViews:
    """Candidate states of the clients for one planning, each variant built once.

    Parameters
    ----------
    clients : Mapping[str, ClientDescription]
        The registered clients' public profiles.
    routing : RoutingTable
        Their routing states ``M_i`` (read, never changed here).
    profile_embeddings : Mapping[str, np.ndarray]
        Each client's profile embedding.
    price : Callable[[str], float] | None
        USD per million tokens of a client, or ``None`` when the run has no price table.
    """

    def __init__(self, *, clients: Mapping[str, ClientDescription], routing: RoutingTable,
                 profile_embeddings: Mapping[str, np.ndarray],
                 price: Callable[[str], float] | None) -> None:
        self._clients, self._routing = clients, routing
        self._emb, self._price = profile_embeddings, price
        self._built: dict[tuple[str, bool, str, bool], CandidateState] = {}

    def get(self, client_id: str, *, asked: bool, kind: str, filtered: bool) -> CandidateState:
        """Client ``client_id`` as a candidate for a query whose answers are of ``kind``."""
        desc = self._clients[client_id]
        way = reasoning_way(desc.reasoning, kind)
        key = (client_id, asked, way, filtered)
        got = self._built.get(key)
        if got is None:
            got = self._built[key] = CandidateState(
                client_id=client_id, state=self._routing.get(client_id),
                profile=desc.description,
                price=self._price(client_id) if self._price is not None else None,
                profile_embedding=self._emb[client_id], asked_for_this_query=asked,
                domains=tuple(desc.domains), reasoning=way, filtered_for_this_query=filtered)
        return got
