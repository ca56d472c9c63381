"""``python -m pfedma_flwr.experiments NAME [--size tiny|small|paper] ...`` or ``... judge ...``.

Exit codes as ``pfedma run``'s: 0 done, 1 a variant failed, 2 the agents' model cannot answer,
3 refused before anything ran, 128+N stopped by signal N (the command to continue is printed).
The table is written for whatever completed, also after a failure or a stop.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from pfedma_flwr.experiments.presets import SIZES, load_preset, preset_names
from pfedma_flwr.experiments.processes import Interrupted
from pfedma_flwr.experiments.runner import (
    ExperimentRefused,
    VariantFailed,
    flwr_executor,
    plan,
    run_experiment,
)
from pfedma_flwr.logs import LOG_LEVELS

EXIT_REFUSED = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_REFUSED, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m pfedma_flwr.experiments",
                description="Run one of the paper's experiments (variants as real `flwr run` "
                            "simulations).")
    p.add_argument("name", help=f"experiment preset in conf/experiments/: {preset_names()}")
    p.add_argument("--size", choices=SIZES, default="tiny")
    p.add_argument("--num-clients", type=int, default=None, help="override the size's N")
    p.add_argument("--output-dir", default="", help="default outputs/experiments/NAME-SIZE")
    p.add_argument("--data-dir", default="",
                   help="benchmark data dir of every variant (or --set data.data_dir=DIR)")
    p.add_argument("--set", dest="extra", action="append", default=[],
                   help="extra override for every variant, e.g. --set strategy.t_max=3")
    p.add_argument("--reuse", action="store_true",
                   help="skip variants whose run dir holds a completed run, resume those "
                        "holding a checkpoint (continues an interrupted experiment)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted experiment: completed levels are kept, an "
                        "interrupted one continues from its checkpoint (as --reuse)")
    p.add_argument("--seeds", default="", metavar="S[,S...]",
                   help="repeat every sampled variant once per seed (e.g. 0,1,2): mean ± sd")
    p.add_argument("--choices-dir", default="",
                   help="where levels' choice files are read (default conf/experiments/choices)")
    p.add_argument("--jobs", type=int, default=1,
                   help="run up to this many scripted variants (no local LLM) at a time; "
                        "variants with a local LLM always run alone (default 1)")
    p.add_argument("--overwrite", action="store_true",
                   help="run the selected variants again where their run dirs hold results")
    p.add_argument("--only", action="append", default=[], metavar="AXIS=LEVEL[,LEVEL]",
                   help="run only these variants, e.g. --only rho=0.4 (repeat for more axes); "
                        "the table keeps the other variants' completed runs")
    p.add_argument("--port", type=int, default=None,
                   help="SuperLink port (default 39291, or a free one when it is busy)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per variant")
    p.add_argument("--tracking", default="none", choices=("none", "tensorboard", "mlflow"),
                   help="log each variant's resolved config, round and final metrics to "
                        "<output-dir>/tracking/<variant> (default none)")
    p.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=None,
                   help="log level of every process of every variant")
    p.add_argument("--quiet", action="store_true",
                   help="no streamed logs or progress of the variants, only the outcome")
    return p


def _continue(argv: list[str]) -> str:
    args = [a for a in argv if a != "--overwrite"]
    return shlex.join([Path(sys.executable).name, "-m", "pfedma_flwr.experiments", *args,
                       *([] if {"--reuse", "--resume"} & set(args) else ["--reuse"])])


def main(argv: list[str] | None = None) -> int:
    """Run one experiment preset and print where its table and plots are (or ``judge ...``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["judge"]:
        from pfedma_flwr.judging.cli import main as judge_main  # loads a model only when judging

        return judge_main(args[1:])
    p = _parser()
    a = p.parse_args(args)
    only: dict[str, list[str]] = {}
    for item in a.only:
        axis, sep, levels = item.partition("=")
        if not sep or not axis.strip() or not levels.strip():
            p.error(f"--only expects AXIS=LEVEL[,LEVEL], got {item!r}")
        only.setdefault(axis.strip(), []).extend(x.strip() for x in levels.split(","))
    out = Path(a.output_dir or f"outputs/experiments/{a.name}-{a.size}")
    choices = Path(a.choices_dir) if a.choices_dir else None
    try:
        seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
        # every level resolvable before anything runs: axes, levels, sizes, choice files
        plan(load_preset(a.name), a.size, out.resolve(), only=only, choices_dir=choices)
    except ValueError as e:
        p.error(str(e))
    if len(set(seeds)) != len(seeds):
        p.error(f"--seeds repeats a seed: {a.seeds}")
    if a.jobs < 1:
        p.error(f"--jobs must be >= 1, got {a.jobs}")
    logging.basicConfig(level=logging.INFO, format="[experiments] %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per health poll otherwise
    log = logging.getLogger(__name__)
    try:
        result = run_experiment(
            a.name, size=a.size, output_dir=out, num_clients=a.num_clients,
            executor=flwr_executor(a.port, a.timeout, log_level=a.log_level, quiet=a.quiet),
            extra=[*a.extra, *([f"data.data_dir={Path(a.data_dir).resolve()}"]
                               if a.data_dir else [])],
            reuse=a.reuse, only=only, resume=a.resume, seeds=seeds, choices_dir=choices,
            jobs=a.jobs, overwrite=a.overwrite, tracking=a.tracking)
    except ExperimentRefused as e:
        sys.stderr.write(f"[experiments] refused: {e} (exit {e.code})\n")
        return e.code
    except VariantFailed as e:
        sys.stderr.write(f"[experiments] {e}; the table holds the completed variants; "
                         f"continue with: {_continue(args)} (exit {e.code})\n")
        return e.code
    except Interrupted as e:
        sys.stderr.write(f"[experiments] interrupted (exit {128 + e.signum}); every process "
                         f"was stopped; continue with: {_continue(args)}\n")
        return 128 + e.signum
    log.info("wrote %s", ", ".join(result["files"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
