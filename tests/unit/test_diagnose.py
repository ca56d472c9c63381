"""Per-query loss attribution between two runs (experiments/diagnose.py), on hand-made runs."""

from __future__ import annotations

import json
from pathlib import Path

from pfedma_flwr.data.benchmarks import load_benchmark
from pfedma_flwr.experiments.diagnose import decided_by, diagnose, main, to_markdown


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
    # a and b agreed in round 1 (b on a wrong answer); c and e split. On e, c0 came round to
    # c1's answer (two clients back it: a majority); on c, c1 only repeated itself (none)
    assert d["round_one"] == {"gsm8k": {
        "agree": {"n": 2, "produced": 1, "run": 1, "ref_n": 2, "reference": 2},
        "split, no majority": {"n": 1, "produced": 1, "run": 0, "ref_n": 1, "reference": 0},
        "split, then majority": {"n": 1, "produced": 1, "run": 0, "ref_n": 1, "reference": 1}}}
    md = to_markdown(d)
    assert "| gsm8k | 1 | 1 | 1 |" in md and f"`{b}` never_produced" in md
    assert "| gsm8k | agree | 2 | 1 | 1 | 2/2 |" in md
    assert "| gsm8k | split, then majority | 1 | 1 | 0 | 1/1 |" in md
    assert main([str(run), "--reference", str(tmp_path / "nothing")]) == 2
    assert "holds no run" in capsys.readouterr().err


def test_multiple_choice_scores_are_tested_against_guessing(tmp_path):
    tasks = load_benchmark("medqa")[:3]
    gold = {t.task_id: t.gold for t in tasks}
    other = {q: "A" if g != "A" else "B" for q, g in gold.items()}
    a, b, c = list(gold)
    run, ref = tmp_path / "fed", tmp_path / "single"
    # c0 right on all three, c1 on none; the run right on two, the reference on one
    _write_run(run, {a: (gold[a], True, 1), b: (gold[b], True, 1), c: (other[c], False, 1)}, [
        {q: {"c0": (gold[q], True), "c1": (other[q], True)} for q in gold}])
    _write_run(ref, {a: (gold[a], True, 1), b: (other[b], False, 1), c: (other[c], False, 1)},
               [])
    d = diagnose(run, ref)
    assert d["chance"] == {"medqa": 0.25}  # four options each
    assert d["accuracy"] == {"medqa": (2, 3)} and d["reference_accuracy"] == {"medqa": (1, 3)}
    md = to_markdown(d)
    # P(X >= 3) = 1/64 = 0.0156, P(X >= 0) = 1; P(X >= 2) = 10/64, P(X >= 1) = 37/64
    assert "| c0 | math | 3/3 (p 0.016) |" in md and "| c1 | doctor | 0/3 (p 1) |" in md
    assert "25 % on medqa" in md
    assert "final answers: medqa 2/3 (p 0.16); the reference's: medqa 1/3 (p 0.58)." in md


def test_open_answers_get_no_guessing_rate(tmp_path):
    gold = {t.task_id: t.gold for t in load_benchmark("gsm8k")[:2]}
    run = tmp_path / "fed"
    _write_run(run, {q: (g, True, 1) for q, g in gold.items()},
               [{q: {"c0": (g, True)} for q, g in gold.items()}])
    d = diagnose(run)
    assert d["chance"] == {} and "Guessing" not in to_markdown(d)
    assert "| c0 | math | 2/2 |" in to_markdown(d)


def test_a_split_that_no_round_resolves_is_counted_apart(tmp_path):
    gold = {t.task_id: t.gold for t in load_benchmark("gsm8k")[:2]}
    a, b = list(gold)
    w1 = {q: str(int(g) + 1) for q, g in gold.items()}
    w2 = {q: str(int(g) + 2) for q, g in gold.items()}
    run = tmp_path / "fed"
    # a: right, wrong, then a third answer: z picks the right singleton; b: three wrong ones
    _write_run(run, {a: (gold[a], True, 2), b: (w1[b], False, 2)}, [
        {a: {"c0": (gold[a], True), "c1": (w1[a], True)},
         b: {"c0": (w1[b], True), "c1": (w2[b], True)}},
        {a: {"c2": (w2[a], True)}, b: {"c2": (gold[b] + "0", True)}},
    ])
    d = diagnose(run)
    assert d["round_one"] == {"gsm8k": {"split, no majority": {
        "n": 2, "produced": 1, "run": 1, "ref_n": 0, "reference": 0}}}
    # a client re-asked that repeats its own answer backs it once: still no majority
    again = tmp_path / "again"
    _write_run(again, {a: (w1[a], False, 2)}, [
        {a: {"c0": (gold[a], True), "c1": (w1[a], True)}}, {a: {"c1": (w1[a], True)}}])
    assert list(diagnose(again)["round_one"]["gsm8k"]) == ["split, no majority"]
    assert "| gsm8k | split, no majority | 2 | 1 | 1 | - |" in to_markdown(d)


def _why(c, sim, s, bonus=0.0, cost=0.0, **tier):
    return {"C": c, "sim": sim, "S": s, "bonus": bonus, "cost": cost,
            "score": (c + sim) / 2 * s + bonus - cost,
            **{t: float(tier.get(t, 0.0)) for t in ("filtered", "off_domain", "asked_again",
                                                    "way")}}


def test_what_decided_a_pick_is_the_first_differing_tier_else_the_largest_score_part():
    # a tier part is compared before any score
    assert decided_by(_why(0.1, 0.1, 0.5), _why(0.9, 0.9, 0.9, asked_again=1)) == "asked_again"
    # the test run's MedQA re-asks (routing.clients at its end, query similarities of
    # docs/experiments.md): physician C .247, sim .29, S .84 against the pharmacologist's
    # C .270, sim .15, S .667. S mid .7535; parts: C (.247 - .270)/2 * .7535 = -.0087,
    # sim (.29 - .15)/2 * .7535 = +.0527, S (.537 + .420)/4 * .173 = +.0414: similarity decides
    phys, pharm = _why(0.247, 0.29, 0.84), _why(0.270, 0.15, 0.667)
    assert decided_by(phys, pharm) == "sim"
    # the parts add up to the score difference (midpoint rule), so the winner is well defined
    assert decided_by(_why(0.5, 0.5, 0.9), _why(0.5, 0.5, 0.5)) == "S"
    assert decided_by(_why(0.5, 0.5, 0.5, bonus=0.2), _why(0.5, 0.5, 0.5)) == "bonus"
    assert decided_by(_why(0.5, 0.5, 0.5), _why(0.5, 0.5, 0.5, cost=0.1)) == "cost"
    assert decided_by(_why(0.5, 0.5, 0.5), _why(0.5, 0.5, 0.5)) == "tie"


def test_routing_reasons_in_the_round_records_are_counted_per_benchmark_and_round(tmp_path):
    gold = {t.task_id: t.gold for t in load_benchmark("gsm8k")[:2]}
    a, b = list(gold)
    run = tmp_path / "fed"
    _write_run(run, {a: (gold[a], True, 2), b: (gold[b], True, 1)},
               [{a: {"c0": (gold[a], True)}, b: {"c0": (gold[b], True)}},
                {a: {"c1": (gold[a], True)}}])
    lines = [json.loads(x) for x in (run / "rounds.jsonl").read_text().splitlines()]
    lines[0]["queries"][0].update(selected=["c0"], routing={
        "c0": _why(0.5, 0.9, 0.5), "c1": _why(0.5, 0.2, 0.5)})          # sim
    lines[0]["queries"][1].update(selected=["c0"])                       # no reasons: skipped
    lines[1]["queries"][0].update(selected=["c1"], routing={
        "c1": _why(0.5, 0.2, 0.5), "c0": _why(0.5, 0.9, 0.5, asked_again=1)})
    (run / "rounds.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    d = diagnose(run)
    assert d["routing"] == {"gsm8k": {"round 1": {"sim": 1}, "later rounds": {"asked_again": 1}}}
    assert "| gsm8k | later rounds | asked_again 1 |" in to_markdown(d)
