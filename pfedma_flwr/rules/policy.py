"""Initial rule policies: each client's personalized local policy and the server's global policy.

Issue 12: with no initial rules, ``SR`` ("static rules") had no rules and equalled ``NR``, and
``G2L`` had an empty global repository to adopt from. A client starts with
:func:`initial_local_rules` (entity types its profile's domains must protect, and its own
``D_i`` sensitive items as literals); the server starts with :func:`initial_global_rules`
(named built-in policies of ``rules.global_policy``). Query-scope global rules act through
``P_in`` from round 1; response-scope ones are redistributed for selective adoption (G2L, full).

Mind2Web-SC's six safety rules are allow/deny policies over a user's attributes; they are rules
of scope ``guard`` (:mod:`pfedma_flwr.rules.guard_rules`): the server's policy
``mind2web_sc_safety`` holds all six, a client's initial policy those of its expertise.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import replace

from pfedma_flwr.protocol.schema import GlobalRule
from pfedma_flwr.rules.generalize import canonical_text, category_for
from pfedma_flwr.rules.guard_rules import SAFETY_POLICY, guard_global_rules
from pfedma_flwr.rules.model import DEFAULT_CATEGORY, PrivacyRule
from pfedma_flwr.rules.query_rules import QUERY_ENTITIES

#: Entity types a client of each knowledge domain protects in its responses from the start.
DOMAIN_ENTITIES: dict[str, tuple[str, ...]] = {
    "medicine": ("PERSON", "PHONE_NUMBER", "EMAIL_ADDRESS", "US_SSN", "MEDICAL_LICENSE"),
    "law": ("PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "US_SSN", "US_PASSPORT"),
    "finance": ("CREDIT_CARD", "IBAN_CODE", "US_BANK_NUMBER", "US_SSN"),
    "psychology": ("PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER"),
}
#: Literals of one initial item rule (a client's items are bounded by its partition).
MAX_INITIAL_LITERALS = 512

#: Built-in server policies (``rules.global_policy`` names) -> (scope, entity types).
GLOBAL_POLICIES: dict[str, tuple[str, tuple[str, ...]]] = {
    # P_in from round 1 (B's audit: 0 % of GSM8K/MedQA altered without PERSON)
    "contact_query": ("query", ("EMAIL_ADDRESS", "PHONE_NUMBER")),
    "identifiers_query": ("query", ("CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS", "US_SSN")),
    # redistributed, adopted where a client's experience holds such data
    "contact_response": ("response", ("EMAIL_ADDRESS", "PHONE_NUMBER")),
    "names_response": ("response", ("PERSON",)),
    # what uncovered-item detection never creates rules for (task text is full of them), so
    # only adoption brings it: a client adopts it where its own data holds dates and places
    "dates_places_response": ("response", ("DATE_TIME", "LOCATION")),
    # sentences stating a private fact about a person (rules/private_facts.py); a response
    # rule only: P_in keeps QUERY_ENTITIES, so the detector never touches a task
    "private_facts_response": ("response", ("PRIVATE_FACT",)),
}
DEFAULT_GLOBAL_POLICY: tuple[str, ...] = (
    "contact_query", "identifiers_query", "contact_response", "names_response")


def profile_entities(domains: Iterable[str]) -> tuple[str, ...]:
    """Entity types of :data:`DOMAIN_ENTITIES` over ``domains``, sorted (empty if none apply)."""
    return tuple(sorted({e for d in domains for e in DOMAIN_ENTITIES.get(d, ())}))


def initial_local_rules(
    *, entity_types: Sequence[str], sensitive_items: Sequence[str], action: str = "redact"
) -> list[PrivacyRule]:
    """A client's initial local policy: one entity-type rule, one literal rule of ``D_i``'s items.

    Either is left out when it would be empty. Ids are ``init-entities`` / ``init-items`` (not
    ``local-<n>``, so new local rules never collide with them).
    """
    out: list[PrivacyRule] = []
    types = tuple(sorted(set(entity_types)))
    if types:
        cat = category_for(types)
        out.append(PrivacyRule(rule_id="init-entities", category=cat, action=action,
                               text=canonical_text(entity_types=types, category=cat),
                               entity_types=types))
    items = tuple(dict.fromkeys(s.strip() for s in sensitive_items if s.strip()))
    if len(items) > MAX_INITIAL_LITERALS:
        raise ValueError(f"{len(items)} sensitive items exceed {MAX_INITIAL_LITERALS} literals")
    if items:
        out.append(PrivacyRule(rule_id="init-items", category=DEFAULT_CATEGORY, action=action,
                               text=canonical_text(entity_types=(), category=DEFAULT_CATEGORY),
                               literals=items))
    return out


def policy_names() -> list[str]:
    """Every built-in name ``rules.global_policy`` accepts (the safety policy included)."""
    return sorted([*GLOBAL_POLICIES, SAFETY_POLICY])


def initial_global_rules(names: Sequence[str], *, id_prefix: str = "g") -> list[GlobalRule]:
    """The server's initial global policy from built-in names (unknown names raise, listed).

    ``mind2web_sc_safety`` (:data:`~pfedma_flwr.rules.guard_rules.SAFETY_POLICY`) adds the six
    safety rules (scope ``guard``).
    """
    known = policy_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"rules.global_policy: unknown {unknown}; known: {known}")
    out: list[GlobalRule] = []
    for name in dict.fromkeys(names):
        if name == SAFETY_POLICY:
            out.extend(guard_global_rules())
            continue
        scope, types = GLOBAL_POLICIES[name]
        cat = category_for(types)
        out.append(GlobalRule(rule_id="", category=cat, scope=scope,
                              text=canonical_text(entity_types=types, category=cat, scope=scope),
                              entity_types=types))
    return [replace(r, rule_id=f"{id_prefix}{k}") for k, r in enumerate(out, start=1)]


def query_twins(promoted: Sequence[GlobalRule]) -> list[GlobalRule]:
    """The ``P_in`` twin of each promoted response rule: its query-safe entity types, query scope.

    Honest clients only upload response-scope candidates (they see responses, not queries), so
    without twins promotion never reached ``P_in`` (issue 12). A twin keeps only the entity
    types of :data:`~pfedma_flwr.rules.query_rules.QUERY_ENTITIES` (patterns and other types
    are task content in queries) and gets no id here: it enters ``Resolve`` like a promoted
    rule, merging into an equivalent query rule if one exists.
    """
    out = []
    for r in promoted:
        types = tuple(sorted(set(r.entity_types) & set(QUERY_ENTITIES)))
        if r.scope != "response" or not types:
            continue
        cat = category_for(types)
        out.append(GlobalRule(rule_id="", category=cat, scope="query", action=r.action,
                              text=canonical_text(entity_types=types, category=cat,
                                                  scope="query"),
                              entity_types=types, created_round=r.created_round))
    return out


def new_id_prefix() -> str:
    """A global-id prefix unique to one repository (``g<6 hex>-``).

    Clients keep counts per global id across runs; with ids restarting at ``g1``, a new run's
    ``g1`` inherited an old run's counts (issue 12).
    """
    return f"g{secrets.token_hex(3)}-"


__all__ = [
    "DEFAULT_GLOBAL_POLICY",
    "DOMAIN_ENTITIES",
    "GLOBAL_POLICIES",
    "policy_names",
    "initial_global_rules",
    "initial_local_rules",
    "new_id_prefix",
    "profile_entities",
    "query_twins",
]
