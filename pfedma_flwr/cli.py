"""The ``pfedma`` command (also ``python -m pfedma_flwr``): ``run``, ``experiment``, ``report``.

``run`` parses its options here and runs :func:`pfedma_flwr.experiments.launch.run`, which
checks everything first, refuses an output dir that already holds a run unless ``--overwrite``
(its files removed only once the new run has started) or ``--resume``, records
``run_info.json`` (command, timestamps, exit code, status, versions, commit, model) and writes
``report.md`` with its plots when the run ends.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr import __version__
from pfedma_flwr.logs import LOG_LEVEL_ENV, LOG_LEVELS
from pfedma_flwr.server import report as rep

#: exit status of a command refused before anything started (launch.EXIT_REFUSED)
EXIT_REFUSED = 3
DEFAULT_PORT = 39291
RUN_DOC = """Run a PFedMA simulation with `flwr run .` on a SuperLink of its own.

Every check runs before anything starts or is removed. Exit codes: 0 completed; 1 failed (the
ServerApp failed); 2 failed:generation (the agents' model cannot answer, or most answers
failed); 3 refused before anything started (config, names, --num-clients, data dir, port,
output dir); 128+N stopped by signal N (status interrupted, resume command printed).
"""

USAGE = """usage: pfedma [--version] {run,experiment,report} ...

  run         a PFedMA simulation with `flwr run` (pfedma run --help)
  experiment  a paper experiment preset (pfedma experiment --help; docs/experiments.md)
  report      (re)write report.md and its plots for a run dir: pfedma report DIR
"""


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 3 (refused before anything started), not argparse's 2."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_REFUSED, f"{self.prog}: error: {message}\n")


def run_parser() -> argparse.ArgumentParser:
    """The options of ``pfedma run`` / ``python -m pfedma_flwr run``."""
    r = _Parser(
        prog="pfedma run", description=RUN_DOC, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # --help lists the options in the order they are added
    _add_run_target_args(r)
    _add_run_resource_args(r)
    _add_run_output_args(r)
    return r


def _add_run_target_args(r: argparse.ArgumentParser) -> None:
    """What a run runs: preset, clients, output dir (and its earlier run), data, overrides."""
    r.add_argument("--config", default="pfedma", help="preset name in conf/ (default: pfedma)")
    r.add_argument("--num-clients", type=int, default=8, help="simulated SuperNodes (default 8)")
    r.add_argument("--output-dir", default="outputs/latest", help="results directory")
    r.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --output-dir (removed only once the new "
        "run has passed every check and its SuperLink started)",
    )
    r.add_argument(
        "--resume",
        action="store_true",
        help="continue from <output-dir>/checkpoint.json (last completed round)",
    )
    r.add_argument(
        "--data-dir",
        default="",
        help="benchmark data dir (default: --set data.data_dir, else the shipped "
        "data/); both given must agree",
    )
    r.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="dotted config override, e.g. --set strategy.t_max=3 (repeatable)",
    )


def _add_run_resource_args(r: argparse.ArgumentParser) -> None:
    """The SuperLink's port, the Ray resources of each ClientApp, the time limit."""
    r.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"SuperLink port: one HTTP port for its Runtime, Control and Fleet "
        f"APIs (default {DEFAULT_PORT}, or a free one when that is busy)",
    )
    r.add_argument(
        "--cpus-per-client",
        type=float,
        default=None,
        help="Ray CPUs per ClientApp (default: the embedded model's "
        "agent.backend.n_threads, capped at the cores; 1 for other backends)",
    )
    r.add_argument(
        "--gpus-per-client",
        type=float,
        default=0.0,
        help="Ray GPUs per ClientApp (default 0: agents on an endpoint or on CPU "
        "reserve none; e.g. 0.25 for the transformers backend on a GPU)",
    )
    r.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds before the run is stopped"
    )


def _add_run_output_args(r: argparse.ArgumentParser) -> None:
    """What a run prints and logs, its backend check and its experiment tracker."""
    r.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=None,
        help=f"level of the project's and Flower's loggers in every process of the "
        f"run: launcher, SuperLink, ServerApp, ClientApps (default: "
        f"${LOG_LEVEL_ENV}, else INFO; WARNING with --quiet)",
    )
    r.add_argument(
        "--quiet",
        action="store_true",
        help="print only the outcome: no streamed log (run.log keeps it), no "
        "progress, WARNING logs in every process unless --log-level",
    )
    r.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no per-query/round/reply progress lines or bar",
    )
    r.add_argument(
        "--no-backend-check",
        dest="backend_check",
        action="store_false",
        help="skip the launcher's check that the agents' model answers (the "
        "ClientApps still check at the handshake)",
    )
    r.add_argument(
        "--tracking",
        default="none",
        choices=("none", "tensorboard", "mlflow"),
        help="experiment tracker fed with the resolved config and each round's "
        "metrics (default none)",
    )
    r.add_argument(
        "--tracking-dir",
        default="",
        help="tracker output (default <output-dir>/tracking; mlflow: a tracking URI or dir)",
    )


def _run(args: list[str]) -> int:
    """``pfedma run ARGS`` (``args`` without the ``run``)."""
    from pfedma_flwr.experiments import launch

    a = run_parser().parse_args(args)
    from pfedma_flwr.logs import configure_logging

    configure_logging(a.log_level or ("WARNING" if a.quiet else None))
    prog = (
        ["pfedma"]
        if Path(sys.argv[0]).name == "pfedma"
        else [Path(sys.executable).name, "-m", "pfedma_flwr"]
    )
    return launch.run(
        config=a.config,
        num_clients=a.num_clients,
        output_dir=Path(a.output_dir),
        overrides=" ".join(shlex.quote(o) for o in a.overrides),
        data_dir=a.data_dir,
        port=a.port,
        cpus_per_client=a.cpus_per_client,
        timeout=a.timeout,
        resume=a.resume,
        log_level=a.log_level,
        progress=a.progress,
        tracking=a.tracking,
        tracking_dir=a.tracking_dir,
        gpus_per_client=a.gpus_per_client,
        overwrite=a.overwrite,
        quiet=a.quiet,
        command=[*prog, "run", *args],
        backend_check=a.backend_check,
    )


def _report(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="pfedma report", description="(re)write report.md and its plots for a run dir"
    )
    p.add_argument("run_dir", help="a run's output dir (holds summary.json)")
    p.add_argument(
        "--tracking",
        default="none",
        choices=("none", "tensorboard", "mlflow"),
        help="also write the run's round records to this tracker (default none)",
    )
    p.add_argument(
        "--tracking-dir",
        default="",
        help="tracker output (default <run_dir>/tracking; mlflow: a URI or dir)",
    )
    a = p.parse_args(argv)
    from pfedma_flwr.experiments import tracking as trk

    try:
        tracker = trk.make_tracker(a.tracking, Path(a.tracking_dir or Path(a.run_dir) / "tracking"))
        path = rep.write_report(a.run_dir)
    except (NotADirectoryError, trk.TrackingError) as e:
        sys.stderr.write(f"[pfedma] {e}\n")
        return 1
    print(path)
    if tracker is not None:
        print(f"[pfedma] {trk.replay(a.run_dir, tracker)} rounds -> {tracker.target}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pfedma`` console script and of ``python -m pfedma_flwr``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        print(f"pfedma-flwr {__version__}")
        return 0
    cmd, rest = args[0], args[1:]
    if cmd == "run":
        return _run(rest)
    if cmd == "report":
        return _report(rest)
    if cmd == "experiment":
        from pfedma_flwr.experiments.__main__ import main as experiment_main

        return int(experiment_main(rest) or 0)
    sys.stderr.write(f"pfedma: unknown command {cmd!r}\n{USAGE}")
    return 2
