"""Orchestrator plug-in: the client with the highest capability C for the query's domain.

--set routing.orchestrator=examples.plugins.highest_c:HighestC
--set routing.orchestrator_options.rounds=1
"""

from pfedma_flwr.routing import BaseOrchestrator, Selection


class HighestC(BaseOrchestrator):
    """Ask the one client with the highest ``C`` for the domain; ``rounds`` rounds per query."""

    def __init__(self, *, k_max, rounds=1, **_ignored):
        self.k_max, self.rounds = k_max, rounds

    def select(self, query, z, candidates, *, round, k_max=None):
        if round > self.rounds or not candidates:
            return Selection.stop_now(f"{self.rounds} round(s)")
        fresh = [c for c in candidates if not c.asked_for_this_query] or list(candidates)
        # highest C, then fewer asks in the domain (so equal C spreads), then the smaller id
        best = min(fresh, key=lambda c: (-c.state.c(query.domain),
                                         c.state.asked(query.domain), c.client_id))
        return Selection((best.client_id,))
