"""Server rule formulas (DESIGN §3.1–3.5): hand-derived numbers for every seed edge case."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pytest

from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import RuleCandidate, RuleFeedback
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.rules.server.promotion import (
    CandidatePool,
    build_candidate_pool,
    feedback_score,
    promote,
    support_proportions,
    update_h_score,
)
from pfedma_flwr.rules.server.resolve import resolve

X = np.array([1.0, 0.0, 0.0])
Y = np.array([0.0, 1.0, 0.0])
Z = np.array([0.0, 0.0, 1.0])
# cos(X, AT90) = 0.9 exactly: the threshold itself counts (≥).
AT90 = np.array([0.9, math.sqrt(1 - 0.81), 0.0])
# cos(X, BELOW) = 0.89 < 0.9
BELOW = np.array([0.89, math.sqrt(1 - 0.89**2), 0.0])


class DictEmbedder:
    """Maps known texts to given vectors (normalized); exact cosines for tests."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = {k: np.asarray(v, np.float32) / np.linalg.norm(v) for k, v in table.items()}
        self.dim = len(next(iter(table.values())))
        self.calls = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.stack([self.table[t] for t in texts]) if texts else np.zeros((0, self.dim))


# --------------------------------------------------------------------------- §3.2


@pytest.mark.parametrize(
    ("rows", "expected_zeta", "expected_promoted"),
    [
        # empty pool: nothing to promote
        ([], [], []),
        # singleton: ζ = 0/max(1, 0) = 0, yet G = B (seed: passes without corroboration)
        ([X], [0.0], [0]),
        # no support: three orthogonal candidates, ζ = 0 each -> G = ∅
        ([X, Y, Z], [0.0, 0.0, 0.0], []),
        # X,X support each other: Supp = 1, |B|-1 = 2 -> ζ = 1/2; Y: 0 -> promote [0, 1]
        ([X, X, Y], [0.5, 0.5, 0.0], [0, 1]),
        # ties kept: two pairs, every ζ = 1/3
        ([X, X, Y, Y], [1 / 3] * 4, [0, 1, 2, 3]),
        # majority cluster wins: X×3 have Supp 2 -> ζ = 2/4; Y×2 -> 1/4
        ([X, X, X, Y, Y], [0.5, 0.5, 0.5, 0.25, 0.25], [0, 1, 2]),
        # cos exactly 0.9 counts; 0.89 does not: X~AT90 (1/2 each), BELOW alone
        ([X, AT90, Z], [0.5, 0.5, 0.0], [0, 1]),
        ([X, BELOW, Z], [0.0, 0.0, 0.0], []),
    ],
)
def test_support_and_promotion(rows, expected_zeta, expected_promoted):
    emb = np.array(rows, dtype=np.float32).reshape(len(rows), 3)
    zeta = support_proportions(emb, 0.9)
    np.testing.assert_allclose(zeta, expected_zeta, atol=1e-9)
    assert promote(zeta) == expected_promoted


def test_self_support_excluded():
    # One candidate has cos 1 with itself; excluded (j ≠ i) -> ζ = 0 in a pool of two
    # orthogonal candidates, and no promotion.
    zeta = support_proportions(np.array([X, Y], dtype=np.float32))
    assert zeta.tolist() == [0.0, 0.0]
    assert promote(zeta) == []


def test_support_rejects_bad_shape():
    with pytest.raises(ValueError, match="2-D"):
        support_proportions(np.zeros(3))


# --------------------------------------------------------------------------- §3.3–3.4


@pytest.mark.parametrize(
    ("dt", "dv", "dc", "expected"),
    [
        (4, 3, 1, 0.5),  # (3 − 1) / 4
        (2, 0, 2, -1.0),  # (0 − 2) / 2: lower bound
        (3, 3, 0, 1.0),  # upper bound
        (5, 2, 2, 0.0),  # valid and conflict cancel
    ],
)
def test_feedback_score(dt, dv, dc, expected):
    assert feedback_score(dt, dv, dc) == pytest.approx(expected)


@pytest.mark.parametrize("dt", [0, -1])
def test_feedback_score_needs_trigger(dt):
    with pytest.raises(ValueError, match="d_trigger > 0"):
        feedback_score(dt, 0, 0)


@pytest.mark.parametrize(
    ("h", "n", "scores", "expected"),
    [
        (0.5, 2, [1.0, -0.5], (0.375, 4)),  # (2·0.5 + 1 − 0.5) / (2 + 2) = 1.5 / 4
        (0.0, 0, [0.5], (0.5, 1)),  # new rule H = N = 0: first score becomes H
        (0.2, 3, [], (0.2, 3)),  # no feedback this round: H kept
        (-1.0, 1, [1.0], (0.0, 2)),  # (−1 + 1) / 2
    ],
)
def test_update_h_score(h, n, scores, expected):
    got = update_h_score(h, n, scores)
    assert got[0] == pytest.approx(expected[0]) and got[1] == expected[1]


# --------------------------------------------------------------------------- §3.1 pool


def _cand(text: str, action: str = "redact", ents: tuple[str, ...] = ("PERSON",)) -> RuleCandidate:
    return RuleCandidate(text=text, category="personal name", action=action, entity_types=ents)


def test_pool_distinct_client_check_and_retained_only():
    emb = HashingEmbedder()
    a, b = "do not reveal person in responses", "do not reveal email address in responses"
    by_client = {
        "c1": [_cand(a), _cand(a), _cand(b)],  # contributes twice to cluster a: one dropped
        "c2": [_cand(a)],
        "c3": [_cand(b)],  # not retained: ignored
    }
    pool = build_candidate_pool(by_client, {"c1", "c2"}, emb, rng=np.random.default_rng(0))
    assert sorted(c.text for c in pool.candidates) == sorted([a, b, a])
    assert pool.n_dropped == 1 and pool.n_contributors == 2
    # a×2 support each other: ζ = 1/2; b alone: 0 -> two promoted. Without the check c1's
    # duplicate would have given a three candidates and ζ = 2/3.
    zeta = support_proportions(pool.embeddings)
    assert sorted(zeta.tolist()) == [0.0, 0.5, 0.5]
    assert pool.embeddings.shape == (3, emb.dim)
    # the pool holds no client identifiers at all
    assert "c1" not in json.dumps([c.to_dict() for c in pool.candidates])


def test_pool_permutation_is_seeded():
    emb = HashingEmbedder()
    by_client = {f"c{k}": [_cand(f"do not reveal thing{k} in responses")] for k in range(8)}
    texts = [
        [c.text for c in build_candidate_pool(by_client, set(by_client), emb,
                                               rng=np.random.default_rng(s)).candidates]
        for s in (7, 7, 8)
    ]
    assert texts[0] == texts[1] and sorted(texts[0]) == sorted(texts[2])
    assert texts[0] != texts[2]


def test_empty_pool():
    rng = np.random.default_rng(0)
    pool = build_candidate_pool({"c1": []}, {"c1"}, HashingEmbedder(16), rng=rng)
    assert len(pool) == 0 and pool.embeddings.shape == (0, 16)


# --------------------------------------------------------------------------- §3.5 Resolve


def test_resolve_merge_alternatives_and_ties():
    e4 = np.array([0.0, 1.0, 1.0])
    emb = np.array([X, X, X, Y, Z, Z, e4, e4]) / np.linalg.norm([X, X, X, Y, Z, Z, e4, e4],
                                                                  axis=1, keepdims=True)
    specs = ["A", "A", "B", "A", "A", "B", "A", "A"]
    h = [0.5, -0.25, 0.2, 0.0, 0.3, 0.3, 0.0, 0.0]
    n = [2, 2, 1, 0, 1, 3, 0, 0]
    res = resolve(emb, specs, h, n, threshold=0.9)
    # Clusters: {0,1,2} (X), {3} (Y), {4,5} (Z), {6,7} (e4) — leaders are the oldest rows.
    assert res.cluster.tolist() == [0, 0, 0, 3, 4, 4, 6, 6]
    # Row 1 merges into row 0 (same spec): N = 2 + 2 = 4, H = (2·0.5 + 2·(−0.25)) / 4 = 0.125
    assert res.rep.tolist() == [0, 0, 2, 3, 4, 5, 6, 6]
    assert res.n[0] == 4 and res.h[0] == pytest.approx(0.125)
    # Alternatives in cluster X: H(0) = 0.125 < H(2) = 0.2 -> row 2 active, row 0 kept inactive.
    # Cluster Z: H tie 0.3 = 0.3 -> the older row 4 wins despite row 5's larger N.
    # e4: two new rules (N = 0) merge: N = 0, H stays 0 (no 0/0).
    assert res.active.tolist() == [False, False, True, True, True, False, True, False]
    assert res.n[6] == 0 and res.h[6] == 0.0
    assert res.representatives == [0, 2, 3, 4, 5, 6]


def test_resolve_empty():
    res = resolve(np.zeros((0, 3)), [], [], [])
    assert res.representatives == [] and res.active.shape == (0,)


# --------------------------------------------------------------------------- repository


#: the seed's promotion and rating rules (a singleton pool promotes, any rating counts); the
#: defaults need two clients (issue 30, tests/unit/test_rules_support.py)
SEED_RULES = {"min_support_clients": 1, "min_support_share": 0.0}
NAME_R = "do not reveal person in responses"
MAIL_R = "do not reveal email address in responses"


def _pool(emb: DictEmbedder, cands: list[RuleCandidate]) -> CandidatePool:
    return CandidatePool(tuple(cands), emb.encode([c.text for c in cands]))


def test_repository_lifecycle():
    emb = DictEmbedder({NAME_R: X, MAIL_R: Y})
    repo = GlobalRuleRepository(embedder=emb, **SEED_RULES)
    # round 1: singleton pool -> promoted directly, new rule H = N = 0, active
    r1 = repo.update(1, _pool(emb, [_cand(NAME_R)]))
    assert r1.added == ("g1",) and r1.promoted == 1 and r1.pool_similarity.n == 1
    (g1,) = repo.rules()
    assert (g1.h_score, g1.n_evals, g1.active, g1.created_round) == (0.0, 0, True, 1)

    # feedback: c1 sends two rows for g1 -> summed (4, 2, 0) -> one score 0.5 (counted once);
    # c2: (2, 0, 2) -> −1; c3: Δtrigger 0 -> not evaluable; "zzz" unknown -> reported.
    fb = repo.apply_feedback({
        "c1": [RuleFeedback("g1", 2, 2, 0), RuleFeedback("g1", 2, 0, 0)],
        "c2": [RuleFeedback("g1", 2, 0, 2), RuleFeedback("zzz", 1, 1, 0)],
        "c3": [RuleFeedback("g1", 0, 0, 0)],
    })
    assert fb.unknown == ("zzz",) and fb.ignored_zero == 1 and fb.n_scores == 2
    # H = (0·0 + 0.5 − 1) / (0 + 2) = −0.25, N = 2
    (g1,) = repo.rules()
    assert g1.h_score == pytest.approx(-0.25) and g1.n_evals == 2

    # round 2: two clients upload the generalize alternative of the same constraint (same
    # text, other action) and one uploads the mail rule. ζ: name×2 = 1/2, mail 0 -> both name
    # candidates promoted; they merge with each other (same spec) and conflict with g1.
    gen = _cand(NAME_R, action="generalize")
    r2 = repo.update(2, _pool(emb, [gen, gen, _cand(MAIL_R, ents=("EMAIL_ADDRESS",))]))
    assert r2.promoted == 2 and r2.added == ("g2",) and r2.merged == 1
    assert r2.pool_similarity.min == pytest.approx(0.0)
    assert r2.pool_similarity.max == pytest.approx(1.0)
    by_id = {r.rule_id: r for r in repo.rules()}
    # conflict pick by H: g2 (H 0) > g1 (H −0.25) -> g2 active, g1 kept inactive
    assert by_id["g1"].active is False and by_id["g2"].active is True
    assert r2.activated == ("g2",) and r2.deactivated == ("g1",)

    # a promoted candidate equivalent to g1 merges into it: N summed (2 + 0), H weighted
    # (2·(−0.25) + 0·0) / 2 = −0.25; no new id.
    r3 = repo.update(3, _pool(emb, [_cand(NAME_R)]))
    assert r3.added == () and r3.merged == 1 and len(repo) == 2
    # rule with no feedback this round keeps H; nothing removed
    assert {r.rule_id: (r.h_score, r.n_evals) for r in repo.rules()} == {
        "g1": (pytest.approx(-0.25), 2), "g2": (0.0, 0)
    }

    # feedback flips the conflict: g1 gets +1 twice -> H = (2·(−0.25) + 2) / 4 = 0.375 > 0
    repo.apply_feedback({"a": [RuleFeedback("g1", 1, 1, 0)], "b": [RuleFeedback("g1", 1, 1, 0)]})
    r4 = repo.update(4, CandidatePool.empty(emb.dim))
    assert r4.activated == ("g1",) and [r.rule_id for r in repo.active_rules()] == ["g1"]

    # checkpoint round trip (JSON) keeps everything; embeddings recomputed once
    payload = json.loads(json.dumps(repo.to_dict()))
    back = GlobalRuleRepository.from_dict(payload, embedder=emb)
    assert back.rules() == repo.rules() and back.to_dict() == repo.to_dict()


def test_repository_tie_keeps_older_and_bad_payloads():
    emb = DictEmbedder({NAME_R: X})
    repo = GlobalRuleRepository(embedder=emb, **SEED_RULES)
    repo.update(1, _pool(emb, [_cand(NAME_R)]))
    repo.update(2, _pool(emb, [_cand(NAME_R, action="refuse")]))
    # both H = 0: tie -> the older g1 stays active
    assert [(r.rule_id, r.active) for r in repo.rules()] == [("g1", True), ("g2", False)]
    with pytest.raises(ValueError, match="expected version 1"):
        GlobalRuleRepository.from_dict({"version": 99}, embedder=emb)
    with pytest.raises(ValueError, match="malformed"):
        GlobalRuleRepository.from_dict({"version": 1}, embedder=emb)
    with pytest.raises(ValueError, match="sim_threshold"):
        GlobalRuleRepository(embedder=emb, sim_threshold=2.0)
