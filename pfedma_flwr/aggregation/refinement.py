"""Feedback-guided query refinement ``q^{t+1}`` from ``z^t`` (DESIGN §3.10).

The next round's query is the original task plus a compact, bounded summary of the
collaboration state: candidate answer, its support, its main claims, the dissenting answers
and disputed claims, and a request to verify. ``-RQ`` resends the task unchanged. The summary
only repeats privacy-processed content that clients already uploaded.

The summary is a plug-in (:data:`REFINERS`, config ``routing.refine_style``): a
:class:`Refiner` maps ``z`` to the text sent beside the task; ``independent`` and ``verify``
are registered, and ``module:attr`` names an outside one.
"""

from __future__ import annotations

from typing import Protocol

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.registry import Registry
from pfedma_flwr.text import clip_line

DEFAULT_MAX_CHARS = 1200
_ITEM_CHARS = 200
_ITEMS = 3


REFINE_STYLES = ("independent", "verify")
_INDEPENDENT_ASK = ("These answers are not confirmed and may all be wrong. Do not build on them: "
                    "solve the task again from scratch, step by step, checking each step "
                    "against the task itself, and state your own final answer.")


def refinement_text(
    z: CollabState | None, *, max_chars: int = DEFAULT_MAX_CHARS, style: str = "independent"
) -> str:
    """The summary of ``z`` appended to the task (``""`` when ``z`` holds no answer).

    Parameters
    ----------
    z : CollabState or None
        Collaboration state after the last round.
    max_chars : int
        Hard cap on the summary length; lower-priority lines are dropped first.
    style : {"independent", "verify"}
        ``independent`` (default) lists the earlier answers only and asks for a fresh solution,
        so a small model does not copy the candidate's reasoning (measured: with the candidate
        and its claims shown, round-2 answers anchored on them); ``verify`` shows the candidate,
        its claims and the disputed ones and asks to verify it (the seed's wording).
    """
    # 500 always fits the first line (answer clipped to 200) and the verification request.
    if max_chars < 500:
        raise ValueError(f"max_chars must be >= 500, got {max_chars}")
    if style not in REFINE_STYLES:
        raise ValueError(f"style must be one of {REFINE_STYLES}, got {style!r}")
    if z is None or z.empty or not z.answer.strip():
        return ""
    if style == "independent":
        given = [(z.answer, z.support), *z.dissent[:_ITEMS]]
        listed = ", ".join(f"'{clip_line(a, 60)}' ({w:.0%})" for a, w in given)
        head = (f"Agents of an earlier round answered differently or without enough agreement; "
                f"answers given: {listed}.")
        return clip_line(head, max_chars - len(_INDEPENDENT_ASK) - 1) + "\n" + _INDEPENDENT_ASK
    lines = [
        f"Previous collaboration round {z.round}: candidate answer "
        f"{clip_line(z.answer, _ITEM_CHARS)!r} "
        f"(support {z.support:.0%}, {z.n_agreeing} of {z.n_retained} reliable responses agree).",
    ]
    if z.claims:
        lines.append("Claims behind the candidate:")
        lines.extend(f"- {clip_line(c, _ITEM_CHARS)}" for c in z.claims[:_ITEMS])
    if z.dissent:
        alts = "; ".join(f"{clip_line(a, 80)!r} ({w:.0%})" for a, w in z.dissent[:_ITEMS])
        lines.append(f"Disputed: other answers {alts}.")
    if z.disputed_claims:
        lines.append("Disputed claims:")
        lines.extend(f"- {clip_line(c, _ITEM_CHARS)}" for c in z.disputed_claims[:_ITEMS])
    ask = ("Verify the candidate answer independently, step by step. If it is wrong, give the "
           "correct answer; otherwise confirm it. Answer in the required format.")
    budget = max_chars - len(ask) - 1
    kept: list[str] = []
    for line in lines:
        if sum(len(k) + 1 for k in kept) + len(line) + 1 > budget:
            break
        kept.append(line)
    return "\n".join([*kept, ask])


class Refiner(Protocol):
    """``z^t`` → the refinement text of round ``t+1`` (``""``: send the task alone).

    The text reaches every selected agent after the server's query rules ``P_in``, so a
    refiner sees only what clients uploaded (privacy-processed) and must keep it bounded.
    """

    def __call__(self, z: CollabState | None) -> str:
        """The refinement text for ``z``."""
        ...


#: refinement styles by name (config ``routing.refine_style``; ``module:attr`` for others)
REFINERS: Registry[Refiner] = Registry("refiner")


@REFINERS.register("independent")
def independent_refiner(z: CollabState | None) -> str:
    """:func:`refinement_text` in the ``independent`` style (the default)."""
    return refinement_text(z, style="independent")


@REFINERS.register("verify")
def verify_refiner(z: CollabState | None) -> str:
    """:func:`refinement_text` in the ``verify`` style (the seed's wording)."""
    return refinement_text(z, style="verify")
