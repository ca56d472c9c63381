"""Run an experiment: every variant through an executor, then the table and the plots.

The default executor is :func:`flwr_executor` (``launch.run`` → a real ``flwr run``
simulation per variant). Tests pass an in-process executor (FakeGrid + ``run_server``);
anything with the :data:`Executor` signature works.

Variants run one after another unless ``jobs > 1``: then *scripted* variants (every model
they use is the ``simulated`` or ``mock`` backend: no local LLM) run up to ``jobs`` at a time,
each in its own slot (``VariantRun.slot``: its own SuperLink ports), and every other variant
runs alone. A variant with a local LLM never runs beside another one: the embedded llama.cpp
backend keeps every core busy (``agent.backend.n_threads``, the launcher reserves as many Ray
CPUs) and its threads synchronise at each layer, so a core taken by anything else stalls all
of them (``docs/throughput.md``). Within one preset and size all variants share the size's
backend, so in practice ``tiny`` runs in parallel and ``small`` one variant at a time.

Nothing is lost: every variant's configuration, plug-in names and client count are checked
before the first one starts (:func:`check_plan`); a selected variant whose run dir already
holds results is refused unless ``reuse``/``resume`` (skip it when completed with the same
configuration, resume it from its checkpoint) or ``overwrite``; the results table always holds
every variant with a completed run in the output dir, so ``--only`` adds levels to it instead
of replacing it; and a stop signal or a failed variant still writes the table of what is done.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from pfedma_flwr.experiments import preflight, processes
from pfedma_flwr.experiments.analysis import load_run, run_metrics
from pfedma_flwr.experiments.executor import flwr_executor
from pfedma_flwr.experiments.presets import (
    ExperimentPreset,
    choice_overrides,
    load_preset,
    overrides_text,
)
from pfedma_flwr.experiments.resume import (
    decide,
    previous_walls,
    refuse_other_experiment,
    save_walls,
)
from pfedma_flwr.experiments.tabulate import (  # noqa: F401  (seed_metrics: re-exported)
    seed_metrics,
    tabulate,
)
from pfedma_flwr.experiments.variant import (  # noqa: F401  (re-exported: the runner's API)
    Executor,
    ExperimentRefused,
    VariantFailed,
    VariantRun,
)

logger = logging.getLogger(__name__)


#: backends that generate without a local model (scripted agents, tests)
SCRIPTED_BACKENDS = frozenset({"simulated", "mock"})


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
         only: Mapping[str, Sequence[str]] | None = None, seeds: Sequence[int] = (),
         choices_dir: Path | None = None, lenient: bool = False
         ) -> list[tuple[Any, list[VariantRun]]]:
    """The runs of ``preset`` at ``size``: per variant, its runs (one per seed), in order.

    ``lenient`` leaves out a variant whose choice file is missing (tabling what exists)
    instead of raising.

    With ``seeds`` a variant whose agents sample (temperature > 0) runs once per seed in
    ``runs/<variant>_seed=<s>``, with ``seed=<s>`` and ``data.split_seed`` pinned to the
    configuration's own seed, so every repetition answers the same questions with the same
    partitions and only the sampling differs; a greedy variant runs once.
    """
    spec = preset.size(size)
    out = []
    for v in select_variants(preset.variants(), only or {}):
        try:
            chosen = choice_overrides(v.choice, size, choices_dir) if v.choice else {}
        except ValueError:
            if lenient:
                continue
            raise
        over = {**spec.shared, **preset.base, **spec.overrides, **chosen, **v.overrides,
                "output.progress": False}
        base = VariantRun(
            experiment=preset.name, variant=v.name, config=spec.config,
            num_clients=v.num_clients or num_clients or spec.num_clients,
            overrides=overrides_text(over, extra), output_dir=output_dir / "runs" / v.name)
        out.append((v, _repetitions(base, seeds)))
    return out


def _repetitions(base: VariantRun, seeds: Sequence[int]) -> list[VariantRun]:
    """``base`` once per seed when its agents sample, else ``base`` alone."""
    if not seeds:
        return [base]
    from pfedma_flwr.config import load_config

    cfg = load_config({"config-name": base.config, "overrides": base.overrides})
    sampled = cfg.agent.backend.temperature > 0 or any(
        b.temperature > 0 for b in cfg.agent.backbones.values())
    if not sampled:
        return [base]
    split = cfg.data.seed_for_split(cfg.seed)
    return [replace(base, seed=s, output_dir=base.output_dir.with_name(
        f"{base.output_dir.name}_seed={s}"), overrides=f"{base.overrides} seed={s} "
        f"data.split_seed={split}".strip()) for s in seeds]


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
        else:
            problems += preflight.question_problems(cfg)
        if backends:
            fresh = {k: b for k, b in preflight.backend_sections(cfg).items()
                     if repr((b.name, b.model, b.base_url)) not in seen}
            seen |= {repr((b.name, b.model, b.base_url)) for b in fresh.values()}
            problems += [preflight.Problem("generation", f"{k}: {why}")
                         for k, b in fresh.items() if (why := preflight.backend_problem(b))]
        if problems:
            raise ExperimentRefused(f"variant {vr.variant}: {problems[0].message}",
                                    problems[0].exit_code)


def scripted(v: VariantRun) -> bool:
    """Whether every model variant ``v`` uses is scripted (no local LLM: fine to run beside)."""
    from pfedma_flwr.config import load_config

    cfg = load_config({"config-name": v.config, "overrides": v.overrides})
    sections = [cfg.agent.backend, *cfg.agent.backbones.values()]
    if cfg.anomaly.judge == "llm":
        sections.append(cfg.anomaly.judge_backend)
    if cfg.routing.orchestrator == "llm":
        sections.append(cfg.routing.llm_backend)
    return all(b.name in SCRIPTED_BACKENDS for b in sections)


def _execute_all(execute: Executor, runs: Sequence[VariantRun], jobs: int,
                 walls: dict[str, float], save: Callable[[dict[str, float]], None]) -> None:
    """Run every variant (scripted ones ``jobs`` at a time, the rest alone).

    Adds each run's wall seconds to ``walls`` under its directory's name (a resumed level adds
    its earlier sittings' time) and calls ``save`` after each run, so an interrupted preset
    keeps the time of what finished.
    """
    lock = threading.Lock()

    def timed(v: VariantRun) -> None:
        logger.info("%s %s/%s -> %s", "resuming" if v.resume else "running", v.experiment,
                    v.variant, v.output_dir)
        t0 = time.perf_counter()
        execute(v)
        key = v.output_dir.name
        with lock:
            walls[key] = (walls.get(key, 0.0) if v.resume else 0.0) + time.perf_counter() - t0
            save(walls)

    light = [v for v in runs if jobs > 1 and scripted(v)]
    if light:
        # a variant takes a free slot (its own SuperLink ports) and gives it back when it
        # ended: two variants never hold one slot, whatever order they finish in
        free: queue.Queue[int] = queue.Queue()
        for k in range(jobs):
            free.put(k)

        def in_slot(v: VariantRun) -> None:
            slot = free.get()
            try:
                timed(replace(v, slot=slot))
            finally:
                free.put(slot)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(in_slot, v) for v in light]
            for f in futures:
                f.result()  # the first failure propagates, as in a sequential run
    for v in runs:
        if v not in light:
            timed(v)


def run_experiment(
    name: str, *, size: str = "tiny", output_dir: Path, num_clients: int | None = None,
    executor: Executor | None = None, extra: Sequence[str] = (), reuse: bool = False,
    only: Mapping[str, Sequence[str]] | None = None, resume: bool = False,
    seeds: Sequence[int] = (), choices_dir: Path | None = None, jobs: int = 1,
    overwrite: bool = False, tracking: str = "none") -> dict[str, Any]:
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
    reuse, resume : bool
        Skip variants whose output directory already holds a completed run of the same
        configuration, and continue an interrupted one from its checkpoint (its finished
        rounds kept): a preset stopped midway completes across sittings.
    only : Mapping[str, Sequence[str]], optional
        Run only the variants with these axis levels, e.g. ``{"rho": ["0.4"]}``; the table
        still lists every variant with a completed run in ``output_dir``.
    seeds : Sequence[int]
        Repeat every sampled variant once per seed (:func:`plan`); metrics are the mean over
        seeds, ``<metric>_sd`` their standard deviation.
    choices_dir : Path, optional
        Where levels' choice files are read (default ``conf/experiments/choices``).
    jobs : int
        Scripted variants run this many at a time (module docstring); 1: one after another.
    overwrite : bool
        Run selected variants again even where their directory holds results.
    tracking : str
        ``none`` | ``tensorboard`` | ``mlflow``: each variant's resolved config, round
        metrics and final metrics to ``<output_dir>/tracking/<variant>``.

    Returns
    -------
    dict
        ``{"rows": [...], "comparison": [...], "files": [...], "wall_seconds": {...}}``.

    Raises
    ------
    ExperimentRefused
        Before anything ran, naming the variant and the problem.
    """
    preset, output_dir = _preset_and_dir(name, size, output_dir, jobs, tracking, overwrite)
    # one plan for the runs to start (``only``) and for the table (every variant, lenient)
    runs_of = partial(plan, preset, size, output_dir, num_clients=num_clients, extra=extra,
                      seeds=seeds, choices_dir=choices_dir)
    todo = _todo(runs_of, only, backends=executor is None, reuse=reuse, resume=resume,
                 overwrite=overwrite)
    return _run_all(executor or flwr_executor(), todo, jobs, tracking, output_dir,
                    lambda w: tabulate(preset, size, output_dir, w, runs_of(lenient=True), seeds))


def _preset_and_dir(name: str, size: str, output_dir: Path, jobs: int, tracking: str,
                    overwrite: bool) -> tuple[ExperimentPreset, Path]:
    """The preset and the resolved output dir, once the request itself is acceptable.

    Raises
    ------
    ExperimentRefused
        For ``jobs < 1``, an unusable ``tracking`` or an output dir of another experiment.
    """
    from pfedma_flwr.experiments import tracking as trk

    if jobs < 1:
        raise ExperimentRefused(f"jobs must be >= 1, got {jobs}")
    preset = load_preset(name)
    output_dir = output_dir.resolve()
    try:
        trk.make_tracker(tracking, output_dir / "tracking")
    except trk.TrackingError as e:
        raise ExperimentRefused(str(e)) from e
    refuse_other_experiment(output_dir, preset.name, size, overwrite)
    return preset, output_dir


def _todo(runs_of: Callable[..., list[tuple[Any, list[VariantRun]]]],
          only: Mapping[str, Sequence[str]] | None, *, backends: bool, reuse: bool,
          resume: bool, overwrite: bool) -> list[VariantRun]:
    """The runs to start: every selected run checked (:func:`check_plan`), then decided.

    Raises
    ------
    ExperimentRefused
        For an unknown ``only`` axis or level, or the first problem :func:`check_plan` finds.
    """
    try:
        planned = runs_of(only=only)
    except ValueError as e:
        raise ExperimentRefused(str(e)) from e
    check_plan([vr for _, reps in planned for vr in reps], backends=backends)
    return decide(planned, reuse=reuse, resume=resume, overwrite=overwrite)


def _run_all(execute: Executor, todo: Sequence[VariantRun], jobs: int, tracking: str,
             output_dir: Path, table: Callable[[dict[str, float]], dict[str, Any]]
             ) -> dict[str, Any]:
    """Run ``todo`` (each run tracked), then ``table`` the wall seconds; return the table."""
    output_dir.mkdir(parents=True, exist_ok=True)
    walls = previous_walls(output_dir)

    def run_and_track(vr: VariantRun) -> None:
        execute(vr)
        _track(tracking, vr, output_dir)

    try:
        with processes.stop_on_signals():
            _execute_all(run_and_track, todo, jobs, walls, lambda w: save_walls(output_dir, w))
    finally:  # what is done so far is tabled even when a variant failed or a signal came
        result = table(walls)
    return result


def _track(tracking: str, vr: VariantRun, output_dir: Path) -> None:
    from pfedma_flwr.experiments import tracking as trk

    tracker = trk.make_tracker(tracking, output_dir / "tracking" / vr.output_dir.name)
    if tracker is not None:
        final = run_metrics(load_run(vr.output_dir))
        steps = trk.replay(vr.output_dir, tracker, final=final)
        logger.info("tracked %s: config, %d rounds, final metrics -> %s", vr.variant, steps,
                    tracker.target)
