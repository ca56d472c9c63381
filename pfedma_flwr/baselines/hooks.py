"""The engine's calls into an orchestrator, at one seam (:class:`BaseOrchestrator`'s contract).

The contract and its defaults are :class:`pfedma_flwr.routing.base.BaseOrchestrator`; the
functions here add what the engine needs around each call: ``P_in`` over what ``compose``
adds, a checked token counter, and the checkpoint entry's ``None`` for a policy without state.
:class:`AgentView` and :class:`QueryOutcome` are re-exported for the baselines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pfedma_flwr.data.profiles import knowledge_domain
from pfedma_flwr.protocol.schema import RoutedQuery
from pfedma_flwr.protocol.wire import ClientDescription
from pfedma_flwr.routing.base import AgentView, BaseOrchestrator, QueryOutcome
from pfedma_flwr.server.query_state import QueryState

__all__ = ["AgentView", "QueryOutcome", "composer", "load_orchestrator_state",
           "observe_outcome", "orchestrator_state", "orchestrator_tokens"]


def composer(
    orchestrator: BaseOrchestrator, q: QueryState, rq: RoutedQuery, selected: Sequence[str],
    clients: Mapping[str, ClientDescription], pin: Callable[[str], str],
) -> Callable[[str], RoutedQuery]:
    """``client_id → RoutedQuery`` of one query round: ``rq`` unless ``compose`` is overridden."""
    if not orchestrator.composes:
        return lambda _c: rq
    compose = orchestrator.compose

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
            raise ValueError(f"compose of {orchestrator.name} left query "
                             f"{rq.query_id!r} empty for {c!r}")
        return replace(rq, text=text, refinement=ref)

    return view


def observe_outcome(orchestrator: BaseOrchestrator, q: QueryState) -> None:
    """Tell the orchestrator that ``q`` finished (queries never started: no)."""
    if not q.history:
        return
    orchestrator.observe(QueryOutcome(
        query_id=q.task.task_id, domain=knowledge_domain(q.task.domain),
        answer_kind=q.task.answer_kind, options=dict(q.task.options),
        history=tuple(q.history), z=q.z))


def orchestrator_tokens(orchestrator: BaseOrchestrator) -> int:
    """Tokens the orchestrator has spent so far (0 for a counter that is not an int >= 0)."""
    n = orchestrator.tokens
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0


def orchestrator_state(orchestrator: BaseOrchestrator) -> dict[str, Any] | None:
    """The orchestrator's checkpoint entry (``None`` when it keeps no state)."""
    return dict(orchestrator.state_dict()) or None


def load_orchestrator_state(orchestrator: BaseOrchestrator,
                            d: Mapping[str, Any] | None) -> None:
    """Restore :func:`orchestrator_state`; a checkpoint without an entry leaves it fresh."""
    if d is not None:
        orchestrator.load_state_dict(d)
