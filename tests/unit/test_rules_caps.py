"""Ω_global stays bounded against colluding clients; failing rules are quarantined (issue 13.2).

Measured before: two colluding clients x 256 distinct candidates x 3 rounds gave 768 active
global rules, and every client then rejected every instruction (decoder cap 512).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import GlobalRule, RuleCandidate, RuleFeedback
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.rules.server.promotion import CandidatePool, admit, build_candidate_pool

EMB = HashingEmbedder(dim=256)
#: the seed's rules (a singleton pool promotes, one rater counts), for the cap mechanics alone
SEED_RULES = {"min_support_clients": 1, "min_support_share": 0.0}
_WORDS = ("amber basalt cobalt dune ember fjord garnet heron iris jade kelp lumen moss nectar "
          "onyx pine quartz reed sage tide umber vale willow xenon yarrow zinc").split()


def _junk(n: int, seed: int) -> list[RuleCandidate]:
    """``n`` distinct valid candidates (random word texts: pairwise cos well below 0.9)."""
    rng = np.random.default_rng(seed)
    return [RuleCandidate(text=" ".join(rng.choice(_WORDS, size=6)) + f" {seed}-{k}",
                          category="government identifier", entity_types=("US_SSN",))
            for k in range(n)]


def test_two_colluders_256_candidates_3_rounds_stay_bounded():
    repo = GlobalRuleRepository(embedder=EMB)
    rng = np.random.default_rng(0)
    for t in (1, 2, 3):
        junk = _junk(256, seed=t)
        pool = build_candidate_pool({"evil-a": junk, "evil-b": junk}, {"evil-a", "evil-b"},
                                    EMB, rng=rng)
        # each client adds at most 8 to the pool, the other 248 are counted as capped
        assert len(pool) == 16 and pool.n_capped == 2 * 248
        up = repo.update(t, pool)
        # all 16 tie at ζ = 1/15; per contributor one new rule, its twin merges into it
        assert len(up.added) == 2 and up.refused == {"per_client": 12}
    assert len(repo.active_rules()) == 6  # was 768
    assert len(repo.snapshot()) == 6


def test_caps_per_round_and_repository_size():
    repo = GlobalRuleRepository(embedder=EMB, max_promotions_per_round=3,
                                max_promotions_per_client=5, max_rules=5)
    cands = _junk(8, seed=9)
    pool = CandidatePool(tuple(cands), EMB.encode([c.text for c in cands]),
                         owners=(0,) * 8)
    # 8 candidates of one contributor, no support: ζ = 0 -> nothing promoted
    assert repo.update(1, pool).added == ()
    twin = CandidatePool(tuple(cands + cands), EMB.encode([c.text for c in cands + cands]),
                         owners=(0,) * 8 + (1,) * 8)
    up = repo.update(2, twin)
    # 16 promoted (ζ = 1/15 each); 3 new per round; twins of the admitted merge
    assert len(up.added) == 3 and up.refused == {"per_round": 10}
    up = repo.update(3, twin)
    # the 3 known texts (x2 copies) merge; 2 new texts fill the repository to 5 (their twins
    # merge); the other 3 texts x 2 copies are refused
    assert len(up.added) == 2 and up.refused == {"full": 6}
    assert len(repo) == 5


def test_invalid_candidate_counts_in_pool_but_is_never_promoted():
    repo = GlobalRuleRepository(embedder=EMB, **SEED_RULES)
    bad = RuleCandidate(text="do not reveal sensitive record in queries",
                        category="sensitive record", scope="query", patterns=("(",))
    pool = build_candidate_pool({"evil": [bad]}, {"evil"}, EMB, rng=np.random.default_rng(0))
    assert pool.problems[0].startswith("invalid rule pattern '('")
    up = repo.update(1, pool)  # a one-candidate pool promotes it (seed App. F) ...
    assert up.promoted == 0 and up.refused == {"invalid": 1} and len(repo) == 0  # ... not now


def _repo_with(hs: list[float], snapshot_size: int = 64) -> GlobalRuleRepository:
    repo = GlobalRuleRepository(embedder=EMB, snapshot_size=snapshot_size, **SEED_RULES)
    for t, c in enumerate(_junk(len(hs), seed=3), start=1):
        repo.update(t, CandidatePool((c,), EMB.encode([c.text])))
    # H of rule k from one client's feedback: (valid − conflict) / trigger
    fb = {f"c{k}": [RuleFeedback(f"g{k + 1}", 4, int(4 * h) if h >= 0 else 0,
                                 int(-4 * h) if h < 0 else 0)] for k, h in enumerate(hs)}
    repo.apply_feedback(fb)
    return repo


def test_snapshot_highest_h_then_oldest():
    repo = _repo_with([0.25, 0.75, -0.5, 0.75, 0.0], snapshot_size=3)
    assert [r.h_score for r in repo.rules()] == [0.25, 0.75, -0.5, 0.75, 0.0]
    # 0.75 (g2, older), 0.75 (g4), 0.25 (g1)
    assert [r.rule_id for r in repo.snapshot()] == ["g2", "g4", "g1"]


def test_quarantine_removes_rule_from_snapshot_and_checkpoint():
    repo = _repo_with([0.5, 0.5])
    repo.quarantine("g1", "timeout")
    assert [r.rule_id for r in repo.snapshot()] == ["g2"] and repo.is_quarantined("g1")
    d = json.loads(json.dumps(repo.to_dict()))
    assert [r["rule_id"] for r in d["rules"]] == ["g2"] and d["quarantined"] == {"g1": "timeout"}
    # feedback for a quarantined rule is unknown, not fatal
    assert repo.apply_feedback({"c": [RuleFeedback("g1", 1, 1, 0)]}).unknown == ("g1",)
    back = GlobalRuleRepository.from_dict(d, embedder=EMB)
    assert back.to_dict() == repo.to_dict()


def test_checkpoint_with_bad_rules_loads_without_them():
    repo = _repo_with([0.5, 0.5])
    d = json.loads(json.dumps(repo.to_dict()))
    bad = GlobalRule(rule_id="g9", text="x", category="c", patterns=("[^a]",)).to_dict()
    bad["patterns"] = ["("]  # as an older version might have saved it
    d["rules"] += [bad, {"rule_id": "g10", "text": 5}, "junk", dict(d["rules"][0])]
    back = GlobalRuleRepository.from_dict(d, embedder=EMB)
    assert [r.rule_id for r in back.rules()] == ["g1", "g2"]  # the duplicate g1 dropped too
    assert back.quarantined == {"g9": "invalid", "g10": "invalid", "rules[4]": "invalid"}


def test_cap_arguments_validated():
    with pytest.raises(ValueError, match="snapshot_size must be an int >= 1"):
        GlobalRuleRepository(embedder=EMB, snapshot_size=0)
    with pytest.raises(ValueError, match="max_per_client"):
        build_candidate_pool({}, set(), EMB, rng=np.random.default_rng(0), max_per_client=0)


def test_admit_hand_derived():
    c = _junk(4, seed=5)
    pool = CandidatePool((c[0], c[1], c[0], c[2], c[3]), EMB.encode([x.text for x in
                                                                      (c[0], c[1], c[0], c[2],
                                                                       c[3])]),
                         owners=(0, 0, 1, 1, 2), problems=("", "", "", "bad", ""))
    # 0 new (owner 0); 1 refused (owner 0 used its one); 2 is 0's twin -> merges (admitted);
    # 3 invalid; 4 new (owner 2), then room is spent
    got = admit([0, 1, 2, 3, 4], pool, set(), room=2, per_round=4, per_client=1)
    assert got == ([0, 2, 4], {"per_client": 1, "invalid": 1})
    assert admit([0, 4], pool, set(), room=1, per_round=4, per_client=1) == ([0], {"full": 1})
    assert admit([0, 4], pool, set(), room=9, per_round=1, per_client=1) == (
        [0], {"per_round": 1})
