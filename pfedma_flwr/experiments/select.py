"""``python -m pfedma_flwr.experiments.select NAME --size S``: choose a level on dev questions.

Runs the selection preset ``NAME`` (e.g. ``best_single``: single-agent candidates on the
development questions), checks that none of its questions is a test question of a preset level
that reads the choice (``choice: NAME`` in ``main``), picks the candidate with the highest
accuracy (ties: fewer tokens per solved question, then preset order) and writes
``conf/experiments/choices/NAME-S.yaml``::

    choice: plain-program          # the winning level of the preset's one axis
    size: small
    overrides: {agent.profiles: [plain], agent.reasoning: program, ...}
    dev_questions: 40              # the questions it was chosen on (ids listed below)
    measured: {plain-cot: {ACC: 0.425, tokens_per_solved: 1650.0, n: 40}, ...}

A choice holds agent / routing keys only: one that would change the questions (``data.*``,
``seed``) is refused, so reading it can never move a level onto the questions it was chosen on.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from pfedma_flwr.experiments.presets import (
    CHOICE_KEY,
    CHOICES_DIR,
    NUM_CLIENTS_KEY,
    SIZES,
    ExperimentPreset,
    load_preset,
    overrides_text,
    preset_names,
)
from pfedma_flwr.experiments.runner import Executor, flwr_executor, run_experiment

logger = logging.getLogger(__name__)


def question_ids(preset: ExperimentPreset, size: str, extra: Sequence[str] = (), *,
                 choice: str | None = None) -> set[str]:
    """The questions the preset's levels (only those reading ``choice``, if given) answer."""
    from pfedma_flwr.config import load_config
    from pfedma_flwr.data.split import sample_eval_tasks

    spec = preset.size(size)
    out: set[str] = set()
    for v in preset.variants():
        if choice is not None and v.choice != choice:
            continue
        over = {**spec.shared, **preset.base, **spec.overrides, **v.overrides}
        cfg = load_config({"config-name": spec.config, "overrides": overrides_text(over, extra)})
        d = cfg.data
        out |= {t.task_id for t in sample_eval_tasks(
            d.benchmarks, d.queries_per_benchmark, d.seed_for_split(cfg.seed), d.data_dir or None,
            dev_pool_per_benchmark=d.dev_pool_per_benchmark, offset=d.eval_offset,
            question_set=d.question_set)}
    return out


def readers(choice: str) -> list[ExperimentPreset]:
    """The presets with a level that reads choice file ``choice``."""
    return [p for p in map(load_preset, preset_names())
            if any(v.choice == choice for v in p.variants())]


def pick(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The most accurate row; ties: fewer tokens per solved question, then the first."""
    def num(v: Any, missing: float) -> float:  # experiment.json writes NaN as null
        return missing if v is None or math.isnan(float(v)) else float(v)

    def key(k_row: tuple[int, Mapping[str, Any]]) -> tuple[float, float, int]:
        k, r = k_row
        return (-num(r["metrics"].get("ACC"), -1.0),
                num(r["metrics"].get("tokens_per_solved"), math.inf), k)

    if not rows:
        raise ValueError("no candidate ran: nothing to select")
    return min(enumerate(rows), key=key)[1]


def incomplete_runs(output_dir: Path, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Candidates whose run lost answers the agent never produced (timeouts, backend errors).

    A candidate measured on half its questions (a round that ran past ``round_timeout`` on a
    loaded machine: 20 of 40 ``timeout``, 2026-12-06) cannot be compared with the others; its
    ``summary.json`` says how many answers were not produced. Maps variant -> why.
    """
    out: dict[str, str] = {}
    for r in rows:
        for run in r.get("runs", []):
            path = Path(output_dir) / "runs" / str(run) / "summary.json"
            try:
                gen = json.loads(path.read_text(encoding="utf-8")).get("generation", {})
            except (OSError, ValueError):
                out[str(r["variant"])] = f"no readable {path}"
                continue
            if (n := int(gen.get("generation_failed", 0) or 0)) > 0:
                out[str(r["variant"])] = (f"{n} of {gen.get('answers', '?')} answers not produced "
                                          f"({gen.get('failed_by_code', {})}) in {path.parent}")
    return out


def choice_record(preset: ExperimentPreset, size: str, rows: Sequence[Mapping[str, Any]],
                  dev: set[str]) -> dict[str, Any]:
    """The choice file's content for ``rows`` of the selection preset (module docstring)."""
    if len(preset.axes) != 1:
        raise ValueError(f"selection preset {preset.name!r} must have one axis, has "
                         f"{sorted(preset.axes)}")
    (axis, levels), = preset.axes.items()
    best = pick(rows)
    level = best["labels"][axis]
    over = {k: v for k, v in levels[level].items() if k not in (NUM_CLIENTS_KEY, CHOICE_KEY)}
    if bad := sorted(k for k in over if k.startswith("data.") or k == "seed"):
        raise ValueError(f"level {level!r} of {preset.name!r} sets {bad}: a choice must not "
                         f"change the questions")
    measured = {r["labels"][axis]: {m: r["metrics"].get(m, math.nan)
                                    for m in ("ACC", "tokens_per_solved", "n")} for r in rows}
    return {"choice": level, "size": size, "overrides": over, "dev_questions": len(dev),
            "measured": measured, "dev_question_ids": sorted(dev),
            "selected_at": time.strftime("%Y-%m-%d %H:%M:%S")}


def select(name: str, *, size: str, output_dir: Path, executor: Executor | None = None,
           extra: Sequence[str] = (), resume: bool = False,
           choices_dir: Path | None = None) -> Path:
    """Run selection preset ``name`` and write its choice file; return the file's path.

    Raises ``ValueError`` before anything runs when a question of the selection is a test
    question of a level that reads the choice.
    """
    preset = load_preset(name)
    dev = question_ids(preset, size, extra)
    for reader in readers(name):
        if size in reader.sizes and (shared := dev & question_ids(reader, size, extra,
                                                                   choice=name)):
            raise ValueError(f"selection {name!r} at size {size} would choose on "
                             f"{len(shared)} test questions of {reader.name!r} (e.g. "
                             f"{sorted(shared)[:3]}); move one of them (data.eval_offset)")
    result = run_experiment(name, size=size, output_dir=output_dir, executor=executor,
                            extra=extra, resume=resume, reuse=resume)
    if lost := incomplete_runs(output_dir, result["rows"]):
        raise ValueError("no choice written: " + "; ".join(f"{v}: {why}" for v, why in
                                                          sorted(lost.items()))
                         + ". Remove those run directories and run again with --resume (the "
                         "generation cache keeps what was answered).")
    record = choice_record(preset, size, result["rows"], dev)
    path = (choices_dir or CHOICES_DIR) / f"{name}-{size}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = (f"# written by `python3 -m pfedma_flwr.experiments.select {name} --size {size}`; "
            f"results in {output_dir}\n")
    path.write_text(head + yaml.safe_dump(record, sort_keys=False), encoding="utf-8")
    logger.info("chose %s (ACC %.3f) -> %s", record["choice"],
                record["measured"][record["choice"]]["ACC"], path)
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line of :func:`select`."""
    p = argparse.ArgumentParser(prog="python -m pfedma_flwr.experiments.select",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="selection preset in conf/experiments/ (e.g. best_single)")
    p.add_argument("--size", choices=SIZES, default="small")
    p.add_argument("--output-dir", default="", help="default outputs/experiments/NAME-SIZE")
    p.add_argument("--set", dest="extra", action="append", default=[],
                   help="extra override for every candidate")
    p.add_argument("--resume", action="store_true", help="continue an interrupted selection")
    p.add_argument("--choices-dir", default="",
                   help="where the choice file goes (default conf/experiments/choices)")
    p.add_argument("--port", type=int, default=None,
                   help="SuperLink port (default 39291, or a free one when it is busy)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per candidate")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[select] %(message)s")
    out = Path(a.output_dir or f"outputs/experiments/{a.name}-{a.size}")
    try:
        select(a.name, size=a.size, output_dir=out, executor=flwr_executor(a.port, a.timeout),
               extra=a.extra, resume=a.resume,
               choices_dir=Path(a.choices_dir) if a.choices_dir else None)
    except ValueError as e:
        p.error(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
