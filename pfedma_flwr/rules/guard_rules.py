"""Safety rules as rules of the repositories: initial policies, local evolution, candidates.

How each rule mode changes what a guard holds (docs/rules.md, "Safety rules"):

- **initial local policy** (every mode but ``NR``, where nothing is applied): the rules of the
  client's expertise, :data:`DOMAIN_SAFETY_RULES` over its profile's knowledge domains (a
  physician knows the vaccination rule, an economist the membership rule, ...);
- **local evolution** (LE, G2L, L2G, full): when a guard task reaches the client, each denied
  example of its own labelled partition ``D_i`` that no held rule covers yields the rule it
  violated (:func:`uncovered_safety_rules`): the analogue of an uncovered ``D_i`` item creating a
  privacy rule;
- **server initial policy** ``mind2web_sc_safety`` (:func:`guard_global_rules`): the six rules,
  redistributed and adopted by ``Φ`` under G2L and full (``Rel`` fires the rule's category
  pattern on the client's experience: it adopts the rules of the tasks it handles);
- **uploads** (L2G, full): a rule created locally is uploaded as its catalogue candidate
  (:func:`guard_candidate`; nothing about the client is in it) and promoted by support.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pfedma_flwr.protocol.schema import GlobalRule, RuleCandidate
from pfedma_flwr.rules.guard_catalogue import (
    GUARD_ACTION,
    GUARD_CATEGORY,
    GUARD_SCOPE,
    SAFETY_RULES,
    SafetyRule,
    rule_of_text,
    safety_rule,
)
from pfedma_flwr.rules.model import PrivacyRule

#: Safety rules a client of each knowledge domain starts with (its personalized local policy).
#: Our choice, by expertise: health (vaccination for flights), commerce (membership to shop;
#: car purchases for finance), law (the age limits), media and culture (regional licensing).
DOMAIN_SAFETY_RULES: dict[str, tuple[str, ...]] = {
    "medicine": ("R2",),
    "biology": ("R2",),
    "finance": ("R1", "R3"),
    "economics": ("R1",),
    "law": ("R4", "R6"),
    "psychology": ("R6",),
    "general": ("R5",),
    "history": ("R5",),
    "physics": ("R3",),
    "computer science": ("R5",),
}
#: ``rules.global_policy`` name of the server's six safety rules.
SAFETY_POLICY = "mind2web_sc_safety"


def guard_rule(rule: SafetyRule, *, rule_id: str | None = None) -> PrivacyRule:
    """The local form of a catalogue rule (scope ``guard``, id ``guard-<Rk>`` by default)."""
    return PrivacyRule(rule_id=rule_id or f"guard-{rule.rule_id}", text=rule.violation,
                       category=GUARD_CATEGORY, scope=GUARD_SCOPE, action=GUARD_ACTION,
                       patterns=(rule.pattern,))


def guard_global_rules(rule_ids: Sequence[str] = ()) -> list[GlobalRule]:
    """Global rules of the catalogue (all six by default); ids are the repository's to assign."""
    chosen = [safety_rule(i) for i in rule_ids] if rule_ids else list(SAFETY_RULES)
    return [GlobalRule(rule_id="", text=r.violation, category=GUARD_CATEGORY, scope=GUARD_SCOPE,
                       action=GUARD_ACTION, patterns=(r.pattern,)) for r in chosen]


def initial_guard_rules(domains: Iterable[str]) -> list[PrivacyRule]:
    """A client's initial safety rules from its profile's knowledge domains, in id order."""
    ids = sorted({i for d in domains for i in DOMAIN_SAFETY_RULES.get(d, ())})
    return [guard_rule(safety_rule(i), rule_id=f"init-guard-{i}") for i in ids]


def held_safety_rules(rules: Sequence[PrivacyRule]) -> tuple[SafetyRule, ...]:
    """The catalogue rules among ``rules`` (guard scope), unique, in id order."""
    found = {r.text for r in rules if r.scope == GUARD_SCOPE}
    return tuple(s for s in SAFETY_RULES if s.violation in found)


def uncovered_safety_rules(violations: Iterable[str],
                           held: Sequence[PrivacyRule]) -> list[SafetyRule]:
    """Rules of ``violations`` (the violated rules of labelled denied examples) not yet held.

    ``violations`` are rule texts (``Task.violated_rules`` of ``D_i``'s Mind2Web-SC rows); texts
    outside the catalogue are ignored. In id order.
    """
    have = {r.rule_id for r in held_safety_rules(held)}
    want = {rule.rule_id for v in violations if (rule := rule_of_text(v)) is not None}
    return [safety_rule(i) for i in sorted(want - have)]


def guard_candidate(rule: PrivacyRule) -> RuleCandidate:
    """``P_gen`` of a safety rule: the catalogue rule itself (a public rule; no client data).

    Raises
    ------
    ValueError
        If ``rule`` is not a catalogue safety rule.
    """
    safe = rule_of_text(rule.text) if rule.scope == GUARD_SCOPE else None
    if safe is None:
        raise ValueError(f"rule {rule.rule_id!r} is not a catalogue safety rule")
    return RuleCandidate(text=safe.violation, category=GUARD_CATEGORY, scope=GUARD_SCOPE,
                         action=GUARD_ACTION, patterns=(safe.pattern,))


__all__ = [
    "DOMAIN_SAFETY_RULES",
    "SAFETY_POLICY",
    "guard_candidate",
    "guard_global_rules",
    "guard_rule",
    "held_safety_rules",
    "initial_guard_rules",
    "uncovered_safety_rules",
]
