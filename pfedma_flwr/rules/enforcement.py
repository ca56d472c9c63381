"""Rule enforcement: ``P_resp``, ``P_in`` and uncovered-constraint detection (DESIGN §4, App. F).

``P_resp`` acts on a client's response, ``P_in`` on the server's query.

Every response field (final answer, claims, evidence) is scanned; the PII recognizer runs once per
field for the union of the rules' entity types. Overlapping spans of different rules merge into one
placeholder, the stronger action winning (redact over generalize).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pfedma_flwr.protocol.schema import Claim, StructuredResponse
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.normalize import normalize_text, normalized_with_map, original_span
from pfedma_flwr.rules.pii import DEFAULT_ENTITIES, PiiRecognizer
from pfedma_flwr.rules.query_rules import QUERY_ENTITIES, apply_query_rules
from pfedma_flwr.rules.safety import MatchBudget
from pfedma_flwr.rules.spans import (
    Span,
    literal_regex,
    pii_per_field,
    placeholder,
    redact,
    run_rules,
)

logger = logging.getLogger(__name__)

_PLACEHOLDER = re.compile(r"\[(?:REDACTED:)?[A-Z0-9_]+\]")
_WORDISH = re.compile(r"\w")
#: Entity types whose detection alone makes an uncovered constraint. DATE_TIME, LOCATION and URL
#: are left out: in task text they mostly mark durations, textbook places and references.
UNCOVERED_ENTITIES: tuple[str, ...] = (
    "PERSON",
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "US_SSN",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "US_PASSPORT",
    "US_DRIVER_LICENSE",
    "MEDICAL_LICENSE",
)


def default_answer_extractable(response: StructuredResponse) -> bool:
    """An answer is extractable if the final answer keeps a word character besides placeholders."""
    return bool(_WORDISH.search(_PLACEHOLDER.sub("", response.final_answer)))


@dataclass(frozen=True)
class RuleOutcome:
    """What one triggered rule did to one response (counted once per response)."""

    rule_id: str
    triggered: bool
    valid: bool
    conflict: bool
    n_spans: int


@dataclass(frozen=True)
class EnforcementResult:
    """``r̃ = P_resp(r, Ω_local)`` plus per-rule outcomes; stays on the client.

    ``response`` is ``None`` iff a triggered ``refuse`` rule withheld it (``refused`` True).
    ``outcomes`` lists triggered rules only; ``errors`` names rules whose pattern timed out on
    its own (to quarantine), ``skipped`` those cut short by the message's matching budget.
    """

    response: StructuredResponse | None
    refused: bool
    outcomes: tuple[RuleOutcome, ...]
    errors: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def triggered_ids(self) -> tuple[str, ...]:
        """Ids of the rules whose detectors fired."""
        return tuple(o.rule_id for o in self.outcomes if o.triggered)


@dataclass(frozen=True)
class Uncovered:
    """A sensitive item present in a response and matched by no active rule (client-only).

    ``kind`` is ``"item"`` for a sensitive item of ``D_i`` (``value`` is the literal) or
    ``"pii"`` for a recognizer span; ``entity_types`` are the recognizer types seen on it.
    """

    kind: str
    value: str
    entity_types: tuple[str, ...] = ()


# --------------------------------------------------------------------------- helpers


def _fields(response: StructuredResponse) -> list[str]:
    out = [response.final_answer]
    for c in response.claims:
        out.append(c.claim)
        out.extend(c.evidence)
    return out


def _rebuild(response: StructuredResponse, fields: Sequence[str]) -> StructuredResponse:
    it = iter(fields)
    final = next(it)
    claims = tuple(
        Claim(claim=next(it), evidence=tuple(next(it) for _ in c.evidence))
        for c in response.claims
    )
    return dataclasses.replace(response, final_answer=final, claims=claims)


def _by_origin(rules: Sequence[PrivacyRule]) -> list[PrivacyRule]:
    # The client's own rules run first: if the matching budget runs out, global ones are skipped.
    return sorted(rules, key=lambda r: r.origin != "local")


# --------------------------------------------------------------------------- P_resp


def _judge_alone(
    rule: PrivacyRule, response: StructuredResponse, fields: Sequence[str],
    per_field: Sequence[Sequence[Span]],
    extractable: Callable[[StructuredResponse], bool],
    requirement_ok: Callable[[PrivacyRule, StructuredResponse | None], bool],
) -> RuleOutcome:
    """A triggered rule's outcome, judged on the response with that rule applied alone."""
    single: StructuredResponse | None = None
    if rule.action != "refuse":
        single = _rebuild(response, [redact(f, [(s, rule.action) for s in ss])
                                     for f, ss in zip(fields, per_field, strict=True)])
    matched = {f[s.start : s.end].casefold() for f, ss in zip(fields, per_field, strict=True)
               for s in ss}
    remaining = [] if single is None else [t.casefold() for t in _fields(single)]
    gone = not any(m in t for m in matched for t in remaining)
    changed = single is None or single.final_answer != response.final_answer
    return RuleOutcome(
        rule_id=rule.rule_id, triggered=True,
        valid=gone and single is not None and extractable(single),
        conflict=changed or not requirement_ok(rule, single),
        n_spans=sum(len(ss) for ss in per_field),
    )


def enforce_response(
    response: StructuredResponse,
    rules: Sequence[PrivacyRule],
    recognizer: PiiRecognizer | None,
    *,
    answer_extractable: Callable[[StructuredResponse], bool] | None = None,
    requirement_ok: Callable[[PrivacyRule, StructuredResponse | None], bool] | None = None,
    budget: MatchBudget | None = None,
) -> EnforcementResult:
    """``r̃ = P_resp(r, Ω_local)``: apply the response-scope rules to every text field (DESIGN §4).

    A rule is *triggered* when a detector fires on any field. Its outcome is judged on the
    response with that rule applied alone, so one rule's refusal does not count against another:
    *valid* = every matched string is gone and the answer is still extractable; *conflict* = the
    final answer changed (a refusal withholds it) or ``requirement_ok`` says the result
    contradicts the client's own requirement. The uploaded response applies all triggered rules
    together; any triggered ``refuse`` rule withholds it.

    Parameters
    ----------
    response : StructuredResponse
        The raw response ``r``.
    rules : sequence of PrivacyRule
        The active local rules; rules of scope ``"query"`` are ignored.
    recognizer : PiiRecognizer or None
        Entity recognizer (needed iff some rule has entity types).
    answer_extractable : callable, optional
        Whether a processed response still yields an answer; default: the final answer keeps a
        word character outside placeholders.
    requirement_ok : callable, optional
        ``(rule, processed_or_None) -> bool``; ``False`` marks a conflict with a client
        requirement. Default: no extra requirement.
    budget : MatchBudget, optional
        The message's pattern-matching deadline (shared by every response of the message);
        local rules are matched first.

    Returns
    -------
    EnforcementResult
    """
    extractable = answer_extractable or default_answer_extractable
    active = _by_origin([r for r in rules if r.scope == "response"])
    fields = _fields(response)
    pii = pii_per_field(fields, active, recognizer)
    run = run_rules(active, fields, pii, recognizer, budget)
    spans = run.spans
    errors = (tuple(run.errors), tuple(run.skipped))
    triggered = [r for r in active if r.rule_id in spans and any(spans[r.rule_id])]

    ok_of = requirement_ok or (lambda _rule, _single: True)
    outcomes = [_judge_alone(rule, response, fields, spans[rule.rule_id], extractable, ok_of)
                for rule in triggered]

    if any(r.action == "refuse" for r in triggered):
        return EnforcementResult(None, True, tuple(outcomes), *errors)
    processed = [
        redact(f, [(s, r.action) for r in triggered for s in spans[r.rule_id][k]])
        for k, f in enumerate(fields)
    ]
    return EnforcementResult(_rebuild(response, processed), False, tuple(outcomes), *errors)


# --------------------------------------------------------------------------- uncovered


def find_uncovered(
    response: StructuredResponse,
    sensitive_items: Sequence[str],
    active_rules: Sequence[PrivacyRule],
    recognizer: PiiRecognizer | None,
    *,
    pii_entity_types: Sequence[str] = UNCOVERED_ENTITIES,
    budget: MatchBudget | None = None,
) -> list[Uncovered]:
    """Privacy constraints present in ``r`` that no active rule covers (DESIGN §4).

    An occurrence is covered when it lies inside a span of an active response-scope rule. A
    sensitive item of ``D_i`` is uncovered if any occurrence (case-insensitive, word-bounded) is
    not covered; a recognizer span of ``pii_entity_types`` likewise. PII spans inside an
    uncovered item fold into it (their types are attached), and results are de-duplicated.
    """
    rules = [r for r in active_rules if r.scope == "response"]
    fields = _fields(response)
    types = list(dict.fromkeys([*pii_entity_types, *(t for r in rules for t in r.entity_types)]))
    if recognizer is not None and types:
        pii = [recognizer.analyze(f, types) if f else [] for f in fields]
    else:
        pii = [[] for _ in fields]
    # A rule that fails here covers nothing, so its items count as uncovered (fail closed).
    spans = run_rules(_by_origin(rules), fields, pii, recognizer, budget).spans
    covered = [[s for ss in spans.values() for s in ss[k]] for k in range(len(fields))]

    def is_covered(k: int, start: int, end: int) -> bool:
        return any(c.start <= start and end <= c.end for c in covered[k])

    out: dict[tuple[str, str], Uncovered] = {}
    claimed: list[list[tuple[int, int]]] = [[] for _ in fields]
    norms = [normalized_with_map(f) for f in fields]
    for item in dict.fromkeys(i for i in sensitive_items if i.strip()):
        for k, f in enumerate(fields):
            norm, starts = norms[k]
            for m in literal_regex(normalize_text(item)).finditer(norm):
                a, b = original_span(starts, len(f), m.start(), m.end())
                claimed[k].append((a, b))
                if is_covered(k, a, b):
                    continue
                inside = tuple(
                    sorted(
                        {p.entity_type for p in pii[k] if p.start < b and a < p.end}
                        & set(pii_entity_types)
                    )
                )
                key = ("item", item.casefold())
                prev = out.get(key)
                merged = tuple(sorted(set(inside) | set(prev.entity_types if prev else ())))
                out[key] = Uncovered("item", item, merged)
    wanted = set(pii_entity_types)
    for k, f in enumerate(fields):
        for p in pii[k]:
            if p.entity_type not in wanted or is_covered(k, p.start, p.end):
                continue
            if any(a < p.end and p.start < b for a, b in claimed[k]):
                continue
            value = f[p.start : p.end]
            out.setdefault(("pii:" + p.entity_type, value.casefold()),
                           Uncovered("pii", value, (p.entity_type,)))
    return list(out.values())


__all__ = [
    "DEFAULT_ENTITIES",
    "QUERY_ENTITIES",
    "EnforcementResult",
    "RuleOutcome",
    "Uncovered",
    "UNCOVERED_ENTITIES",
    "apply_query_rules",
    "default_answer_extractable",
    "enforce_response",
    "find_uncovered",
    "placeholder",
]
