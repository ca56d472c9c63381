"""Client rule repository (DESIGN §3.6): utility, relevance, adaptation, feedback, modes."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from pfedma_flwr.protocol.schema import GlobalRule
from pfedma_flwr.rules.client.local_repo import LocalRuleRepository
from pfedma_flwr.rules.enforcement import EnforcementResult, RuleOutcome, Uncovered
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.modes import RuleMode, local_utility, relevance


class DictEmbedder:
    def __init__(self, table: dict[str, Sequence[float]]) -> None:
        self.table = {k: np.asarray(v, np.float32) / np.linalg.norm(v) for k, v in table.items()}
        self.dim = len(next(iter(table.values())))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]) if texts else np.zeros((0, self.dim))


@pytest.mark.parametrize(
    ("rel", "t", "v", "c", "expected"),
    [
        (0.5, 4, 3, 1, 1.0),  # 0.5 + (3 − 1)/4
        (0.0, 0, 0, 0, 0.0),  # never triggered: max(1, 0) avoids 0/0
        (0.2, 2, 0, 2, -0.8),  # 0.2 + (0 − 2)/2
    ],
)
def test_local_utility(rel, t, v, c, expected):
    assert local_utility(rel, t, v, c) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("exp", "expected"),
    [
        (np.zeros((0, 2)), 0.0),  # empty buffer
        (np.array([[0.6, 0.8], [1.0, 0.0]]), 1.0),  # max cos
        (np.array([[-1.0, 0.0]]), 0.0),  # negative cos clipped at 0
        (np.array([[0.6, 0.8]]), 0.6),
    ],
)
def test_relevance(exp, expected):
    assert relevance(np.array([1.0, 0.0]), exp) == pytest.approx(expected)


LOCAL_T = "do not reveal person in responses (local)"
G_SAME = "do not reveal person in responses"
G_OTHER = "do not reveal email address in responses"
EXP = "patient notes, write to ann@example.org"


def _g(rid: str, text: str, action: str = "redact", active: bool = True) -> GlobalRule:
    types = ("EMAIL_ADDRESS",) if text == G_OTHER else ("PERSON",)
    return GlobalRule(rule_id=rid, text=text, category="c", action=action,
                      entity_types=types, active=active)


def _outcome(rid: str, valid: bool, conflict: bool) -> EnforcementResult:
    return EnforcementResult(None, False, (RuleOutcome(rid, True, valid, conflict, 1),))


def _repo(mode: RuleMode = RuleMode.FULL, literals: tuple[str, ...] = ()) -> LocalRuleRepository:
    local = PrivacyRule(rule_id="l1", text=LOCAL_T, category="c", entity_types=("PERSON",),
                        literals=literals)
    return LocalRuleRepository(mode=mode, rules=[local])


def _emb(g_same_vs_local: float) -> DictEmbedder:
    s = g_same_vs_local
    return DictEmbedder({
        LOCAL_T: [1, 0, 0],
        G_SAME: [s, (1 - s * s) ** 0.5, 0],
        G_OTHER: [0, 0, 1],
        EXP: [0, 0, 1],  # experience holds an email: only the email rule fires on it
    })


def test_adapt_counterpart_tie_keeps_local():
    repo = _repo()
    # Φ(g) = 0 + 0 = Φ(l) = 0 + 0 -> tie keeps the local rule; g stored inactive.
    rep = repo.adapt([_g("g1", G_SAME)], [], _emb(0.95))
    (d,) = rep.decisions
    assert (d.counterpart, d.phi_global, d.phi_counterpart, d.active, d.new) == ("l1", 0.0, 0.0,
                                                                                False, True)
    assert repo.is_active("l1") and not repo.is_active("g:g1")


def test_adapt_global_wins_then_reconsidered_without_duplicate():
    repo = _repo()
    repo.adapt([_g("g1", G_SAME)], [], _emb(0.95))
    # l1 conflicts once: Φ(l) = 0 + (0 − 1)/1 = −1 < Φ(g) = 0 -> g active, l1 inactive (kept)
    repo.record_enforcement(_outcome("l1", valid=False, conflict=True))
    rep = repo.adapt([_g("g1", G_SAME, action="generalize")], [], _emb(0.95))
    assert rep.decisions[0].active and not rep.decisions[0].new
    assert repo.is_active("g:g1") and not repo.is_active("l1")
    assert repo.get("g:g1").action == "generalize"  # re-adapt updates the stored copy
    assert len(repo) == 2  # never duplicates
    # g now conflicts twice: Φ(g) = (0 − 2)/2 = −1 = Φ(l) -> tie keeps local: l1 back
    repo.record_enforcement(_outcome("g:g1", False, True))
    repo.record_enforcement(_outcome("g:g1", False, True))
    repo.adapt([_g("g1", G_SAME)], [], _emb(0.95))
    assert repo.is_active("l1") and not repo.is_active("g:g1")


@pytest.mark.parametrize(
    ("sim", "experience", "expected_active", "counterpart"),
    [
        # cos 0.89 < 0.9: no counterpart; Φ(g) = Rel 0 (empty buffer) ≤ 0.3 default -> rejected
        (0.89, [], False, None),
        # cos exactly 0.9 counts as the counterpart
        (0.9, [], False, "l1"),
    ],
)
def test_adapt_threshold(sim, experience, expected_active, counterpart):
    repo = _repo()
    rep = repo.adapt([_g("g1", G_SAME)], experience, _emb(sim))
    assert rep.decisions[0].counterpart == counterpart
    assert rep.decisions[0].active is expected_active


def test_adapt_literal_counterpart_is_never_switched_off():
    repo = _repo(literals=("Alice Zed",))
    repo.adapt([_g("g1", G_SAME)], [], _emb(0.95))
    repo.record_enforcement(_outcome("l1", valid=False, conflict=True))
    # Φ(g) = 0 > Φ(l) = −1: g wins and becomes active, but l1 holds a literal: it stays on
    rep = repo.adapt([_g("g1", G_SAME)], [], _emb(0.95))
    assert rep.decisions[0].active
    assert repo.is_active("g:g1") and repo.is_active("l1")


def test_adapt_default_policy_threshold():
    repo = _repo()
    # email rule: no counterpart; its detector fires on the one item (F = 1, min(1, 1/0.125) = 1)
    # and cos(G_OTHER, EXP) = 1: Rel = 1 · (0.5 + 0.5) = 1 -> Φ = 1 > 0.3 -> adopted;
    # with phi_default = 1.0, Φ = 1 is not > 1 -> rejected.
    assert repo.adapt([_g("g2", G_OTHER)], [EXP], _emb(0.5)).adopted == ["g2"]
    repo2 = _repo()
    assert repo2.adapt([_g("g2", G_OTHER)], [EXP], _emb(0.5), phi_default=1.0).adopted == []
    # inactive global rules are skipped
    assert repo2.adapt([_g("g3", G_OTHER, active=False)], [], _emb(0.5)).skipped == 1


def test_round_feedback_deltas_only_global_rules_with_triggers():
    repo = _repo()
    repo.adapt([_g("g2", G_OTHER)], [EXP], _emb(0.5))
    repo.record_enforcement(_outcome("g:g2", True, False))
    repo.record_enforcement(_outcome("g:g2", True, True))
    repo.record_enforcement(_outcome("l1", True, False))  # local rule: never reported
    (row,) = repo.round_feedback()
    assert row.to_dict() == {"rule_id": "g2", "d_trigger": 2, "d_valid": 2, "d_conflict": 1}
    assert repo.round_feedback() == []  # Δ since last call is zero -> no row sent
    repo.record_enforcement(_outcome("g:g2", False, False))
    assert [r.to_dict() for r in repo.round_feedback()] == [
        {"rule_id": "g2", "d_trigger": 1, "d_valid": 0, "d_conflict": 0}
    ]
    assert repo.counts("g:g2") == (3, 2, 1)  # cumulative counters kept


@pytest.mark.parametrize(
    ("mode", "enforce", "creates", "uploads", "adopts"),
    [
        (RuleMode.NR, False, False, False, False),
        (RuleMode.SR, True, False, False, False),
        (RuleMode.LE, True, True, False, False),
        (RuleMode.G2L, True, True, False, True),
        (RuleMode.L2G, True, True, True, False),
        (RuleMode.FULL, True, True, True, True),
    ],
)
def test_modes(mode, enforce, creates, uploads, adopts):
    repo = _repo(mode)
    assert bool(repo.active_rules("response")) is enforce
    cands = repo.handle_uncovered([Uncovered("pii", "bob@x.org", ("EMAIL_ADDRESS",))])
    assert (len(repo) == 2) is creates
    assert bool(cands) is uploads
    assert repo.adapt([_g("g2", G_OTHER)], [EXP], _emb(0.5)).disabled is (not adopts)


def test_handle_uncovered_dedupes_and_skips_detectorless():
    repo = _repo()
    items = [
        Uncovered("pii", "bob@x.org", ("EMAIL_ADDRESS",)),
        Uncovered("pii", "eve@y.org", ("EMAIL_ADDRESS",)),  # same spec -> same local rule
        Uncovered("item", "Project Nightjar"),  # literal-only: local rule, no upload
    ]
    cands = repo.handle_uncovered(items)
    assert [c.text for c in cands] == ["do not reveal email address in responses"]
    assert len(repo) == 3  # l1 + one email rule + one literal rule


def test_persistence_round_trip_and_errors():
    repo = _repo()
    repo.adapt([_g("g1", G_SAME)], [], _emb(0.95))
    repo.record_enforcement(_outcome("g:g1", True, False))
    repo.handle_uncovered([Uncovered("item", "Project Nightjar")])
    back = LocalRuleRepository.from_dict(json.loads(json.dumps(repo.to_dict())))
    assert back.to_dict() == repo.to_dict()
    assert back.round_feedback() == repo.round_feedback()
    with pytest.raises(ValueError, match="expected version 1"):
        LocalRuleRepository.from_dict({"version": 2})
    with pytest.raises(ValueError, match="expected version 1"):
        LocalRuleRepository.from_dict([])
    with pytest.raises(ValueError, match="malformed"):
        LocalRuleRepository.from_dict({"version": 1, "mode": "full"})
    with pytest.raises(ValueError):
        LocalRuleRepository.from_dict({"version": 1, "mode": "bogus", "next_id": 0, "rules": []})
