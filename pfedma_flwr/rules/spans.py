"""Span helpers shared by ``P_resp`` and ``P_in``: run the detectors of many rules, redact.

The detectors of all rules of one call share one :class:`~pfedma_flwr.rules.safety.MatchBudget`;
a rule whose pattern is slow is named in ``errors`` (its own fault: the caller quarantines it),
one cut short by the shared deadline in ``skipped`` (not its fault: it is only skipped).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from pfedma_flwr.rules.model import PrivacyRule, Span, find_spans
from pfedma_flwr.rules.pii import PiiRecognizer, PiiSpan
from pfedma_flwr.rules.safety import BudgetExhaustedError, MatchBudget, PatternTimeoutError

logger = logging.getLogger(__name__)


def placeholder(action: str, kind: str) -> str:
    """Replacement text: ``[REDACTED:<TYPE>]`` for redact, ``[<TYPE>]`` for generalize."""
    return f"[REDACTED:{kind}]" if action == "redact" else f"[{kind}]"


@dataclass
class RuleRun:
    """Spans per rule and field, plus the rules that failed or were skipped on the way."""

    spans: dict[str, list[list[Span]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def pii_per_field(
    fields: Sequence[str], rules: Sequence[PrivacyRule], recognizer: PiiRecognizer | None
) -> list[list[PiiSpan]]:
    """Recognizer output per field for the union of the rules' entity types (one call a field)."""
    types = list(dict.fromkeys(t for r in rules for t in r.entity_types))
    if not types:
        return [[] for _ in fields]
    if recognizer is None:
        raise ValueError("rules with entity types need a PII recognizer")
    return [recognizer.analyze(f, types) if f else [] for f in fields]


def run_rules(
    rules: Sequence[PrivacyRule],
    fields: Sequence[str],
    pii: Sequence[Sequence[PiiSpan]],
    recognizer: PiiRecognizer | None,
    budget: MatchBudget | None,
) -> RuleRun:
    """Detector spans of every rule on every field; slow rules are reported, never raised."""
    run = RuleRun()
    for rule in rules:
        try:
            run.spans[rule.rule_id] = [
                find_spans(rule, f, recognizer, pii_spans=p, budget=budget)
                for f, p in zip(fields, pii, strict=True)
            ]
        except BudgetExhaustedError:
            run.skipped.append(rule.rule_id)
        except PatternTimeoutError as e:
            logger.warning("%s", e)
            run.errors.append(rule.rule_id)
    if run.skipped:
        logger.warning("matching budget exhausted: %d rule(s) skipped", len(run.skipped))
    return run


def merge_spans(spans: Sequence[tuple[Span, str]]) -> list[tuple[int, int, str, str]]:
    """Union of overlapping spans as ``(start, end, kind, action)``; redact beats generalize.

    The longest span of a merged group names its placeholder.
    """
    ordered = sorted(spans, key=lambda sa: (sa[0].start, -sa[0].end))
    groups: list[tuple[int, int, str, str, int]] = []
    for span, action in ordered:
        length = span.end - span.start
        if groups and span.start < groups[-1][1]:
            start, end, kind, act, best = groups[-1]
            if length > best:
                kind, best = span.kind, length
            act = "redact" if "redact" in (act, action) else act
            groups[-1] = (start, max(end, span.end), kind, act, best)
        else:
            groups.append((span.start, span.end, span.kind, action, length))
    return [(s, e, k, a) for s, e, k, a, _ in groups]


def redact(text: str, spans: Sequence[tuple[Span, str]], *, numbered: bool = False) -> str:
    """Replace each merged span group by one placeholder.

    With ``numbered`` the placeholder carries an index per kind, shared by equal span texts
    (case-insensitive): "Ann ... Bob ... Ann" -> ``[PERSON_1] ... [PERSON_2] ... [PERSON_1]``,
    so a word problem about two people stays solvable.
    """
    if not spans:
        return text
    index: dict[tuple[str, str], int] = {}
    per_kind: dict[str, int] = {}
    pieces: list[str] = []
    pos = 0
    for start, end, kind, act in merge_spans(spans):
        pieces.append(text[pos:start])
        if numbered:
            key = (kind, " ".join(text[start:end].casefold().split()))
            if key not in index:
                per_kind[kind] = per_kind.get(kind, 0) + 1
                index[key] = per_kind[kind]
            kind = f"{kind}_{index[key]}"
        pieces.append(placeholder(act, kind))
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)
