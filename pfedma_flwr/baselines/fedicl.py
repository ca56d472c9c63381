"""Fed-ICL: federated in-context learning with a re-broadcast majority vote.

Clients answer with in-context examples retrieved from their private data ``D_i`` (the agents'
``agent.few_shot`` demonstrations; the main preset turns them on for this method). The server
samples K_max clients per query (seeded), takes the majority vote of their answers and
re-broadcasts it to the same clients for refinement rounds up to T_max, stopping early once
every answer agrees.
"""

from __future__ import annotations

from collections.abc import Sequence

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.baselines.base import BaselineOrchestrator, query_rng, same_team, unanimous
from pfedma_flwr.baselines.hooks import AgentView
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery, Selection

_ASK = ("Revisit the task with your own worked examples in mind and give your final answer "
        "(keep it if you still find it correct).")


def broadcast_text(z: CollabState | None) -> str:
    """The server's vote as the next round's refinement (``""`` without a vote yet)."""
    if z is None or z.empty or not z.answer.strip():
        return ""
    others = "; ".join(f"'{a[:80]}' ({w:.0%})" for a, w in z.dissent[:3])
    line = (f"Federated vote of the previous round: '{z.answer[:160]}' ({z.n_agreeing} of "
            f"{z.n_retained} agents).")
    if others:
        line += f" Other answers: {others}."
    return f"{line}\n{_ASK}"


class FedICLOrchestrator(BaselineOrchestrator):
    """K_max seeded random clients per query; the same clients in every refinement round.

    Parameters
    ----------
    k_max : int
        Clients per query.
    seed : int
        Run seed (the draw depends on ``(seed, query_id)`` only).
    embedder : Embedder, optional
        Unused.
    """

    def __init__(self, *, k_max: int, seed: int = 0, embedder: Embedder | None = None) -> None:
        super().__init__(k_max=k_max, embedder=embedder)
        self.seed = seed

    def stop_reason(self, query: OrchestratorQuery, z: CollabState | None, *,
                    round: int) -> str:
        """See :meth:`BaselineOrchestrator.stop_reason`."""
        return "every answer agrees" if round > 1 and unanimous(z) else ""

    def choose(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int, k: int) -> Selection:
        """See :meth:`BaselineOrchestrator.choose`."""
        ids = sorted(c.client_id for c in candidates)
        order = [ids[int(i)] for i in query_rng(self.seed, query.query_id, 0).permutation(len(ids))]
        return self._pick(same_team(candidates, order, k) if round > 1 else order[:k],
                          candidates, k)

    def compose(self, view: AgentView) -> tuple[str, str]:
        """Round 1: the task alone; later rounds: the task and the broadcast vote."""
        return view.text, broadcast_text(view.z) if view.round > 1 else ""
