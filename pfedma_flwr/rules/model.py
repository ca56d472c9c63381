"""The privacy rule ``ω`` (DESIGN §4) and the checks of its detectors.

A rule's detectors (entity types, regexes, literals) find spans in a text
(:func:`pfedma_flwr.rules.spans.find_spans`); the action (redact, generalize, refuse) is applied
by :mod:`pfedma_flwr.rules.enforcement`. Detectors are checked by :func:`check_detectors`:
patterns must pass :func:`pfedma_flwr.rules.safety.check_pattern` (a safe, bounded regex subset
that does not fire on ordinary task text), and every match runs under a timeout and the caller's
:class:`~pfedma_flwr.rules.safety.MatchBudget`: a rule must not be able to stall a node or to
redact the task itself.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pfedma_flwr.protocol.rule_wire import (
    RULE_ACTIONS,
    RULE_SCOPES,
    GlobalRule,
    RuleSpec,
    rule_spec_dict,
)
from pfedma_flwr.rules.guard_catalogue import GUARD_CATEGORY, GUARD_SCOPE, catalogue_problem
from pfedma_flwr.rules.safety import (
    MATCH_TIMEOUT_S,
    MAX_PATTERN_CHARS,
    MAX_PATTERNS_PER_RULE,
    BudgetExhaustedError,
    PatternTimeoutError,
    UnsafePatternError,
    check_pattern,
)

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

RULE_ORIGINS: tuple[str, ...] = ("local", "global")
#: Entity types per rule; names look like Presidio's (``EMAIL_ADDRESS``).
MAX_ENTITY_TYPES = 16
_ENTITY_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,39}")
_TAG_CHARS = re.compile(r"[^A-Z0-9]+")
_SPACES = re.compile(r"[\s_]+")

DEFAULT_CATEGORY = "sensitive record"

#: Category of a rule created for an entity type (first matching type wins, in rule order).
ENTITY_CATEGORY: dict[str, str] = {
    "PERSON": "personal name",
    "EMAIL_ADDRESS": "contact information",
    "PHONE_NUMBER": "contact information",
    "US_SSN": "government identifier",
    "US_PASSPORT": "government identifier",
    "US_DRIVER_LICENSE": "government identifier",
    "US_ITIN": "government identifier",
    "UK_NHS": "government identifier",
    "ID": "government identifier",
    "MEDICAL_LICENSE": "professional identifier",
    "CREDIT_CARD": "financial account",
    "IBAN_CODE": "financial account",
    "US_BANK_NUMBER": "financial account",
    "CRYPTO": "financial account",
    "IP_ADDRESS": "online identifier",
    "URL": "online identifier",
    "MAC_ADDRESS": "online identifier",
    "LOCATION": "location",
    "DATE_TIME": "date",
    # sentences the private-fact detector flags (rules/private_facts.py)
    "PRIVATE_FACT": "private fact",
}

# Escapes (\d, \.), character classes, counted repeats and group headers carry no literal text.
#: Categories that may appear outside the client (placeholders, candidates): a fixed vocabulary,
#: because a client's own category is free text and may name the secret.
SHARED_CATEGORIES: frozenset[str] = (frozenset(ENTITY_CATEGORY.values())
                                     | {DEFAULT_CATEGORY, GUARD_CATEGORY})


def normalize_category(category: str) -> str:
    """Canonical category: lower case, ``_`` → space, single spaces."""
    return _SPACES.sub(" ", category.strip().lower()).strip() or DEFAULT_CATEGORY


def category_tag(category: str) -> str:
    """Upper-snake tag of a category for placeholders: ``"personal name"`` -> ``PERSONAL_NAME``."""
    tag = _TAG_CHARS.sub("_", category.upper()).strip("_")
    return tag or "SENSITIVE"


def placeholder_kind(rule: PrivacyRule) -> str:
    """Placeholder tag of a rule's pattern/literal spans: its category if shared vocabulary.

    Otherwise ``SENSITIVE_RECORD``: the tag is uploaded inside the processed response, and a
    client-written category ("Wexhollow Ward names") can itself be the secret.
    """
    cat = normalize_category(rule.category)
    return category_tag(cat if cat in SHARED_CATEGORIES else DEFAULT_CATEGORY)


def check_detectors(entity_types: Sequence[str], patterns: Sequence[str], *,
                    shared: bool = True, probe: bool = True) -> None:
    """Raise ``ValueError`` naming the first unusable shared detector (count, name or pattern).

    The check every rule passes where it enters a node (candidates on the server, global rules
    on a client, rules read back from a checkpoint or state file); a client's own local rule
    passes it with ``shared=False`` (:func:`~pfedma_flwr.rules.safety.check_pattern`).
    """
    if len(entity_types) > MAX_ENTITY_TYPES:
        raise ValueError(f"{len(entity_types)} entity types exceed {MAX_ENTITY_TYPES}")
    for e in entity_types:
        if not isinstance(e, str) or not _ENTITY_NAME.fullmatch(e):
            raise ValueError(f"entity type {str(e)[:40]!r} is not an upper-snake entity name")
    if len(patterns) > MAX_PATTERNS_PER_RULE:
        raise ValueError(f"{len(patterns)} patterns exceed {MAX_PATTERNS_PER_RULE}")
    for p in patterns:
        check_pattern(p, shared=shared, probe=probe)


@dataclass(frozen=True)
class PrivacyRule(RuleSpec):
    """One privacy rule ``ω = {id, text, category, scope, action, entities, patterns, literals}``.

    Implements DESIGN §4. ``literals`` are client secrets (e.g. a patient's actual name); they
    exist only in local rules and are dropped by ``P_gen``
    (:func:`pfedma_flwr.rules.generalize.generalize`).

    Parameters
    ----------
    rule_id : str
        Unique id within its repository.
    text : str
        Natural-language statement of the rule (embedded for similarity).
    category : str
        Privacy category, e.g. ``"contact information"``.
    scope : {"query", "response"}
        Where the rule acts.
    action : {"redact", "generalize", "refuse"}
        What happens to a matched span.
    entity_types : tuple of str
        PII recognizer entity types (Presidio names, e.g. ``"EMAIL_ADDRESS"``).
    patterns : tuple of str
        Regexes in the safe subset of :mod:`pfedma_flwr.rules.safety`; others raise
        ``ValueError``.
    literals : tuple of str
        Case-insensitive literal strings; client-only.
    origin : {"local", "global"}
        Created on this client, or adopted from the global repository.
    global_id : str or None
        The global rule id for ``origin="global"``; ``None`` for local rules.
    """

    rule_id: str = field(kw_only=True)
    literals: tuple[str, ...] = ()
    origin: str = "local"
    global_id: str | None = None

    def __post_init__(self) -> None:
        if not self.rule_id.strip():
            raise ValueError("PrivacyRule.rule_id must not be empty")
        if not self.text.strip() or not self.category.strip():
            raise ValueError(f"rule {self.rule_id!r}: text and category must not be empty")
        if self.scope not in RULE_SCOPES:
            raise ValueError(f"rule {self.rule_id!r}: scope {self.scope!r} not in {RULE_SCOPES}")
        if self.action not in RULE_ACTIONS:
            raise ValueError(f"rule {self.rule_id!r}: action {self.action!r} not in {RULE_ACTIONS}")
        if self.origin not in RULE_ORIGINS:
            raise ValueError(f"rule {self.rule_id!r}: origin {self.origin!r} not in {RULE_ORIGINS}")
        if (self.origin == "global") != (self.global_id is not None):
            raise ValueError(f"rule {self.rule_id!r}: global_id is required iff origin='global'")
        for name in ("entity_types", "patterns", "literals"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"rule {self.rule_id!r}: {name} must be a tuple of non-empty str")
        if self.origin == "global" and self.literals:
            raise ValueError(f"rule {self.rule_id!r}: a global rule cannot hold literals")
        try:
            # a safety rule's patterns never redact (they measure relevance) and only the
            # catalogue's exist (checked below), so they skip the task-text probe
            check_detectors(self.entity_types, self.patterns, shared=self.origin != "local",
                            probe=self.scope != GUARD_SCOPE)
        except ValueError as e:
            raise ValueError(f"rule {self.rule_id!r} rejected: {e}") from None
        # a safety rule's text reaches the model's prompt: only the catalogue's rules exist
        if self.scope == GUARD_SCOPE and (why := catalogue_problem(
                self.text, self.category, self.action, self.entity_types, self.patterns)):
            raise ValueError(f"rule {self.rule_id!r} rejected: {why}")
        if self.scope == GUARD_SCOPE and self.literals:
            raise ValueError(f"rule {self.rule_id!r}: a safety rule holds no literals")

    @property
    def has_detector(self) -> bool:
        """Whether any detector is configured (a rule without one can never trigger)."""
        return bool(self.entity_types or self.patterns or self.literals)

    def spec_key(self) -> tuple[Any, ...]:
        """Identity of the detector spec and action (order-insensitive), for de-duplication."""
        return (
            self.scope,
            self.action,
            tuple(sorted(set(self.entity_types))),
            tuple(sorted(set(self.patterns))),
            tuple(sorted({lit.casefold() for lit in self.literals})),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (holds literals: client-local persistence only, never the wire)."""
        return {
            "rule_id": self.rule_id,
            **rule_spec_dict(self),
            "literals": list(self.literals),
            "origin": self.origin,
            "global_id": self.global_id,
        }

    @classmethod
    def from_dict(cls, d: Any) -> PrivacyRule:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` naming the bad field."""
        if not isinstance(d, dict):
            raise ValueError(f"PrivacyRule payload must be an object, got {type(d).__name__}")
        try:
            return cls(
                rule_id=str(d["rule_id"]),
                text=str(d["text"]),
                category=str(d["category"]),
                scope=str(d.get("scope", "response")),
                action=str(d.get("action", "redact")),
                entity_types=tuple(d.get("entity_types", ())),
                patterns=tuple(d.get("patterns", ())),
                literals=tuple(d.get("literals", ())),
                origin=str(d.get("origin", "local")),
                global_id=d.get("global_id"),
            )
        except KeyError as e:
            raise ValueError(f"PrivacyRule payload misses field {e.args[0]!r}") from None


def load_rule_lenient(payload: Any) -> PrivacyRule:
    """:meth:`PrivacyRule.from_dict`, dropping stored patterns that fail today's check.

    A client's stored rule may predate the current pattern check; its literals and entity types
    must keep protecting, so only the unusable patterns go (logged).
    """
    try:
        return PrivacyRule.from_dict(payload)
    except ValueError:
        if not isinstance(payload, dict) or not isinstance(payload.get("patterns"), list):
            raise
    kept = []
    for p in payload["patterns"]:
        try:
            check_pattern(p, shared=payload.get("origin", "local") != "local")
        except ValueError:
            continue
        kept.append(p)
    rule = PrivacyRule.from_dict({**payload, "patterns": kept})
    logger.warning("stored rule %r: %d unusable pattern(s) dropped", rule.rule_id,
                   len(payload["patterns"]) - len(kept))
    return rule


def from_global(g: GlobalRule) -> PrivacyRule:
    """The local form of a redistributed global rule (origin ``"global"``, keyed ``g:<id>``)."""
    return PrivacyRule(
        rule_id=f"g:{g.rule_id}",
        text=g.text,
        category=g.category,
        scope=g.scope,
        action=g.action,
        entity_types=g.entity_types,
        patterns=g.patterns,
        origin="global",
        global_id=g.rule_id,
    )


__all__ = [
    "MATCH_TIMEOUT_S",
    "MAX_PATTERN_CHARS",
    "BudgetExhaustedError",
    "PatternTimeoutError",
    "PrivacyRule",
    "UnsafePatternError",
    "check_detectors",
    "from_global",
    "load_rule_lenient",
]
