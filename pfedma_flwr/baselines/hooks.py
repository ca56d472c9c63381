"""Optional orchestrator capabilities the engine calls when an orchestrator has them.

An orchestrator only has to ``select`` (:class:`pfedma_flwr.routing.Orchestrator`). The paper's
baselines also decide what each selected agent sees, learn from finished queries and keep that
learning across a resume, so :class:`~pfedma_flwr.server.engine.CollaborationEngine` looks for
three optional methods:

``compose(view: AgentView) -> tuple[str, str]``
    The ``(text, refinement)`` one selected agent receives (EPEAgents' field filtering, a
    debate's neighbours' answers, MoA's proposals). Both pass through ``P_in`` again.
``observe(outcome: QueryOutcome) -> None``
    A query finished. It may be called again for the same ``query_id`` (the strategy re-absorbs
    a round without a hostile client's reply), so the last call must win: keep what you learn
    keyed by ``query_id``.
``state_dict() -> dict`` / ``load_state_dict(d) -> None``
    JSON-able learning state, stored in ``checkpoint.json`` under ``"orchestrator"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pfedma_flwr.aggregation.consensus import CollabState, RoundResponse
from pfedma_flwr.data.profiles import knowledge_domain
from pfedma_flwr.protocol.schema import RoutedQuery
from pfedma_flwr.protocol.wire import ClientDescription
from pfedma_flwr.server.query_state import QueryState


@dataclass(frozen=True)
class AgentView:
    """What :meth:`compose` decides from: one selected agent and its query so far.

    ``text`` is the task after ``P_in``; ``refinement`` is what PFedMA would send (its
    summary of ``z``); ``selected`` are the agents of this round.
    """

    client_id: str
    client_domains: tuple[str, ...]
    query_id: str
    text: str
    refinement: str
    domain: str
    round: int
    answer_kind: str
    selected: tuple[str, ...]
    history: tuple[RoundResponse, ...]
    z: CollabState | None


@dataclass(frozen=True)
class QueryOutcome:
    """A finished query as :meth:`observe` sees it: who answered what, and the final ``z``."""

    query_id: str
    domain: str
    answer_kind: str
    options: Mapping[str, str]
    history: tuple[RoundResponse, ...]
    z: CollabState | None


def composer(
    orchestrator: Any, q: QueryState, rq: RoutedQuery, selected: Sequence[str],
    clients: Mapping[str, ClientDescription], pin: Callable[[str], str],
) -> Callable[[str], RoutedQuery]:
    """``client_id → RoutedQuery`` of one query round: ``rq`` unless ``compose`` exists."""
    compose = getattr(orchestrator, "compose", None)
    if compose is None:
        return lambda _c: rq

    def view(c: str) -> RoutedQuery:
        text, ref = compose(AgentView(
            client_id=c, client_domains=tuple(clients[c].domains), query_id=rq.query_id,
            text=rq.text, refinement=rq.refinement, domain=rq.domain, round=rq.round,
            answer_kind=rq.answer_kind, selected=tuple(selected), history=tuple(q.history),
            z=q.z))
        # What compose adds may quote uploaded answers: the query rules act on it too.
        text = text if text == rq.text else pin(text)
        ref = ref if ref == rq.refinement else pin(ref)
        if not text.strip():
            raise ValueError(f"compose of {type(orchestrator).__name__} left query "
                             f"{rq.query_id!r} empty for {c!r}")
        return replace(rq, text=text, refinement=ref)

    return view


def observe_outcome(orchestrator: Any, q: QueryState) -> None:
    """Tell an orchestrator with ``observe`` that ``q`` finished (queries never started: no)."""
    observe = getattr(orchestrator, "observe", None)
    if observe is None or not q.history:
        return
    observe(QueryOutcome(query_id=q.task.task_id, domain=knowledge_domain(q.task.domain),
                         answer_kind=q.task.answer_kind, options=dict(q.task.options),
                         history=tuple(q.history), z=q.z))


def orchestrator_tokens(orchestrator: Any) -> int:
    """Tokens the orchestrator has spent so far (its ``tokens`` counter; 0 without one)."""
    n = getattr(orchestrator, "tokens", 0)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0


def orchestrator_state(orchestrator: Any) -> dict[str, Any] | None:
    """The orchestrator's checkpoint entry (``None`` when it keeps no state)."""
    fn = getattr(orchestrator, "state_dict", None)
    return None if fn is None else dict(fn())


def load_orchestrator_state(orchestrator: Any, d: Mapping[str, Any] | None) -> None:
    """Restore :func:`orchestrator_state`; a checkpoint without an entry leaves it fresh."""
    fn = getattr(orchestrator, "load_state_dict", None)
    if fn is not None and d is not None:
        fn(d)
