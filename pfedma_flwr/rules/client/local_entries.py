"""One stored rule of ``Ω_i,local`` with its counters and flags, and its persisted form."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pfedma_flwr.rules.enforcement import Uncovered
from pfedma_flwr.rules.model import PrivacyRule, load_rule_lenient
from pfedma_flwr.rules.spans import literal_regex


@dataclass
class Entry:
    """A rule of the client's repository with its cumulative counts and flags."""

    rule: PrivacyRule
    active: bool = True
    n_trigger: int = 0
    n_valid: int = 0
    n_conflict: int = 0
    # counts at the last round_feedback() call; Δ = current − reported (global-origin rules)
    reported: tuple[int, int, int] = (0, 0, 0)
    # the global copy ("g:<id>") that won against this local rule in adapt(); only that copy
    # may hand the flag back, so a rule displaced by one copy is not revived by another
    displaced_by: str | None = None


def entry_to_dict(e: Entry) -> dict[str, Any]:
    """JSON form of an entry (holds literals: client-local persistence only)."""
    return {"rule": e.rule.to_dict(), "active": e.active,
            "counts": [e.n_trigger, e.n_valid, e.n_conflict], "reported": list(e.reported),
            **({"displaced_by": e.displaced_by} if e.displaced_by else {})}


def entry_from_dict(item: Any, k: int) -> Entry:
    """Inverse of :func:`entry_to_dict`; ``ValueError`` naming ``rules[k]`` on bad counts.

    ``KeyError`` / ``TypeError`` on a missing or mistyped field (the caller names the payload).
    """
    rule = load_rule_lenient(item["rule"])
    counts = tuple(int(x) for x in item["counts"])
    reported = tuple(int(x) for x in item["reported"])
    if len(counts) != 3 or len(reported) != 3 or min(*counts, *reported) < 0:
        raise ValueError(f"rules[{k}]: counts must be three non-negative integers")
    by = item.get("displaced_by")
    return Entry(rule=rule, active=bool(item["active"]), n_trigger=counts[0],
                 n_valid=counts[1], n_conflict=counts[2],
                 reported=(reported[0], reported[1], reported[2]),
                 displaced_by=str(by)[:200] if by else None)


def eviction_victim(entries: Mapping[str, Entry]) -> str | None:
    """The entry to drop at the cap (``None`` if only literal and active local rules remain).

    Order: an inactive global copy, an inactive detector-only local rule, the oldest global copy.
    """
    tiers = (
        lambda e: e.rule.origin == "global" and not e.active,
        lambda e: e.rule.origin == "local" and not e.active and not e.rule.literals,
        lambda e: e.rule.origin == "global",
    )
    for tier in tiers:
        for rid, e in entries.items():
            if tier(e):
                return rid
    return None


def covering_inactive(entries: Mapping[str, Entry], quarantined: Mapping[str, str],
                      uncovered: Sequence[Uncovered]) -> list[str]:
    """Inactive, unquarantined local rules whose literals or entity types cover an item."""
    out = []
    for rid, e in entries.items():
        if e.active or e.rule.origin != "local" or rid in quarantined:
            continue
        types = set(e.rule.entity_types)
        if any(set(u.entity_types) & types
               or any(literal_regex(lit).search(u.value) for lit in e.rule.literals)
               for u in uncovered):
            out.append(rid)
    return out
