r"""Reason in free text first, then derive the structured response from the reasoning.

Small instruct models are trained to think step by step in plain text; forcing that reasoning
into a JSON grammar with bounded claims cut steps mid-sentence and cost accuracy (issue 11: the
0.5B model scored 1/20 with and without the grammar; the 1.5B model reasons to 10/20 in plain
chain-of-thought). So an agent generates its chain of thought with a token budget, ending with
``The answer is X.``, and :func:`derive_response` turns that text into the seed's structured
response (App. D) **deterministically**, at no extra generation cost:

* ``final_answer``: the last explicit answer statement (``The answer is ...``, ``\boxed{...}``,
  ``#### ...``), canonicalized for the task's answer kind; a reasoning without one falls back
  to the kind's own extraction (the last number, an option letter) and is marked with a lower
  ``self_confidence``; nothing extractable is a format failure (the caller re-asks once).
* ``claims``: the reasoning's steps (lines, then sentences), the short ones merged so at most
  :data:`MAX_CLAIMS` remain and no step is dropped; the last step stays whole (a long one
  keeps its end), so the claims state the answer they reach. When no step names the final
  answer (steps that argue for another option, then an answer line, often the one the repair
  follow-up asked for), the answer line is the last claim: the claims then state the answer
  as the evidence term expects of an honest client.
* ``evidence`` of each claim: the sentence of the question, or the earlier step, that it shares
  most content words and numbers with (numbers count three times), quoted verbatim, so the
  evidence judge checks real support.

A constrained second pass (the model re-reading its reasoning to emit JSON) was the other
option; it costs a second prefill of the whole context plus ~100 decoded tokens per answer on a
2-core CPU, while the deterministic derivation yields the same fields from the same text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pfedma_flwr.agents.actions import action_answer, parse_action
from pfedma_flwr.answers import (
    ANSWER_KINDS,
    OPEN_KINDS,
    Options,
    canonical_answer,
    last_boxed,
    names_answer,
)
from pfedma_flwr.protocol.schema import Claim, StructuredResponse
from pfedma_flwr.text import clip, clip_start

MAX_CLAIMS = 8
MAX_CLAIM_CHARS = 400
MAX_EVIDENCE_CHARS = 240
# Steps shorter than this are merged into the next one ("Step 1:" headers, bare equations).
_MIN_STEP_CHARS = 25

_ANSWER_STATEMENT = re.compile(
    r"(?i)(?:final\s+answer|the\s+answer|answer)\s*(?:is|:|=)\s*:?\s*(.+)"
)
_GSM = re.compile(r"####\s*(.+)")
_SENT = re.compile(r"(?<=[.?!])\s+(?=[A-Z(\d])")
_WORD = re.compile(r"[a-z]{3,}|\d+(?:\.\d+)?")
_STOP = frozenset(
    "the and with for that this from are was were has have had his her its their they how "
    "what which who does did into than then each there these those will would can could "
    "step answer total also".split()
)
_OPTION_LINE = re.compile(r"^\s*\(?[A-E][.):]\s")

_INSTRUCTIONS = {
    # Plain chain of thought: an instruction to write terse one-quantity steps, with a terse
    # GSM8K rationale as demonstration, cut the 1.5B model's answers to ~70 tokens and scored
    # 3/10 on the default GSM8K questions (run of 2026-12-01), against 7/10 for plain CoT.
    "number": (
        "Solve the problem step by step. Finish with a last line of the form "
        "'The answer is N.' where N is only the final number (no units, no commas)."
    ),
    "option": (
        "Reason briefly, in at most six short lines: the key findings or facts of the "
        "question, what they point to, and why the best option fits better than the closest "
        "other one. Finish with a last line of the form 'The answer is X.' where X is only "
        "the letter of the single best option."
    ),
    "math": (
        "Solve the problem step by step, one step per line. Finish with a last line of the "
        "form 'The answer is $\\boxed{...}$' with the final expression in LaTeX."
    ),
    "text": (
        "Think briefly and step by step about what the task asks. Finish with a last line of "
        "the form 'The answer is: ...' giving only what the task asks for, as short as "
        "possible: a single word when it asks for a decision (e.g. allow or deny), the name "
        "of the action when it asks for an action. Never include personal data that the task "
        "does not require."
    ),
    # PrivacyLens (docs/experiments.md): the task text poses the ReAct step in full; the
    # whole reply is the answer (agents/actions.py reads its first action)
    "action": (
        "This is one step of a tool-use task. Reply in the format the task gives: a line "
        "'Thought: ...' with your reasoning, then a line 'Action: <tool name>' and a line "
        "'Action Input: <one JSON object with the tool's arguments>', and nothing after it."
    ),
    # AlpacaEval: the whole reply is the response a judge compares with the reference
    "response": (
        "Write the response to the user's request directly: complete, accurate and helpful, "
        "as the final answer the user reads."
    ),
}


def reasoning_instruction(answer_kind: str) -> str:
    """How an agent must reason and end its answer, per answer kind."""
    _check_kind(answer_kind)
    return _INSTRUCTIONS[answer_kind]


def _check_kind(kind: str) -> None:
    if kind not in ANSWER_KINDS:
        raise ValueError(f"answer_kind must be one of {list(ANSWER_KINDS)}, got {kind!r}")


@dataclass(frozen=True)
class Derivation:
    """What :func:`derive_response` made of one reasoning text.

    ``response`` is ``None`` when no answer could be found (``error`` says why); ``explicit``
    tells whether the answer came from an answer statement rather than a fallback.
    """

    response: StructuredResponse | None
    error: str = ""
    explicit: bool = False


def extract_answer(text: str, answer_kind: str, options: Options = None) -> tuple[str, bool]:
    """The final answer of a reasoning text and whether it was stated explicitly.

    Returns ``("", False)`` when nothing usable is found.
    """
    _check_kind(answer_kind)
    if answer_kind in OPEN_KINDS:
        return _open_answer(text, answer_kind)
    raw, explicit = "", False
    boxed = last_boxed(text)
    statements = _ANSWER_STATEMENT.findall(text)
    gsm = _GSM.findall(text)
    if gsm:
        raw, explicit = gsm[-1], True
    elif boxed is not None:
        raw, explicit = boxed, True
    elif statements:
        raw, explicit = statements[-1], True
    if answer_kind == "text":
        ans = raw.strip().strip("*").strip().rstrip(".").strip() if explicit else ""
        if not ans:
            lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
            ans = lines[-1][:200] if lines else ""
        return ans, explicit and bool(ans)
    source = raw if explicit else _tail(text, answer_kind)
    if not source.strip():
        return "", False
    canon = canonical_answer(source, answer_kind, options=options)
    if answer_kind == "number" and not re.fullmatch(r"-?\d+(?:\.\d+)?", canon):
        if explicit:  # "The answer is twelve apples": fall back to the text's last number
            canon = canonical_answer(_tail(text, answer_kind), answer_kind, options=options)
            explicit = False
        if not re.fullmatch(r"-?\d+(?:\.\d+)?", canon):
            return "", False
    if answer_kind == "option" and not re.fullmatch(r"[A-E]", canon):
        return "", False
    if answer_kind == "math" and not canon.strip():
        return "", False
    return canon, explicit


def _open_answer(text: str, answer_kind: str) -> tuple[str, bool]:
    """An action's canonical text (explicit = well formed), or the whole response."""
    if answer_kind == "response":
        return text.strip(), bool(text.strip())
    action = parse_action(text)
    return (action_answer(action), action.well_formed) if action.taken else ("", False)


def _tail(text: str, answer_kind: str) -> str:
    """Where a fallback answer is looked for: the last lines that name one."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if answer_kind == "option":
        # Option listings repeat every letter; only the reasoning's last lines decide.
        body = [ln for ln in lines if not _OPTION_LINE.match(ln)]
        return "\n".join(body[-2:])
    return "\n".join(lines[-3:])


def reasoning_steps(text: str) -> list[str]:
    """The reasoning's steps: lines, long lines split into sentences, answer line excluded."""
    steps: list[str] = []
    for line in text.strip().splitlines():
        line = line.strip().lstrip("-*• ").strip()
        if not line or _ANSWER_STATEMENT.match(line) or _GSM.match(line):
            continue
        pieces = [p.strip() for p in _SENT.split(line)] if len(line) > MAX_CLAIM_CHARS else [line]
        steps.extend(p for p in pieces if p)
    merged: list[str] = []
    carry = ""
    for s in steps:
        s = f"{carry} {s}".strip() if carry else s
        if len(s) < _MIN_STEP_CHARS:
            carry = s
            continue
        merged.append(s)
        carry = ""
    if carry:
        if merged:
            merged[-1] = f"{merged[-1]} {carry}"
        else:
            merged.append(carry)
    if len(merged) > MAX_CLAIMS:
        # Merge the middle, so no step is dropped and the last one, where the answer is
        # reached, stays a claim of its own. Merging the tail put the final computation at the
        # end of a long claim, which the claim cap cut off: the claims then stated no answer,
        # the evidence term scored 1 (anomaly/evidence.py states_answer) and the filter removed
        # honest chain-of-thought answers, 9 of the mathematician's 33 round-2 answers on
        # development GSM8K questions 40-99 (docs/experiments.md).
        merged = [*merged[: MAX_CLAIMS - 2], " ".join(merged[MAX_CLAIMS - 2 : -1]), merged[-1]]
    return merged


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower())) - _STOP


def best_support(claim: str, candidates: Sequence[str]) -> str:
    """The candidate sharing most content words with ``claim`` (numbers count 3x; first wins).

    Returns ``""`` when no candidate shares anything.
    """
    words = _words(claim)
    best, best_score = "", 0
    for c in candidates:
        score = sum(3 if w[0].isdigit() else 1 for w in words & _words(c))
        if score > best_score:
            best, best_score = c, score
    return best


def question_facts(question: str) -> list[str]:
    """Sentences of the question (option lines kept whole), the evidence a claim may cite."""
    out: list[str] = []
    for line in question.splitlines():
        line = line.strip()
        if not line:
            continue
        out.extend([line] if _OPTION_LINE.match(line) else
                   [p.strip() for p in _SENT.split(line) if len(p.strip()) > 3])
    return out


def _answer_line(text: str) -> str:
    """The reasoning's last answer statement line (``The answer is C.``, ``#### 72``), or ``""``."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip().lstrip("-*• ").strip()
        if line and (_ANSWER_STATEMENT.search(line) or _GSM.search(line)):
            return line
    return ""


def derive_response(
    text: str, *, question: str, answer_kind: str, options: Options = None,
    domain_fit: float = 0.5,
) -> Derivation:
    """The structured response (seed App. D) derived from one reasoning text.

    Parameters
    ----------
    text : str
        The agent's chain of thought, ending with an answer statement.
    question : str
        The task text the agent saw (the evidence pool, with the earlier steps).
    answer_kind : {"number", "option", "math", "text"}
        How the final answer is canonicalized.
    options : mapping or sequence, optional
        Multiple-choice options (to map an option's text to its letter).
    domain_fit : float
        How well the task fits the agent's expertise, in [0, 1] (only logged, DESIGN §3.7).
    """
    answer, explicit = extract_answer(text, answer_kind, options)
    if not answer:
        return Derivation(None, "no_answer: the reasoning states no final answer")
    facts = question_facts(question)
    steps = reasoning_steps(text)
    claims: list[Claim] = []
    for i, step in enumerate(steps):
        support = best_support(step, [*facts, *steps[:i]])
        # the last step keeps its end: the result it reaches is what the claims must state
        last = i == len(steps) - 1
        claims.append(Claim(claim=clip_start(step, MAX_CLAIM_CHARS) if last
                            else clip(step, MAX_CLAIM_CHARS),
                            evidence=(clip(support, MAX_EVIDENCE_CHARS),) if support else ()))
    if not claims:  # "The answer is 12." alone: the statement is the only claim
        claims.append(Claim(claim=clip(text.strip(), MAX_CLAIM_CHARS), evidence=()))
    elif explicit and not names_answer("\n".join(c.claim for c in claims), answer,
                                        answer_kind):
        # Steps that argue for another option, then an answer line (often the follow-up that
        # asks for a missing one): without the line the claims never state the answer, which
        # the evidence term reads as an unreliable client's (anomaly/evidence.py
        # states_answer) and halves the vote of an honest one (docs/accuracy.md, 2026-12-07)
        line = _answer_line(text)
        # only a line that names this answer (a \boxed{} answer can differ from the last line)
        if line and names_answer(line, answer, answer_kind):
            support = best_support(line, [*facts, *steps])
            claims.append(Claim(claim=clip(line, MAX_CLAIM_CHARS),
                                evidence=(clip(support, MAX_EVIDENCE_CHARS),) if support else ()))
    return Derivation(
        StructuredResponse(final_answer=answer, claims=tuple(claims),
                           domain_fit=float(min(1.0, max(0.0, domain_fit))),
                           self_confidence=1.0 if explicit else 0.5),
        explicit=explicit,
    )
