"""The client's personalized rule repository ``Ω_i,local`` (DESIGN §3.6, seed App. F).

It holds counters, computes local utility, adapts global rules and reports Δ-count feedback.

Everything here stays on the client except :meth:`LocalRuleRepository.round_feedback` rows (a
global rule id and three Δ counts) and the candidates made by
:func:`pfedma_flwr.rules.generalize.generalize`.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.rules.enforcement import (
    EnforcementResult,
    Uncovered,
    enforce_response,
    find_uncovered,
)
from pfedma_flwr.rules.generalize import generalize, is_shareable, rule_from_uncovered
from pfedma_flwr.rules.model import PrivacyRule, from_global
from pfedma_flwr.rules.pii import PiiRecognizer
from pfedma_flwr.schema import GlobalRule, RuleCandidate, RuleFeedback, StructuredResponse

logger = logging.getLogger(__name__)

REPO_VERSION = 1


def local_utility(rel: float, n_trigger: int, n_valid: int, n_conflict: int) -> float:
    """``Φ_i(ω) = Rel(ω, X_i) + (n_valid − n_conflict) / max(1, n_trigger)`` (DESIGN §3.6)."""
    return float(rel) + (n_valid - n_conflict) / max(1, n_trigger)


def relevance(rule_emb: np.ndarray, experience_embs: np.ndarray) -> float:
    """``Rel(ω, X_i) = max(0, max_x cos(e(ω), e(x)))``, 0 for an empty buffer (DESIGN §3.6)."""
    exp = np.asarray(experience_embs, dtype=np.float32)
    if exp.size == 0:
        return 0.0
    return max(0.0, float(np.max(exp.reshape(-1, exp.shape[-1]) @ np.asarray(rule_emb).ravel())))


class RuleMode(enum.Enum):
    """Rule-evolution ablations of the seed (§4.3): which directions of the loop run.

    ``NR`` no rules; ``SR`` static rules (no new, no adoption); ``LE`` local evolution only;
    ``G2L`` global-to-local adoption (+ local evolution), no uploads; ``L2G`` uploads
    (+ local evolution), no adoption; ``FULL`` everything.
    """

    NR = "nr"
    SR = "sr"
    LE = "le"
    G2L = "g2l"
    L2G = "l2g"
    FULL = "full"

    @property
    def enforce(self) -> bool:
        """Whether rules are applied at all."""
        return self is not RuleMode.NR

    @property
    def create_local(self) -> bool:
        """Whether uncovered constraints create local rules."""
        return self in (RuleMode.LE, RuleMode.G2L, RuleMode.L2G, RuleMode.FULL)

    @property
    def upload(self) -> bool:
        """Whether generalized candidates are uploaded (local-to-global)."""
        return self in (RuleMode.L2G, RuleMode.FULL)

    @property
    def adopt(self) -> bool:
        """Whether redistributed global rules are adapted (global-to-local) and fed back on."""
        return self in (RuleMode.G2L, RuleMode.FULL)


@dataclass
class _Entry:
    rule: PrivacyRule
    active: bool = True
    n_trigger: int = 0
    n_valid: int = 0
    n_conflict: int = 0
    # counts at the last round_feedback() call; Δ = current − reported (global-origin rules)
    reported: tuple[int, int, int] = (0, 0, 0)


@dataclass(frozen=True)
class AdaptDecision:
    """How one redistributed global rule was handled (client-local log)."""

    global_id: str
    counterpart: str | None
    phi_global: float
    phi_counterpart: float | None
    active: bool
    new: bool


@dataclass(frozen=True)
class AdaptReport:
    """Result of :meth:`LocalRuleRepository.adapt`; ``skipped`` counts inactive global rules."""

    decisions: tuple[AdaptDecision, ...] = ()
    skipped: int = 0
    disabled: bool = False

    @property
    def adopted(self) -> list[str]:
        """Global ids active locally after this call."""
        return [d.global_id for d in self.decisions if d.active]


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
        self._entries: dict[str, _Entry] = {}
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

    def _insert(self, rule: PrivacyRule, *, active: bool) -> None:
        if rule.rule_id in self._entries:
            raise ValueError(f"duplicate rule id {rule.rule_id!r}")
        self._entries[rule.rule_id] = _Entry(rule=rule, active=active)

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
                return rid
        self._insert(rule, active=True)
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
            if self.mode.upload:
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
    ) -> tuple[EnforcementResult, list[RuleCandidate]]:
        """The client's rule step for one response: uncovered → new rules → ``P_resp`` → counts.

        Uncovered constraints are detected first so that the rule they create already protects
        the response that revealed them (otherwise that response would leave unprotected).
        Returns the enforcement result (to upload ``result.response``) and the candidates.
        """
        candidates: list[RuleCandidate] = []
        if self.mode.enforce:
            found = find_uncovered(
                response, sensitive_items, self.active_rules("response"), recognizer
            )
            candidates = self.handle_uncovered(found, action=action)
        result = enforce_response(
            response,
            self.active_rules("response"),
            recognizer,
            answer_extractable=answer_extractable,
            requirement_ok=requirement_ok,
        )
        self.record_enforcement(result)
        return result, candidates

    # ------------------------------------------------------------------ counters

    def record_enforcement(self, result: EnforcementResult) -> None:
        """Add one enforcement's per-rule outcomes to the cumulative counters."""
        for o in result.outcomes:
            e = self._entries.get(o.rule_id)
            if e is None:
                logger.warning("enforcement outcome for unknown rule %r ignored", o.rule_id)
                continue
            e.n_trigger += int(o.triggered)
            e.n_valid += int(o.valid)
            e.n_conflict += int(o.conflict)

    def round_feedback(self) -> list[RuleFeedback]:
        """``F_i^t``: Δ counts of global-origin rules since the last call (seed App. F).

        Only rows with ``Δn_trigger > 0`` are sent: the server ignores the others (DESIGN §3.3),
        and omitting them avoids telling it which global rules this client holds but did not use.
        Rows hold only the global id and the three Δ counts.
        """
        rows: list[RuleFeedback] = []
        for e in self._entries.values():
            if e.rule.origin != "global" or e.rule.global_id is None:
                continue
            now = (e.n_trigger, e.n_valid, e.n_conflict)
            dt, dv, dc = (a - b for a, b in zip(now, e.reported, strict=True))
            e.reported = now
            if dt > 0 and self.mode.adopt:
                rows.append(RuleFeedback(e.rule.global_id, dt, dv, dc))
        return rows

    # ------------------------------------------------------------------ adaptation

    def adapt(
        self,
        global_rules: Sequence[GlobalRule],
        experience: Sequence[str],
        embedder: Embedder,
        *,
        sim_threshold: float = 0.9,
        phi_default: float = 0.3,
    ) -> AdaptReport:
        """Selective global-to-local adaptation (DESIGN §3.6, seed App. F).

        For each active global rule ``ω_g`` (in the given order): its counterpart is the most
        similar other stored rule of the same scope with cos ≥ ``sim_threshold``. With one,
        ``ω_g`` becomes active iff ``Φ(ω_g) > Φ(ω_l)`` and the counterpart takes the opposite
        flag (ties keep the local rule). Without one, ``ω_g`` is active iff
        ``Φ(ω_g) > phi_default``. The non-selected rule stays stored, inactive. Re-adapting a
        global id updates its stored copy (counters kept), never duplicates it.
        """
        if not -1.0 <= sim_threshold <= 1.0:
            raise ValueError(f"sim_threshold must be in [-1, 1], got {sim_threshold}")
        if not self.mode.adopt:
            return AdaptReport(disabled=True)
        todo = [g for g in global_rules if g.active]
        skipped = len(global_rules) - len(todo)
        if not todo:
            return AdaptReport(skipped=skipped)
        # Insert/update first so every rule (old and new) is embedded in one encode call.
        new_ids: set[str] = set()
        for g in todo:
            local = from_global(g)
            if local.rule_id in self._entries:
                self._entries[local.rule_id].rule = local
            else:
                self._insert(local, active=False)
                new_ids.add(local.rule_id)
        ids = list(self._entries)
        emb = embedder.encode([self._entries[i].rule.text for i in ids])
        exp = embedder.encode(list(experience)) if experience else np.zeros((0, emb.shape[1]))
        rel = np.maximum(0.0, (emb @ exp.T).max(axis=1)) if len(exp) else np.zeros(len(ids))
        sims = emb @ emb.T
        row = {rid: k for k, rid in enumerate(ids)}
        scopes = np.array([self._entries[i].rule.scope for i in ids])

        def phi(rid: str) -> float:
            e = self._entries[rid]
            return local_utility(float(rel[row[rid]]), e.n_trigger, e.n_valid, e.n_conflict)

        decisions: list[AdaptDecision] = []
        for g in todo:
            gid = f"g:{g.rule_id}"
            k = row[gid]
            # 1e-6 absorbs float32 rounding of a cosine that is exactly the threshold.
            cand = (scopes == g.scope) & (sims[k] >= sim_threshold - 1e-6)
            cand[k] = False
            phi_g = phi(gid)
            if cand.any():
                j = int(np.argmax(np.where(cand, sims[k], -np.inf)))
                lid = ids[j]
                phi_l = phi(lid)
                win = phi_g > phi_l
                self._entries[gid].active = win
                self._entries[lid].active = not win
                decisions.append(AdaptDecision(g.rule_id, lid, phi_g, phi_l, win, gid in new_ids))
            else:
                win = phi_g > phi_default
                self._entries[gid].active = win
                decisions.append(AdaptDecision(g.rule_id, None, phi_g, None, win, gid in new_ids))
        return AdaptReport(decisions=tuple(decisions), skipped=skipped)

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state for client-local persistence (holds literals: never send it)."""
        return {
            "version": REPO_VERSION,
            "mode": self.mode.value,
            "next_id": self._next_id,
            "rules": [
                {
                    "rule": e.rule.to_dict(),
                    "active": e.active,
                    "counts": [e.n_trigger, e.n_valid, e.n_conflict],
                    "reported": list(e.reported),
                }
                for e in self._entries.values()
            ],
        }

    @classmethod
    def from_dict(cls, d: Any) -> LocalRuleRepository:
        """Inverse of :meth:`to_dict`; ``ValueError`` on a malformed or other-version payload."""
        if not isinstance(d, dict) or d.get("version") != REPO_VERSION:
            got = d.get("version") if isinstance(d, dict) else type(d).__name__
            raise ValueError(
                f"local rule repository payload: expected version {REPO_VERSION}, got {got!r}"
            )
        try:
            repo = cls(mode=RuleMode(d["mode"]))
            repo._next_id = int(d["next_id"])
            for k, item in enumerate(d["rules"]):
                rule = PrivacyRule.from_dict(item["rule"])
                counts = tuple(int(x) for x in item["counts"])
                reported = tuple(int(x) for x in item["reported"])
                if len(counts) != 3 or len(reported) != 3 or min(*counts, *reported) < 0:
                    raise ValueError(f"rules[{k}]: counts must be three non-negative integers")
                repo._insert(rule, active=bool(item["active"]))
                e = repo._entries[rule.rule_id]
                e.n_trigger, e.n_valid, e.n_conflict = counts
                e.reported = (reported[0], reported[1], reported[2])
        except (KeyError, TypeError) as e:
            raise ValueError(f"local rule repository payload is malformed: {e!r}") from None
        return repo
