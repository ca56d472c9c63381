"""``P_gen`` (local rule -> shareable candidate) and the local rule for an uncovered item.

DESIGN §3.1: with the offline MiniLM model, paraphrased privacy rules score cos 0.58–0.70, far
below the seed's 0.9 support threshold. So ``P_gen`` never forwards the client's wording: it
renders the candidate text with ONE canonical template (:func:`canonical_text`). Two clients
generalizing the same constraint then upload the *same* string (cos 1.0).

The text names the *constraint* (what is protected, where), not the action. Measured with MiniLM:
"redact person ..." vs "generalize person ..." scored 0.81, so with the action in the text the
seed's conflicting alternatives (same constraint, different action) would never meet in Resolve;
and a category word in the text pulled email vs phone rules to 0.95 (one constraint by mistake).
With ``"do not reveal <entity names> in <scope>s"``, distinct single entity types scored ≤ 0.74,
the query/response versions of one constraint 0.74; only a set and its superset (phone vs
email+phone, location vs person+location) reached 0.90–0.91.

Literals never leave the client. Patterns are shared only when *generic* (see
:func:`is_generic_pattern`): a pattern that embeds a literal, or any run of literal text, may
itself be the secret (a codename, a ward number), so it is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pfedma_flwr.protocol.schema import RuleCandidate
from pfedma_flwr.rules.enforcement import Uncovered
from pfedma_flwr.rules.guard_catalogue import GUARD_SCOPE
from pfedma_flwr.rules.guard_rules import guard_candidate
from pfedma_flwr.rules.model import (
    DEFAULT_CATEGORY,
    ENTITY_CATEGORY,
    PrivacyRule,
    normalize_category,
)

#: Longest run of literal alphanumerics a shared pattern may contain (``Mr``, ``Mrs`` pass;
#: ``Acme``, ``Ward7`` do not).
MAX_LITERAL_RUN = 3
_NON_LITERAL = re.compile(
    r"\\[A-Za-z]|\\.|\[(?:\\.|[^\]\\])*\]|\{\d*,?\d*\}|\(\?(?:P<\w+>|<\w+>|[a-zA-Z]+[:)]|[:=!]|<[=!])"
)
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")


def canonical_text(*, entity_types: Sequence[str], category: str, scope: str = "response") -> str:
    """The one template for shared rule text (DESIGN §3.1); order-insensitive in entity types.

    ``"do not reveal email address, phone number in responses"``; a rule without entity types
    names its category instead: ``"do not reveal sensitive record in responses"``. The action
    is deliberately absent (see the module docstring).
    """
    names = sorted({e.lower().replace("_", " ") for e in entity_types})
    what = ", ".join(names) if names else normalize_category(category)
    return f"do not reveal {what} in {'queries' if scope == 'query' else scope + 's'}"


def is_generic_pattern(pattern: str, literals: Sequence[str] = ()) -> bool:
    r"""Whether a regex may be shared: no literal, no piece of a literal, no literal run > 3 chars.

    Escapes, character classes and group headers are removed first, so
    ``\b\d{3}-\d{2}-\d{4}\b`` is generic while ``(?i)project\s+\w+`` (literal ``project``)
    is not.
    """
    folded = pattern.casefold()
    if any(lit.casefold() in folded for lit in literals):
        return False
    runs = [r.casefold() for r in _ALNUM_RUN.findall(_NON_LITERAL.sub(" ", pattern))]
    if any(len(run) > MAX_LITERAL_RUN for run in runs):
        return False
    # A literal spelled with regex separators (``ann\s+lee`` for "Ann Lee") is still the literal.
    words = {w.casefold() for lit in literals for w in _ALNUM_RUN.findall(lit)}
    return not any(len(run) >= 2 and run in w for run in runs for w in words)


def generalize(rule: PrivacyRule) -> RuleCandidate:
    """``ω̄ = P_gen(ω)``: drop literals and rewrite the text canonically (seed App. F, DESIGN §4).

    The candidate keeps scope, action, entity types (sorted, unique) and the generic patterns.
    Its category comes from the fixed vocabulary of :data:`ENTITY_CATEGORY` (``"sensitive
    record"`` without entity types), not from the rule: a client's category is free text and
    may name the secret (a ward, a project). It carries no rule id, literal or own wording. A
    safety rule (scope ``guard``) is uploaded as its catalogue rule
    (:func:`~pfedma_flwr.rules.guard_rules.guard_candidate`).
    """
    if rule.scope == GUARD_SCOPE:
        return guard_candidate(rule)
    entity_types = tuple(sorted(set(rule.entity_types)))
    patterns = tuple(
        sorted({p for p in rule.patterns if is_generic_pattern(p, rule.literals)})
    )
    category = category_for(entity_types)
    return RuleCandidate(
        text=canonical_text(entity_types=entity_types, category=category, scope=rule.scope),
        category=category,
        scope=rule.scope,
        action=rule.action,
        entity_types=entity_types,
        patterns=patterns,
    )


def is_shareable(candidate: RuleCandidate) -> bool:
    """Whether a candidate can fire anywhere else: it keeps an entity type or a generic pattern.

    A literal-only rule generalizes to a detector-less candidate that would be promoted (every
    such client uploads the same text) yet never trigger, so it is not uploaded.
    """
    return bool(candidate.entity_types or candidate.patterns)


def category_for(entity_types: Sequence[str], default: str = DEFAULT_CATEGORY) -> str:
    """Category of the first entity type with a known category, else ``default``."""
    for e in entity_types:
        if e in ENTITY_CATEGORY:
            return ENTITY_CATEGORY[e]
    return default


def rule_from_uncovered(
    uncovered: Uncovered,
    *,
    rule_id: str,
    action: str = "redact",
    category: str | None = None,
) -> PrivacyRule:
    """The local rule created for an uncovered constraint (DESIGN §4).

    A sensitive item of ``D_i`` gives a literal rule (plus the entity types seen on it, so its
    generalization is useful to others); a PII span gives an entity-type rule without literals —
    the detected value is never stored in the rule.
    """
    if uncovered.kind not in ("item", "pii"):
        raise ValueError(f"Uncovered.kind must be 'item' or 'pii', got {uncovered.kind!r}")
    entity_types = tuple(sorted(set(uncovered.entity_types)))
    cat = normalize_category(category or category_for(entity_types))
    literals = (uncovered.value,) if uncovered.kind == "item" else ()
    if uncovered.kind == "pii" and not entity_types:
        raise ValueError("an uncovered PII span must name its entity type")
    return PrivacyRule(
        rule_id=rule_id,
        text=canonical_text(entity_types=entity_types, category=cat),
        category=cat,
        scope="response",
        action=action,
        entity_types=entity_types,
        literals=literals,
    )
