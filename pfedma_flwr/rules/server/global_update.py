"""Parts of one ``RuleUpdate`` besides promotion: round-log reports, equivalence, ``P_in`` twins.

Used by :class:`~pfedma_flwr.rules.server.global_repo.GlobalRuleRepository` (which re-exports the
reports). Pure functions over :class:`~pfedma_flwr.protocol.schema.GlobalRule` lists.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pfedma_flwr.protocol.schema import GlobalRule
from pfedma_flwr.rules.model import check_detectors
from pfedma_flwr.rules.policy import query_twins
from pfedma_flwr.rules.server.promotion import SimilarityStats

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


__all__ = ["TWIN_MIN_EVALS", "FeedbackReport", "UpdateReport", "confirmed", "load_rules",
           "new_twins", "spec_key"]
