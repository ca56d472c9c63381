"""Mixture-of-Agents: layers of proposers, then one aggregator whose answer is final.

Rounds 1 .. T_max − 1 are proposer layers: the K_max agents of highest expertise answer, each
layer after the first given the previous layer's proposals. Round T_max is the aggregator
layer: the single agent of highest expertise receives every proposal of the layer before and
synthesizes the answer. With T_max = 1 there is no aggregator and the proposals' majority vote
is the answer; an aggregator that fails leaves the proposals' vote.
"""

from __future__ import annotations

from collections.abc import Sequence

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.baselines.base import BaselineOrchestrator, digest, round_responses
from pfedma_flwr.baselines.hooks import AgentView
from pfedma_flwr.baselines.scoring import ranked
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery, Selection

PROPOSER, AGGREGATOR = "proposer", "aggregator"
_PROPOSALS = "Proposals of other agents for this task:"
_IMPROVE = "Use what is right in them, correct what is wrong, and give your final answer."
_SYNTHESIZE = ("You are the aggregator: critically evaluate these proposals, some may be wrong, "
               "and synthesize one correct final answer.")


def moa_role(round: int, t_max: int) -> str:
    """:data:`AGGREGATOR` in the last round of a budget of at least two, else :data:`PROPOSER`."""
    return AGGREGATOR if t_max >= 2 and round == t_max else PROPOSER


class MoAOrchestrator(BaselineOrchestrator):
    """Proposer layers then an aggregator (module docstring).

    Parameters
    ----------
    k_max : int
        Proposers per layer.
    t_max : int
        The round budget (``strategy.t_max``): its last round is the aggregator's.
    embedder : Embedder, optional
        Unused.
    """

    def __init__(self, *, k_max: int, t_max: int, embedder: Embedder | None = None) -> None:
        super().__init__(k_max=k_max, embedder=embedder)
        if isinstance(t_max, bool) or not isinstance(t_max, int) or t_max < 1:
            raise ValueError(f"t_max must be an integer >= 1, got {t_max!r}")
        self.t_max = t_max

    def stop_reason(self, query: OrchestratorQuery, z: CollabState | None, *,
                    round: int) -> str:
        """See :meth:`BaselineOrchestrator.stop_reason`."""
        return "MoA: every layer ran" if round > self.t_max else ""

    def choose(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int, k: int) -> Selection:
        """See :meth:`BaselineOrchestrator.choose`."""
        n = 1 if moa_role(round, self.t_max) == AGGREGATOR else k
        return self._pick(ranked(query, candidates)[:n], candidates, k)

    def compose(self, view: AgentView) -> tuple[str, str]:
        """Proposers after layer 1 and the aggregator get the previous layer's proposals."""
        if view.round == 1:
            return view.text, ""
        ask = _SYNTHESIZE if moa_role(view.round, self.t_max) == AGGREGATOR else _IMPROVE
        prev = round_responses(view.history, view.round - 1)
        return view.text, digest(prev, header=_PROPOSALS, ask=ask)
