"""What a second sitting does with the run directories an earlier one left (issue 33 item 4).

A level whose run completed with the same configuration is reused, one stopped midway with a
checkpoint is resumed from it, anything else runs again; results in a selected directory are
never replaced unless asked (``--reuse``/``--resume``/``--overwrite``), and an output directory
holding another experiment or size is refused. The wall seconds of earlier sittings are kept in
``walls.json`` so a level resumed across sittings reports its whole time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from pfedma_flwr.experiments import preflight
from pfedma_flwr.experiments.variant import ExperimentRefused, VariantRun
from pfedma_flwr.server.results import write_json_atomic

logger = logging.getLogger(__name__)


def completed(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds a run whose ``summary.json`` says it completed."""
    try:
        s = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(s, dict) and s.get("status") == "completed"


def same_config(vr: VariantRun) -> bool:
    """Whether the run in ``vr.output_dir`` was made with ``vr``'s configuration.

    Output keys are left out, and the data dir unless the plan names one (the launcher and the
    executors set them). A level whose preset changed since it ran is run again rather than
    reused or resumed.
    """
    from pfedma_flwr.config import load_config, to_yaml

    try:
        saved = yaml.safe_load((vr.output_dir / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    planned = yaml.safe_load(to_yaml(load_config(
        {"config-name": vr.config, "overrides": vr.overrides})))
    if not isinstance(saved, dict) or not isinstance(planned, dict):
        return False
    for d in (saved, planned):
        d.pop("output", None)
    if not (planned.get("data") or {}).get("data_dir"):  # the launcher fills in its default
        for d in (saved, planned):
            (d.get("data") or {}).pop("data_dir", None)
    return bool(saved == planned)


def action(vr: VariantRun, *, reuse: bool, resume: bool) -> str:
    """``reuse`` a finished level, ``resume`` an interrupted one, else ``run`` it."""
    if not (reuse or resume) or not vr.output_dir.is_dir():
        return "run"
    if not same_config(vr):
        logger.warning("%s holds a run of another configuration: running it again",
                       vr.output_dir)
        return "run"
    if completed(vr.output_dir):
        return "reuse"
    if resume and (vr.output_dir / "checkpoint.json").is_file():
        return "resume"
    return "run"


def decide(planned: Sequence[tuple[Any, list[VariantRun]]], *, reuse: bool, resume: bool,
            overwrite: bool) -> list[VariantRun]:
    """The runs to execute (resume/overwrite set); the reused ones are left out.

    Raises :class:`ExperimentRefused` when a selected run dir holds results and none of
    ``reuse``, ``resume``, ``overwrite`` says what to do with them.
    """
    runs = [vr for _, reps in planned for vr in reps]
    held = [vr.output_dir.name for vr in runs if preflight.existing_results(vr.output_dir)]
    if held and not (reuse or resume or overwrite):
        raise ExperimentRefused(
            f"these variants already hold runs: {held}; pass --reuse (skip the completed ones, "
            "resume the others), --overwrite (run them again) or another --output-dir")
    todo = []
    for vr in runs:
        has = bool(preflight.existing_results(vr.output_dir))
        what = "run" if overwrite else action(vr, reuse=reuse or resume, resume=reuse or resume)
        if what == "reuse":
            logger.info("reusing %s", vr.output_dir)
        else:
            todo.append(replace(vr, resume=what == "resume", overwrite=has and what == "run"))
    return todo


def refuse_other_experiment(output_dir: Path, name: str, size: str, overwrite: bool) -> None:
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


_WALLS = "walls.json"


def previous_walls(output_dir: Path) -> dict[str, float]:
    """Seconds per run dir of earlier sittings (kept across an interruption)."""
    try:
        d = json.loads((output_dir / _WALLS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in d.items()} if isinstance(d, dict) else {}


def save_walls(output_dir: Path, walls: Mapping[str, float]) -> None:
    """Write the seconds per run dir so far (after each run: an interruption keeps them)."""
    write_json_atomic(output_dir / _WALLS, dict(walls))
