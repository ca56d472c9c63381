"""The orchestrator contract (DESIGN §1 step 2, §3.12): what a routing policy sees and returns.

:class:`BaseOrchestrator` is the whole contract with its defaults: ``select`` is the one method a
policy must write; ``stop_before_routing``, ``compose``, ``observe``, ``state_dict`` /
``load_state_dict``, the ``tokens`` counter and ``summary`` default to "no early stop", "the
agent sees the task and PFedMA's refinement", "learn nothing", "no state", 0 and a log line. The
built-in policies (heuristic, random, the trained LLM) and the baselines' orchestrators subclass
it, and so should a plug-in (docs/extending.md). An object that only has ``select`` (the
:class:`Orchestrator` protocol) still works: :func:`as_orchestrator` wraps it, and the engine
only ever talks to a :class:`BaseOrchestrator`.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from pfedma_flwr.routing.state import RoutingState

if TYPE_CHECKING:  # aggregation imports routing.state: a runtime import here would be circular
    from pfedma_flwr.aggregation.consensus import CollabState, RoundResponse

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OrchestratorQuery:
    """The privacy-processed query ``q̃`` as the orchestrator sees it."""

    query_id: str
    text: str
    domain: str
    embedding: np.ndarray | None = None


@dataclass(frozen=True)
class CandidateState:
    """One candidate client: id, routing state ``M_i`` and whether it was asked for this query."""

    client_id: str
    state: RoutingState
    profile: str = ""
    profile_embedding: np.ndarray | None = None
    asked_for_this_query: bool = False
    # public profile domains (ClientDescription.domains); empty = unknown
    domains: tuple[str, ...] = ()
    # USD per million tokens of its backbone (routing.prices); None = no prices configured
    price: float | None = None
    # how it would answer this query: "program" (computes it) | "cot" | "" (unknown)
    reasoning: str = ""
    # the anomaly filter removed its answer to this query in an earlier round
    filtered_for_this_query: bool = False


@dataclass(frozen=True)
class Selection:
    """A routing action: STOP, or the ids of 1..K_max distinct clients."""

    clients: tuple[str, ...] = ()
    stop: bool = False
    reason: str = ""
    # why, for the run's record (``rounds.jsonl`` ``routing``): per client id the terms of its
    # score, for the chosen clients and the first one left out; empty when a policy says nothing
    why: Mapping[str, Mapping[str, float]] = field(default_factory=dict, compare=False,
                                                    repr=False)

    def why_record(self) -> dict[str, dict[str, float]]:
        """``why`` as the run's record keeps it: finite numbers, for the chosen and one more.

        What a plug-in policy put there that is not a finite number is left out, so the record
        stays JSON and bounded whatever a policy returns.
        """
        out: dict[str, dict[str, float]] = {}
        for cid, parts in list(self.why.items())[: len(self.clients) + 1]:
            if not isinstance(parts, Mapping):
                continue
            nums = {}
            for k, v in parts.items():
                try:
                    x = float(v)
                except (TypeError, ValueError, OverflowError):
                    continue
                if math.isfinite(x):
                    nums[str(k)[:32]] = x
            out[str(cid)] = nums
        return out

    @classmethod
    def stop_now(cls, reason: str = "") -> Selection:
        """The STOP action."""
        return cls(clients=(), stop=True, reason=reason)


def validate_selection(selection: Selection, candidates: Sequence[str], k_max: int) -> Selection:
    """Check a routing action against the candidates; raise ``ValueError`` saying what is wrong.

    STOP must name no client; otherwise 1 ≤ |E^t| ≤ K_max distinct known client ids.
    """
    if selection.stop:
        if selection.clients:
            raise ValueError(f"STOP must select no client, got {list(selection.clients)}")
        return selection
    n = len(selection.clients)
    if not 1 <= n <= k_max:
        raise ValueError(f"selection must name 1..{k_max} clients, got {n}")
    if len(set(selection.clients)) != n:
        raise ValueError(f"selection repeats a client: {list(selection.clients)}")
    unknown = sorted(set(selection.clients) - set(candidates))
    if unknown:
        raise ValueError(f"selection names unknown client(s) {unknown}")
    return selection


@runtime_checkable
class Orchestrator(Protocol):
    """Routing policy ``π(q̃, z^{t-1}, {M_i}) → E^t | STOP``."""

    def select(
        self,
        query: OrchestratorQuery,
        z: CollabState | None,
        candidates: Sequence[CandidateState],
        *,
        round: int,
        k_max: int | None = None,
    ) -> Selection:
        """Choose the clients of round ``round`` (1-based) or STOP."""
        ...


def _check_k(k: int | None, name: str) -> int | None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"{name} must be an integer >= 1, got {k!r}")
    return k


def round_budget(k_max: int | None, default: int, round: int) -> int:
    """The checks every ``select`` starts with: the round's K (``k_max`` or ``default``).

    Raises ``ValueError`` for a ``k_max`` that is not an integer >= 1 or a round below 1.
    """
    if round < 1:
        raise ValueError(f"round must be >= 1, got {round}")
    return _check_k(k_max, "k_max") or default


@dataclass(frozen=True)
class AgentView:
    """What :meth:`BaseOrchestrator.compose` decides from: one selected agent and its query so far.

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
    """A finished query as :meth:`BaseOrchestrator.observe` sees it: who answered what, final z."""

    query_id: str
    domain: str
    answer_kind: str
    options: Mapping[str, str]
    history: tuple[RoundResponse, ...]
    z: CollabState | None


class BaseOrchestrator(ABC):
    """A routing policy ``π(q̃, z^{t-1}, {M_i}) → E^t | STOP`` with the engine's whole contract.

    Subclasses write :meth:`select`; every other method has a default that a policy overrides
    when it needs it. The engine calls, per query round: :meth:`stop_before_routing` (before it
    builds the candidate list), :meth:`select`, then :meth:`compose` for each selected agent;
    :meth:`observe` when a query ends; :meth:`state_dict` / :meth:`load_state_dict` with each
    checkpoint; :attr:`tokens` before and after ``select`` (the policy's own generation is
    part of the query's cost).
    """

    #: Tokens the policy has generated so far (an LLM policy counts them; rule-based ones: 0).
    tokens: int = 0

    @property
    def name(self) -> str:
        """The policy's name in summaries and reports (its class name)."""
        return type(self).__name__

    @abstractmethod
    def select(
        self,
        query: OrchestratorQuery,
        z: CollabState | None,
        candidates: Sequence[CandidateState],
        *,
        round: int,
        k_max: int | None = None,
    ) -> Selection:
        """Choose the clients of round ``round`` (1-based) or STOP.

        Return ``Selection((ids...))`` of 1..``k_max`` distinct candidates, or
        :meth:`Selection.stop_now`. An invalid action ends that query with
        ``invalid_selection`` (``R_fmt`` of the RL loop), never the run.
        """

    def stop_before_routing(self, z: CollabState | None, *, round: int) -> str | None:
        """A STOP reason that needs no candidates, else ``None`` (default: never).

        The engine asks this before it builds a query's candidate list (O(N) per query). It
        must agree with what :meth:`select` would do: a subclass that changes when to stop
        overrides both.
        """
        return None

    @property
    def composes(self) -> bool:
        """Whether :meth:`compose` is overridden (the engine skips the views otherwise)."""
        return type(self).compose is not BaseOrchestrator.compose

    def compose(self, view: AgentView) -> tuple[str, str]:
        """The ``(text, refinement)`` one selected agent receives (default: unchanged).

        EPEAgents' field filtering, a debate's neighbours' answers, MoA's proposals. What this
        returns passes through ``P_in`` again.
        """
        return view.text, view.refinement

    def observe(self, outcome: QueryOutcome) -> None:
        """A query finished (default: learn nothing).

        May be called again for the same ``query_id`` (the strategy re-absorbs a round without
        a hostile client's reply), so the last call must win: keep what you learn keyed by
        ``query_id``.
        """
        return None

    def state_dict(self) -> dict[str, Any]:
        """JSON-able learning state for ``checkpoint.json`` (default: none, ``{}``)."""
        return {}

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` on ``--resume`` (default: nothing to restore)."""
        return None

    def summary(self) -> None:
        """Log the policy's configuration."""
        logger.info("%s", self.name)


class _SelectOnly(BaseOrchestrator):
    """A ``select``-only plug-in (the :class:`Orchestrator` protocol) under the full contract.

    Optional methods the wrapped object has are used; the rest take the base defaults.
    Attribute reads fall through to the wrapped object, so a report or test that reads a
    policy's own counters still sees them.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, attr: str) -> Any:
        if attr == "inner":  # not set yet (copy, unpickling): no recursion through __getattr__
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    @property
    def name(self) -> str:
        return type(self.inner).__name__

    @property
    def tokens(self) -> int:  # type: ignore[override]
        return getattr(self.inner, "tokens", 0)

    def select(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int,
               k_max: int | None = None) -> Selection:
        return self.inner.select(query, z, candidates, round=round, k_max=k_max)  # type: ignore[no-any-return]

    def stop_before_routing(self, z: CollabState | None, *, round: int) -> str | None:
        fn = getattr(self.inner, "stop_before_routing", None)
        return None if fn is None else fn(z, round=round)

    @property
    def composes(self) -> bool:
        return callable(getattr(self.inner, "compose", None))

    def compose(self, view: AgentView) -> tuple[str, str]:
        fn = getattr(self.inner, "compose", None)
        return (view.text, view.refinement) if fn is None else fn(view)

    def observe(self, outcome: QueryOutcome) -> None:
        fn = getattr(self.inner, "observe", None)
        if fn is not None:
            fn(outcome)

    def state_dict(self) -> dict[str, Any]:
        fn = getattr(self.inner, "state_dict", None)
        return {} if fn is None else dict(fn())

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        fn = getattr(self.inner, "load_state_dict", None)
        if fn is not None:
            fn(d)

    def summary(self) -> None:
        fn = getattr(self.inner, "summary", None)
        if fn is not None:
            fn()
        else:
            super().summary()


def as_orchestrator(policy: Any) -> BaseOrchestrator:
    """``policy`` under the full contract: itself if a :class:`BaseOrchestrator`, else wrapped.

    Raises
    ------
    TypeError
        When ``policy`` has no callable ``select`` (naming its type).
    """
    if isinstance(policy, BaseOrchestrator):
        return policy
    if not callable(getattr(policy, "select", None)):
        raise TypeError(f"orchestrator {type(policy).__name__} has no select(query, z, "
                        "candidates, *, round, k_max) method; subclass "
                        "pfedma_flwr.routing.BaseOrchestrator")
    return _SelectOnly(policy)
