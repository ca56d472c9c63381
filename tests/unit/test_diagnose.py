"""Per-query loss attribution between two runs (experiments/diagnose.py), on hand-made runs."""

from __future__ import annotations

import json
from pathlib import Path

from pfedma_flwr.data.benchmarks import load_benchmark
from pfedma_flwr.experiments.diagnose import diagnose, main, to_markdown


def _write_run(d: Path, finals: dict[str, tuple[str, bool, int]],
               rounds: list[dict[str, dict[str, tuple[str, bool]]]]) -> None:
    """``finals``: qid → (answer, correct, rounds); ``rounds[t-1]``: qid → client → (answer,
    retained)."""
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("{}\n", encoding="utf-8")
    (d / "summary.json").write_text(json.dumps({"status": "completed", "clients": {
        "c0": {"description": "math"}, "c1": {"description": "doctor"}}}), encoding="utf-8")
    (d / "queries.jsonl").write_text("".join(json.dumps(
        {"query_id": q, "benchmark": q.split("-")[0], "answer": a, "correct": ok, "rounds": n,
         "stop_reason": "t_max"}) + "\n" for q, (a, ok, n) in finals.items()), encoding="utf-8")
    (d / "rounds.jsonl").write_text("".join(json.dumps({"queries": [
        {"query_id": q, "t": t, "responses": {c: {"answer": a} for c, (a, _r) in per.items()},
         "anomaly": {c: {"retained": r} for c, (_a, r) in per.items()}}
        for q, per in rnd.items()]}) + "\n" for t, rnd in enumerate(rounds, 1)),
        encoding="utf-8")


def test_each_wrong_query_gets_the_first_mechanism_that_lost_it(tmp_path, capsys):
    gold = {t.task_id: t.gold for t in load_benchmark("gsm8k")[:4]}
    a, b, c, e = list(gold)
    wrong = {q: str(int(g) + 1) for q, g in gold.items()}
    run, ref = tmp_path / "fed", tmp_path / "single"
    _write_run(run, {a: (gold[a], True, 1), b: (wrong[b], False, 1), c: (wrong[c], False, 2),
                     e: (wrong[e], False, 1)}, [
        {a: {"c0": (gold[a], True), "c1": (gold[a], True)},
         b: {"c0": (wrong[b], True), "c1": (wrong[b], True)},       # never produced
         c: {"c0": (gold[c], False), "c1": (wrong[c], True)},       # the right one filtered
         e: {"c0": (gold[e], True), "c1": (wrong[e], True)}},       # retained but outvoted
        {c: {"c1": (wrong[c], True)}, e: {"c0": (wrong[e], True)}},  # c0 conforms on e
    ])
    _write_run(ref, {a: (gold[a], True, 1), b: (gold[b], True, 1), c: (wrong[c], False, 1),
                     e: (gold[e], True, 1)}, [])
    d = diagnose(run, ref)
    assert d["correct"] == 1 and d["losses"] == {
        "gsm8k": {"never_produced": 1, "filtered": 1, "outvoted": 1}}
    assert d["wrong_after_one_agreeing_round"] == 1  # b: two agents, one wrong answer, 1 round
    # c1 was wrong on c in round 1 and again in round 2: no switch; c0 gave up its right e
    assert d["switched"] == {"right_to_wrong": 1, "wrong_to_right": 0}
    # round-1 answers only: c0 right on a, c, e; c1 right on a
    assert d["clients"] == {"c0": {"gsm8k": (3, 4)}, "c1": {"gsm8k": (1, 4)}}
    assert [r["query_id"] for r in d["lost_vs_reference"]] == sorted([b, e])
    assert d["won_vs_reference"] == [] and d["on_common"] == {"n": 4, "run": 1, "reference": 3}
    md = to_markdown(d)
    assert "| gsm8k | 1 | 1 | 1 |" in md and f"`{b}` never_produced" in md
    assert main([str(run), "--reference", str(tmp_path / "nothing")]) == 2
    assert "holds no run" in capsys.readouterr().err
