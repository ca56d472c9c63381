"""The client's personalized rule repository ``Ω_i,local`` (DESIGN §3.6, seed App. F).

It holds counters, computes local utility, adapts global rules and reports Δ-count feedback;
the work on entries lives in :mod:`.local_entries` and :mod:`.adaptation`.

Everything here stays on the client except :meth:`LocalRuleRepository.round_feedback` rows (a
global rule id and three Δ counts) and the candidates made by
:func:`pfedma_flwr.rules.generalize.generalize`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.schema import GlobalRule, RuleCandidate, RuleFeedback, StructuredResponse
from pfedma_flwr.rules.client.adaptation import admissible, decide_flags
from pfedma_flwr.rules.client.local_entries import (
    REPO_VERSION,
    Entry,
    count_outcomes,
    covering_inactive,
    entry_to_dict,
    eviction_victim,
    feedback_rows,
    repo_from_dict,
)
from pfedma_flwr.rules.constants import PHI_DEFAULT, SIM_THRESHOLD
from pfedma_flwr.rules.enforcement import (
    UNCOVERED_ENTITIES,
    EnforcementResult,
    Uncovered,
    enforce_response,
    find_uncovered,
)
from pfedma_flwr.rules.generalize import generalize, is_shareable, rule_from_uncovered
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.modes import AdaptReport, RuleMode
from pfedma_flwr.rules.pii import PiiRecognizer
from pfedma_flwr.rules.safety import MatchBudget

logger = logging.getLogger(__name__)

#: Redistributed global rules considered per message (the server sends its best first).
MAX_ADOPTED_GLOBAL = 128
#: Seconds of pattern matching for all responses of one message (all rules together).
MESSAGE_MATCH_BUDGET_S = 1.0
#: Stored entries (local and global-origin). Past it, inactive global copies go first, then
#: inactive detector-only local rules, then the oldest global copies; literal-bearing local
#: rules are never evicted (they are bounded by the client's own sensitive items).
MAX_LOCAL_RULES = 256


class LocalRuleRepository:
    """``Ω_i,local`` with per-rule counters and active flags (DESIGN §3.6, seed App. F).

    Parameters
    ----------
    mode : RuleMode
        Ablation switch (default ``FULL``).
    rules : sequence of PrivacyRule
        Initial (static) local rules, all active; ids must be unique.
    """

    def __init__(
        self, *, mode: RuleMode = RuleMode.FULL, rules: Sequence[PrivacyRule] = ()
    ) -> None:
        if not isinstance(mode, RuleMode):
            raise ValueError(f"mode must be a RuleMode, got {mode!r}")
        self.mode = mode
        self._entries: dict[str, Entry] = {}
        self._quarantined: dict[str, str] = {}  # rule id -> reason code
        self._budget: MatchBudget | None = None
        self._next_id = 0
        for r in rules:
            if not isinstance(r, PrivacyRule):
                raise ValueError(f"rules must be PrivacyRule objects, got {type(r).__name__}")
            self._insert(r, active=True)

    # ------------------------------------------------------------------ contents

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, rule_id: str) -> PrivacyRule:
        """The rule stored under ``rule_id`` (``KeyError`` if absent)."""
        return self._entries[rule_id].rule

    def is_active(self, rule_id: str) -> bool:
        """Whether ``rule_id`` is active."""
        return self._entries[rule_id].active

    def counts(self, rule_id: str) -> tuple[int, int, int]:
        """Cumulative ``(n_trigger, n_valid, n_conflict)`` of ``rule_id``."""
        e = self._entries[rule_id]
        return e.n_trigger, e.n_valid, e.n_conflict

    def all_rules(self) -> list[PrivacyRule]:
        """Every stored rule, active or not, in insertion order."""
        return [e.rule for e in self._entries.values()]

    def active_rules(self, scope: str | None = None) -> list[PrivacyRule]:
        """Active rules (of ``scope`` if given); none at all in mode ``NR``."""
        if not self.mode.enforce:
            return []
        return [
            e.rule
            for e in self._entries.values()
            if e.active and (scope is None or e.rule.scope == scope)
        ]

    @property
    def quarantined(self) -> dict[str, str]:
        """Rule id -> reason code of every rule taken out of service on this client."""
        return dict(self._quarantined)

    def quarantine(self, rule_id: str, reason: str) -> None:
        """Deactivate a rule that failed at run time; adaptation never re-activates it."""
        self._quarantined[rule_id] = str(reason)[:40]
        e = self._entries.get(rule_id)
        if e is not None and e.active:
            logger.warning("rule %r quarantined (%s)", rule_id, reason)
            e.active = False

    def begin_message(self, budget_s: float = MESSAGE_MATCH_BUDGET_S) -> MatchBudget:
        """Start a pattern-matching budget, shared by every :meth:`process` call until the next.

        :meth:`adapt` starts its own; the agent starts one after generation, so the time a
        model takes is never charged to the rules (issue 30).
        """
        self._budget = MatchBudget(budget_s)
        return self._budget

    def _insert(self, rule: PrivacyRule, *, active: bool) -> bool:
        """Store a new entry; ``False`` (nothing stored) if the cap leaves no room for it."""
        if rule.rule_id in self._entries:
            raise ValueError(f"duplicate rule id {rule.rule_id!r}")
        if len(self._entries) >= MAX_LOCAL_RULES and not self._evict_one():
            if rule.origin == "global" or not rule.literals:
                logger.warning("local rule cap %d reached: %s rule not stored",
                               MAX_LOCAL_RULES, rule.origin)
                return False
            # protection only grows: a literal rule of this client is kept above the cap
        self._entries[rule.rule_id] = Entry(rule=rule, active=active)
        return True

    def _evict_one(self) -> bool:
        """Drop one entry by the eviction order of :data:`MAX_LOCAL_RULES`; ``False`` if none."""
        rid = eviction_victim(self._entries)
        if rid is not None:
            self._drop(rid)
        return rid is not None

    def _drop(self, rid: str) -> None:
        """Remove an entry; local rules it displaced get their flag back."""
        self._entries.pop(rid, None)
        for e in self._entries.values():
            if e.displaced_by == rid:
                e.active, e.displaced_by = True, None

    def reactivate_matching(self, uncovered: Sequence[Uncovered]) -> list[str]:
        """Re-activate inactive local rules whose detectors cover an uncovered item.

        Issue 12: a global rule had displaced a literal rule; the item it protects reached a
        response uncovered and leaked. Quarantined rules stay out of service.
        """
        out = covering_inactive(self._entries, self._quarantined, uncovered)
        for rid in out:
            self._entries[rid].active, self._entries[rid].displaced_by = True, None
        return out

    def next_local_id(self) -> str:
        """A fresh local rule id (``local-<n>``; never derived from rule content)."""
        while True:
            self._next_id += 1
            rid = f"local-{self._next_id}"
            if rid not in self._entries:
                return rid

    def add_local_rule(self, rule: PrivacyRule) -> str:
        """Store an active local rule; an existing local rule with the same spec is reused.

        Returns the id under which the rule is stored.
        """
        if rule.origin != "local":
            raise ValueError("add_local_rule takes local rules; global rules enter via adapt()")
        key = rule.spec_key()
        for rid, e in self._entries.items():
            if e.rule.origin == "local" and e.rule.spec_key() == key:
                if not e.active and rid not in self._quarantined:
                    # the same constraint found uncovered again: its rule protects again
                    e.active, e.displaced_by = True, None
                return rid
        if not self._insert(rule, active=True):
            return ""
        return rule.rule_id

    def handle_uncovered(
        self, uncovered: Sequence[Uncovered], *, action: str = "redact"
    ) -> list[RuleCandidate]:
        """Create local rules for uncovered constraints and return the candidates to upload.

        Follows the mode: no rules unless ``create_local``; no candidates unless ``upload``.
        Candidates are de-duplicated by (text, action); detector-less ones are not uploaded
        (:func:`~pfedma_flwr.rules.generalize.is_shareable`).
        """
        if not self.mode.create_local:
            return []
        out: dict[tuple[str, str], RuleCandidate] = {}
        for u in uncovered:
            rule = rule_from_uncovered(u, rule_id=self.next_local_id(), action=action)
            rid = self.add_local_rule(rule)
            if rid and self.mode.upload:
                cand = generalize(self._entries[rid].rule)
                if is_shareable(cand):
                    out.setdefault((cand.text, cand.action), cand)
        return list(out.values())

    def process(
        self,
        response: StructuredResponse,
        sensitive_items: Sequence[str],
        recognizer: PiiRecognizer | None,
        *,
        action: str = "redact",
        answer_extractable: Callable[[StructuredResponse], bool] | None = None,
        requirement_ok: Callable[[PrivacyRule, StructuredResponse | None], bool] | None = None,
        uncovered_types: Sequence[str] = UNCOVERED_ENTITIES,
    ) -> tuple[EnforcementResult, list[RuleCandidate]]:
        """The client's rule step for one response: uncovered → new rules → ``P_resp`` → counts.

        Uncovered constraints are detected first so that the rule they create already protects
        the response that revealed them (otherwise that response would leave unprotected).
        ``uncovered_types`` are the recognizer types whose spans count as uncovered constraints.
        Returns the enforcement result (to upload ``result.response``) and the candidates.
        """
        candidates: list[RuleCandidate] = []
        if self._budget is None:
            self.begin_message()
        if self.mode.enforce:
            found = find_uncovered(
                response, sensitive_items, self.active_rules("response"), recognizer,
                pii_entity_types=uncovered_types, budget=self._budget,
            )
            self.reactivate_matching(found)
            candidates = self.handle_uncovered(found, action=action)
        result = enforce_response(
            response,
            self.active_rules("response"),
            recognizer,
            answer_extractable=answer_extractable,
            requirement_ok=requirement_ok,
            budget=self._budget,
        )
        for rid in result.errors:
            self.quarantine(rid, "timeout")
        self.record_enforcement(result)
        return result, candidates

    # ------------------------------------------------------------------ counters

    def record_enforcement(self, result: EnforcementResult) -> None:
        """Add one enforcement's per-rule outcomes to the cumulative counters."""
        for rid in count_outcomes(self._entries, result.outcomes):
            logger.warning("enforcement outcome for unknown rule %r ignored", rid)

    def note_guard_decision(self, named: Sequence[str], *, decided: bool) -> None:
        """Count a guard decision on the held safety rules it named (texts of ``named``).

        A named rule triggered; the use is valid when the reply stated a decision (a safety rule
        edits nothing, so "valid" cannot mean "enforced": it means the rule produced one).
        """
        if not self.mode.enforce:
            return
        for e in self._entries.values():
            if e.active and e.rule.scope == "guard" and e.rule.text in named:
                e.n_trigger += 1
                e.n_valid += int(decided)

    def round_feedback(self) -> list[RuleFeedback]:
        """``F_i^t``: Δ counts of global-origin rules since the last call (seed App. F).

        Only rows with ``Δn_trigger > 0`` are sent: the server ignores the others (DESIGN §3.3),
        and omitting them avoids telling it which global rules this client holds but did not use.
        Rows hold only the global id and the three Δ counts.
        """
        return feedback_rows(self._entries.values(), send=self.mode.adopt)

    # ------------------------------------------------------------------ adaptation

    def adapt(
        self,
        global_rules: Sequence[GlobalRule],
        experience: Sequence[str],
        embedder: Embedder,
        *,
        sim_threshold: float = SIM_THRESHOLD,
        phi_default: float = PHI_DEFAULT,
        recognizer: PiiRecognizer | None = None,
    ) -> AdaptReport:
        """Selective global-to-local adaptation (DESIGN §3.6, seed App. F).

        Starts the message's matching budget (:meth:`begin_message`). Query-scope rules are
        left out (the server's ``P_in`` applies them). At most
        :data:`MAX_ADOPTED_GLOBAL` active global rules are considered, in the given order; one
        whose detectors fail :func:`~pfedma_flwr.rules.model.check_detectors` is quarantined.
        Global copies not in ``global_rules`` are stale and dropped (what they displaced is
        re-activated). Each remaining copy is then turned on or off by ``Φ`` against its local
        counterpart or ``phi_default`` (:func:`~pfedma_flwr.rules.client.adaptation.decide_flags`:
        a literal-bearing local rule is never switched off). ``Rel`` in ``Φ`` fires the rule's
        detectors on the last :data:`~pfedma_flwr.rules.client.relevance.MAX_ITEMS` experience items
        (``recognizer`` fires entity types; without one the regex recognizer stands in).
        Re-adapting a global id updates its stored copy (counters kept), never duplicates it.
        """
        if not -1.0 <= sim_threshold <= 1.0:
            raise ValueError(f"sim_threshold must be in [-1, 1], got {sim_threshold}")
        self.begin_message()
        if not self.mode.adopt:
            return AdaptReport(disabled=True)
        # Query rules act in the server's P_in only: a client never enforces them, so it
        # neither stores nor evaluates them (issue 30: they took adaptation budget for nothing)
        global_rules = [g for g in global_rules if g.scope != "query"]
        todo, rejected = admissible(global_rules, self._quarantined, limit=MAX_ADOPTED_GLOBAL)
        for g, err in rejected:  # a rule this node cannot run safely: quarantined, not adopted
            logger.warning("global rule %r rejected: %s", g.rule_id[:40], err)
            self.quarantine(f"g:{g.rule_id}", "invalid")
        skipped = len(global_rules) - len(todo)
        # Global copies whose rule left the snapshot are stale (a repository of another run,
        # a rule the server dropped): removed, and what they displaced protects again.
        sent = {f"g:{g.rule_id}" for g in global_rules}
        for rid in [r for r, e in self._entries.items()
                    if e.rule.origin == "global" and r not in sent]:
            self._drop(rid)
        if not todo:
            return AdaptReport(skipped=skipped)
        kept, new_ids = self._store(todo)
        skipped += len(todo) - len(kept)
        decisions = decide_flags(
            self._entries, self._quarantined, kept, new_ids, experience, embedder,
            sim_threshold=sim_threshold, phi_default=phi_default, recognizer=recognizer,
            budget=self._budget)
        return AdaptReport(decisions=tuple(decisions), skipped=skipped)

    def _store(
        self, todo: Sequence[tuple[GlobalRule, PrivacyRule]]
    ) -> tuple[list[GlobalRule], set[str]]:
        """Insert or update each rule's local copy (inactive until decided): kept, new ids.

        Everything is stored before deciding, so every rule (old and new) is embedded in one
        encode call; a rule the full repository has no room for is not kept.
        """
        new_ids: set[str] = set()
        kept: list[GlobalRule] = []
        for g, local in todo:
            if local.rule_id in self._entries:
                self._entries[local.rule_id].rule = local
            elif self._insert(local, active=False):
                new_ids.add(local.rule_id)
            else:
                continue
            kept.append(g)
        return kept, new_ids

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state for client-local persistence (holds literals: never send it)."""
        return {"version": REPO_VERSION, "mode": self.mode.value, "next_id": self._next_id,
                "quarantined": dict(self._quarantined),
                "rules": [entry_to_dict(e) for e in self._entries.values()]}

    @classmethod
    def from_dict(cls, d: Any) -> LocalRuleRepository:
        """Inverse of :meth:`to_dict`; ``ValueError`` on a malformed or other-version payload.

        A stored pattern that fails today's check is dropped from its rule
        (:func:`~pfedma_flwr.rules.model.load_rule_lenient`): its literals keep protecting.
        """
        mode, next_id, quarantined, entries = repo_from_dict(d)
        repo = cls(mode=mode)
        repo._next_id, repo._quarantined, repo._entries = next_id, quarantined, entries
        return repo
