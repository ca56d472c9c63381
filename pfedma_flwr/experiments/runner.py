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
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

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
    """

    experiment: str
    variant: str
    config: str
    num_clients: int
    overrides: str
    output_dir: Path
    slot: int = 0


Executor = Callable[[VariantRun], None]
#: backends that generate without a local model (scripted agents, tests)
SCRIPTED_BACKENDS = frozenset({"simulated", "mock"})
_SLOT_PORTS = 10


def flwr_executor(port: int = 39291, timeout: float = 3600.0) -> Executor:
    """An executor running each variant as a real ``flwr run`` simulation (``launch.run``)."""

    def execute(v: VariantRun) -> None:
        from pfedma_flwr.experiments.launch import run  # Flower CLI machinery only when used

        # concurrent variants (slots) each need their own SuperLink ports
        rc = run(config=v.config, num_clients=v.num_clients, output_dir=v.output_dir,
                 overrides=v.overrides, port=port + _SLOT_PORTS * v.slot, timeout=timeout)
        if rc != 0:
            raise RuntimeError(f"variant {v.variant} of {v.experiment} failed (rc={rc}); "
                               f"see {v.output_dir / 'run.log'}")

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


def _execute_all(execute: Executor, runs: Sequence[VariantRun], jobs: int) -> dict[str, float]:
    """Run every variant (scripted ones ``jobs`` at a time, the rest alone); wall seconds each."""
    walls: dict[str, float] = {}

    def timed(v: VariantRun) -> None:
        logger.info("running %s/%s -> %s", v.experiment, v.variant, v.output_dir)
        t0 = time.perf_counter()
        execute(v)
        walls[v.variant] = time.perf_counter() - t0

    light = [v for v in runs if jobs > 1 and scripted(v)]
    if light:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            # one slot per worker: a slot's ports are free again once its variant ended
            slots = [replace(v, slot=k % jobs) for k, v in enumerate(light)]
            futures = [pool.submit(timed, v) for v in slots]
            for f in futures:
                f.result()  # the first failure propagates, as in a sequential run
    for v in runs:
        if v not in light:
            timed(v)
    return walls


def run_experiment(
    name: str, *, size: str = "tiny", output_dir: Path, num_clients: int | None = None,
    executor: Executor | None = None, extra: Sequence[str] = (), reuse: bool = False,
    only: Mapping[str, Sequence[str]] | None = None, jobs: int = 1,
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
        Skip variants whose output directory already holds a completed run.
    only : Mapping[str, Sequence[str]], optional
        Run only the variants with these axis levels, e.g. ``{"rho": ["0.4"]}``.
    jobs : int
        Scripted variants run this many at a time (module docstring); 1: one after another.

    Returns
    -------
    dict
        ``{"rows": [...], "files": [...], "wall_seconds": {...}}``.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    preset = load_preset(name)
    output_dir = output_dir.resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    planned = plan(preset, size, output_dir, num_clients=num_clients, extra=extra, only=only)
    todo = []
    for _, vr in planned:
        if reuse and _completed(vr.output_dir):
            logger.info("reusing %s", vr.output_dir)
        else:
            todo.append(vr)
    walls = _execute_all(executor or flwr_executor(), todo, jobs)
    runs: dict[str, RunData] = {}
    rows: list[dict[str, Any]] = []
    for variant, vr in planned:
        runs[vr.variant] = load_run(vr.output_dir)
        rows.append({"variant": vr.variant, "labels": dict(variant.labels),
                     "metrics": run_metrics(runs[vr.variant])})
    add_clean_twin_metrics(rows, runs, undefended=preset.undefended)
    files = write_tables(preset, rows, output_dir)
    files += make_plots(preset, rows, runs, output_dir)
    result = {"experiment": preset.name, "size": size, "description": preset.description,
              "rows": rows, "files": [str(f) for f in files],
              "wall_seconds": {v.variant: walls[v.variant] for v in todo}}
    write_json_atomic(output_dir / "experiment.json", result)
    return result
