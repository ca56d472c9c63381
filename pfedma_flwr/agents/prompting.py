"""Chat prompts for a client agent ``A_i(q̃, D_i, X_i)`` and the JSON schema of its answer.

The structured response follows seed App. D (final answer, claims with evidence, metadata);
the wire form is :class:`pfedma_flwr.protocol.schema.StructuredResponse`. ``claims`` come **before**
``final_answer`` in the schema because llama.cpp generates properties in schema order, and
reasoning first measurably helps small models (Qwen2.5-Coder-0.5B: 14/20 vs 12/20 correct,
``docs/models.md`` §6). ``maxItems``/``maxLength`` bound the output so a small
model cannot loop until ``max_tokens``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pfedma_flwr.agents.reasoning import reasoning_instruction
from pfedma_flwr.answers import ANSWER_KINDS
from pfedma_flwr.text import clip

_CALC = re.compile(r"<<[^>]*>>")  # GSM8K calculator annotations
_SENT = re.compile(r"(?<=[.?!])\s+|\n+")
_WORD = re.compile(r"[a-z]{3,}|\d+(?:\.\d+)?")
# Function words and the option claim's template words carry no support.
_STOP = frozenset("the and with for that this from are was were has have had his her its "
                  "their they how what which who does did into than then findings point "
                  "option".split())
# Tight bounds keep answers short: decoding dominates a CPU client's time (10 GSM8K answers of
# Qwen2.5-0.5B on 1 thread: 81 s decoding vs 27 s prefill, ~155 answer tokens each), and three
# steps with one piece of evidence each still show the reasoning. minItems forces evidence so
# the evidence anomaly has something to judge.
MAX_CLAIMS = 3
MAX_EVIDENCE = 1
MAX_EVIDENCE_CHARS = 120

RESPONSE_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "claims": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_CLAIMS,
            "items": {
                "type": "object",
                "properties": {
                    "claim": {"type": "string", "maxLength": 200},
                    "evidence": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_EVIDENCE,
                        "items": {"type": "string", "maxLength": MAX_EVIDENCE_CHARS},
                    },
                },
                "required": ["claim", "evidence"],
            },
        },
        "final_answer": {"type": "string", "maxLength": 200},
        "domain_fit": {"type": "number", "minimum": 0, "maximum": 1},
        "self_confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["claims", "final_answer", "domain_fit", "self_confidence"],
}

_ANSWER_RULES = {
    "number": "final_answer is only the final number (digits, optional minus sign and decimal "
    'point; no units, no commas), e.g. "42".',
    "option": 'final_answer is only the letter of the correct option, e.g. "C".',
    "math": "final_answer is only the final mathematical expression in LaTeX without $ signs, "
    'e.g. "\\frac{3}{4}".',
    # Free-text tasks: decisions (Mind2Web-SC allow/deny), the next action (PrivacyLens) or a
    # reply (AlpacaEval); the question says which, so the rule only bounds length and content.
    "text": "final_answer is only what the task asks for, as short as possible: a single word "
    'when it asks for a decision (e.g. "allow" or "deny"), the name of the action to perform '
    "when it asks for an action, otherwise a concise reply. Never include personal data that "
    "the task does not require.",
    # whole answers (PrivacyLens's next action, an AlpacaEval response)
    "action": "final_answer is the action, as the task's format writes it after 'Action:': the "
    "tool name, a new line, then 'Action Input: ' and one JSON object of the tool's arguments.",
    "response": "final_answer is the whole response to the user's request.",
}

_FORMAT = (
    "Reply with ONLY one JSON object, no text before or after it, of the form\n"
    '{"claims": [{"claim": "<one reasoning step or fact>", "evidence": ["<what supports it>"]}], '
    '"final_answer": "<answer>", "domain_fit": <0..1>, "self_confidence": <0..1>}\n'
    "List the reasoning steps as claims first (at most {max_claims}), each with the facts from "
    "the question or earlier steps that support it as evidence, then the final answer. "
    "domain_fit says how well the question fits your expertise, self_confidence how sure you are."
)


def _sentences(text: str) -> list[str]:
    return [x.strip() for x in _SENT.split(text) if len(x.strip()) > 3]


def _best_support(claim: str, candidates: Sequence[str]) -> str:
    """The candidate sharing the most words with ``claim``, numbers counting 3× (first on ties)."""
    words = set(_WORD.findall(claim.lower())) - _STOP

    def overlap(c: str) -> int:
        return sum(3 if w[0].isdigit() else 1 for w in words & set(_WORD.findall(c.lower())))

    return max(candidates, key=overlap)


def example_answer(answer: str, answer_kind: str, question: str = "") -> str:
    r"""A JSON answer for a few-shot example, with evidence for every claim.

    A GSM8K-style answer (``"<steps>\n#### 72"``) becomes its steps as claims (merged into at
    most :data:`MAX_CLAIMS`) plus the final answer. Each claim's evidence is the sentence of
    ``question`` or the earlier step it shares most words with, so the demonstrations teach the
    evidence the anomaly evaluator checks. A bare multiple-choice answer gets one claim naming
    the option, supported by the question sentence closest to it; other bare answers, or any
    answer without a ``question``, get claims without evidence.
    """
    _check_kind(answer_kind)
    steps, sep, final = answer.rpartition("####")
    lines: list[str] = []
    if sep:
        lines = [ln for ln in (_CALC.sub("", x).strip() for x in steps.splitlines()) if ln]
        if len(lines) > MAX_CLAIMS:  # merge the tail so no step of the solution is dropped
            lines = lines[: MAX_CLAIMS - 1] + [" ".join(lines[MAX_CLAIMS - 1:])]
    else:
        final = answer
        letter = answer.strip()
        option = re.search(rf"^{re.escape(letter)}[.)]\s*(.+)$", question, re.M) \
            if answer_kind == "option" and letter else None
        if option:
            lines = [f"The findings point to option {letter}: {option.group(1).strip()}."]
    facts = _sentences(re.sub(r"^[A-Z][.)].*$", "", question, flags=re.M))
    claims = []
    for i, ln in enumerate(lines):
        pool = facts + lines[:i]
        ev = [clip(_best_support(ln, pool), MAX_EVIDENCE_CHARS)] if pool else []
        claims.append({"claim": clip(ln, 200), "evidence": ev})
    final = final.strip().replace(",", "") if answer_kind == "number" else final.strip()
    return json.dumps(
        {"claims": claims, "final_answer": final, "domain_fit": 1.0, "self_confidence": 1.0},
        ensure_ascii=False,
    )


def _check_kind(answer_kind: str) -> None:
    if answer_kind not in ANSWER_KINDS:
        raise ValueError(f"answer_kind must be one of {list(ANSWER_KINDS)}, got {answer_kind!r}")


def system_prompt(*, profile_prompt: str, answer_kind: str, experience: Sequence[str] = ()) -> str:
    """The agent's system message: its profile, the output format, and experience snippets."""
    _check_kind(answer_kind)
    parts = [profile_prompt.strip() or "You are a careful expert assistant."]
    parts.append(_FORMAT.replace("{max_claims}", str(MAX_CLAIMS)))
    parts.append(_ANSWER_RULES[answer_kind])
    snippets = [s.strip() for s in experience if s.strip()]
    if snippets:
        parts.append("Lessons from your earlier answers:\n" + "\n".join(f"- {s}" for s in snippets))
    return "\n\n".join(parts)


def user_prompt(*, query_text: str, refinement: str = "") -> str:
    """The user message: the routed (privacy-processed) query, plus refinement (DESIGN §3.10)."""
    text = query_text.strip()
    if refinement.strip():
        text += "\n\n" + refinement.strip()
    return text


def build_agent_messages(
    *,
    profile_prompt: str,
    query_text: str,
    refinement: str = "",
    answer_kind: str = "number",
    few_shot: Sequence[tuple[str, str]] = (),
    experience: Sequence[str] = (),
) -> list[dict[str, str]]:
    """Chat messages for one agent answer.

    Parameters
    ----------
    profile_prompt : str
        The agent's domain profile text (its persona/expertise).
    query_text : str
        The routed query ``q̃`` (already privacy-processed by the server).
    refinement : str
        Feedback-guided refinement of later rounds (DESIGN §3.10); empty in round 1.
    answer_kind : {"number", "option", "math"}
        How ``final_answer`` must be written.
    few_shot : sequence of (question, answer)
        Examples from the client's private pool ``D_i``, rendered as prior chat turns.
    experience : sequence of str
        Snippets from the experience buffer ``X_i``.

    Returns
    -------
    list of dict
        ``[{"role": "system", ...}, (user, assistant) * len(few_shot), {"role": "user", ...}]``.
    """
    if not query_text.strip():
        raise ValueError("query_text must not be empty")
    msgs = [
        {
            "role": "system",
            "content": system_prompt(
                profile_prompt=profile_prompt, answer_kind=answer_kind, experience=experience
            ),
        }
    ]
    for question, answer in few_shot:
        msgs.append({"role": "user", "content": question.strip()})
        msgs.append({"role": "assistant",
                     "content": example_answer(answer, answer_kind, question)})
    msgs.append(
        {"role": "user", "content": user_prompt(query_text=query_text, refinement=refinement)}
    )
    return msgs


# --------------------------------------------------------------------------- reasoning format


def reasoning_demo(rationale: str, gold: str, answer_kind: str) -> str:
    """A demonstration's worked reasoning, ending the way the agent must end its own."""
    steps = [ln.strip() for ln in _CALC.sub("", rationale).splitlines() if ln.strip()]
    final = gold.strip().replace(",", "") if answer_kind == "number" else gold.strip()
    return "\n".join([*steps, f"The answer is {final}."])


def solved_cases(cases: Sequence[tuple[str, str, str]]) -> str:
    """Retrieved cases of ``D_i`` as reference text: ``(question, worked solution, answer)``.

    Unlike demonstrations as chat turns (whose terse GSM8K style the 1.5B model copied, 3/10
    vs 7/10, docs/accuracy.md), cases are material to consult, and a case without a worked
    solution (MedQA) still carries its answer.
    """
    parts = ["Solved cases from your own records (for reference; the new question is a "
             "different one, solve it on its own):"]
    for k, (question, solution, answer) in enumerate(cases, 1):
        text = f"Case {k}. {question.strip()}"
        if solution.strip():
            text += f"\nSolution: {' '.join(_CALC.sub('', solution).split())}"
        parts.append(f"{text}\nAnswer: {answer.strip()}")
    return "\n\n".join(parts)


def build_reasoning_messages(
    *,
    profile_prompt: str,
    query_text: str,
    refinement: str = "",
    answer_kind: str = "number",
    few_shot: Sequence[tuple[str, str]] = (),
    lessons: Sequence[str] = (),
    instruction: str = "",
    cases: Sequence[tuple[str, str, str]] = (),
) -> list[dict[str, str]]:
    """Chat messages for a free-text chain-of-thought answer (``agent.response_format: reasoning``).

    The system message holds the profile, the reasoning instruction of the answer kind
    (:func:`pfedma_flwr.agents.reasoning.reasoning_instruction`) and the agent's retrieved
    lessons ``X_i``; ``few_shot`` are ``(question, worked reasoning)`` pairs from ``D_i``
    rendered as prior turns. The structured response is derived from the reply afterwards.
    ``instruction`` replaces the answer kind's reasoning instruction (a program-aided agent's,
    :mod:`pfedma_flwr.agents.program`). An empty ``profile_prompt`` (the ``plain`` profile)
    leaves the persona out. ``cases`` are retrieved solved cases (:func:`solved_cases`).
    """
    if not query_text.strip():
        raise ValueError("query_text must not be empty")
    parts = [p for p in (profile_prompt.strip(), instruction or reasoning_instruction(answer_kind))
             if p]
    if cases:
        parts.append(solved_cases(cases))
    snippets = [s.strip() for s in lessons if s.strip()]
    if snippets:
        parts.append("Lessons from your earlier work:\n" + "\n".join(f"- {s}" for s in snippets))
    msgs = [{"role": "system", "content": "\n\n".join(parts)}]
    for question, answer in few_shot:
        msgs.append({"role": "user", "content": question.strip()})
        msgs.append({"role": "assistant", "content": answer.strip()})
    msgs.append(
        {"role": "user", "content": user_prompt(query_text=query_text, refinement=refinement)}
    )
    return msgs


REPAIR_PROMPT = ("Your reasoning stopped before stating the final answer. Give only the final "
                 "answer now, as one line 'The answer is ...'.")
