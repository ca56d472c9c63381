"""Training rows: veRL row format, dev pools disjoint from evaluation, MATH-500 held out, CLI."""

import json

import pyarrow.parquet as pq
import pytest

from pfedma_flwr.data.benchmarks import load_benchmark
from pfedma_flwr.data.split import sample_eval_tasks
from pfedma_flwr.training.__main__ import main
from pfedma_flwr.training.data import AGENT_NAME, build_data, build_rows, training_tasks
from pfedma_flwr.training.episode import task_from_extra_info


@pytest.fixture(scope="module")
def tasks():
    return training_tasks(per_benchmark=30, seed=0)


def test_tasks_are_disjoint_from_the_eval_stream_and_math500(tasks):
    evaluated = {t.task_id for t in sample_eval_tasks(["math", "medqa"], 50, 0,
                                                      dev_pool_per_benchmark=30)}
    assert evaluated and not evaluated & {t.task_id for t in tasks}
    math500 = {t.question for t in load_benchmark("math500")}
    assert not math500 & {t.question for t in tasks}
    assert {t.benchmark for t in tasks} == {"math", "medqa"}
    # medqa keeps its whole pool; math loses only MATH-500 overlaps
    assert sum(t.benchmark == "medqa" for t in tasks) == 30
    assert 0 < sum(t.benchmark == "math" for t in tasks) <= 30


def test_rows_follow_the_verl_format_and_round_trip_to_tasks(tasks):
    train, val = build_rows(tasks, val_per_benchmark=3)
    assert len(val) == 6 and len(train) == len(tasks) - 6
    row = next(r for r in train if r["data_source"] == "pfedma/medqa")
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "agent_name",
                        "extra_info"}
    assert row["agent_name"] == AGENT_NAME and row["ability"] == "medicine"
    assert row["prompt"][0]["role"] == "user"
    assert row["reward_model"]["style"] == "rule"
    ex = row["extra_info"]
    assert ex["split"] == "train" and ex["answer_kind"] == "option"
    back = task_from_extra_info(ex, row["prompt"][0]["content"],
                                row["reward_model"]["ground_truth"])
    original = next(t for t in tasks if t.task_id == ex["task_id"])
    assert back == original and back.options == original.options
    assert [r["extra_info"]["index"] for r in val] == list(range(6))


def test_val_size_must_leave_training_rows(tasks):
    with pytest.raises(ValueError, match="leave none for training"):
        build_rows(tasks, val_per_benchmark=30)


def test_cli_writes_parquet_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "d"
    args = ["build-data", "--out", str(out), "--benchmarks", "medqa", "--per-benchmark", "12",
            "--val-per-benchmark", "2"]
    assert main(args) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["train"] == 10 and info["val"] == 2
    rows = pq.read_table(out / "train.parquet").to_pylist()
    assert len(rows) == 10 and rows[0]["extra_info"]["benchmark"] == "medqa"
    assert json.loads(rows[0]["extra_info"]["options_json"]).keys() == {"A", "B", "C", "D"}
    assert main(args) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0


def test_build_data_unknown_benchmark(tmp_path):
    with pytest.raises(ValueError, match="nosuch"):
        build_data(tmp_path, benchmarks=["nosuch"])
