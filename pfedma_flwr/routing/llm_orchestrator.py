"""The LLM orchestrator ``π_θ``: a chat model reads the routing state and emits an action.

The prompt lists the candidates (id, profile domains, ``C`` per domain, ``S``, times asked, cost)
and the collaboration state ``z``; the reply must be, after an optional ``<think>…</think>``,
exactly ``<select>id1,id2</select>`` (1 ≤ size ≤ K_max distinct candidate ids) or ``<stop/>``; the
reply ends at its first action, as with a serving stop sequence (:func:`through_first_action`).
:func:`parse_action` parses it strictly; a malformed reply (or a backend error) is counted as a
format failure by reason code and that round falls back to the heuristic policy (DESIGN §3.12), so
an untrained or broken policy never ends a query. The same prompt and parser serve the veRL
training loop (:mod:`pfedma_flwr.training.agent_loop`), so the trained checkpoint sees at serving
time exactly what it saw in training.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.orchestrator import (
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

logger = logging.getLogger(__name__)

#: reason codes of :class:`FormatFailure` (also the keys of the orchestrator's counters)
#: queries whose earlier routing turns are kept (a query's turns are dropped at its STOP)
MAX_CONVERSATIONS = 4096

FAILURE_REASONS = (
    "empty", "no_action", "multiple_actions", "extra_text", "empty_selection", "too_many",
    "duplicate_id", "unknown_id", "stop_without_answer", "backend_error",
)

SYSTEM_PROMPT = (
    "You are the orchestrator of a federated team of expert agents. For the query below, "
    "decide which agents answer in this collaboration round, or stop because the current "
    "collaborative answer z is good enough. Prefer agents whose domains match the query and "
    "whose capability C (for the query's domain) and reliability S are high; asking costs "
    "tokens, so ask no more agents than needed.\n"
    "Reply with an optional <think>short reasoning</think> followed by exactly one action:\n"
    "  <select>ID1,ID2</select>  ask 1 to {k_max} distinct agents, ids from the list\n"
    "  <stop/>                  stop and keep z as the final answer (only once z exists)\n"
    "Write nothing after the action. Do not answer the query yourself.\n"
    # Measured (docs/training.md): without an example the untrained embedded model restated
    # the query inside <think> and stopped, so all 40 decisions of a 20-question run failed;
    # with a placeholder id in the example it copied the placeholder (35 of 40 unknown_id).
    # So the example names a real candidate, drawn per query (example_id), not a favourite.
    "Example replies ({example} is one id from the candidate list):\n"
    "<think>{example} covers the query's domain.</think><select>{example}</select>\n"
    "<think>z has full support from reliable agents.</think><stop/>"
)

_THINK = re.compile(r"\A\s*<think>.*?</think>", re.DOTALL)
_ACTION = re.compile(r"<select>(?P<ids>.*?)</select>|<stop\s*/>", re.DOTALL)
_OPENERS = re.compile(r"<select>|<stop\s*/>")


@dataclass(frozen=True)
class FormatFailure:
    """A reply that is not a valid action: a reason code (:data:`FAILURE_REASONS`) and detail."""

    reason: str
    detail: str = ""


def parse_action(text: str, candidates: Sequence[str], k_max: int) -> Selection | FormatFailure:
    """Parse an orchestrator reply strictly into a :class:`Selection` or a :class:`FormatFailure`.

    Grammar: ``[<think>…</think>] (<select>id(,id)*</select> | <stop/>)`` with whitespace
    allowed around tags and ids and nothing else before or after. Ids must be distinct
    members of ``candidates``, 1..``k_max`` of them.

    Examples
    --------
    >>> parse_action("<select>a, b</select>", ["a", "b", "c"], 2)
    Selection(clients=('a', 'b'), stop=False, reason='llm')
    >>> parse_action("<select>a,a</select>", ["a"], 2).reason
    'duplicate_id'
    """
    _check_k(k_max, "k_max")
    if not isinstance(text, str) or not text.strip():
        return FormatFailure("empty", "the reply is empty")
    think = _THINK.match(text)
    body = text[think.end():] if think else text
    n_actions = len(_OPENERS.findall(body))
    if n_actions == 0:
        return FormatFailure("no_action", f"no <select> or <stop/> in {_excerpt(body)}")
    if n_actions > 1:
        return FormatFailure("multiple_actions", f"{n_actions} actions in {_excerpt(body)}")
    m = _ACTION.search(body)
    if m is None:  # an opener without its closing tag
        return FormatFailure("no_action", f"unterminated action in {_excerpt(body)}")
    outside = (body[:m.start()] + body[m.end():]).strip()
    if outside:
        return FormatFailure("extra_text", f"text outside the action: {_excerpt(outside)}")
    if m.group("ids") is None:
        return Selection.stop_now("llm")
    ids = [s.strip() for s in m.group("ids").split(",")]
    if not any(ids):
        return FormatFailure("empty_selection", "<select> names no agent")
    if "" in ids:
        return FormatFailure("empty_selection", f"an empty id in {_excerpt(m.group('ids'))}")
    if len(ids) > k_max:
        return FormatFailure("too_many", f"{len(ids)} agents selected, at most {k_max}")
    if len(set(ids)) != len(ids):
        return FormatFailure("duplicate_id", f"repeated id in {ids}")
    known = set(candidates)
    unknown = [i for i in ids if i not in known]
    if unknown:
        return FormatFailure("unknown_id", f"not a candidate: {[_excerpt(u) for u in unknown]}")
    return Selection(clients=tuple(ids), reason="llm")


def through_first_action(text: str) -> str:
    """``text`` up to the end of its first complete action (all of it when it has none).

    What a serving stop sequence (``</select>``, ``<stop/>``; vLLM's ``stop``, Router-R1's
    ``</search>``) returns: generation ends at the action, so whatever a model would have
    written after it never exists. Text before the action is kept and parsed strictly.
    """
    m = _ACTION.search(text)
    return text if m is None else text[:m.end()]


def _excerpt(s: str, n: int = 80) -> str:
    return repr(s if len(s) <= n else s[:n] + "…")


def _fmt(x: float) -> str:
    return f"{x:.2f}"


_TAG_CHARS = str.maketrans({"<": "‹", ">": "›"})
_MAX_QUOTED = 120


def _client_text(s: str) -> str:
    """Client-supplied text for the prompt: one line, bounded, no tag brackets.

    Answers and domains come from untrusted clients; an answer reading ``<select>x</select>``
    must not look like an action to the policy (docs/threat_model.md).
    """
    flat = " ".join(str(s).split()).translate(_TAG_CHARS)
    return flat if len(flat) <= _MAX_QUOTED else flat[:_MAX_QUOTED] + "…"


def build_prompt(
    query: OrchestratorQuery,
    z: CollabState | None,
    candidates: Sequence[CandidateState],
    *,
    round: int,
    k_max: int,
    costs: Mapping[str, float] | None = None,
) -> list[dict[str, str]]:
    """The chat prompt of one routing decision (system grammar + user state).

    Each candidate line carries its id, public profile domains, ``C`` for the query's domain
    and every other domain it has a value for, ``S``, times asked for the domain, whether it
    was asked for this query, and its cost: ``costs[id]``, else the candidate's price (USD per
    million tokens of its backbone, ``routing.prices``), ``?`` when unknown; and, when known,
    how it would answer this query (``reasoning=program`` or ``cot``).
    """
    lines = [f"Query (domain {query.domain}, round {round}, at most {k_max} agents):",
             query.text.strip(), ""]
    if z is None or z.empty:
        lines.append("Collaborative answer z: none yet")
    else:
        dissent = "; ".join(f"{_client_text(a)} ({_fmt(w)})" for a, w in z.dissent[:3]) or "none"
        answer = _client_text(z.answer)
        lines.append(f"Collaborative answer z: {answer!r} with support {_fmt(z.support)} "
                     f"({z.n_agreeing} of {z.n_retained} retained answers agree) after round "
                     f"{z.round}; dissent: {dissent}")
    lines += ["", "Candidate agents:"]
    for c in candidates:
        st = c.state
        caps = {query.domain: st.c(query.domain), **st.capability}
        cap = ", ".join(f"{_client_text(d)}={_fmt(v)}" for d, v in caps.items())
        cost = costs.get(c.client_id) if costs else c.price
        cost_s = "?" if cost is None or not math.isfinite(cost) else f"{cost:g}"
        lines.append(
            f"- id={c.client_id} domains=[{', '.join(map(_client_text, c.domains)) or 'unknown'}]"
            f" C: {cap}; "
            f"S={_fmt(st.reliability)}; asked={st.asked(query.domain)}; "
            f"asked_this_query={'yes' if c.asked_for_this_query else 'no'}; cost={cost_s}"
            + (f"; reasoning={c.reasoning}" if c.reasoning else "")
        )
    system = SYSTEM_PROMPT.format(k_max=k_max, example=example_id(query.query_id, candidates))
    return [{"role": "system", "content": system},
            {"role": "user", "content": "\n".join(lines)}]


def example_id(query_id: str, candidates: Sequence[CandidateState]) -> str:
    """The candidate id the prompt's example reply names: one drawn by a stable hash of the query.

    A real id, so a policy that copies the example still takes a valid action; drawn per query
    rather than fixed (the first or the best candidate), so copying it is uninformed routing
    and does not pass the heuristic's choice to the policy. Stable across rounds, processes
    and ``PYTHONHASHSEED`` (the conversation of a query keeps one system prompt).

    >>> example_id("q", [])
    'agent'
    """
    if not candidates:
        return "agent"
    ids = sorted(c.client_id for c in candidates)
    digest = hashlib.blake2b(str(query_id).encode(), digest_size=8).digest()
    return ids[int.from_bytes(digest, "big") % len(ids)]


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


class LLMOrchestrator:
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
