"""The LLM orchestrator ``π_θ``: a chat model reads the routing state and emits an action.

Each round, :class:`LLMOrchestrator` sends the prompt of :mod:`pfedma_flwr.routing.llm_action`
(the grammar, prompt and strict parser it shares with the veRL training loop; re-exported here)
to any project backend and parses the reply. A malformed reply (or a backend error) is counted
as a format failure by reason code and that round falls back to the heuristic policy (DESIGN
§3.12), so an untrained or broken policy never ends a query.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.llm_action import (
    FAILURE_REASONS,
    SYSTEM_PROMPT,
    FormatFailure,
    build_prompt,
    example_id,
    parse_action,
    through_first_action,
)
from pfedma_flwr.routing.orchestrator import (
    BaseOrchestrator,
    CandidateState,
    HeuristicOrchestrator,
    Orchestrator,
    OrchestratorQuery,
    Selection,
    _check_k,
    round_budget,
)

if TYPE_CHECKING:  # aggregation imports routing.state: a runtime import would be circular
    from pfedma_flwr.aggregation.consensus import CollabState

__all__ = ["FAILURE_REASONS", "MAX_CONVERSATIONS", "SYSTEM_PROMPT", "ChatBackend",
           "FormatFailure", "LLMOrchestrator", "build_prompt", "example_id", "parse_action",
           "through_first_action"]

logger = logging.getLogger(__name__)

#: queries whose earlier routing turns are kept (a query's turns are dropped at its STOP)
MAX_CONVERSATIONS = 4096


class _Result(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def ok(self) -> bool: ...

    @property
    def tokens(self) -> int: ...


class ChatBackend(Protocol):
    """Batch chat generation (implemented by ``pfedma_flwr.agents.backends``)."""

    def generate(
        self, prompts: list[list[dict[str, str]]], *, max_tokens: int, temperature: float,
    ) -> Sequence[_Result]:
        """One result per chat prompt, in order."""
        ...


class LLMOrchestrator(BaseOrchestrator):
    """Routing by a chat LLM, with the heuristic policy as the per-round fallback.

    Parameters
    ----------
    backend : ChatBackend
        Any project backend (embedded llama.cpp, transformers, OpenAI-compatible such as a
        vLLM server of the trained checkpoint); config ``routing.llm_backend``.
    k_max : int
        Default K_max when :meth:`select` gets none.
    max_tokens, temperature : int, float
        Generation budget and sampling temperature of one routing reply.
    costs : Mapping[str, float], optional
        Cost shown per candidate id (e.g. price per 1k tokens of its backbone); ``?`` if absent.
    fallback : Orchestrator, optional
        Policy used for a round whose reply is malformed; default a
        :class:`HeuristicOrchestrator` built from the remaining arguments.
    history : bool
        Round ``t > 1`` sees the query's earlier prompts and replies as a chat (system, user_1,
        assistant_1, …, user_t): the conversation the veRL agent loop trains on. False sends
        each round alone.
    stop_support, exploration_c, use_capability, use_reliability
        Passed to the default heuristic fallback (see :class:`HeuristicOrchestrator`), as are
        ``embedder``, ``adaptive_k`` and ``mix_reasoning``.
    """

    def __init__(
        self,
        *,
        backend: ChatBackend,
        k_max: int,
        max_tokens: int = 256,
        temperature: float = 0.0,
        costs: Mapping[str, float] | None = None,
        fallback: Orchestrator | None = None,
        history: bool = True,
        stop_support: float = 0.7,
        exploration_c: float = 0.1,
        use_capability: bool = True,
        use_reliability: bool = True,
        embedder: Embedder | None = None,
        adaptive_k: bool = False,
        mix_reasoning: bool = False,
    ) -> None:
        _check_k(k_max, "k_max")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"LLMOrchestrator max_tokens must be an integer >= 1, "
                             f"got {max_tokens!r}")
        if not (math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"LLMOrchestrator temperature must be >= 0, got {temperature!r}")
        if not callable(getattr(backend, "generate", None)):
            raise ValueError(f"LLMOrchestrator backend {type(backend).__name__} has no generate()")
        self.backend = backend
        self.k_max = k_max
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.costs = dict(costs or {})
        self.fallback: Orchestrator = fallback or HeuristicOrchestrator(
            k_max=k_max, stop_support=stop_support, exploration_c=exploration_c,
            use_capability=use_capability, use_reliability=use_reliability,
            embedder=embedder, adaptive_k=adaptive_k, mix_reasoning=mix_reasoning)
        self.history = history
        self._turns: OrderedDict[str, list[dict[str, str]]] = OrderedDict()
        self.decisions = 0
        self.tokens = 0
        self.failures: dict[str, int] = {}

    @property
    def format_failures(self) -> int:
        """Replies that did not parse (backend errors included) so far."""
        return sum(self.failures.values())

    def select(
        self,
        query: OrchestratorQuery,
        z: CollabState | None,
        candidates: Sequence[CandidateState],
        *,
        round: int,
        k_max: int | None = None,
    ) -> Selection:
        """See :class:`~pfedma_flwr.routing.orchestrator.Orchestrator`."""
        k = round_budget(k_max, self.k_max, round)
        if not candidates:
            return Selection.stop_now("no candidates")
        self.decisions += 1
        system, user = build_prompt(query, z, candidates, round=round, k_max=k, costs=self.costs)
        earlier = self._turns.pop(query.query_id, []) if round > 1 and self.history else []
        prompt = [system, *earlier, user]
        results = self.backend.generate([prompt], max_tokens=self.max_tokens,
                                        temperature=self.temperature)
        self.tokens += sum(r.tokens for r in results)
        if len(results) != 1 or not results[0].ok:
            action: Selection | FormatFailure = FormatFailure(
                "backend_error", f"{len(results)} results" if len(results) != 1
                else str(getattr(results[0], "error", ""))[:120])
        else:
            reply = through_first_action(results[0].text)
            action = parse_action(reply, [c.client_id for c in candidates], k)
            if isinstance(action, Selection) and action.stop and (z is None or z.empty):
                # STOP keeps z as the answer; with no z yet it would end the query unanswered
                # (measured: the untrained 1.5B model stopped at round 1 on every probe)
                action = FormatFailure("stop_without_answer", "<stop/> before any answer z")
            stopped = isinstance(action, Selection) and action.stop
            if self.history and not stopped:
                self._remember(query.query_id,
                               [*earlier, user, {"role": "assistant", "content": reply}])
        if isinstance(action, Selection):
            return action
        self.failures[action.reason] = self.failures.get(action.reason, 0) + 1
        logger.warning("orchestrator format failure (%s) for %s round %d: %s; heuristic "
                       "fallback", action.reason, query.query_id, round, action.detail)
        sel = self.fallback.select(query, z, candidates, round=round, k_max=k)
        return Selection(clients=sel.clients, stop=sel.stop,
                         reason=f"fallback:{action.reason}")

    def conversation(self, query_id: str) -> list[dict[str, str]]:
        """The user/assistant turns kept for ``query_id`` (empty when none)."""
        return list(self._turns.get(query_id, []))

    def _remember(self, query_id: str, turns: list[dict[str, str]]) -> None:
        self._turns[query_id] = turns
        while len(self._turns) > MAX_CONVERSATIONS:  # queries ended by T_max never STOP
            self._turns.popitem(last=False)

    def observe(self, outcome: Any) -> None:
        """Engine hook (:mod:`pfedma_flwr.baselines.hooks`): a query ended, drop its turns."""
        self._turns.pop(str(outcome.query_id), None)

    def state_dict(self) -> dict[str, Any]:
        """Engine hook: the counters, stored in ``checkpoint.json`` (turns are not kept)."""
        return self.state()

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Engine hook: restore :meth:`state_dict` after ``--resume``; bad values raise."""
        counts = {"decisions": d.get("decisions", 0), "tokens": d.get("tokens", 0),
                  **{f"format_failures_by_reason[{k!r}]": v
                     for k, v in dict(d.get("format_failures_by_reason", {})).items()}}
        for name, v in counts.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"orchestrator checkpoint: {name} must be an int >= 0, "
                                 f"got {v!r}")
        unknown = sorted(set(d.get("format_failures_by_reason", {})) - set(FAILURE_REASONS))
        if unknown:
            raise ValueError(f"orchestrator checkpoint: unknown failure reason(s) {unknown}")
        self.decisions, self.tokens = int(d.get("decisions", 0)), int(d.get("tokens", 0))
        self.failures = {str(k): int(v)
                         for k, v in dict(d.get("format_failures_by_reason", {})).items()}

    def state(self) -> dict[str, Any]:
        """Counters for the run's results: decisions, format failures by reason, their rate."""
        return {
            "decisions": self.decisions, "tokens": self.tokens,
            "format_failures": self.format_failures,
            "format_failure_rate": self.format_failures / self.decisions if self.decisions
            else 0.0,
            "format_failures_by_reason": dict(sorted(self.failures.items())),
        }

    def summary(self) -> None:
        """Log the configuration and the format-failure counters."""
        s = self.state()
        logger.info("LLMOrchestrator: backend=%s, k_max=%d, max_tokens=%d, decisions=%d, "
                    "format_failures=%d (%.1f%%) %s", type(self.backend).__name__, self.k_max,
                    self.max_tokens, s["decisions"], s["format_failures"],
                    100 * s["format_failure_rate"], s["format_failures_by_reason"])
