"""The LLM orchestrator's action grammar and prompt, shared by serving and training.

The prompt (:func:`build_prompt`) lists the candidates (id, profile domains, ``C`` per domain,
``S``, times asked, cost) and the collaboration state ``z``; the reply must be, after an
optional ``<think>…</think>``, exactly ``<select>id1,id2</select>`` (1 ≤ size ≤ K_max distinct
candidate ids) or ``<stop/>``, and it ends at its first action, as with a serving stop sequence
(:func:`through_first_action`). :func:`parse_action` parses it strictly into a
:class:`~pfedma_flwr.routing.orchestrator.Selection` or a :class:`FormatFailure` with a reason
code. :class:`~pfedma_flwr.routing.llm_orchestrator.LLMOrchestrator` serves with these and the
veRL agent loop (:mod:`pfedma_flwr.training.agent_loop`) trains with them, so a checkpoint sees
at serving time exactly what it saw in training.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pfedma_flwr.routing.orchestrator import (
    CandidateState,
    OrchestratorQuery,
    Selection,
    _check_k,
)

if TYPE_CHECKING:  # aggregation imports routing.state: a runtime import would be circular
    from pfedma_flwr.aggregation.consensus import CollabState

#: reason codes of :class:`FormatFailure` (also the keys of the orchestrator's counters)
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
