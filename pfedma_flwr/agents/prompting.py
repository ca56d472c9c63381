"""Chat prompts for a client agent ``A_i(q̃, D_i, X_i)`` and the JSON schema of its answer.

The structured response follows seed App. D (final answer, claims with evidence, metadata);
the wire form is :class:`pfedma_flwr.schema.StructuredResponse`. ``claims`` come **before**
``final_answer`` in the schema because llama.cpp generates properties in schema order, and
reasoning first measurably helps small models (Qwen2.5-Coder-0.5B: 14/20 vs 12/20 correct,
``/work/shared/notes/models.md`` §6). ``maxItems``/``maxLength`` bound the output so a small
model cannot loop until ``max_tokens``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

_CALC = re.compile(r"<<[^>]*>>")  # GSM8K calculator annotations
ANSWER_KINDS: tuple[str, ...] = ("number", "option", "math", "text")
MAX_CLAIMS = 6
MAX_EVIDENCE = 3

RESPONSE_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "claims": {
            "type": "array",
            "maxItems": MAX_CLAIMS,
            "items": {
                "type": "object",
                "properties": {
                    "claim": {"type": "string", "maxLength": 300},
                    "evidence": {
                        "type": "array",
                        "maxItems": MAX_EVIDENCE,
                        "items": {"type": "string", "maxLength": 200},
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
}

_FORMAT = (
    "Reply with ONLY one JSON object, no text before or after it, of the form\n"
    '{"claims": [{"claim": "<one reasoning step or fact>", "evidence": ["<what supports it>"]}], '
    '"final_answer": "<answer>", "domain_fit": <0..1>, "self_confidence": <0..1>}\n'
    "List the reasoning steps as claims first (at most {max_claims}), then the final answer. "
    "domain_fit says how well the question fits your expertise, self_confidence how sure you are."
)


def example_answer(answer: str, answer_kind: str) -> str:
    r"""A JSON answer for a few-shot example.

    A GSM8K-style answer (``"<steps>\n#### 72"``) becomes its steps as claims plus the final
    answer, so the examples demonstrate reasoning-first output; a bare answer gets no claims.
    """
    _check_kind(answer_kind)
    steps, sep, final = answer.rpartition("####")
    claims = []
    if sep:
        lines = [_CALC.sub("", ln).strip() for ln in steps.splitlines()]
        claims = [{"claim": ln, "evidence": []} for ln in lines if ln][:MAX_CLAIMS]
    else:
        final = answer
    final = final.strip().replace(",", "") if answer_kind == "number" else final.strip()
    return json.dumps(
        {"claims": claims, "final_answer": final, "domain_fit": 1.0, "self_confidence": 1.0}
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
        msgs.append({"role": "assistant", "content": example_answer(answer, answer_kind)})
    msgs.append(
        {"role": "user", "content": user_prompt(query_text=query_text, refinement=refinement)}
    )
    return msgs
