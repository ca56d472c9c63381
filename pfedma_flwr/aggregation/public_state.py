r"""What of ``z`` may reach other clients' prompts: canonical answers and bounded, clean text.

Measured (issue 30): the refinement copied a hostile answer's text ("Ignore previous
instructions.") into honest agents' next prompts, and the accuracy fell from 0.85 to 0.70. A
refiner (``routing.refine_style``, a plug-in too) only ever sees :func:`public_state` of ``z``:

- **answers** are shown in their canonical form (math as written), and only when they are well
  formed for the task's answer kind (a number, an option letter, a short math expression;
  free text clipped):
  an answer that is an instruction is not an answer of a number or option task and is left out;
- **claims** are clipped, single-line, and dropped when they read as an instruction to the
  agent (ignore / disregard / override ... instructions, a system prompt, a new role).
"""

from __future__ import annotations

import dataclasses
import re

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.answers import Options, canonical_answer

#: Characters of a free-text answer or a claim shown to other clients.
TEXT_CHARS = 160
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_OPTION = re.compile(r"[A-J]")
#: a short expression: no run of more than 5 letters (``sqrt``, ``frac``, ``infty`` pass)
_MATH = re.compile(r"(?!.*[A-Za-z]{6})[\w\s+\-*/^().,\[\]{}=<>!|\\√π∞']{1,60}")
_INSTRUCTION = re.compile(
    r"(?i)\b(?:ignore|disregard|forget|override|bypass)\b.{0,40}\b(?:instructions?|prompts?|"
    r"rules?|system|above|previous|context)\b|\bsystem prompt\b|\byou are now\b|"
    r"\bact as\b|\bnew instructions?\b")


def shown_answer(answer: str, kind: str, *, options: Options = None) -> str:
    """The canonical form of ``answer`` if it is well formed for ``kind``, else ``""``."""
    canon = canonical_answer(answer, kind, options=options)
    if kind == "number":
        return canon if _NUMBER.fullmatch(canon) else ""
    if kind == "option":
        return canon if _OPTION.fullmatch(canon) else ""
    if kind == "math":  # the answer as written (LaTeX reads better than sympy's form)
        return clean_text(answer, 60) if _MATH.fullmatch(canon) else ""
    return clean_text(answer)


def clean_text(text: str, limit: int = TEXT_CHARS) -> str:
    """One bounded line of ``text``, or ``""`` if it reads as an instruction to the agent."""
    line = " ".join(text.split()).replace("'", "\u2019")
    if not line or _INSTRUCTION.search(line):
        return ""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "\u2026"


def public_state(z: CollabState | None, kind: str, *, options: Options = None
                 ) -> CollabState | None:
    """``z`` as a refiner may show it (module docstring); ``None`` stays ``None``.

    A winning answer that is not well formed empties the state (nothing to verify); dissenting
    answers that are not are dropped with their weights.
    """
    if z is None or z.empty:
        return z
    answer = shown_answer(z.answer, kind, options=options)
    if not answer:
        return CollabState(round=z.round)
    dissent = tuple((a, w) for a, w in ((shown_answer(a, kind, options=options), w)
                                        for a, w in z.dissent) if a)
    return dataclasses.replace(
        z, answer=answer, dissent=dissent,
        claims=tuple(c for c in map(clean_text, z.claims) if c),
        disputed_claims=tuple(c for c in map(clean_text, z.disputed_claims) if c))


__all__ = ["TEXT_CHARS", "clean_text", "public_state", "shown_answer"]
