"""Parts of one ``RuleUpdate`` besides promotion: round-log reports, equivalence, ``P_in`` twins.

Also the new rules and their ids (promoted, committed after Resolve, seeded) and the rules of a
checkpoint. Used by :class:`~pfedma_flwr.rules.server.global_repo.GlobalRuleRepository` (which
re-exports the reports and stores what these return). Pure functions over
:class:`~pfedma_flwr.protocol.schema.GlobalRule` lists.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pfedma_flwr.protocol.schema import GlobalRule, RuleCandidate
from pfedma_flwr.protocol.validation import short_id
from pfedma_flwr.rules.guard_catalogue import GUARD_SCOPE, catalogue_problem
from pfedma_flwr.rules.model import check_detectors
from pfedma_flwr.rules.normalize import text_key
from pfedma_flwr.rules.policy import query_twins
from pfedma_flwr.rules.server.feedback import FeedbackTally
from pfedma_flwr.rules.server.promotion import SimilarityStats
from pfedma_flwr.rules.server.resolve import ResolveResult

logger = logging.getLogger(__name__)

#: Evaluations (client feedback scores, DESIGN §3.4) after which a response rule with ``H > 0``
#: counts as confirmed across clients and gets its ``P_in`` twin, like a promoted rule.
TWIN_MIN_EVALS = 2


def spec_key(r: GlobalRule) -> tuple[Any, ...]:
    """What makes two rules of one constraint equivalent (DESIGN §3.5): scope, action, detectors."""
    return (
        r.scope,
        r.action,
        tuple(sorted(set(r.entity_types))),
        tuple(sorted(set(r.patterns))),
    )


@dataclass(frozen=True)
class FeedbackReport:
    """What :meth:`GlobalRuleRepository.apply_feedback` did (for the round log)."""

    n_clients: int
    n_rows: int
    n_scores: int
    updated: tuple[str, ...]
    unknown: tuple[str, ...]
    ignored_zero: int
    #: rows (or rule scores) not counted, per reason: zero_trigger, query_scope, not_held,
    #: implausible (rules/server/feedback.py)
    ignored: dict[str, int] = dataclasses.field(default_factory=dict)
    #: unknown ids in all (``unknown`` lists at most 16, as bounded excerpts)
    n_unknown: int = 0

    @classmethod
    def of(cls, tally: FeedbackTally, n_clients: int) -> FeedbackReport:
        """The report of one round's scored feedback ``tally`` from ``n_clients`` clients."""
        return cls(
            n_clients=n_clients,
            n_rows=tally.n_rows,
            n_scores=sum(len(s) for s in tally.scores.values()),
            updated=tuple(sorted(tally.scores)),
            # the round log lists a bounded excerpt of at most 16 (a client may send 512)
            unknown=tuple(short_id(u) for u in sorted(tally.unknown)[:16]),
            n_unknown=len(tally.unknown),
            ignored_zero=tally.ignored.get("zero_trigger", 0),
            ignored=dict(sorted(tally.ignored.items())),
        )


@dataclass(frozen=True)
class UpdateReport:
    """What :meth:`GlobalRuleRepository.update` did (for the round log)."""

    server_round: int
    pool_size: int
    zeta_max: float
    promoted: int
    added: tuple[str, ...]
    merged: int
    n_rules: int
    n_active: int
    n_clusters: int
    activated: tuple[str, ...]
    deactivated: tuple[str, ...]
    pool_similarity: SimilarityStats
    #: promoted by ζ but not admitted, per reason: invalid / per_client / per_round / full
    refused: dict[str, int] = dataclasses.field(default_factory=dict)
    #: query twins of promoted or feedback-confirmed rules (server-derived, not admitted from a
    #: contributor: outside the per-contributor caps, at most one per query-safe entity-type set
    #: not yet covered)
    twins: tuple[str, ...] = ()


def promoted_rules(candidates: Sequence[RuleCandidate], server_round: int) -> list[GlobalRule]:
    """The promoted ``candidates`` as new rules of ``server_round`` (``H = 0, N = 0``).

    They have no id yet (``rule_id=""``): :func:`commit` names only those that survive Resolve.
    """
    return [
        GlobalRule(
            rule_id="",  # assigned by commit(), only if the rule survives the merge
            text=c.text,
            category=c.category,
            scope=c.scope,
            action=c.action,
            entity_types=tuple(sorted(set(c.entity_types))),
            patterns=tuple(sorted(set(c.patterns))),
            created_round=server_round,
        )
        for c in candidates
    ]


@dataclass(frozen=True)
class Commit:
    """Resolve's outcome as repository contents (:func:`commit`)."""

    #: one rule per cluster representative, in age order
    rules: list[GlobalRule]
    #: ids given to the surviving promoted rules, and to the surviving twins
    added: list[str]
    twins: list[str]
    #: ``(old id, surviving id)`` of each existing rule merged into an older equivalent
    merged: list[tuple[str, str]]
    #: the id counter after the ids given here
    next_id: int


def commit(
    rows: Sequence[GlobalRule], res: ResolveResult, n_old: int, n_promoted_rows: int, *,
    id_prefix: str, next_id: int,
) -> Commit:
    """Resolve's outcome as the repository: one rule per cluster representative.

    Rows from ``n_old`` on are new (promoted, then twins from ``n_promoted_rows``) and get
    ids (``<id_prefix><n>``, counting on from ``next_id``) only if they survive; an old rule
    merged into an older equivalent is listed in ``merged`` (the repository makes it an alias).
    """
    kept: list[GlobalRule] = []
    added: list[str] = []
    twin_ids: list[str] = []
    for i in res.representatives:
        rid = rows[i].rule_id
        if i >= n_old:
            next_id += 1
            rid = f"{id_prefix}{next_id}"
            (twin_ids if i >= n_promoted_rows else added).append(rid)
        kept.append(
            dataclasses.replace(
                rows[i],
                rule_id=rid,
                h_score=float(res.h[i]),
                n_evals=int(res.n[i]),
                active=bool(res.active[i]),
            )
        )
    # existing rules merged into an older equivalent
    merged = [(rows[i].rule_id, rows[int(res.rep[i])].rule_id)
              for i in range(n_old) if res.rep[i] != i]
    return Commit(rules=kept, added=added, twins=twin_ids, merged=merged, next_id=next_id)


def confirmed(rules: Sequence[GlobalRule], *, min_evals: int = TWIN_MIN_EVALS) -> list[GlobalRule]:
    """Active response rules that client feedback confirmed: ``N ≥ min_evals`` and ``H > 0``.

    Under ``full`` an adopted global rule covers what clients find, so nothing is uncovered and
    nothing uploaded: the cross-client evidence that promotion gives in ``L2G`` arrives as
    Δ-count feedback instead (issue 12).
    """
    return [r for r in rules if r.active and r.scope == "response"
            and r.n_evals >= min_evals and r.h_score > 0.0]


def new_twins(sources: Sequence[GlobalRule], rules: Sequence[GlobalRule]) -> list[GlobalRule]:
    """The ``P_in`` twins of ``sources`` that no active query rule of ``rules`` covers yet.

    One twin per entity-type set (colluders' junk for one type adds no query rule when the
    server's policy holds that type, and a promoted rule and a confirmed one of the same types
    add one twin).
    """
    covered = [set(r.entity_types) for r in rules if r.scope == "query" and r.active]
    out: list[GlobalRule] = []
    for t in query_twins(sources):
        types = set(t.entity_types)
        if not any(types <= c for c in covered):
            out.append(t)
            covered.append(types)
    return out


def seed_rules(
    rules: Sequence[GlobalRule], stored: Sequence[GlobalRule], *, room: int
) -> Iterator[GlobalRule]:
    """The initial rules to add, in order: at most ``room``, none equivalent to an earlier one.

    Equivalent means same text and spec as a ``stored`` rule or one yielded before. Every
    rule is checked, added or not: ``ValueError`` on detectors that fail
    :func:`~pfedma_flwr.rules.model.check_detectors` or a guard rule the catalogue refuses.
    A generator, so the repository names each rule before the next is checked (as the loop
    it came from did).
    """
    have = {(text_key(r.text), spec_key(r)) for r in stored}
    n = 0
    for g in rules:
        # a catalogue safety rule (guard scope) was checked against the catalogue where
        # it was built; its relevance keywords never redact, so they skip the text probe
        check_detectors(g.entity_types, g.patterns, probe=g.scope != GUARD_SCOPE)
        if g.scope == GUARD_SCOPE and (why := catalogue_problem(
                g.text, g.category, g.action, g.entity_types, g.patterns)):
            raise ValueError(f"initial rule {g.text[:60]!r}: {why}")
        if (text_key(g.text), spec_key(g)) in have or n >= room:
            continue
        n += 1
        yield g
        have.add((text_key(g.text), spec_key(g)))


def load_rules(entries: Sequence[Any], quarantined: dict[str, str]) -> list[GlobalRule]:
    """Checkpoint rule entries -> rules; a malformed or unsafe entry goes to ``quarantined``.

    A rule whose detectors fail :func:`~pfedma_flwr.rules.model.check_detectors` (an older
    run, an edited file) is not loaded, so resuming survives it; a duplicated id keeps its
    first copy.
    """
    rules: list[GlobalRule] = []
    for k, entry in enumerate(entries):
        rid = str(entry.get("rule_id", f"rules[{k}]")) if isinstance(entry, dict) else \
            f"rules[{k}]"
        try:
            rule = GlobalRule.from_dict(entry, f"rules[{k}]")
            check_detectors(rule.entity_types, rule.patterns)
        except ValueError as e:
            logger.warning("checkpoint rule %s quarantined: %s", rid[:40], e)
            quarantined[rid[:80]] = "invalid"
            continue
        if any(r.rule_id == rule.rule_id for r in rules):
            logger.warning("checkpoint rule %s duplicated: later copy dropped", rid[:40])
            continue
        rules.append(rule)
    return rules


__all__ = ["TWIN_MIN_EVALS", "Commit", "FeedbackReport", "UpdateReport", "commit", "confirmed",
           "load_rules", "new_twins", "promoted_rules", "seed_rules", "spec_key"]
