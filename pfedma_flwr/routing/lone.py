"""What capability ``C`` learns from an answer that nothing could be compared with (issue 33).

The leave-one-out quality signal (DESIGN §3.8 revision) compares a client's retained answer with
``z`` formed from the *other* clients' retained answers. A client that answered alone in its
round (its partner failed or was filtered, K = 1, the first answer of a query) had nothing to be
compared with, so its C never moved and the orchestrator could not tell such clients apart.
``routing.lone_answers`` says what happens instead:

- ``skip``: nothing (C kept; the behaviour before issue 33);
- ``defer``: when the query ends, the answer is compared with ``z`` of the other clients'
  retained answers of **all** its rounds (later agreement: a round-2 answer confirms or
  contradicts a lone round-1 answer); still nothing to compare: C kept;
- ``prior`` (default): ``defer``, and an answer still alone at the end gets
  ``g = (1 − A_i) · 0.5``: the anomaly filter's verdict on the answer itself, at the prior
  of agreement (0.5, the prior of C). A retained answer with clean evidence (A ≈ 0) keeps C
  near the prior, a doubtful one lowers it; a filtered answer already got g = 0.

No ground truth is used. A filtered answer is never deferred (its g is 0 in its round).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: ``routing.lone_answers`` values (module docstring).
LONE_ANSWERS: tuple[str, ...] = ("skip", "defer", "prior")
#: The agreement credited to an answer never compared with another (the prior of C).
LONE_PRIOR = 0.5


def had_reference(history: Sequence[Any], client_id: str, round: int) -> bool:
    """Whether another client's retained answer existed by ``round`` (``g`` was computed)."""
    return any(h.client_id != client_id and h.retained and h.response is not None
               and h.round <= round for h in history)


def lone_qualities(
    history: Sequence[Any], *, mode: str,
    similarity: Callable[[str, Sequence[Any]], float | None],
) -> list[tuple[str, float]]:
    """``(client, g)`` for each retained answer of a finished query that had no reference.

    Parameters
    ----------
    history : sequence of RoundResponse
        The query's answers of all rounds (``client_id``, ``round``, ``response``,
        ``retained``, ``anomaly``).
    mode : {"skip", "defer", "prior"}
        ``routing.lone_answers``.
    similarity : callable
        ``similarity(answer, others)``: the similarity of ``answer`` to ``z`` aggregated from
        ``others`` (the other clients' answers), ``None`` when that ``z`` is empty.
    """
    if mode not in LONE_ANSWERS:
        raise ValueError(f"lone_answers must be one of {LONE_ANSWERS}, got {mode!r}")
    if mode == "skip":
        return []
    out: list[tuple[str, float]] = []
    for h in history:
        if not h.retained or h.response is None or had_reference(history, h.client_id, h.round):
            continue
        others = [o for o in history if o.client_id != h.client_id]
        sim = similarity(h.response.final_answer, others) if any(
            o.retained and o.response is not None for o in others) else None
        if sim is not None:
            out.append((h.client_id, (1.0 - h.anomaly) * min(1.0, max(0.0, sim))))
        elif mode == "prior":
            out.append((h.client_id, (1.0 - h.anomaly) * LONE_PRIOR))
    return out
