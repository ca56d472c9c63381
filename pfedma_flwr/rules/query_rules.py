"""``q̃ = P_in(q, Ω_global)``: minimise what clients see of a query without damaging the task.

Seed §3.2 / App. F; DESIGN §4 (revision of 2026-12-01). Measured before these rules: a PERSON
rule learned from responses was applied to every query; the small spaCy model tagged whole option
blocks ("A. Midodrine B. Rivastigmine C. Mirtazapine") as one PERSON, different people of a word
problem became one placeholder, and 17 of 20 questions were altered. So here:

- only **query-scope** rules apply (a response-scope rule protects what a client writes, not the
  user's task); ``refuse`` rules do not apply either (the server already holds the query, and
  dropping it would refuse the task);
- only the entity types of :data:`QUERY_ENTITIES` are recognized in queries (dates, places and
  URLs of task text are task content), and a PERSON span must look like a name
  (:func:`plausible_person`: no digits, capitalised words, not a drug name);
- answer-option lines (``A. ...``, ``B) ...``, ``(C) ...``) are never changed;
- placeholders are numbered per kind (``[REDACTED:PERSON_1]``, ``[REDACTED:PERSON_2]``; the same
  name gets the same number within one text), so a word problem stays solvable;
- what the task itself needs stays readable: a span whose text occurs in one of the task's
  ``keep`` texts (``Task.task_needed``: the user's own name and address, the instruction that
  names the addressee, the addressee's address) is never redacted. Measured before this: the
  ``privacy`` presets replaced the recipient's address in "send Sarah an update using Messenger
  (sarah@messenger.com)", so no agent could address the message.

Rules that fail (an invalid pattern, a pattern past its timeout) are handed to the
``quarantine`` (the global repository) and skipped; P_in never raises for a rule.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Protocol

from pfedma_flwr.protocol.schema import GlobalRule
from pfedma_flwr.rules.model import PrivacyRule, from_global
from pfedma_flwr.rules.pii import PiiRecognizer, PiiSpan
from pfedma_flwr.rules.pii_filters import plausible_person
from pfedma_flwr.rules.safety import MatchBudget
from pfedma_flwr.rules.spans import Span, redact, run_rules

logger = logging.getLogger(__name__)

#: Entity types P_in recognizes in task text: names and structured identifiers only.
QUERY_ENTITIES: tuple[str, ...] = (
    "PERSON",
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "US_SSN",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "US_PASSPORT",
)
#: Server-side time for all patterns of one query text.
QUERY_MATCH_BUDGET_S = 0.25

_OPTION_LINE = re.compile(r"(?m)^[ \t]*(?:\([A-Ja-j]\)|[A-Ja-j][.)])[ \t].*$")
class RuleQuarantine(Protocol):
    """Where P_in reports a rule that failed (the server's global repository)."""

    def quarantine(self, rule_id: str, reason: str) -> None:
        """Take ``rule_id`` out of service with a short reason."""
        ...

    def is_quarantined(self, rule_id: str) -> bool:
        """Whether ``rule_id`` was taken out of service."""
        ...


def option_line_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every answer-option line (``A. x``, ``B) x``, ``(C) x``)."""
    return [(m.start(), m.end()) for m in _OPTION_LINE.finditer(text)]


def _query_rules(
    rules: Sequence[PrivacyRule | GlobalRule], quarantine: RuleQuarantine | None
) -> list[PrivacyRule]:
    out: list[PrivacyRule] = []
    for r in rules:
        if isinstance(r, GlobalRule):
            if not r.active or r.scope != "query" or r.action == "refuse":
                continue
            if quarantine is not None and quarantine.is_quarantined(r.rule_id):
                continue
            try:
                r = from_global(r)
            except ValueError as e:
                logger.warning("global rule %r unusable in P_in: %s", r.rule_id, e)
                if quarantine is not None:
                    quarantine.quarantine(r.rule_id, "invalid")
                continue
        elif r.scope != "query" or r.action == "refuse":
            continue
        out.append(r)
    return out


def query_pii(text: str, rules: Sequence[PrivacyRule], recognizer: PiiRecognizer | None
              ) -> list[PiiSpan]:
    """Recognizer spans of the rules' entity types that P_in may act on (see module docstring)."""
    types = [t for t in dict.fromkeys(t for r in rules for t in r.entity_types)
             if t in QUERY_ENTITIES]
    if not types or not text.strip():
        return []
    if recognizer is None:
        raise ValueError("query rules with entity types need a PII recognizer")
    return [s for s in recognizer.analyze(text, types)
            if s.entity_type != "PERSON" or plausible_person(text[s.start : s.end])]


def _every_occurrence(text: str, spans: Sequence[Span]) -> list[Span]:
    # The recognizer may tag "Stanley" once and miss it later in the same text; the same name
    # must get the same placeholder everywhere (and not stay in clear once).
    out = set(spans)
    for s in spans:
        if s.kind in QUERY_ENTITIES:
            needle = re.escape(text[s.start : s.end])
            out.update(Span(m.start(), m.end(), s.kind)
                       for m in re.finditer(rf"(?<!\w){needle}(?!\w)", text))
    return sorted(out)


def _needed(span_text: str, keep: Sequence[str]) -> bool:
    """Whether ``span_text`` occurs, as whole words and in the same case, in a ``keep`` text.

    Case matters: the Slack tool's example handle ``'@john'`` must not keep a "John" readable.
    """
    needle = span_text.strip()
    if not needle:
        return False
    pattern = re.compile(rf"(?<!\w){re.escape(needle)}(?!\w)")
    return any(pattern.search(k) for k in keep)


def apply_query_rules(
    text: str,
    rules: Sequence[PrivacyRule | GlobalRule],
    recognizer: PiiRecognizer | None,
    *,
    quarantine: RuleQuarantine | None = None,
    budget: MatchBudget | None = None,
    keep: Sequence[str] = (),
) -> tuple[str, list[str]]:
    """``q̃ = P_in(q, Ω_global)`` with the query-scope rules (see the module docstring).

    Parameters
    ----------
    text : str
        Query (or refinement) text.
    rules : sequence of PrivacyRule or GlobalRule
        Candidate rules; inactive, response-scope and ``refuse`` rules are skipped.
    recognizer : PiiRecognizer or None
        Entity recognizer (needed iff a query-scope rule has entity types).
    quarantine : RuleQuarantine, optional
        Receives rules that fail (invalid, or a pattern past its timeout); those it already
        holds are skipped.
    budget : MatchBudget, optional
        Pattern-matching deadline (default: :data:`QUERY_MATCH_BUDGET_S` for this text).
    keep : sequence of str
        Texts whose identifiers the task needs (module docstring): spans found in them stay.

    Returns
    -------
    tuple of (str, list of str)
        The processed text and the ids of the rules that changed it (global ids for global
        rules).
    """
    local = _query_rules(rules, quarantine)
    if not local or not text:
        return text, []
    pii = query_pii(text, local, recognizer)
    run = run_rules(local, [text], [pii], recognizer, budget or MatchBudget(QUERY_MATCH_BUDGET_S))
    for rid in run.errors:
        gid = next((r.global_id for r in local if r.rule_id == rid and r.global_id), None)
        if gid is not None and quarantine is not None:
            quarantine.quarantine(gid, "timeout")
    protected = option_line_spans(text)
    needed = [k for k in keep if k.strip()]

    def free(start: int, end: int) -> bool:
        if needed and _needed(text[start:end], needed):
            return False
        return not any(a < end and start < b for a, b in protected)

    fired: list[tuple[PrivacyRule, list[Span]]] = []
    for r in local:
        spans = [s for s in run.spans.get(r.rule_id, [[]])[0] if free(s.start, s.end)]
        spans = [s for s in _every_occurrence(text, spans) if free(s.start, s.end)]
        if spans:
            fired.append((r, spans))
    out = redact(text, [(s, r.action) for r, spans in fired for s in spans], numbered=True)
    return out, [r.global_id or r.rule_id for r, _ in fired]
