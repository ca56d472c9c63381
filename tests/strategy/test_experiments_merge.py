"""The experiment harness loses nothing and uses what the user said (issue 32), in-process.

``--only`` into an existing output dir adds its variants to the table instead of replacing it;
running a variant that already holds results is refused unless ``--reuse`` or ``--overwrite``;
every variant is checked before the first one runs; ``--data-dir`` / ``--set data.data_dir``
reach every variant; ``--tracking tensorboard`` logs each variant's config and metrics.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pfedma_flwr.experiments import VariantRun, run_experiment
from pfedma_flwr.experiments import __main__ as harness
from pfedma_flwr.experiments.runner import ExperimentRefused
from tests.strategy.test_experiments import fakegrid_executor

ROUNDS = ["t-max=1", "t-max=2", "t-max=3", "t-max=4"]


class _Counting:
    def __init__(self) -> None:
        self.runs: list[VariantRun] = []

    def __call__(self, v: VariantRun) -> None:
        self.runs.append(v)
        fakegrid_executor(v)


def _table(out: Path) -> list[str]:
    with open(out / "results.csv", newline="", encoding="utf-8") as f:
        return [row["t_max"] for row in csv.DictReader(f)]


def test_only_into_an_existing_dir_merges_and_never_reruns_silently(tmp_path):
    run = _Counting()
    run_experiment("rounds", output_dir=tmp_path, executor=run, only={"t_max": ["1"]})
    first = (tmp_path / "runs" / "t-max=1" / "queries.jsonl").read_text()
    result = run_experiment("rounds", output_dir=tmp_path, executor=run, only={"t_max": ["3"]})
    assert [r["variant"] for r in result["rows"]] == ["t-max=1", "t-max=3"]
    md = (tmp_path / "results.md").read_text()
    assert _table(tmp_path) == ["1", "3"] and "\n| 1 |" in md and "\n| 3 |" in md
    # the same level again: refused before anything runs, the earlier run untouched
    with pytest.raises(ExperimentRefused, match=r"already hold runs: \['t-max=1'\]"):
        run_experiment("rounds", output_dir=tmp_path, executor=run, only={"t_max": ["1", "2"]})
    assert [v.variant for v in run.runs] == ["t-max=1", "t-max=3"]
    # --reuse skips the completed one, runs the new one
    run_experiment("rounds", output_dir=tmp_path, executor=run, only={"t_max": ["1", "2"]},
                   reuse=True)
    assert [v.variant for v in run.runs][2:] == ["t-max=2"]
    assert (tmp_path / "runs" / "t-max=1" / "queries.jsonl").read_text() == first
    # --overwrite runs it again (the launcher replaces its files once the new run starts)
    run_experiment("rounds", output_dir=tmp_path, executor=run, only={"t_max": ["1"]},
                   overwrite=True)
    assert run.runs[-1].variant == "t-max=1" and run.runs[-1].overwrite
    assert _table(tmp_path) == ["1", "2", "3"]


def test_reuse_resumes_a_variant_that_stopped_after_a_checkpoint(tmp_path):
    run = _Counting()
    run_experiment("rounds", output_dir=tmp_path, executor=run, only={"t_max": ["2"]})
    summary = tmp_path / "runs" / "t-max=2" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "status": "interrupted"}))
    (tmp_path / "runs" / "t-max=2" / "checkpoint.json").write_text("{}")
    run_experiment("rounds", output_dir=tmp_path, executor=lambda v: run.runs.append(v),
                   only={"t_max": ["2"]}, reuse=True)
    assert run.runs[-1].resume and not run.runs[-1].overwrite


@pytest.mark.parametrize("extra, words", [
    (["strategy.name=fedavgg"], "variant t-max=1: strategy.name: unknown strategy 'fedavgg'"),
    (["data.data_dir=/no/such/dir"], "'/no/such/dir' (from data-dir) does not exist"),
])
def test_every_variant_is_checked_before_the_first_runs(tmp_path, extra, words):
    run = _Counting()
    with pytest.raises(ExperimentRefused, match=words.replace("(", r"\(").replace(")", r"\)")):
        run_experiment("rounds", output_dir=tmp_path, executor=run, extra=extra)
    assert run.runs == [] and not (tmp_path / "runs").exists()


def test_too_few_clients_for_a_variant_are_refused(tmp_path):
    with pytest.raises(ExperimentRefused, match="--num-clients 1 is below strategy.min_nodes"):
        run_experiment("rounds", output_dir=tmp_path, executor=_Counting(), num_clients=1)


def test_harness_data_dir_and_set_data_dir_reach_every_variant(tmp_path, monkeypatch, capsys):
    data = Path(__file__).resolve().parents[2] / "data"
    seen: list[VariantRun] = []
    monkeypatch.setattr(harness, "flwr_executor", lambda *a, **k: seen.append)
    assert harness.main(["rounds", "--output-dir", str(tmp_path / "a"), "--only", "t_max=1",
                         "--data-dir", str(data)]) == 0
    assert f"data.data_dir={data}" in seen[-1].overrides
    assert harness.main(["rounds", "--output-dir", str(tmp_path / "b"), "--only", "t_max=1",
                         "--set", f"data.data_dir={data}"]) == 0
    assert f"data.data_dir={data}" in seen[-1].overrides
    assert harness.main(["rounds", "--output-dir", str(tmp_path / "c"), "--data-dir",
                         str(tmp_path / "nope")]) == 3
    assert "does not exist" in capsys.readouterr().err


def test_tracking_logs_each_variants_config_rounds_and_final_metrics(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_experiment("rounds", output_dir=tmp_path, executor=fakegrid_executor,
                   only={"t_max": ["2"]}, tracking="tensorboard")
    [events] = list((tmp_path / "tracking" / "t-max=2").glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "t_max: 2" in text and "name: simulated" in text
    assert {"final/ACC", "cost/tokens"} <= set(acc.Tags()["scalars"])
