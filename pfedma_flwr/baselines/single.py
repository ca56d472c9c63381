"""Single agent: the one best-matching agent answers once (the paper's single-agent baseline)."""

from __future__ import annotations

from collections.abc import Sequence

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.baselines.base import BaselineOrchestrator
from pfedma_flwr.baselines.scoring import ranked
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery, Selection


class SingleAgentOrchestrator(BaselineOrchestrator):
    """Round 1: the agent of highest :func:`~pfedma_flwr.baselines.scoring.expertise`; then STOP.

    The main preset runs it with one client, so the federation's gain is measured against the
    same model answering alone.
    """

    one_round = "single agent: one round"

    def choose(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int, k: int) -> Selection:
        """See :meth:`BaselineOrchestrator.choose`."""
        return self._pick(ranked(query, candidates)[:1], candidates, k)
