"""Anomaly score (DESIGN §3.7): formula, ablations, evidence and consensus terms, the filter."""

import math

import numpy as np
import pytest

from pfedma_flwr.anomaly.scores import (
    Ablation,
    ablated_anomaly_score,
    anomaly_score,
    answer_similarity_matrix,
    consensus_anomalies,
    consensus_floor,
    evaluate_batch,
    evaluate_responses,
    evidence_anomaly,
    similarity_to,
)
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.protocol.schema import Claim, StructuredResponse


class MatrixEmbedder:
    """Explicit vectors per text (unit-normalized); the empty text embeds to zeros."""

    def __init__(self, vectors):
        self.vectors = {k: np.asarray(v, dtype=np.float32) / np.linalg.norm(v)
                        for k, v in vectors.items()}
        self.dim = len(next(iter(vectors.values())))

    def encode(self, texts):
        return np.stack([self.vectors[t] if t else np.zeros(self.dim, np.float32)
                         for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


class FakeJudge:
    """Returns preset values by position and counts its calls."""

    def __init__(self, intent, supports):
        self.intent, self.supports = intent, supports
        self.calls = {"intent": 0, "evidence": 0}
        self.seen = None

    @property
    def parse_failures(self):
        return 0

    def intent_risk(self, sentences_per_response):
        self.calls["intent"] += 1
        self.seen = [list(s) for s in sentences_per_response]
        assert len(sentences_per_response) == len(self.intent)
        return list(self.intent)

    def evidence_support(self, claims_per_response):
        self.calls["evidence"] += 1
        assert [len(c) for c in claims_per_response] == [len(s) for s in self.supports]
        return [list(s) for s in self.supports]


@pytest.mark.parametrize(
    ("a_int", "a_evi", "a_con", "lam", "alpha", "expected"),
    [
        (0.0, 0.0, 0.0, 0.3, 0.3, 0.0),
        (1.0, 1.0, 1.0, 0.3, 0.3, 1.0),
        # max=.6 mean=.4 → bracket .3·.6+.7·.4=.46 → A=.7·.46+.3·.5=.322+.15=.472
        (0.2, 0.6, 0.5, 0.3, 0.3, 0.472),
        # max=.8 mean=.4 → bracket .24+.28=.52 → A=.7·.52=.364
        (0.8, 0.0, 0.0, 0.3, 0.3, 0.364),
        # λ=α=.5: max 1 mean .5 → bracket .5+.25=.75 → A=.5·.75+.5·1=.875
        (0.0, 1.0, 1.0, 0.5, 0.5, 0.875),
        # λ=1, α=0: pure max pooling
        (0.3, 0.9, 0.7, 1.0, 0.0, 0.9),
        # λ=0, α=0: pure mean
        (0.3, 0.9, 0.7, 0.0, 0.0, 0.6),
        # α=1: consensus only
        (0.3, 0.9, 0.7, 0.3, 1.0, 0.7),
    ],
)
def test_anomaly_score_table(a_int, a_evi, a_con, lam, alpha, expected):
    assert anomaly_score(a_int, a_evi, a_con, lam, alpha) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("a_int", "a_evi", "a_con", "ablation", "expected"),
    [
        # issue 30: clean intent and evidence, the others agree and this answer does not:
        # the seed's .3·1 = .3 kept it; the floor (1 − J)·a_con = 1 filters it
        (0.0, 0.0, 1.0, "none", 1.0),
        # J = .3·.2 + .7·.1 = .13 → seed .7·.13 + .3·.8 = .331 < floor .87·.8 = .696
        (0.2, 0.0, 0.8, "none", 0.696),
        # J dominates: .472 (J = .46, floor .54·.5 = .27) unchanged
        (0.2, 0.6, 0.5, "none", 0.472),
        # -evidence: J = a_int = .2 → .29 < floor .8·.5 = .4
        (0.2, 0.6, 0.5, "-evidence", 0.4),
        # -intent: J = a_evi = .6 → .57 > floor .4·.5 = .2
        (0.2, 0.6, 0.5, "-intent", 0.57),
        # no consensus term: no floor
        (0.0, 0.0, 1.0, "-consensus", 0.0),
    ],
)
def test_consensus_floor(a_int, a_evi, a_con, ablation, expected):
    got = ablated_anomaly_score(a_int, a_evi, a_con, ablation=ablation, floor=True)
    assert got == pytest.approx(expected)
    assert consensus_floor(0.3, 0.0, 1.0) == 1.0 and consensus_floor(0.9, 0.5, 1.0) == 0.9


def test_anomaly_score_defaults_are_the_seed_values():
    assert anomaly_score(0.2, 0.6, 0.5) == pytest.approx(0.472)


@pytest.mark.parametrize(
    ("ablation", "expected"),
    [
        # (a_int, a_evi, a_con) = (.2, .6, .5), λ = α = .3
        ("none", 0.472),
        # -intent: (1−α)·a_evi + α·a_con = .42 + .15
        ("-intent", 0.57),
        # -evidence: (1−α)·a_int + α·a_con = .14 + .15
        ("-evidence", 0.29),
        # -consensus: bracket with weight 1 = .3·.6 + .7·.4
        ("-consensus", 0.46),
        # -all: evaluator removed
        ("-all", 0.0),
    ],
)
def test_ablated_scores(ablation, expected):
    got = ablated_anomaly_score(0.2, 0.6, 0.5, lambda_pool=0.3, alpha_con=0.3, ablation=ablation)
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    "args", [(1.2, 0.0, 0.0, 0.3, 0.3), (0.0, -0.1, 0.0, 0.3, 0.3), (0.0, 0.0, 0.0, 1.5, 0.3),
             (0.0, 0.0, 0.0, 0.3, -0.3), (math.nan, 0.0, 0.0, 0.3, 0.3)],
)
def test_anomaly_score_rejects_out_of_range(args):
    with pytest.raises(ValueError, match="must be in"):
        anomaly_score(*args)


def test_unknown_ablation():
    with pytest.raises(ValueError):
        ablated_anomaly_score(0, 0, 0, ablation="-everything")
    assert Ablation("-all") is Ablation.ALL


@pytest.mark.parametrize(
    ("supports", "expected"),
    [([], 1.0), ([0.4, 0.8], 0.4), ([1.0, 1.0], 0.0), ([0.0], 1.0)],
)
def test_evidence_anomaly(supports, expected):
    # 1 − mean support; a response with no claims is maximally anomalous
    assert evidence_anomaly(supports) == pytest.approx(expected)


EMB = MatrixEmbedder({
    "18": [1, 0], "20": [0.6, 0.8], "abc": [-1, 0], "42": [0, 1],
    "1,000": [1, 1], "1000": [1, -1], "$1000.00": [-1, 1],
})


def test_consensus_alone_and_empty():
    assert consensus_anomalies(["18"], "number", EMB) == [0.0]
    assert consensus_anomalies([], "number", EMB) == []


def test_consensus_equal_canonical_answers_is_zero():
    # embeddings are orthogonal/opposite, but the canonical answers are all 1000 → sim 1
    assert consensus_anomalies(["1,000", "1000", "$1000.00"], "number", EMB) == [0.0, 0.0, 0.0]


def test_consensus_uses_clipped_cosine_for_free_text():
    # sim(18,20)=.6, sim(18,abc)=max(-1,0)=0, sim(20,abc)=max(-.6,0)=0
    # a_con(18)=1−(.6+0)/2=.7, a_con(20)=1−(.6+0)/2=.7, a_con(abc)=1−0=1
    got = consensus_anomalies(["18", "20", "abc"], "text", EMB, mode="mean")
    assert got == pytest.approx([0.7, 0.7, 1.0])
    # coherent: weighted by the others' own agreement; the others of 18 and of 20 include abc
    # (sim 0 to each), so only abc, whose others agree at .6, is an outlier: 1 · .6
    got = consensus_anomalies(["18", "20", "abc"], "text", EMB)
    assert got == pytest.approx([0.0, 0.0, 0.6])


@pytest.mark.parametrize("kind,answers,expected", [
    # different numbers never agree, however close their embeddings (cos .6 here)
    ("number", ["18", "20", "18.0"], [0.5, 1.0, 0.5]),
    # option letters: "C" vs "(C)" equal, "D" agrees with nobody
    ("option", ["C", "(C)", "D"], [0.5, 0.5, 1.0]),
    # LaTeX: \frac{1}{2} = 0.5 canonically
    ("math", ["\\frac{1}{2}", "0.5", "2"], [0.5, 0.5, 1.0]),
])
def test_consensus_is_canonical_equality_for_discrete_answers(kind, answers, expected):
    emb = MatrixEmbedder({"18": [1, 0], "20": [0.6, 0.8], "18.0": [1, 0]})
    assert consensus_anomalies(answers, kind, emb, mode="mean") == pytest.approx(expected)
    # coherent: the two agreeing answers face a split (coherence 0), the odd one a consensus
    coherent = [1.0 if e == 1.0 else 0.0 for e in expected]
    assert consensus_anomalies(answers, kind, emb) == pytest.approx(coherent)


def test_coherent_consensus_two_way_split_is_neutral():
    # two honest agents that disagree: no majority, so neither is an outlier (mean: both 1)
    assert consensus_anomalies(["12", "17"], "number", EMB) == [0.0, 0.0]
    assert consensus_anomalies(["12", "17"], "number", EMB, mode="mean") == [1.0, 1.0]
    # a round-2 answer against a round-1 tie (251 vs 44) is not an outlier either
    assert consensus_anomalies(["54"], "number", EMB, prior=["251", "44"]) == [0.0]
    # 4 answers A A A B: B faces full agreement (1 · 1); each A has raw 1/3 and its others
    # (A, A, B) agree on 1 pair of 3 → 1/3 · 1/3
    got = consensus_anomalies(["7", "7", "7", "8"], "number", EMB)
    assert got == pytest.approx([1 / 9, 1 / 9, 1 / 9, 1.0])
    with pytest.raises(ValueError, match="consensus mode"):
        consensus_anomalies(["1", "2"], "number", EMB, mode="median")


def test_consensus_counts_earlier_retained_answers():
    # alone in its round but checked against 2 earlier answers: "17" agrees with neither
    assert consensus_anomalies(["17"], "number", EMB, prior=["12", "12"]) == [1.0]
    # "12" agrees with both earlier answers
    assert consensus_anomalies(["12"], "number", EMB, prior=["12", "12"]) == [0.0]
    # two participants + 2 prior: "12" agrees with 2 of its 3 others, "17" with 0 of 3
    got = consensus_anomalies(["12", "17"], "number", EMB, prior=["12", "12"], mode="mean")
    assert got == pytest.approx([1 / 3, 1.0])
    # coherent: 12's others (17, 12, 12) agree on 1 of 3 pairs → 1/3 · 1/3; 17's all agree
    got = consensus_anomalies(["12", "17"], "number", EMB, prior=["12", "12"])
    assert got == pytest.approx([1 / 9, 1.0])
    assert consensus_anomalies(["12"], "number", EMB) == [0.0]  # nobody to compare with


def test_blank_answers_agree_with_nobody():
    m = answer_similarity_matrix(["", "", "18"], "number", EMB)
    assert m.tolist() == [[0, 0, 0], [0, 0, 0], [0, 0, 1]]
    assert consensus_anomalies(["", "18"], "number", EMB, mode="mean") == [1.0, 1.0]
    assert consensus_anomalies(["", "", "18"], "number", EMB) == [0.0, 0.0, 0.0]


def test_similarity_to_reference():
    emb = MatrixEmbedder({"18.0": [0, 1], "20": [0.6, 0.8], "abc": [-1, 0], "18": [1, 0]})
    # numbers: equal canonical → 1, anything else 0 (no embedding cosine)
    assert similarity_to(["18.0", "20", "abc"], "18", "number", emb) == [1.0, 0.0, 0.0]
    # free text: clipped cosine .6, opposite → 0
    assert similarity_to(["20", "abc"], "18", "text", emb) == pytest.approx([0.6, 0.0])


def _resp(answer, claims=()):
    return StructuredResponse(answer, tuple(Claim(c, tuple(e)) for c, e in claims))


# each states its final answer in a claim (issue 30: claims stating another answer score
# a_evi = 1, tests/unit/test_anomaly_evidence.py)
R1 = _resp("18", [("9 eggs sold, 18 dollars", ["16-3-4=9"])])
R2 = _resp("18", [("2 dollars each", ["price is 2"]), ("9·2=18", ["9 times 2"])])
R4 = _resp("42")


def _judge():
    # R1: a_int 0, a_evi 1−.8=.2;  R2: a_int 0, a_evi 1−.5=.5;  R4: a_int .9, a_evi 1 (no claims)
    return FakeJudge(intent=[0.0, 0.0, 0.9], supports=[[0.8], [0.6, 0.4], []])


def test_evaluate_responses_scores_and_filters():
    judge = _judge()
    out = evaluate_responses([R1, R2, None, R4], kind="number", judge=judge, embedder=EMB,
                             consensus="mean")
    # consensus: R1, R2 agree (sim 1), R4 orthogonal (sim 0) → a_con .5, .5, 1
    # R1: bracket .3·.2+.7·.1=.13 → A=.7·.13+.3·.5=.241
    # R2: bracket .3·.5+.7·.25=.325 → A=.2275+.15=.3775
    # R4: bracket .3·1+.7·.95=.965 → A=.6755+.3=.9755
    assert [r.score for r in out] == pytest.approx([0.241, 0.3775, 1.0, 0.9755])
    assert [r.retained for r in out] == [True, True, False, False]
    assert [r.reason for r in out] == ["retained", "retained", "unparsed", "above_tolerance"]
    assert [r.a_con for r in out] == pytest.approx([0.5, 0.5, 0.0, 1.0])
    # coherent: R1's and R2's others (a split of 18 and 42) agree on nothing → a_con 0, so
    # A = .7·bracket: .091, .2275; R4 faces two agreeing answers → unchanged .9755
    out = evaluate_responses([R1, R2, None, R4], kind="number", judge=_judge(), embedder=EMB)
    assert [r.score for r in out] == pytest.approx([0.091, 0.2275, 1.0, 0.9755])
    # one batched call per judge term, over the parsed responses only
    assert judge.calls == {"intent": 1, "evidence": 1}
    assert judge.seen[0] == ["18", "9 eggs sold, 18 dollars", "16-3-4=9"]


def test_evaluate_all_ablation_skips_the_evaluator():
    judge = _judge()
    out = evaluate_responses([R1, R2, None, R4], kind="number", judge=judge, embedder=EMB,
                             ablation="-all")
    assert judge.calls == {"intent": 0, "evidence": 0}
    assert [r.retained for r in out] == [True, True, False, True]
    assert [r.score for r in out] == [0.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("ablation", "scores", "calls"),
    [
        # a_con dropped: the bracket alone (.13, .325, .965)
        ("-consensus", [0.13, 0.325, 0.965], {"intent": 1, "evidence": 1}),
        # a_int dropped: .7·a_evi + .3·a_con = .14+.15, .35+.15, .7+.3
        ("-intent", [0.29, 0.5, 1.0], {"intent": 0, "evidence": 1}),
        # a_evi dropped: .7·a_int + .3·a_con = .15, .15, .63+.3
        ("-evidence", [0.15, 0.15, 0.93], {"intent": 1, "evidence": 0}),
    ],
)
def test_evaluate_term_ablations(ablation, scores, calls):
    judge = _judge()
    out = evaluate_responses([R1, R2, R4], kind="number", judge=judge, embedder=EMB,
                             ablation=ablation, consensus="mean")
    assert [r.score for r in out] == pytest.approx(scores)
    assert judge.calls == calls
    # tolerance .5: "-intent" keeps R2 at exactly .5 (A ≤ tolerance is retained)
    assert [r.retained for r in out] == [s <= 0.5 + 1e-12 for s in scores]


def test_tolerance_boundary_is_inclusive():
    # λ=α=0 → A = (a_int + a_evi)/2 = (0 + .5)/2 = .25 exactly
    kw = {"kind": "number", "embedder": EMB, "lambda_pool": 0.0, "alpha_con": 0.0}
    r = _resp("18", [("c 18", ["e"])])
    assert evaluate_responses([r], judge=FakeJudge([0.0], [[0.5]]), tolerance=0.25,
                              **kw)[0].retained
    assert not evaluate_responses([r], judge=FakeJudge([0.0], [[0.5]]), tolerance=0.2499,
                                  **kw)[0].retained


def test_intent_bound_filters_agreeing_colluders_the_weighted_score_keeps():
    # two colluders agree (coherent a_con 0) and back their claim (support .85 → a_evi .15);
    # their intent risk .78 (the ASB injection runs, docs/threat_model.md):
    # bracket .3·.78 + .7·(.78+.15)/2 = .5595 → A = .7·.5595 = .39165 ≤ .5: kept by A alone
    bad = _resp("18", [("c 18", ["e"])])
    judge = FakeJudge([0.78, 0.78], [[0.85], [0.85]])
    out = evaluate_responses([bad, bad], kind="number", judge=judge, embedder=EMB)
    assert [r.score for r in out] == pytest.approx([0.39165, 0.39165])
    assert [r.retained for r in out] == [True, True]  # the default here: no intent bound
    out = evaluate_responses([bad, bad], kind="number", judge=FakeJudge([0.78, 0.78],
                             [[0.85], [0.85]]), embedder=EMB, intent_tolerance=0.5)
    assert [(r.retained, r.reason) for r in out] == [(False, "intent_above_tolerance")] * 2
    assert [r.score for r in out] == pytest.approx([0.39165, 0.39165])  # A itself unchanged
    # a_int at the bound is kept (inclusive, like the tolerance); above A's tolerance the
    # reason stays above_tolerance
    out = evaluate_responses([bad], kind="number", judge=FakeJudge([0.5], [[0.85]]),
                             embedder=EMB, intent_tolerance=0.5)
    assert out[0].retained
    out = evaluate_responses([bad], kind="number", judge=FakeJudge([0.9], [[0.0]]),
                             embedder=EMB, intent_tolerance=0.5)
    assert out[0].reason == "above_tolerance"
    # -intent drops the term and with it the bound; the run config's default is 0.5
    out = evaluate_responses([bad], kind="number", judge=FakeJudge([0.9], [[0.85]]),
                             embedder=EMB, intent_tolerance=0.5, ablation="-intent")
    assert out[0].retained
    assert PFedMAConfig().anomaly.intent_tolerance == 0.5


def test_bad_judge_values_are_conservative():
    # NaN intent → 1.0; support 1.5 clipped to 1 → a_evi 0; λ=α=0 → A = (1+0)/2
    r = _resp("18", [("c 18", ["e"])])
    out = evaluate_responses([r], kind="number", judge=FakeJudge([math.nan], [[1.5]]),
                             embedder=EMB, lambda_pool=0.0, alpha_con=0.0)
    assert (out[0].a_int, out[0].a_evi, out[0].score) == (1.0, 0.0, 0.5)


def test_evaluate_batch_consensus_within_groups_one_judge_call():
    judge = FakeJudge(intent=[0.0] * 3, supports=[[1.0], [1.0, 1.0], []])
    out = evaluate_batch([[R1, None], [R2, R4]], kinds=["number", "number"], judge=judge,
                         embedder=EMB, consensus="mean")
    assert judge.calls == {"intent": 1, "evidence": 1}
    # group 1: R1 alone → a_con 0; group 2: 18 vs 42 orthogonal → a_con 1 each
    assert [[r.a_con for r in g] for g in out] == [[0.0, 0.0], [1.0, 1.0]]
    # coherent (default): 18 vs 42 is a split with no consensus → 0 each
    out = evaluate_batch([[R1, None], [R2, R4]], kinds=["number", "number"],
                         judge=FakeJudge(intent=[0.0] * 3, supports=[[1.0], [1.0, 1.0], []]),
                         embedder=EMB)
    assert [[r.a_con for r in g] for g in out] == [[0.0, 0.0], [0.0, 0.0]]
    assert out[0][1].reason == "unparsed"


def test_evaluate_validates_arguments():
    with pytest.raises(ValueError, match="kinds"):
        evaluate_batch([[R1]], kinds=[], judge=_judge(), embedder=EMB)
    with pytest.raises(ValueError, match="tolerance"):
        evaluate_responses([R1], kind="number", judge=_judge(), embedder=EMB, tolerance=2.0)
    # nothing parsed: no judge call at all
    judge = _judge()
    assert evaluate_responses([None], kind="number", judge=judge, embedder=EMB)[0].reason == \
        "unparsed"
    assert judge.calls == {"intent": 0, "evidence": 0}
