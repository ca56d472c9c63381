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
  name gets the same number within one text), so a word problem stays solvable.

Rules that fail (an invalid pattern, a pattern past its timeout) are handed to the
``quarantine`` (the global repository) and skipped; P_in never raises for a rule.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Protocol

from pfedma_flwr.rules.model import PrivacyRule, from_global
from pfedma_flwr.rules.pii import PiiRecognizer, PiiSpan
from pfedma_flwr.rules.safety import MatchBudget
from pfedma_flwr.rules.spans import redact, run_rules
from pfedma_flwr.schema import GlobalRule

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
_NAME_TOKEN = re.compile(r"[A-Z][a-z]*(?:[A-Z][a-z]+)?(?:['’\-][A-Za-z]+)*\.?(?:['’]s)?")
#: Stems of drug names (INN stems); a one-word PERSON span ending in one is a drug, not a person.
_DRUG_STEM = re.compile(
    r"(?i)(?:pril|sartan|statin|mab|tinib|azole|cillin|mycin|cycline|vir|olol|dipine|oxacin|"
    r"parin|profen|triptan|azepam|afil|tidine|prazole|semide|thiazide|formin|gliptin|glitazone|"
    r"setron|oxetine|ipramine|triptyline|stigmine|zapine|apine|odrine|drine|sone|olone|caine|"
    r"phylline|amine|idine|azine|ridone|peridol|platin|rubicin|taxel|trexate|lukast|terol|"
    r"tropium|curium|barbital|fenac|coxib|dronate|lutamide|tadine|fibrate|xaban|gatran|umab|"
    r"ximab|zumab|zolam|done|pramine|phine|nidine)$"
)


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


def plausible_person(span_text: str) -> bool:
    """Whether a recognizer PERSON span can name a person.

    One to four capitalised words or initials (a possessive ``'s`` allowed), no digits, no line
    break; a single word ending in a drug-name stem (``Midodrine``, ``Lisinopril``) is not a
    person. Conservative by design: a name that fails stays in the query (task text wins).
    """
    words = span_text.split()
    if not 1 <= len(words) <= 4 or "\n" in span_text or any(c.isdigit() for c in span_text):
        return False
    if not all(_NAME_TOKEN.fullmatch(w.strip(",;:")) for w in words):
        return False
    return not (len(words) == 1 and _DRUG_STEM.search(words[0].rstrip(".,;:")))


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


def apply_query_rules(
    text: str,
    rules: Sequence[PrivacyRule | GlobalRule],
    recognizer: PiiRecognizer | None,
    *,
    quarantine: RuleQuarantine | None = None,
    budget: MatchBudget | None = None,
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

    def free(start: int, end: int) -> bool:
        return not any(a < end and start < b for a, b in protected)

    fired: list[tuple[PrivacyRule, list]] = []
    for r in local:
        spans = [s for s in run.spans.get(r.rule_id, [[]])[0] if free(s.start, s.end)]
        if spans:
            fired.append((r, spans))
    out = redact(text, [(s, r.action) for r, spans in fired for s in spans], numbered=True)
    return out, [r.global_id or r.rule_id for r, _ in fired]
