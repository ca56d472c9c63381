"""Every row of an experiment table with its interval and its paired test against the reference.

A row's runs give per-question correctness (``queries.jsonl``; with several seeds the mean over
the seeds that answered the question). From it, per row and per benchmark:

- ``ACC_lo`` / ``ACC_hi``: the 95 % Wilson interval of one run's accuracy, or with several
  seeds the percentile bootstrap interval of the seed-averaged accuracy over questions;
- ``ACC_sd``: the standard deviation of ACC over seeds (only with ``--seeds``);
- against the preset's reference level (``reference: {method: pfedma}``: the row with the same
  labels but that level): ``dACC`` = ACC(row) − ACC(reference) on the questions both answered,
  its paired-bootstrap 95 % interval ``dACC_lo`` / ``dACC_hi`` and the exact McNemar
  ``p_mcnemar`` (:mod:`pfedma_flwr.experiments.stats`).

Overall values become row metrics (table columns); the per-benchmark ones are the long table
``comparison.csv`` and the second table of ``results.md``.

On a multiple-choice benchmark a group also gets ``p_guess``: the exact one-sided binomial
p-value of its score against guessing (:func:`guessing_rates`, :func:`stats.above_chance`), so a
table shows where every method is indistinguishable from picking an option at random.

Attacked rows get the same for their attack success rate (:func:`add_rate_comparisons`):
``ASR_lo`` / ``ASR_hi`` and, against the reference level at the same attack, ``dASR`` with its
paired interval and ``p_ASR``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pfedma_flwr.experiments import stats
from pfedma_flwr.experiments.analysis import RunData

ALL = "all"
Correct = dict[str, tuple[str, float]]


def seed_means(per_run: Sequence[Mapping[str, tuple[str, bool]]]) -> Correct:
    """Question id → (benchmark, mean of its 0/1 outcome over the runs).

    Only questions every run has count (a partial run answers a prefix).
    """
    per: dict[str, list[float]] = {}
    bench: dict[str, str] = {}
    for outcomes in per_run:
        for qid, (b, ok) in outcomes.items():
            per.setdefault(qid, []).append(1.0 if ok else 0.0)
            bench[qid] = b
    return {qid: (bench[qid], sum(v) / len(v)) for qid, v in per.items()
            if len(v) == len(per_run)}


def correctness(runs: Sequence[RunData]) -> Correct:
    """Question id → (benchmark, correctness), averaged over the runs (seeds) that have it.

    A question some seed did not finish is left out (a partial run answers a prefix), and so is
    one without a gold verdict (``correct: null``: AlpacaEval's judged responses, scored by
    WR/LC instead), as in the run's own ACC.
    """
    return seed_means([{str(q["query_id"]): (str(q.get("benchmark", "")), bool(q["correct"]))
                        for q in run.queries
                        if q.get("query_id") and q.get("correct") is not None} for run in runs])


def guessing_rates(runs: Sequence[RunData]) -> dict[str, float]:
    """Benchmark → the mean guessing rate (1 / number of options) of its scored questions.

    Only benchmarks whose every scored question has options (multiple choice); the questions
    are read from each run's own benchmark files (``data.data_dir``).
    """
    from pfedma_flwr.data.benchmarks import load_benchmark

    rates: dict[str, list[float]] = {}
    open_benches: set[str] = set()
    for run in runs:
        wanted: dict[str, set[str]] = {}
        for q in run.queries:
            if q.get("query_id") and q.get("correct") is not None:
                wanted.setdefault(str(q.get("benchmark", "")), set()).add(str(q["query_id"]))
        for bench, qids in wanted.items():
            if bench in rates or bench in open_benches:
                continue
            try:
                tasks = load_benchmark(bench, run.cfg.data.data_dir or None)
            except (ValueError, OSError):  # a benchmark these files no longer hold: no rate
                open_benches.add(bench)
                continue
            opts = [len(t.options) for t in tasks if t.task_id in qids]
            if opts and all(n > 1 for n in opts):
                rates[bench] = [1.0 / n for n in opts]
            else:
                open_benches.add(bench)
    return {b: sum(v) / len(v) for b, v in sorted(rates.items())}


def _groups(c: Correct) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {ALL: sorted(c)}
    for qid in sorted(c):
        out.setdefault(c[qid][0], []).append(qid)
    return out


def accuracy_interval(values: Sequence[float], seeds: int) -> tuple[float, float]:
    """Wilson for one run's 0/1 values; a one-sample percentile bootstrap for seed means."""
    if not values:
        return math.nan, math.nan
    if seeds <= 1:
        return stats.wilson_interval(int(round(sum(values))), len(values))
    _, lo, hi = stats.paired_bootstrap(values, [0.0] * len(values))
    return lo, hi


def row_stats(c: Correct, seeds: int,
              guessing: Mapping[str, float] | None = None) -> dict[str, dict[str, float]]:
    """Per group (``all`` and each benchmark): n, solved, ACC and its interval.

    A benchmark in ``guessing`` also gets ``p_guess`` (on the solved count rounded, for seed
    means).
    """
    out = {}
    for g, qids in _groups(c).items():
        v = [c[q][1] for q in qids]
        lo, hi = accuracy_interval(v, seeds)
        out[g] = {"n": float(len(v)), "solved": float(sum(v)),
                  "ACC": sum(v) / len(v) if v else math.nan, "ACC_lo": lo, "ACC_hi": hi}
        if guessing and g in guessing and v:
            out[g]["p_guess"] = stats.above_chance(min(len(v), int(round(sum(v)))), len(v),
                                                   guessing[g])
    return out


def paired_stats(c: Correct, ref: Correct) -> dict[str, dict[str, float]]:
    """Per group: the paired comparison of ``c`` against ``ref`` on their common questions."""
    common = {q: v for q, v in c.items() if q in ref}
    out = {}
    for g, qids in _groups(common).items():
        if not qids:
            continue
        d = stats.compare(np.array([c[q][1] for q in qids]), np.array([ref[q][1] for q in qids]))
        out[g] = {"n_paired": float(d.n), "dACC": d.diff, "dACC_lo": d.lo, "dACC_hi": d.hi,
                  "b": d.b, "c": d.c, "p_mcnemar": d.p_mcnemar}
    return out


def reference_labels(labels: Mapping[str, str], reference: Mapping[str, str]
                     ) -> dict[str, str] | None:
    """The labels of a row's reference row, ``None`` when the preset has no reference axis."""
    if not reference or not all(a in labels for a in reference):
        return None
    return {**labels, **reference}


def _reference_rows(rows: Sequence[dict[str, Any]], reference: Mapping[str, str]
                    ) -> dict[str, dict[str, Any] | None]:
    """Each row's reference row by variant (``None`` without one in ``rows``)."""
    by_labels = {tuple(sorted(r["labels"].items())): r for r in rows}
    out: dict[str, dict[str, Any] | None] = {}
    for r in rows:
        ref_labels = reference_labels(r["labels"], reference)
        out[r["variant"]] = by_labels.get(tuple(sorted(ref_labels.items()))) \
            if ref_labels else None
    return out


def add_comparisons(rows: list[dict[str, Any]], correct: Mapping[str, Correct],
                    reference: Mapping[str, str], seeds: Mapping[str, int],
                    guessing: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """Add the interval and paired-test metrics to ``rows``; return the long comparison table.

    ``correct`` and ``seeds`` are keyed by row variant. Long rows: ``variant``, the labels,
    ``benchmark`` (``all`` first), then the statistics of :func:`row_stats` and, against the
    reference, :func:`paired_stats` (NaN for the reference row itself or without one).
    ``guessing``: :func:`guessing_rates` of the runs (``p_guess`` per multiple-choice benchmark).
    """
    refs = _reference_rows(rows, reference)
    long: list[dict[str, Any]] = []
    for r in rows:
        own = row_stats(correct[r["variant"]], seeds.get(r["variant"], 1), guessing)
        ref_row = refs[r["variant"]]
        paired = {} if ref_row is None or ref_row is r else paired_stats(
            correct[r["variant"]], correct[ref_row["variant"]])
        m = r["metrics"]
        m["ACC_lo"], m["ACC_hi"] = own[ALL]["ACC_lo"], own[ALL]["ACC_hi"]
        m["n"] = own[ALL]["n"]
        for g, st in own.items():  # per benchmark for the plots' error bars
            if g != ALL:
                m[f"ACC_lo/{g}"], m[f"ACC_hi/{g}"] = st["ACC_lo"], st["ACC_hi"]
        if ref_row is not None:
            p = paired.get(ALL, {})
            for k in ("dACC", "dACC_lo", "dACC_hi", "p_mcnemar"):
                m[k] = p.get(k, math.nan)
        for g, s in own.items():
            long.append({"variant": r["variant"], **r["labels"], "benchmark": g, **s,
                         **paired.get(g, {})})
    return long


def add_rate_comparisons(rows: list[dict[str, Any]], outcomes: Mapping[str, Correct],
                         reference: Mapping[str, str], seeds: Mapping[str, int],
                         name: str = "ASR") -> None:
    """Add a per-query rate's interval and paired test to the rows that have its outcomes.

    Added: ``<name>_lo`` / ``<name>_hi`` and, against the reference row, ``d<name>`` with its
    paired interval and ``p_<name>`` (exact McNemar).

    ``outcomes`` is keyed by row variant (e.g. each attacked run's per-query attack success,
    :func:`~pfedma_flwr.experiments.analysis.attack_outcomes`); rows without any (clean runs)
    are left alone, as are comparisons with a reference row without them. ``d<name>`` is
    row − reference on the questions both were attacked on: for ASR against PFedMA, a positive
    value is what PFedMA's defences removed.
    """
    refs = _reference_rows(rows, reference)
    for r in rows:
        mine = outcomes.get(r["variant"])
        if not mine:
            continue
        own = row_stats(mine, seeds.get(r["variant"], 1))[ALL]
        m = r["metrics"]
        m[f"{name}_lo"], m[f"{name}_hi"] = own["ACC_lo"], own["ACC_hi"]
        ref_row = refs[r["variant"]]
        theirs = outcomes.get(ref_row["variant"]) if ref_row is not None else None
        if ref_row is None or ref_row is r or not theirs:
            continue
        p = paired_stats(mine, theirs).get(ALL)
        if p is not None:
            m[f"d{name}"], m[f"d{name}_lo"], m[f"d{name}_hi"] = p["dACC"], p["dACC_lo"], \
                p["dACC_hi"]
            m[f"p_{name}"] = p["p_mcnemar"]
