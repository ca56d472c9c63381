"""A run whose questions do not exist is refused before anything starts (experiments/preflight)."""

from __future__ import annotations

from pfedma_flwr.config import load_config
from pfedma_flwr.experiments.preflight import question_problems


def _cfg(overrides: str):  # noqa: ANN202
    return load_config({"config-name": "pfedma", "overrides": overrides})


def test_the_unseen_set_with_the_test_offset_is_refused_naming_the_keys():
    # 100 unseen questions a benchmark: questions 100-129 of them do not exist
    got = question_problems(_cfg("data.question_set=unseen data.eval_offset=100 "
                                 "data.queries_per_benchmark=30"))
    assert len(got) == 1 and got[0].exit_code == 3
    msg = got[0].message
    assert "offset 100 + n_per_benchmark 30 is too many" in msg
    assert "data.question_set=unseen" in msg and "data.eval_offset=100" in msg


def test_the_documented_comparisons_are_accepted():
    assert question_problems(_cfg("data.question_set=unseen data.eval_offset=0 "
                                  "data.queries_per_benchmark=30")) == []
    assert question_problems(_cfg("data.eval_offset=100 data.queries_per_benchmark=30")) == []


def test_an_unknown_benchmark_is_a_config_problem_not_a_crash():
    got = question_problems(_cfg("data.benchmarks=[gsm8k,nosuchbench]"))
    assert len(got) == 1 and "nosuchbench" in got[0].message
