"""Run an experiment: every variant through an executor, then the table and the plots.

The default executor is :func:`flwr_executor` (``launch.run`` → a real ``flwr run``
simulation per variant, sequentially). Tests pass an in-process executor (FakeGrid +
``run_server``); anything with the :data:`Executor` signature works.

Nothing is lost: every variant's configuration, plug-in names and client count are checked
before the first one starts (:func:`check_plan`); a selected variant whose run dir already
holds results is refused unless ``reuse`` (skip it when completed, resume it from its
checkpoint) or ``overwrite``; the results table always holds every variant with a completed
run in the output dir, so ``--only`` adds levels to it instead of replacing it; and a stop
signal or a failed variant still writes the table of what is done.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pfedma_flwr.experiments import preflight, processes
from pfedma_flwr.experiments.analysis import RunData, add_clean_twin_metrics, load_run, run_metrics
from pfedma_flwr.experiments.plots import make_plots
from pfedma_flwr.experiments.presets import ExperimentPreset, load_preset, overrides_text
from pfedma_flwr.experiments.tables import write_tables
from pfedma_flwr.server.results import write_json_atomic

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VariantRun:
    """Everything an executor needs to run one variant.

    Parameters
    ----------
    experiment, variant : str
        Names (for logs).
    config : str
        ``conf/`` preset the run starts from.
    num_clients : int
        Simulated clients ``N``.
    overrides : str
        Shell-quoted dotted overrides (``load_config`` / ``launch.run`` syntax).
    output_dir : Path
        Absolute output directory of the run.
    resume, overwrite : bool
        Continue the run in ``output_dir`` from its checkpoint; replace the results there.
    """

    experiment: str
    variant: str
    config: str
    num_clients: int
    overrides: str
    output_dir: Path
    resume: bool = False
    overwrite: bool = False


Executor = Callable[[VariantRun], None]


class ExperimentRefused(ValueError):
    """The experiment cannot start (nothing ran); ``code`` is the exit status (3, or 2)."""

    def __init__(self, message: str, code: int = preflight.EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


class VariantFailed(RuntimeError):
    """A variant's run failed (``code``: the launcher's exit status)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def flwr_executor(port: int | None = None, timeout: float = 3600.0, data_dir: str = "",
                  log_level: str | None = None, quiet: bool = False) -> Executor:
    """An executor running each variant as a real ``flwr run`` simulation (``launch.run``).

    ``port=None``: the default port, or a free one. A run stopped by a signal raises
    :class:`~pfedma_flwr.experiments.processes.Interrupted` (every process of it is stopped
    already), any other failure :class:`VariantFailed`.
    """

    def execute(v: VariantRun) -> None:
        from pfedma_flwr.experiments.launch import run  # Flower CLI machinery only when used

        rc = run(config=v.config, num_clients=v.num_clients, output_dir=v.output_dir,
                 overrides=v.overrides, port=port, timeout=timeout, data_dir=data_dir,
                 resume=v.resume, overwrite=v.overwrite, log_level=log_level, quiet=quiet,
                 backend_check=False)  # checked once for every variant by check_plan
        if rc >= 128:
            raise processes.Interrupted(rc - 128)
        if rc != 0:
            raise VariantFailed(f"variant {v.variant} of {v.experiment} failed (exit {rc}); "
                                f"see {v.output_dir / 'run.log'}", rc)

    return execute


def select_variants(variants: Sequence[Any], only: Mapping[str, Sequence[str]]) -> list[Any]:
    """The variants whose label of every axis in ``only`` is one of its listed levels.

    Raises ``ValueError`` naming the axis or level when ``only`` names one the preset lacks.
    """
    for axis, levels in only.items():
        known = {v.labels.get(axis) for v in variants} - {None}
        if not known:
            raise ValueError(f"--only: no axis {axis!r}; axes: "
                             f"{sorted({a for v in variants for a in v.labels})}")
        bad = [lvl for lvl in levels if lvl not in known]
        if bad:
            raise ValueError(f"--only: axis {axis!r} has no level {bad}; levels: {sorted(known)}")
    return [v for v in variants if all(v.labels.get(a) in lv for a, lv in only.items())]


def plan(preset: ExperimentPreset, size: str, output_dir: Path, *,
         num_clients: int | None = None, extra: Sequence[str] = (),
         only: Mapping[str, Sequence[str]] | None = None) -> list[tuple[Any, VariantRun]]:
    """The runs of ``preset`` at ``size`` as ``(variant, VariantRun)`` pairs, in order."""
    spec = preset.size(size)
    out = []
    for v in select_variants(preset.variants(), only or {}):
        over = {**spec.shared, **preset.base, **spec.overrides, **v.overrides,
                "output.progress": False}
        out.append((v, VariantRun(
            experiment=preset.name, variant=v.name, config=spec.config,
            num_clients=v.num_clients or num_clients or spec.num_clients,
            overrides=overrides_text(over, extra), output_dir=output_dir / "runs" / v.name)))
    return out


def _completed(out_dir: Path) -> bool:
    try:
        s = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(s, dict) and s.get("status") == "completed"


def check_plan(runs: Sequence[VariantRun], *, backends: bool = True) -> None:
    """Every variant's config, names and client count (and, once each, its model backends).

    Raises
    ------
    ExperimentRefused
        With the first problem, naming the variant; nothing has started.
    """
    from pfedma_flwr.config import ConfigError, load_config
    from pfedma_flwr.data.benchmarks import resolve_data_dir

    seen: set[str] = set()
    plugins_ok = os.environ.get("PFEDMA_ALLOW_PLUGINS", "0").strip().lower() in ("1", "true")
    for vr in runs:
        try:
            cfg = load_config({"config-name": vr.config, "overrides": vr.overrides})
        except ConfigError as e:
            raise ExperimentRefused(f"variant {vr.variant}: {e}") from e
        problems = (preflight.name_problems(cfg, plugins_ok=plugins_ok)
                    + preflight.client_problems(cfg, vr.num_clients))
        try:
            resolve_data_dir(cfg.data.data_dir or None)
        except FileNotFoundError as e:
            problems.append(preflight.Problem("config", str(e)))
        if backends:
            fresh = {k: b for k, b in preflight.backend_sections(cfg).items()
                     if repr((b.name, b.model, b.base_url)) not in seen}
            seen |= {repr((b.name, b.model, b.base_url)) for b in fresh.values()}
            problems += [preflight.Problem("generation", f"{k}: {why}")
                         for k, b in fresh.items() if (why := preflight.backend_problem(b))]
        if problems:
            raise ExperimentRefused(f"variant {vr.variant}: {problems[0].message}",
                                    problems[0].exit_code)


def _decide(runs: list[tuple[Any, VariantRun]], *, reuse: bool, overwrite: bool
            ) -> list[tuple[Any, VariantRun, bool]]:
    """Per selected variant: its run (resume/overwrite set) and whether it runs at all."""
    held = [vr.variant for _, vr in runs if preflight.existing_results(vr.output_dir)]
    if held and not (reuse or overwrite):
        raise ExperimentRefused(
            f"these variants already hold runs: {held}; pass --reuse (skip the completed ones, "
            "resume the others), --overwrite (run them again) or another --output-dir")
    out = []
    for v, vr in runs:
        has = bool(preflight.existing_results(vr.output_dir))
        if reuse and _completed(vr.output_dir):
            out.append((v, vr, False))
        elif reuse and (vr.output_dir / "checkpoint.json").is_file():
            out.append((v, replace(vr, resume=True), True))
        else:
            out.append((v, replace(vr, overwrite=has), True))
    return out


def _earlier(output_dir: Path, name: str, size: str, overwrite: bool) -> None:
    """Refuse merging into an output dir that holds another experiment or size."""
    try:
        prev = json.loads((output_dir / "experiment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(prev, dict) and (prev.get("experiment"), prev.get("size")) != (name, size) \
            and not overwrite:
        raise ExperimentRefused(
            f"{output_dir} holds experiment {prev.get('experiment')!r} at size "
            f"{prev.get('size')!r}, not {name!r} at {size!r}; choose another --output-dir")


def run_experiment(
    name: str, *, size: str = "tiny", output_dir: Path, num_clients: int | None = None,
    executor: Executor | None = None, extra: Sequence[str] = (), reuse: bool = False,
    only: Mapping[str, Sequence[str]] | None = None, overwrite: bool = False,
    tracking: str = "none",
) -> dict[str, Any]:
    """Run experiment ``name``; write ``results.csv``/``.md``, plots and ``experiment.json``.

    Parameters
    ----------
    name : str
        Preset in ``conf/experiments/``.
    size : str
        ``tiny`` | ``small`` | ``paper``.
    output_dir : Path
        Where everything goes (``runs/<variant>/`` per run).
    num_clients : int, optional
        Overrides the size's client count.
    executor : Executor, optional
        Default :func:`flwr_executor`.
    extra : Sequence[str]
        Extra ``key=value`` overrides applied to every variant (last).
    reuse : bool
        Skip variants whose output directory already holds a completed run; resume those
        holding a checkpoint.
    only : Mapping[str, Sequence[str]], optional
        Run only the variants with these axis levels, e.g. ``{"rho": ["0.4"]}``; the table
        still lists every variant with a completed run in ``output_dir``.
    overwrite : bool
        Run selected variants again even where their directory holds results.
    tracking : str
        ``none`` | ``tensorboard`` | ``mlflow``: each variant's resolved config, round
        metrics and final metrics to ``<output_dir>/tracking/<variant>``.

    Returns
    -------
    dict
        ``{"rows": [...], "files": [...], "wall_seconds": {...}}``.

    Raises
    ------
    ExperimentRefused
        Before anything ran, naming the variant and the problem.
    """
    from pfedma_flwr.experiments import tracking as trk

    preset = load_preset(name)
    output_dir = output_dir.resolve()
    try:
        trk.make_tracker(tracking, output_dir / "tracking")
    except trk.TrackingError as e:
        raise ExperimentRefused(str(e)) from e
    _earlier(output_dir, preset.name, size, overwrite)
    selected = plan(preset, size, output_dir, num_clients=num_clients, extra=extra, only=only)
    check_plan([vr for _, vr in selected], backends=executor is None)
    todo = _decide(selected, reuse=reuse, overwrite=overwrite)
    output_dir.mkdir(parents=True, exist_ok=True)
    execute = executor or flwr_executor()
    walls: dict[str, float] = {}
    try:
        with processes.stop_on_signals():
            for _variant, vr, go in todo:
                if not go:
                    logger.info("reusing %s", vr.output_dir)
                    continue
                logger.info("running %s/%s -> %s", preset.name, vr.variant, vr.output_dir)
                t0 = time.perf_counter()
                execute(vr)
                walls[vr.variant] = time.perf_counter() - t0
                _track(tracking, vr, output_dir)
    finally:  # what is done so far is tabled even when a variant failed or a signal came
        result = _tabulate(preset, size, output_dir, walls, num_clients, extra)
    return result


def _track(tracking: str, vr: VariantRun, output_dir: Path) -> None:
    from pfedma_flwr.experiments import tracking as trk

    tracker = trk.make_tracker(tracking, output_dir / "tracking" / vr.variant)
    if tracker is not None:
        final = run_metrics(load_run(vr.output_dir))
        steps = trk.replay(vr.output_dir, tracker, final=final)
        logger.info("tracked %s: config, %d rounds, final metrics -> %s", vr.variant, steps,
                    tracker.target)


def _tabulate(preset: ExperimentPreset, size: str, output_dir: Path, walls: dict[str, float],
              num_clients: int | None, extra: Sequence[str]) -> dict[str, Any]:
    """Table and plots of every variant whose run dir holds a completed run (merged)."""
    runs: dict[str, RunData] = {}
    rows: list[dict[str, Any]] = []
    for variant, vr in plan(preset, size, output_dir, num_clients=num_clients, extra=extra):
        if not _completed(vr.output_dir):
            continue
        runs[vr.variant] = load_run(vr.output_dir)
        rows.append({"variant": vr.variant, "labels": dict(variant.labels),
                     "metrics": run_metrics(runs[vr.variant])})
    add_clean_twin_metrics(rows, runs, undefended=preset.undefended)
    files = write_tables(preset, rows, output_dir) if rows else []
    files += make_plots(preset, rows, runs, output_dir) if rows else []
    result = {"experiment": preset.name, "size": size, "description": preset.description,
              "rows": rows, "files": [str(f) for f in files], "wall_seconds": walls}
    write_json_atomic(output_dir / "experiment.json", result)
    return result
