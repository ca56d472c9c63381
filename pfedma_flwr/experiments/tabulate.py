"""An experiment's table, comparison, plots and ``experiment.json``, from its completed runs.

The runner (:mod:`pfedma_flwr.experiments.runner`) calls :func:`tabulate` after its variants
ran, also after a failure or a stop. It hands in the plan of every variant (not only the
selected ones), so the table holds every variant whose runs completed in the output dir.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.experiments.analysis import (
    RunData,
    add_clean_twin_metrics,
    attack_outcomes,
    load_run,
    run_metrics,
)
from pfedma_flwr.experiments.compare import (
    Correct,
    add_comparisons,
    add_rate_comparisons,
    correctness,
    guessing_rates,
    seed_means,
)
from pfedma_flwr.experiments.plots import make_plots
from pfedma_flwr.experiments.presets import ExperimentPreset
from pfedma_flwr.experiments.resume import completed
from pfedma_flwr.experiments.stats import mean_sd
from pfedma_flwr.experiments.tables import write_comparison, write_tables
from pfedma_flwr.experiments.variant import VariantRun
from pfedma_flwr.server.results import write_json_atomic


def tabulate(
    preset: ExperimentPreset,
    size: str,
    output_dir: Path,
    walls: dict[str, float],
    planned: Sequence[tuple[Any, list[VariantRun]]],
    seeds: Sequence[int],
) -> dict[str, Any]:
    """Table, comparison and plots of every variant whose runs all completed (merged).

    Parameters
    ----------
    preset : ExperimentPreset
        The experiment.
    size : str
        Its size (``tiny`` | ``small`` | ``paper``).
    output_dir : Path
        The experiment's output dir: the runs are read from it, the files written into it.
    walls : dict[str, float]
        Wall seconds per run dir name, written into ``experiment.json``.
    planned : Sequence[tuple[Any, list[VariantRun]]]
        Every variant with its runs (one per seed), as
        :func:`pfedma_flwr.experiments.runner.plan` gives them with ``lenient=True``.
    seeds : Sequence[int]
        The seeds the sampled variants were repeated with.

    Returns
    -------
    dict
        What ``experiment.json`` holds: rows, comparison, seeds, files and wall seconds.
    """
    rows, runs, correct, attacked, n_seeds = _completed(planned)
    # unreliable/collusion ASR is decided per query against the clean twin (first seed's runs,
    # as the ASR metric itself)
    for variant, won in add_clean_twin_metrics(rows, runs, undefended=preset.undefended).items():
        attacked[variant] = {qid: (b, 1.0 if ok else 0.0) for qid, (b, ok) in won.items()}
    comparison = add_comparisons(
        rows, correct, preset.reference, n_seeds, guessing_rates(list(runs.values()))
    )
    add_rate_comparisons(rows, attacked, preset.reference, n_seeds, "ASR")
    files = _write_files(preset, rows, comparison, runs, output_dir) if rows else []
    result = {
        "experiment": preset.name,
        "size": size,
        "description": preset.description,
        "rows": rows,
        "comparison": comparison,
        "seeds": list(seeds),
        "files": [str(f) for f in files],
        "wall_seconds": walls,
    }
    write_json_atomic(output_dir / "experiment.json", result)
    return result


def _completed(
    planned: Sequence[tuple[Any, list[VariantRun]]],
) -> tuple[
    list[dict[str, Any]], dict[str, RunData], dict[str, Correct], dict[str, Correct], dict[str, int]
]:
    """Rows, first runs, per-question correctness, attack success and seeds of the variants.

    Correctness and attack success are seed means per question. A variant counts only when
    every one of its runs (one per seed) completed.
    """
    rows: list[dict[str, Any]] = []
    runs: dict[str, RunData] = {}
    correct: dict[str, Correct] = {}
    attacked: dict[str, Correct] = {}
    n_seeds: dict[str, int] = {}
    for variant, reps in planned:
        if not all(completed(vr.output_dir) for vr in reps):
            continue
        loaded = [load_run(vr.output_dir) for vr in reps]
        runs[variant.name] = loaded[0]
        correct[variant.name] = correctness(loaded)
        attacked[variant.name] = seed_means([attack_outcomes(r) for r in loaded])
        n_seeds[variant.name] = len(loaded)
        rows.append(
            {
                "variant": variant.name,
                "labels": dict(variant.labels),
                "metrics": seed_metrics([run_metrics(r) for r in loaded]),
                "runs": [vr.output_dir.name for vr in reps],
            }
        )
    return rows, runs, correct, attacked, n_seeds


def _write_files(
    preset: ExperimentPreset,
    rows: list[dict[str, Any]],
    comparison: list[dict[str, Any]],
    runs: Mapping[str, RunData],
    output_dir: Path,
) -> list[Path]:
    """Write ``results.csv``/``.md``, ``comparison.csv`` and the plots; return their paths."""
    files: list[Path] = []
    files += write_tables(preset, rows, output_dir)
    files += write_comparison(
        preset,
        comparison,
        output_dir,
        reference=",".join(f"{a}={v}" for a, v in preset.reference.items()),
    )
    files += make_plots(preset, rows, runs, output_dir)
    return files


def seed_metrics(per_seed: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One run's metrics, or the mean over seeds with ``<metric>_sd`` for ACC and its parts."""
    if len(per_seed) == 1:
        return dict(per_seed[0])
    out: dict[str, float] = {}
    for m in dict.fromkeys(k for ms in per_seed for k in ms):
        mean, sd = mean_sd([ms.get(m, math.nan) for ms in per_seed])
        out[m] = mean
        if m == "ACC" or m.startswith("ACC/"):
            out[m.replace("ACC", "ACC_sd", 1)] = sd
    return out
