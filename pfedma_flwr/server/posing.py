"""``q̃`` of a query's next round: ``P_in`` over the task, the refinement and its candidate.

The server never forwards a query as its client wrote it: the active query-scope rules of
``Ω_global`` redact it (``P_in``, DESIGN §3.5), and from round 2 on the configured refiner's
feedback (§3.10) travels beside it, with the candidate answer ``z`` as its own field
(:attr:`~pfedma_flwr.protocol.schema.RoutedQuery.candidate`), so no client reads the
candidate out of the refiner's wording.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pfedma_flwr.aggregation.public_state import public_state
from pfedma_flwr.aggregation.refinement import Refiner
from pfedma_flwr.protocol.schema import CANDIDATE_CHARS, GlobalRule, RoutedQuery
from pfedma_flwr.protocol.validation import DEFAULT_LIMITS
from pfedma_flwr.rules.enforcement import apply_query_rules
from pfedma_flwr.rules.pii import PiiRecognizer
from pfedma_flwr.rules.query_rules import RuleQuarantine
from pfedma_flwr.server.query_state import QueryState


@dataclass(frozen=True)
class Posed:
    """A query as it goes out this round.

    Attributes
    ----------
    query : RoutedQuery
        ``q̃``: the redacted task, its refinement and candidate.
    fired : tuple[str, ...]
        Ids of the query rules that fired on the task or the refinement (one per firing).
    pin : Callable[[str], str]
        ``P_in`` itself, for the text an orchestrator composes per client.
    """

    query: RoutedQuery
    fired: tuple[str, ...]
    pin: Callable[[str], str]


def refinement(q: QueryState, refine: Refiner) -> tuple[str, str]:
    """``refine``'s text for ``q.z`` (checked: a string) and ``z``'s answer as the candidate.

    The refiner sees only the public form of ``z`` (canonical answers, bounded claims
    without instructions; :func:`~pfedma_flwr.aggregation.public_state.public_state`). No
    candidate travels without refinement text.

    Raises
    ------
    TypeError
        Naming the refiner and the query when it returns anything but a string.
    """
    public = public_state(q.z, q.task.answer_kind, options=q.task.options or None)
    ref = refine(public)
    if not isinstance(ref, str):
        name = getattr(refine, "__qualname__", type(refine).__name__)
        raise TypeError(f"refiner {name!r} returned "
                        f"{type(ref).__name__} for {q.task.task_id}, expected str")
    if not ref.strip():
        return "", ""
    # clients reject a query field over the wire cap, so an overlong text would cost the
    # round every answer; keep its start instead
    cap = DEFAULT_LIMITS.max_text_chars
    candidate = public.answer.strip() if public is not None and public.answer else ""
    return ref[:cap], candidate[:CANDIDATE_CHARS]


def pose(q: QueryState, domain: str, global_rules: Sequence[GlobalRule], *,
         recognizer: PiiRecognizer | None, quarantine: RuleQuarantine | None,
         refine: Refiner | None) -> Posed:
    """``q̃`` of ``q``'s next round; from round 2 on with ``refine``'s text (None: -RQ).

    ``quarantine`` (the global repository) tells :func:`apply_query_rules` which rules are
    quarantined.
    """
    keep = q.task.task_needed

    def pin_fired(t: str) -> tuple[str, list[str]]:
        return apply_query_rules(t, global_rules, recognizer, quarantine=quarantine,
                                 keep=keep)

    text, fired = pin_fired(q.task.question)
    # round 1 has no z to refine from
    ref, candidate = refinement(q, refine) if refine is not None and q.t else ("", "")
    if ref:
        ref, fired_ref = pin_fired(ref)
        fired = [*fired, *fired_ref]
    if candidate:  # a part of the refinement's content: its firings are counted there
        candidate = pin_fired(candidate)[0]
    rq = RoutedQuery(query_id=q.task.task_id, text=text, domain=domain, round=q.t + 1,
                     refinement=ref, answer_kind=q.task.answer_kind,
                     task_format=q.task.task_format, candidate=candidate)
    return Posed(query=rq, fired=tuple(fired), pin=lambda t: pin_fired(t)[0])
