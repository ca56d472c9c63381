"""Intervals and paired tests of the experiment tables against hand-computed cases."""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import pytest

from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.data.benchmarks import load_benchmark
from pfedma_flwr.experiments import stats
from pfedma_flwr.experiments.analysis import RunData
from pfedma_flwr.experiments.compare import add_comparisons, add_rate_comparisons, guessing_rates
from pfedma_flwr.experiments.presets import load_preset
from pfedma_flwr.experiments.tables import markdown_cells, table, write_comparison


@pytest.mark.parametrize(("b", "c", "p"), [
    (4, 0, 0.125),  # 2 * 0.5**4: the 4:0 split of discordant pairs
    (0, 4, 0.125),
    (0, 0, 1.0),  # no discordant pair: no evidence either way
    (3, 3, 1.0),
    (5, 1, 2 * (1 + 6) / 64),  # 2 * P(X <= 1), X ~ Bin(6, 1/2)
    (10, 2, 2 * (1 + 12 + 66) / 4096),
])
def test_mcnemar_exact_by_hand(b: int, c: int, p: float, monkeypatch):
    assert stats.mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # the exact sum without scipy
    assert stats.mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)


def test_mcnemar_refuses_negative_or_fractional_counts():
    with pytest.raises(ValueError, match="integers >= 0"):
        stats.mcnemar_exact(-1, 2)
    with pytest.raises(ValueError, match="integers >= 0"):
        stats.mcnemar_exact(1.5, 2)


def test_wilson_interval_by_hand():
    # 19/40: centre (0.475 + z^2/80) / (1 + z^2/40), half-width
    # z sqrt(p(1-p)/40 + z^2/6400) / (1 + z^2/40), z = 1.959964
    lo, hi = stats.wilson_interval(19, 40)
    assert (lo, hi) == (pytest.approx(0.32935, abs=1e-5), pytest.approx(0.62503, abs=1e-5))
    assert stats.wilson_interval(0, 10) == (0.0, pytest.approx(0.27753, abs=1e-5))
    assert stats.wilson_interval(40, 40)[1] == 1.0
    assert all(math.isnan(v) for v in stats.wilson_interval(0, 0))
    with pytest.raises(ValueError, match="0 <= k <= n"):
        stats.wilson_interval(5, 4)


def _exact_percentiles(d: list[float], level: float = 0.95) -> tuple[float, float]:
    """The bootstrap distribution of mean(d) enumerated over all n^n resamples."""
    n = len(d)
    means = sorted(sum(d[i] for i in idx) / n for idx in itertools.product(range(n), repeat=n))
    cdf = np.arange(1, len(means) + 1) / len(means)
    tail = (1 - level) / 2
    return means[int(np.argmax(cdf >= tail))], means[int(np.argmax(cdf >= 1 - tail))]


@pytest.mark.parametrize(("a", "b", "expected"), [
    # d = (1, 1, 1, 0): mean k/4, k ~ Bin(4, 3/4); P(0) = 1/256 < 2.5 % < P(<= 1/4) = 13/256
    # and P(<= 3/4) = 175/256 < 97.5 %: the interval is [1/4, 1]
    ([1, 1, 1, 0], [0, 0, 0, 0], (0.75, 0.25, 1.0)),
    # d = (1, -1): means -1, 0, 1 with probabilities 1/4, 1/2, 1/4
    ([1, 0], [0, 1], (0.0, -1.0, 1.0)),
    # d = (1, 0, 0, 0, 0): P(mean = 0) = 0.8^5 = 0.33; P(<= 0.4) = 0.942 < 97.5 % <= P(<= 0.6)
    ([1, 0, 0, 0, 0], [0, 0, 0, 0, 0], (0.2, 0.0, 0.6)),
])
def test_paired_bootstrap_matches_the_enumerated_distribution(a, b, expected):
    diff, lo, hi = stats.paired_bootstrap(a, b)
    assert (diff, lo, hi) == pytest.approx(expected)
    d = [x - y for x, y in zip(a, b, strict=True)]
    assert (lo, hi) == pytest.approx(_exact_percentiles(d))
    # fixed seed, 10,000 resamples: the same numbers on every call
    assert stats.paired_bootstrap(a, b) == (diff, lo, hi)


def test_paired_bootstrap_checks_its_inputs():
    with pytest.raises(ValueError, match="same questions"):
        stats.paired_bootstrap([1, 0], [1])
    with pytest.raises(ValueError, match="correctness values"):
        stats.paired_bootstrap([2, 0], [1, 0])
    assert all(math.isnan(v) for v in stats.paired_bootstrap([], []))


def test_compare_counts_discordant_pairs():
    a = [1, 1, 1, 1, 0, 1]
    b = [0, 0, 0, 0, 0, 1]
    d = stats.compare(a, b)
    assert (d.n, d.b, d.c, d.p_mcnemar) == (6, 4, 0, 0.125)
    assert d.diff == pytest.approx(4 / 6) and d.lo <= d.diff <= d.hi


def test_mean_sd_over_seeds():
    assert stats.mean_sd([0.4, 0.5, 0.6]) == (pytest.approx(0.5), pytest.approx(0.1))
    assert stats.mean_sd([0.4]) == (0.4, 0.0)


def test_rows_get_intervals_and_the_paired_comparison_with_the_reference():
    # 4 questions; pfedma right on q1..q3, single right on q1 only: b = 2, c = 0
    pf = {f"q{i}": ("gsm8k" if i < 3 else "medqa", float(i <= 3)) for i in range(1, 5)}
    single = {f"q{i}": ("gsm8k" if i < 3 else "medqa", float(i == 1)) for i in range(1, 5)}
    rows = [{"variant": "method=pfedma", "labels": {"method": "pfedma"}, "metrics": {}},
            {"variant": "method=single", "labels": {"method": "single"}, "metrics": {}}]
    long = add_comparisons(rows, {"method=pfedma": pf, "method=single": single},
                           {"method": "pfedma"}, {})
    m = rows[1]["metrics"]
    assert m["dACC"] == pytest.approx(-0.5) and m["p_mcnemar"] == pytest.approx(0.5)
    assert (m["ACC_lo"], m["ACC_hi"]) == pytest.approx(stats.wilson_interval(1, 4))
    assert math.isnan(rows[0]["metrics"]["dACC"])  # the reference against itself
    per = {(r["variant"], r["benchmark"]): r for r in long}
    # gsm8k: q1 both right, q2 only pfedma -> b = 0, c = 1 from the single agent's side
    g = per[("method=single", "gsm8k")]
    assert (g["n"], g["solved"], g["b"], g["c"], g["dACC"]) == (2, 1, 0, 1, -0.5)
    assert per[("method=pfedma", "medqa")]["solved"] == 1


def test_attacked_rows_get_an_asr_interval_and_the_paired_test_against_the_reference():
    # 8 attacked tasks: without the filter 3 succeed (t5, t6, t7), with it 1 (t5)
    tasks = [f"t{i}" for i in range(8)]
    off = {t: ("asb", float(t in {"t5", "t6", "t7"})) for t in tasks}
    on = {t: ("asb", float(t == "t5")) for t in tasks}
    rows = [{"variant": v, "labels": {"method": m, "rho": rho}, "metrics": {}}
            for v, m, rho in (("pf0", "pfedma", "0.0"), ("pf4", "pfedma", "0.4"),
                              ("off0", "-all", "0.0"), ("off4", "-all", "0.4"))]
    add_rate_comparisons(rows, {"pf0": {}, "pf4": on, "off0": {}, "off4": off},
                         {"method": "pfedma"}, {}, "ASR")
    pf0, pf4, off0, off4 = (r["metrics"] for r in rows)
    assert pf0 == {} and off0 == {}  # clean rows: nothing attacked
    assert (pf4["ASR_lo"], pf4["ASR_hi"]) == pytest.approx(stats.wilson_interval(1, 8))
    assert "dASR" not in pf4  # the reference itself
    # the row minus the reference at the same rho: +2/8, discordant 2:0 -> p = 2 * 0.5**2
    assert off4["dASR"] == pytest.approx(0.25) and off4["p_ASR"] == pytest.approx(0.5)
    assert off4["dASR_lo"] <= 0.25 <= off4["dASR_hi"]
    # the table shows the intervals in the values' cells, the difference signed
    for r, asr in zip(rows, (math.nan, 0.125, math.nan, 0.375), strict=True):
        r["metrics"]["ASR"] = asr
    preset = load_preset("robustness")
    header, body = table(preset, rows)
    head, cells = markdown_cells(header, body)
    row = dict(zip(head, cells[3], strict=True))
    lo, hi = stats.wilson_interval(3, 8)
    assert row["ASR [95% CI]"] == f"37.50 [{100 * lo:.2f}, {100 * hi:.2f}]"
    assert row["dASR [95% CI]"].startswith("+25.0 [") and row["p_ASR"] == "0.5"
    assert dict(zip(head, cells[0], strict=True))["ASR [95% CI]"] == "n/a"


def test_above_chance_by_hand():
    # P(X >= 2), X ~ Bin(3, 1/4): 3 * (1/4)^2 * (3/4) + (1/4)^3 = 9/64 + 1/64
    assert stats.above_chance(2, 3, 0.25) == pytest.approx(10 / 64)
    assert stats.above_chance(3, 3, 0.25) == pytest.approx(1 / 64)
    assert stats.above_chance(0, 5, 0.25) == 1.0 and stats.above_chance(0, 0, 0.25) == 1.0
    # the numbers of the docstring: 10 of 30 and 14 of 30 at a quarter
    assert stats.above_chance(10, 30, 0.25) == pytest.approx(0.19659, abs=1e-5)
    assert stats.above_chance(14, 30, 0.25) == pytest.approx(0.00818, abs=1e-5)
    for bad in [(4, 3, 0.25), (-1, 3, 0.25), (1, 3, 0.0), (1, 3, 1.0), (1.5, 3, 0.25)]:
        with pytest.raises(ValueError):
            stats.above_chance(*bad)


def test_multiple_choice_groups_get_their_p_value_against_guessing(tmp_path):
    # medqa: 3 of 4 right at a guessing rate of 1/4: P(X >= 3) = 4 * (1/4)^3 * (3/4) + (1/4)^4
    pf = {f"q{i}": ("gsm8k" if i < 3 else "medqa", 1.0) for i in range(1, 3)}
    pf.update({f"m{i}": ("medqa", float(i < 3)) for i in range(4)})
    rows = [{"variant": "method=pfedma", "labels": {"method": "pfedma"}, "metrics": {}}]
    long = add_comparisons(rows, {"method=pfedma": pf}, {"method": "pfedma"}, {},
                           {"medqa": 0.25})
    per = {r["benchmark"]: r for r in long}
    assert per["medqa"]["p_guess"] == pytest.approx(13 / 256)
    assert "p_guess" not in per["gsm8k"] and "p_guess" not in per["all"]
    write_comparison(load_preset("main"), long, tmp_path, "method=pfedma")
    md = (tmp_path / "results.md").read_text()
    assert "| pfedma | medqa | 3/4 | 75.00 [30.06, 95.44] | 0.051 |" in md
    assert "| pfedma | gsm8k | 2/2 |" in md and "against picking one option at random" in md
    csv_text = (tmp_path / "comparison.csv").read_text()
    assert "p_guess" in csv_text.splitlines()[0]


def test_guessing_rates_come_from_the_benchmark_files_of_the_scored_questions(tmp_path):
    med = [t.task_id for t in load_benchmark("medqa")[:3]]
    gsm = [t.task_id for t in load_benchmark("gsm8k")[:2]]
    queries = ([{"query_id": q, "benchmark": "medqa", "correct": True} for q in med]
               + [{"query_id": q, "benchmark": "gsm8k", "correct": False} for q in gsm]
               + [{"query_id": "x", "benchmark": "alpacaeval", "correct": None}])
    run = RunData(out_dir=tmp_path, cfg=PFedMAConfig(), summary={}, queries=queries)
    assert guessing_rates([run]) == {"medqa": 0.25}  # 4 options each; GSM8K is open
