"""OPTAGENT: multi-agent debate over a collaboration graph refined by debate-quality scores.

Round 1: the K_max agents of highest expertise answer independently. Round t > 1: each debater
sees the previous round's answers of its neighbours — the other debaters ``j`` with edge weight
``w_ij ≥ threshold``, or its heaviest edge when none passes — and answers again; the debate
stops early once every answer agrees. The answer is the majority vote of the last round.

The graph: every edge starts at ``w_0 = 1``. When a query finishes, each debater ``j`` gets the
debate-quality score ``s_j`` (1 if its last answer agrees with the final vote, else 0) and every
edge into it from a co-debater moves ``w_ij ← (1 − η)·w_ij + η·s_j``: agents learn whose
arguments to listen to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.baselines.base import (
    BaselineOrchestrator,
    agreement,
    as_mapping,
    digest,
    round_responses,
    same_team,
    unanimous,
)
from pfedma_flwr.baselines.hooks import AgentView, QueryOutcome
from pfedma_flwr.baselines.scoring import ranked
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery, Selection

Edge = tuple[str, str]
_HEADER = "Other agents in this debate answered in the previous round:"
_ASK = ("Weigh their arguments against the task, point out any error, and give your final "
        "answer.")


def edge_weights(outcomes: Sequence[Mapping[str, float]], *, eta: float,
                 w0: float = 1.0) -> dict[Edge, float]:
    """``w_ij`` after the debate-quality scores of ``outcomes`` (oldest first).

    Each outcome maps the debaters of one query to their scores ``s_j``; edges never debated
    are absent (they weigh ``w0``).
    """
    w: dict[Edge, float] = {}
    for scores in outcomes:
        for i in scores:
            for j, s in scores.items():
                if i != j:
                    w[(i, j)] = (1.0 - eta) * w.get((i, j), w0) + eta * s
    return w


def neighbours(agent: str, debaters: Sequence[str], weights: Mapping[Edge, float], *,
               threshold: float, w0: float = 1.0) -> list[str]:
    """The co-debaters ``agent`` listens to: ``w ≥ threshold``, else the heaviest one.

    Ordered by weight (heaviest first), ties by id.
    """
    others = sorted((j for j in debaters if j != agent),
                    key=lambda j: (-weights.get((agent, j), w0), j))
    kept = [j for j in others if weights.get((agent, j), w0) >= threshold]
    return kept or others[:1]


class OptAgentOrchestrator(BaselineOrchestrator):
    """A debate team per query, its graph learned across queries (module docstring).

    Parameters
    ----------
    k_max : int
        Debaters per query.
    eta : float
        Learning rate of the edge weights, in (0, 1].
    threshold : float
        Edge weight from which an agent sees a co-debater's answer, in [0, 1].
    embedder : Embedder, optional
        Unused.
    """

    def __init__(self, *, k_max: int, eta: float = 0.5, threshold: float = 0.5,
                 embedder: Embedder | None = None) -> None:
        super().__init__(k_max=k_max, embedder=embedder)
        if not 0.0 < eta <= 1.0:
            raise ValueError(f"eta must be in (0, 1], got {eta}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        self.eta, self.threshold = eta, threshold
        # query id -> debate-quality scores (finishing order; a repeated observe replaces)
        self._scores: dict[str, dict[str, float]] = {}

    def weights(self) -> dict[Edge, float]:
        """The collaboration graph after every finished query."""
        return edge_weights(list(self._scores.values()), eta=self.eta)

    def stop_reason(self, query: OrchestratorQuery, z: CollabState | None, *,
                    round: int) -> str:
        """See :meth:`BaselineOrchestrator.stop_reason`."""
        return "the debate agrees" if round > 1 and unanimous(z) else ""

    def choose(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int, k: int) -> Selection:
        """See :meth:`BaselineOrchestrator.choose`."""
        order = ranked(query, candidates)
        return self._pick(same_team(candidates, order, k) if round > 1 else order[:k],
                          candidates, k)

    def compose(self, view: AgentView) -> tuple[str, str]:
        """The task, and after round 1 the neighbours' answers of the previous round."""
        if view.round == 1:
            return view.text, ""
        prev = round_responses(view.history, view.round - 1)
        near = neighbours(view.client_id, [r.client_id for r in prev], self.weights(),
                          threshold=self.threshold)
        shown = [r for j in near for r in prev if r.client_id == j]
        return view.text, digest(shown, header=_HEADER, ask=_ASK)

    def observe(self, outcome: QueryOutcome) -> None:
        """Debate-quality scores of the finished query refine the graph."""
        self._scores[outcome.query_id] = agreement(
            outcome.history, outcome.z, outcome.answer_kind, as_mapping(outcome.options))

    def state_dict(self) -> dict[str, Any]:
        """The scores in finishing order (the graph follows from them)."""
        return {"scores": [[q, s] for q, s in self._scores.items()]}

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self._scores = {str(q): {str(c): float(v) for c, v in s.items()}
                        for q, s in d.get("scores", [])}
