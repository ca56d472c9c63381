"""One stored rule of ``Ω_i,local`` with its counters and flags, and its persisted form.

Also what :class:`.local_repo.LocalRuleRepository` does to its entries' counters
(:func:`count_outcomes`, :func:`feedback_rows`) and the persisted form of the whole repository
(:func:`repo_from_dict`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pfedma_flwr.protocol.schema import RuleFeedback
from pfedma_flwr.rules.enforcement import RuleOutcome, Uncovered
from pfedma_flwr.rules.model import PrivacyRule, load_rule_lenient
from pfedma_flwr.rules.modes import RuleMode
from pfedma_flwr.rules.spans import literal_regex

#: Version of the persisted repository (:meth:`.local_repo.LocalRuleRepository.to_dict`).
REPO_VERSION = 1


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


def count_outcomes(entries: Mapping[str, Entry], outcomes: Iterable[RuleOutcome]) -> list[str]:
    """Add per-rule enforcement outcomes to the entries' counters; returns the unknown ids."""
    unknown: list[str] = []
    for o in outcomes:
        e = entries.get(o.rule_id)
        if e is None:
            unknown.append(o.rule_id)
            continue
        e.n_trigger += int(o.triggered)
        e.n_valid += int(o.valid)
        e.n_conflict += int(o.conflict)
    return unknown


def feedback_rows(entries: Iterable[Entry], *, send: bool) -> list[RuleFeedback]:
    """Δ counts of the global-origin entries since their last report, which moves to now.

    A row (global id and the three Δ counts) only for an entry with ``Δn_trigger > 0``, and
    none unless ``send``; every entry's ``reported`` counts move on either way.
    """
    rows: list[RuleFeedback] = []
    for e in entries:
        if e.rule.origin != "global" or e.rule.global_id is None:
            continue
        now = (e.n_trigger, e.n_valid, e.n_conflict)
        dt, dv, dc = (a - b for a, b in zip(now, e.reported, strict=True))
        e.reported = now
        if dt > 0 and send:
            rows.append(RuleFeedback(e.rule.global_id, dt, dv, dc))
    return rows


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


def repo_from_dict(d: Any) -> tuple[RuleMode, int, dict[str, str], dict[str, Entry]]:
    """A persisted repository's mode, id counter, quarantine (id -> reason) and entries by id.

    ``ValueError`` on a malformed or other-version payload.
    """
    if not isinstance(d, dict) or d.get("version") != REPO_VERSION:
        got = d.get("version") if isinstance(d, dict) else type(d).__name__
        raise ValueError(
            f"local rule repository payload: expected version {REPO_VERSION}, got {got!r}"
        )
    try:
        mode = RuleMode(d["mode"])
        next_id = int(d["next_id"])
        quarantined = {str(a): str(b)[:40] for a, b in dict(d.get("quarantined", {})).items()}
        entries: dict[str, Entry] = {}
        for k, item in enumerate(d["rules"]):
            e = entry_from_dict(item, k)
            if e.rule.rule_id in entries:
                raise ValueError(f"duplicate rule id {e.rule.rule_id!r}")
            entries[e.rule.rule_id] = e
    except (KeyError, TypeError) as e:
        raise ValueError(f"local rule repository payload is malformed: {e!r}") from None
    return mode, next_id, quarantined, entries


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
