"""Detection: the spans a rule's detectors find, and the helpers ``P_resp`` and ``P_in`` share.

:func:`find_spans` runs one rule's detectors (entity recognizer, bounded regexes, literals) over
a text; :func:`run_rules` those of many rules, and the placeholders replace what they found.

The detectors of all rules of one call share one :class:`~pfedma_flwr.rules.safety.MatchBudget`;
a rule whose pattern is slow is named in ``errors`` (its own fault: the caller quarantines it),
one cut short by the shared deadline in ``skipped`` (not its fault: it is only skipped).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import regex

from pfedma_flwr.rules.model import PrivacyRule, placeholder_kind
from pfedma_flwr.rules.normalize import normalize_text, normalized_with_map, original_span
from pfedma_flwr.rules.pii import PiiRecognizer, PiiSpan
from pfedma_flwr.rules.safety import (
    MATCH_TIMEOUT_S,
    BudgetExhaustedError,
    MatchBudget,
    PatternTimeoutError,
    check_pattern,
)

logger = logging.getLogger(__name__)


class Span(NamedTuple):
    """A detected span ``text[start:end]``; ``kind`` names it in placeholders (never the text)."""

    start: int
    end: int
    kind: str


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """A pattern's compiled bounded rewrite; ``UnsafePatternError`` (a ``ValueError``) if unsafe.

    Every rule was checked where it entered (shared ones by shape); compiling needs only the
    local check, which every checked pattern passes.
    """
    return check_pattern(pattern, shared=False, probe=False).compiled


@functools.lru_cache(maxsize=4096)
def literal_regex(literal: str) -> regex.Pattern[str]:
    """Case-insensitive matcher of a literal, word-bounded where it starts/ends with a word char."""
    # Word boundaries only where the literal starts/ends with a word character, so "Ann" does not
    # fire inside "Announcement" but "+1-555" still matches after a space.
    body = regex.escape(literal)
    pre = r"(?<!\w)" if literal[:1].isalnum() or literal[:1] == "_" else ""
    post = r"(?!\w)" if literal[-1:].isalnum() or literal[-1:] == "_" else ""
    return regex.compile(pre + body + post, regex.IGNORECASE | regex.VERSION0)


def _pattern_matches(rule_id: str, pattern: str, text: str,
                     budget: MatchBudget | None) -> list[tuple[int, int]]:
    """Non-empty matches of one pattern, timed; the rule or the message's deadline at fault.

    Raises :class:`PatternTimeoutError` when the pattern spent its own time, and
    :class:`BudgetExhaustedError` when the message's shared deadline cut it short.
    """
    compiled = compile_pattern(pattern)  # checked once per process (cached), never timed here
    timeout, shared = budget.bound(rule_id) if budget is not None else (MATCH_TIMEOUT_S, False)
    t0 = time.perf_counter()
    try:
        return [(m.start(), m.end()) for m in compiled.finditer(text, timeout=timeout)
                if m.end() > m.start()]
    except TimeoutError:
        if shared:
            # Cut short by the message's deadline, not by its own cost.
            raise BudgetExhaustedError(
                f"rule {rule_id!r}: message matching budget exhausted") from None
        raise PatternTimeoutError(
            f"rule {rule_id!r}: pattern timed out after {timeout:.3g}s (its own cost)"
        ) from None
    finally:
        if budget is not None:
            budget.charge(rule_id, time.perf_counter() - t0)


def find_spans(
    rule: PrivacyRule,
    text: str,
    recognizer: PiiRecognizer | None,
    *,
    pii_spans: Sequence[PiiSpan] | None = None,
    budget: MatchBudget | None = None,
) -> list[Span]:
    """Spans of ``text`` matched by ``rule``'s detectors, sorted and de-duplicated (DESIGN §4).

    Parameters
    ----------
    rule : PrivacyRule
        The rule whose detectors run.
    text : str
        Text to scan.
    recognizer : PiiRecognizer or None
        Entity recognizer for ``rule.entity_types``; may be ``None`` when ``pii_spans`` is given
        or the rule has no entity types.
    pii_spans : sequence of PiiSpan, optional
        Precomputed recognizer output for ``text`` (lets a caller run the recognizer once for
        many rules); filtered to the rule's entity types.
    budget : MatchBudget, optional
        Shared deadline of the caller's message; each pattern match runs with the smaller of
        :data:`MATCH_TIMEOUT_S` and what is left of it.

    Returns
    -------
    list of Span
        ``kind`` is the entity type for recognizer spans and the rule's category tag for pattern
        and literal spans.

    Raises
    ------
    PatternTimeoutError
        A pattern ran past :data:`MATCH_TIMEOUT_S`, or the rule spent its own share of
        ``budget`` (the rule is at fault: its owner quarantines it).
    BudgetExhaustedError
        The message's budget ran out before or during this rule's patterns.
    """
    if not text:
        return []
    found: set[Span] = set()
    if rule.entity_types:
        wanted = set(rule.entity_types)
        if pii_spans is None:
            if recognizer is None:
                raise ValueError(f"rule {rule.rule_id!r} has entity types but no recognizer")
            pii_spans = recognizer.analyze(text, rule.entity_types)
        found.update(
            Span(s.start, s.end, s.entity_type) for s in pii_spans if s.entity_type in wanted
        )
    tag = placeholder_kind(rule)
    # Patterns and literals see the normal form (NFKC, no invisible characters): a long s or
    # a zero-width space must not hide a match; spans are mapped back to ``text``.
    norm, starts = normalized_with_map(text) if rule.patterns or rule.literals else (text, ())

    def span(a: int, b: int) -> Span:
        s, e = original_span(starts, len(text), a, b)
        return Span(s, e, tag)

    for p in rule.patterns:
        found.update(span(a, b) for a, b in _pattern_matches(rule.rule_id, p, norm, budget))
    for lit in rule.literals:
        found.update(span(m.start(), m.end())
                     for m in literal_regex(normalize_text(lit)).finditer(norm))
    return sorted(found)



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
