"""Replaying a run's recorded answers with fewer later-round answers (experiments/replay.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pfedma_flwr.data.benchmarks import load_benchmark
from pfedma_flwr.experiments.replay import main, replay


def _write_run(d: Path, finals: dict[str, bool],
               rounds: list[dict[str, tuple[list[str], dict[str, tuple[str, bool]]]]],
               states: dict[str, dict]) -> None:
    """``rounds[t-1]``: qid → (selected in order, client → (answer, retained))."""
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("{}\n", encoding="utf-8")
    (d / "summary.json").write_text(json.dumps({"status": "completed"}), encoding="utf-8")
    (d / "checkpoint.json").write_text(json.dumps(
        {"routing": {"eta": 0.2, "clients": states}}), encoding="utf-8")
    (d / "queries.jsonl").write_text("".join(json.dumps(
        {"query_id": q, "benchmark": "gsm8k", "correct": ok}) + "\n"
        for q, ok in finals.items()), encoding="utf-8")
    (d / "rounds.jsonl").write_text("".join(json.dumps({"queries": [
        {"query_id": q, "t": t, "selected": sel,
         "responses": {c: {"answer": a, "claims": ["x = 1"]} for c, (a, _r) in per.items()},
         "anomaly": {c: {"retained": r, "score": 0.0} for c, (_a, r) in per.items()}}
        for q, (sel, per) in rnd.items()]}) + "\n" for t, rnd in enumerate(rounds, 1)),
        encoding="utf-8")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    gold = {t.task_id: t.gold for t in load_benchmark("gsm8k")[:3]}
    a, b, c = list(gold)
    w = {q: str(int(g) + 1) for q, g in gold.items()}
    w2 = {q: str(int(g) + 2) for q, g in gold.items()}
    d = tmp_path / "run"
    # c1 is the heaviest voter: C 0.9 against the prior 0.5, S 0.5 for all (weights 0.45, 0.25)
    _write_run(d, {a: True, b: True, c: False}, [
        {a: (["c0", "c1"], {"c0": (gold[a], True), "c1": (w[a], True)}),
         b: (["c0", "c1"], {"c0": (gold[b], True), "c1": (gold[b], True)}),
         c: (["c0", "c1"], {"c0": (gold[c], False), "c1": (w[c], True)})},
        # on a the first round-2 answer matches neither side, the second backs c0
        {a: (["c2", "c3"], {"c2": (w2[a], True), "c3": (gold[a], True)}),
         c: (["c2"], {"c2": (w[c], True)})},
    ], {"c1": {"capability": {"math": 0.9}, "reliability": 0.5, "n_asked": {"math": 3}}})
    return d


def test_cutting_a_later_round_to_its_first_answer_replays_what_k_1_would_have_given(run_dir):
    d = replay(run_dir, [None, 1, 2])
    assert (d["recorded"], d["n"]) == (2, 3)
    everything, one, two = d["rows"]
    # unchanged, the replay must give the record: a by c0 + c3 (0.25 + 0.25 > 0.45), b agreed
    assert (everything["solved"], everything["b"], everything["c"]) == (2, 0, 0)
    assert everything["answers_per_query"] == pytest.approx(9 / 3)  # 4 + 2 + 3 (one filtered)
    # K = 1 after round 1: on a three singletons, c1's wrong answer is the heaviest
    assert (one["solved"], one["b"], one["c"]) == (1, 0, 1)
    assert one["diff"] == pytest.approx(-1 / 3)
    assert one["answers_per_query"] == pytest.approx(8 / 3)
    assert two["solved"] == 2


def test_the_cli_prints_the_table_and_refuses_a_dir_that_is_not_a_finished_run(
        run_dir, tmp_path, capsys):
    assert main([str(run_dir), "--later-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "Recorded: 2/3" in out and "| 1 | 1/3 |" in out and "| all | 2/3 |" in out
    (run_dir / "checkpoint.json").unlink()
    assert main([str(run_dir)]) == 2
    assert "checkpoint.json is missing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(run_dir), "--later-k", "0"])
