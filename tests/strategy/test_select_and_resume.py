"""The best-single selection on dev questions, and a preset that survives an interruption.

In-process (FakeGrid + run_server), the runner and the selection command are the real ones.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from client_apps.agent_app import app as client_app
from pfedma_flwr.client import components as client_components
from pfedma_flwr.config import load_config
from pfedma_flwr.experiments import VariantRun, load_preset, run_experiment
from pfedma_flwr.experiments.presets import CHOICES_DIR
from pfedma_flwr.experiments.select import pick, question_ids, select
from pfedma_flwr.server_app import run_server
from pfedma_flwr.testing import FakeGrid


class _Killed(BaseException):
    """Stands for the SIGTERM / Ctrl-C that stops a long experiment."""


class _DyingGrid(FakeGrid):
    """Dies on its ``die_at``-th send_and_receive (call 1 is the handshake)."""

    def __init__(self, *a, die_at: int, **k):
        super().__init__(*a, **k)
        self.calls, self.die_at = 0, die_at

    def send_and_receive(self, messages, *, timeout=None):
        self.calls += 1
        if self.calls == self.die_at:
            raise _Killed("stopped")
        return super().send_and_receive(messages, timeout=timeout)


class Executor:
    """The FakeGrid executor, recording its calls; ``die`` kills one variant mid-run."""

    def __init__(self, die: str = "", die_at: int = 3):
        self.calls: list[tuple[str, bool]] = []
        self.die, self.die_at = die, die_at

    def __call__(self, v: VariantRun) -> None:
        self.calls.append((v.variant, v.resume))
        client_components.build_agent.cache_clear()
        rc = {"config-name": v.config, "output-dir": str(v.output_dir),
              "overrides": v.overrides, "resume": v.resume}
        grid = (_DyingGrid(client_app, v.num_clients, rc, die_at=self.die_at)
                if v.variant == self.die else FakeGrid(client_app, v.num_clients, rc))
        assert run_server(grid, load_config(rc))["status"] == "completed"


pytestmark = pytest.mark.usefixtures("fresh_agent_caches")


def test_best_single_is_chosen_on_dev_questions_and_read_by_main(tmp_path: Path):
    choices = tmp_path / "choices"
    path = select("best_single", size="tiny", output_dir=tmp_path / "sel", executor=Executor(),
                  choices_dir=choices)
    record = yaml.safe_load(path.read_text())
    rows = json.loads((tmp_path / "sel" / "experiment.json").read_text())["rows"]
    assert record["choice"] == pick(rows)["labels"]["candidate"]
    best = max(r["metrics"]["ACC"] for r in rows)
    assert record["measured"][record["choice"]]["ACC"] == best
    cand = load_preset("best_single").axes["candidate"][record["choice"]]
    assert record["overrides"] == {k: v for k, v in cand.items() if k != "num_clients"}
    # chosen on questions main never tests on
    test_ids = question_ids(load_preset("main"), "tiny", choice="best_single")
    assert test_ids and not set(record["dev_question_ids"]) & test_ids
    # main's best-single and centralized levels run with the chosen configuration
    ex = Executor()
    result = run_experiment("main", size="tiny", output_dir=tmp_path / "main", executor=ex,
                            only={"method": ["pfedma", "best-single", "centralized"]},
                            choices_dir=choices)
    assert [c[0] for c in ex.calls] == ["method=pfedma", "method=best-single",
                                        "method=centralized"]
    cfg = yaml.safe_load((tmp_path / "main/runs/method=best-single/config.yaml").read_text())
    assert cfg["agent"]["profiles"] == record["overrides"]["agent.profiles"]
    assert cfg["data"]["eval_offset"] == 5  # main's tiny test questions
    by = {r["labels"]["method"]: r["metrics"] for r in result["rows"]}
    assert {"dACC", "dACC_lo", "dACC_hi", "p_mcnemar"} <= set(by["best-single"])


def test_a_selection_that_would_see_test_questions_is_refused(tmp_path: Path):
    ex = Executor()
    with pytest.raises(ValueError, match="test questions of 'main'"):
        # the same offset for both: the candidates would answer main's test questions
        select("best_single", size="tiny", output_dir=tmp_path, executor=ex,
               extra=["data.eval_offset=5"], choices_dir=tmp_path)
    assert ex.calls == []  # refused before anything ran


def test_a_missing_choice_names_the_command_that_writes_it(tmp_path: Path):
    with pytest.raises(ValueError, match="pfedma_flwr.experiments.select best_single"):
        run_experiment("main", size="tiny", output_dir=tmp_path, executor=Executor(),
                       only={"method": ["best-single"]}, choices_dir=tmp_path)


def test_the_shipped_tiny_choice_is_the_tiny_selection(tmp_path: Path):
    # conf/experiments/choices/best_single-tiny.yaml: written by the selection at tiny size
    shipped = yaml.safe_load((CHOICES_DIR / "best_single-tiny.yaml").read_text())
    path = select("best_single", size="tiny", output_dir=tmp_path / "sel", executor=Executor(),
                  choices_dir=tmp_path)
    fresh = yaml.safe_load(path.read_text())
    for k in ("choice", "overrides", "measured", "dev_question_ids"):
        assert fresh[k] == shipped[k], k


def test_an_interrupted_preset_resumes_where_it_stopped(tmp_path: Path):
    only = {"method": ["pfedma", "single-agent", "kabb"]}
    # the third level dies in its second collaboration round (call 3: handshake, round 1,
    # round 2): pfedma and single-agent are finished, kabb has a checkpoint after round 1
    first = Executor(die="method=kabb", die_at=3)
    with pytest.raises(_Killed):
        run_experiment("main", size="tiny", output_dir=tmp_path, executor=first, only=only,
                       choices_dir=tmp_path)
    kabb = tmp_path / "runs" / "method=kabb"
    assert json.loads((kabb / "checkpoint.json").read_text())["server_round"] == 1
    assert json.loads((kabb / "summary.json").read_text())["status"] == "failed"
    # what completed is tabled already (a failed or stopped preset loses nothing)
    with open(tmp_path / "results.csv", newline="") as f:
        assert [r["method"] for r in csv.DictReader(f)] == ["pfedma", "single-agent"]
    again = Executor()
    result = run_experiment("main", size="tiny", output_dir=tmp_path, executor=again,
                            only=only, resume=True, choices_dir=tmp_path)
    # no finished level ran again; the interrupted one continued from its checkpoint
    assert again.calls == [("method=kabb", True)]
    assert json.loads((kabb / "summary.json").read_text())["resumed_from_round"] == 1
    with open(tmp_path / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["method"] for r in rows] == ["pfedma", "single-agent", "kabb"]
    assert all(r["ACC"] != "" for r in rows)
    ids = [json.loads(line)["query_id"] for line in (kabb / "queries.jsonl").open()]
    assert len(ids) == len(set(ids)) == 6 * 3  # 6 benchmarks x 3 questions, none twice
    assert set(json.loads((tmp_path / "walls.json").read_text())) == {
        "method=pfedma", "method=single-agent", "method=kabb"}
    assert len(result["rows"]) == 3


def test_a_changed_level_is_run_again_not_reused(tmp_path: Path):
    only = {"method": ["single-agent"]}
    run_experiment("main", size="tiny", output_dir=tmp_path, executor=Executor(), only=only,
                   choices_dir=tmp_path)
    ex = Executor()
    run_experiment("main", size="tiny", output_dir=tmp_path, executor=ex, only=only,
                   resume=True, choices_dir=tmp_path)
    assert ex.calls == []  # same configuration: reused
    run_experiment("main", size="tiny", output_dir=tmp_path, executor=ex, only=only,
                   resume=True, extra=["strategy.batch_size=2"], choices_dir=tmp_path)
    assert ex.calls == [("method=single-agent", False)]


def test_seeds_repeat_sampled_levels_on_the_same_questions(tmp_path: Path):
    ex = Executor()
    result = run_experiment("main", size="tiny", output_dir=tmp_path, executor=ex,
                            only={"method": ["pfedma", "single-agent"]}, seeds=[0, 1, 2],
                            choices_dir=tmp_path)
    # pfedma samples (temperature 0.3): three runs; the single agent is greedy: one
    assert [c[0] for c in ex.calls] == ["method=pfedma"] * 3 + ["method=single-agent"]
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == ["method=pfedma_seed=0", "method=pfedma_seed=1", "method=pfedma_seed=2",
                    "method=single-agent"]
    qs = [[json.loads(line)["query_id"] for line in (tmp_path / "runs" / r / "queries.jsonl")
           .open()] for r in runs[:3]]
    assert sorted(qs[0]) == sorted(qs[1]) == sorted(qs[2])  # same questions
    m = {r["labels"]["method"]: r["metrics"] for r in result["rows"]}
    accs = [json.loads((tmp_path / "runs" / r / "summary.json").read_text())["accuracy"]
            for r in runs[:3]]
    mean = sum(accs) / 3
    sd = (sum((a - mean) ** 2 for a in accs) / 2) ** 0.5
    assert m["pfedma"]["ACC"] == pytest.approx(mean) and m["pfedma"]["ACC_sd"] == pytest.approx(sd)
    assert "ACC_sd" not in m["single-agent"]


def test_select_leaves_the_port_to_the_launcher_unless_one_is_named(monkeypatch, tmp_path):
    """A fixed default port was "requested": the SuperLink of the candidate before could still
    hold it when the next candidate started, and the selection died (exit 3, 2026-12-06)."""
    from pfedma_flwr.experiments import select as sel

    seen: list[int | None] = []
    monkeypatch.setattr(sel, "flwr_executor", lambda port, timeout: seen.append(port))
    monkeypatch.setattr(sel, "select", lambda *a, **k: None)
    sel.main(["best_single", "--size", "tiny", "--output-dir", str(tmp_path)])
    sel.main(["best_single", "--size", "tiny", "--output-dir", str(tmp_path), "--port", "40001"])
    assert seen == [None, 40001]


def test_no_choice_is_made_from_a_candidate_that_lost_answers(tmp_path: Path):
    """A candidate whose round timed out (answers never produced) is not compared with the
    others: the selection names it and writes no choice; rerun with it removed, it is chosen
    from complete runs (2026-12-06: generalist-cot lost 20 of 40 answers to a timeout)."""
    from pfedma_flwr.experiments.select import incomplete_runs

    out, choices = tmp_path / "sel", tmp_path / "choices"
    select("best_single", size="tiny", output_dir=out, executor=Executor(), choices_dir=choices)
    summary = out / "runs" / "candidate=plain-cot" / "summary.json"
    d = json.loads(summary.read_text())
    d["generation"] = {**d["generation"], "answers": 6, "generation_failed": 3,
                       "failed_by_code": {"timeout": 3}}
    summary.write_text(json.dumps(d))
    (choices / "best_single-tiny.yaml").unlink()
    rows = json.loads((out / "experiment.json").read_text())["rows"]
    assert list(incomplete_runs(out, rows)) == ["candidate=plain-cot"]
    with pytest.raises(ValueError, match=r"candidate=plain-cot: 3 of 6 answers not produced"):
        select("best_single", size="tiny", output_dir=out, executor=Executor(), resume=True,
               choices_dir=choices)
    assert not (choices / "best_single-tiny.yaml").exists()
    import shutil

    shutil.rmtree(summary.parent)  # what the message says to do
    ex = Executor()
    select("best_single", size="tiny", output_dir=out, executor=ex, resume=True,
           choices_dir=choices)
    assert [c[0] for c in ex.calls] == ["candidate=plain-cot"]  # only the removed one reruns
    assert (choices / "best_single-tiny.yaml").exists()
