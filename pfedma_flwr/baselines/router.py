"""Router-R1 (heuristic policy): consult one agent per turn, stop when the answer repeats.

Each turn the router picks the not yet consulted agent of highest capability for the query's
domain — domain match plus the agent's learned capability ``C_{i,d}`` (the routing state the
engine keeps for every method) plus profile cosine — and shows it the earlier turns' answers.
It stops once two consecutive turns give the same answer, or after T_max turns; the answer is
the last turn's. The LLM router policy of the paper is the ``llm`` orchestrator (issue 15).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.baselines.base import BaselineOrchestrator, digest
from pfedma_flwr.baselines.hooks import AgentView, QueryOutcome
from pfedma_flwr.baselines.scoring import expertise, ranked
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery, Selection

_HEADER = "Experts the router consulted earlier answered:"
_ASK = ("Check their reasoning against the task itself, step by step, and give your own final "
        "answer.")


def router_scores(query: OrchestratorQuery, candidates: Sequence[CandidateState], *,
                  use_capability: bool = True) -> list[float]:
    """``match + C_{i,d} + cos`` per candidate (``C`` left out when ``use_capability`` is off)."""
    return [expertise(query, c) + (c.state.c(query.domain) if use_capability else 0.0)
            for c in candidates]


def next_expert(order: Sequence[str], consulted: Sequence[str]) -> str | None:
    """The best agent of ``order`` not consulted yet (``None`` when every one was)."""
    return next((c for c in order if c not in consulted), None)


def repeated(answers: Mapping[int, str]) -> bool:
    """Whether the answers of the last two turns (by turn number) are the same non-empty one."""
    if len(answers) < 2:
        return False
    a, b = (answers[t] for t in sorted(answers)[-2:])
    return bool(a) and a == b


class RouterR1Orchestrator(BaselineOrchestrator):
    """One agent per turn (see the module docstring); answers of past turns kept per query.

    Parameters
    ----------
    k_max : int
        Accepted for the common factory arguments; a turn consults one agent.
    use_capability : bool
        Score with the learned capability ``C`` (``routing.use_capability``).
    embedder : Embedder, optional
        Unused.
    """

    def __init__(self, *, k_max: int, use_capability: bool = True,
                 embedder: Embedder | None = None) -> None:
        super().__init__(k_max=k_max, embedder=embedder)
        self.use_capability = use_capability
        # query id -> turn -> canonical answer of that turn (z of the latest-turn vote)
        self._answers: dict[str, dict[int, str]] = {}

    def stop_reason(self, query: OrchestratorQuery, z: CollabState | None, *,
                    round: int) -> str:
        """The answer of the latest turn repeats an earlier turn's (records the turn's answer)."""
        if round == 1:
            return ""
        seen = self._answers.setdefault(query.query_id, {})
        seen[round - 1] = z.canonical if z is not None and not z.empty else ""
        return "the answer repeated" if repeated(seen) else ""

    def choose(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int, k: int) -> Selection:
        """See :meth:`BaselineOrchestrator.choose`."""
        order = ranked(query, candidates, router_scores(
            query, candidates, use_capability=self.use_capability))
        consulted = [c.client_id for c in candidates if c.asked_for_this_query]
        return self._pick([next_expert(order, consulted) or order[0]], candidates, k)

    def compose(self, view: AgentView) -> tuple[str, str]:
        """The task, and from turn 2 on the earlier turns' answers."""
        earlier = sorted((r for r in view.history if r.round < view.round),
                         key=lambda r: r.round)
        return view.text, digest(earlier, header=_HEADER, ask=_ASK)

    def observe(self, outcome: QueryOutcome) -> None:
        """A finished query needs no turn memory any more."""
        self._answers.pop(outcome.query_id, None)

    def state_dict(self) -> dict[str, Any]:
        """Turn answers of the queries in flight (JSON keys are strings)."""
        return {"answers": {q: {str(t): a for t, a in d.items()}
                            for q, d in self._answers.items()}}

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self._answers = {str(q): {int(t): str(a) for t, a in v.items()}
                         for q, v in dict(d.get("answers", {})).items()}
