"""The ``pfedma`` command (also ``python -m pfedma_flwr``): ``run``, ``experiment``, ``report``.

``run`` takes every option of :func:`pfedma_flwr.experiments.launch.main` plus
``--overwrite``. It refuses
an output dir that already holds a run's results unless ``--overwrite`` (those files are removed
first) or ``--resume`` is given, records ``run_info.json`` (command, timestamps, exit code,
versions, commit, model) and writes ``report.md`` with its plots when the run ends.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pfedma_flwr import __version__
from pfedma_flwr.server import report as rep

USAGE = """usage: pfedma [--version] {run,experiment,report} ...

  run         a PFedMA simulation with `flwr run` (pfedma run --help)
  experiment  a paper experiment preset (pfedma experiment --help; docs/experiments.md)
  report      (re)write report.md and its plots for a run dir: pfedma report DIR
"""


#: files that make a dir hold a run (a run that failed before writing any is not one)
RESULT_FILES = ("summary.json", "rounds.jsonl", "queries.jsonl", "checkpoint.json")


def existing_results(out: Path) -> list[str]:
    """The result files (:data:`RESULT_FILES`) already in ``out``."""
    return [n for n in RESULT_FILES if (out / n).exists()] if out.is_dir() else []


def _run(argv: list[str]) -> int:
    from pfedma_flwr.experiments import launch

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--output-dir", default="outputs/latest")
    pre.add_argument("--overwrite", action="store_true")
    pre.add_argument("--resume", action="store_true")
    known, _ = pre.parse_known_args(argv)
    if "-h" in argv or "--help" in argv:
        print(
            "pfedma run: the options below, plus --overwrite (replace the results already in "
            "--output-dir; without it such a dir is refused unless --resume)\n"
        )
        return launch.main(["run", "--help"])
    out = Path(known.output_dir).expanduser().resolve()
    found = existing_results(out)
    if found and not (known.overwrite or known.resume):
        sys.stderr.write(
            f"[pfedma] {out} already holds a run ({', '.join(found[:4])}"
            f"{', ...' if len(found) > 4 else ''}); pass --overwrite to replace it, --resume to "
            "continue it, or choose another --output-dir\n"
        )
        return 1
    if known.overwrite and not known.resume:
        for name in rep.RUN_FILES:  # the earlier run's report and log go with its results
            (out / name).unlink(missing_ok=True)
    rest = [a for a in argv if a != "--overwrite"]
    rep.update_run_info(
        out,
        {
            **rep.base_run_info(),
            "command": ["pfedma", "run", *rest],
            "cwd": str(Path.cwd()),
            "started_at": rep.now(),
            "finished_at": "",
            "exit_code": "",
        },
    )
    rc = 1
    try:
        rc = launch.main(["run", *rest])
        return rc
    finally:
        rep.update_run_info(out, {"finished_at": rep.now(), "exit_code": rc})
        if existing_results(out):  # nothing to report when the run wrote no result
            try:
                path = rep.write_report(out)
                print(f"{rep.headline(out)}\n[pfedma] report: {path}", flush=True)
            except (OSError, ValueError) as e:
                sys.stderr.write(f"[pfedma] report not written: {e}\n")


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
