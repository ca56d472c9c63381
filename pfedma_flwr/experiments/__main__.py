"""``python -m pfedma_flwr.experiments NAME [--size tiny|small|paper] ...`` or ``... judge ...``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pfedma_flwr.experiments.presets import SIZES, load_preset, preset_names
from pfedma_flwr.experiments.runner import flwr_executor, plan, run_experiment


def main(argv: list[str] | None = None) -> int:
    """Run one experiment preset and print where its table and plots are (or ``judge ...``)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["judge"]:
        from pfedma_flwr.judging.cli import main as judge_main  # loads a model only when judging

        return judge_main(args[1:])
    p = argparse.ArgumentParser(prog="python -m pfedma_flwr.experiments",
                                description="Run one of the paper's experiments "
                                            "(variants as real `flwr run` simulations).")
    p.add_argument("name", help=f"experiment preset in conf/experiments/: {preset_names()}")
    p.add_argument("--size", choices=SIZES, default="tiny")
    p.add_argument("--num-clients", type=int, default=None, help="override the size's N")
    p.add_argument("--output-dir", default="", help="default outputs/experiments/NAME-SIZE")
    p.add_argument("--set", dest="extra", action="append", default=[],
                   help="extra override for every variant, e.g. --set strategy.t_max=3")
    p.add_argument("--reuse", action="store_true",
                   help="skip variants whose run directory already holds a completed run")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted experiment: completed levels are kept, an "
                        "interrupted one continues from its checkpoint")
    p.add_argument("--seeds", default="", metavar="S[,S...]",
                   help="repeat every sampled variant once per seed (e.g. 0,1,2): mean ± sd")
    p.add_argument("--only", action="append", default=[], metavar="AXIS=LEVEL[,LEVEL]",
                   help="run only these variants, e.g. --only rho=0.4 (repeat for more axes)")
    p.add_argument("--choices-dir", default="",
                   help="where levels' choice files are read (default conf/experiments/choices)")
    p.add_argument("--port", type=int, default=39291, help="SuperLink port (+2 control)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per variant")
    p.add_argument("--jobs", type=int, default=1,
                   help="run up to this many scripted variants (no local LLM) at a time; "
                        "variants with a local LLM always run alone (default 1)")
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
    logging.basicConfig(level=logging.INFO, format="[experiments] %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per health poll otherwise
    result = run_experiment(a.name, size=a.size, output_dir=out, num_clients=a.num_clients,
                            executor=flwr_executor(a.port, a.timeout), extra=a.extra,
                            reuse=a.reuse, only=only, resume=a.resume, seeds=seeds,
                            choices_dir=choices, jobs=a.jobs)
    logging.getLogger(__name__).info("wrote %s", ", ".join(result["files"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
