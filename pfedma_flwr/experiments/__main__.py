"""``python -m pfedma_flwr.experiments NAME [--size tiny|small|paper] [--num-clients N] ...``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pfedma_flwr.experiments.presets import SIZES, load_preset, preset_names
from pfedma_flwr.experiments.runner import flwr_executor, run_experiment, select_variants


def main(argv: list[str] | None = None) -> int:
    """Run one experiment preset and print where its table and plots are."""
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
    p.add_argument("--only", action="append", default=[], metavar="AXIS=LEVEL[,LEVEL]",
                   help="run only these variants, e.g. --only rho=0.4 (repeat for more axes)")
    p.add_argument("--port", type=int, default=39291, help="SuperLink port (+2 control)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per variant")
    p.add_argument("--jobs", type=int, default=1,
                   help="run up to this many scripted variants (no local LLM) at a time; "
                        "variants with a local LLM always run alone (default 1)")
    a = p.parse_args(argv)
    only: dict[str, list[str]] = {}
    for item in a.only:
        axis, sep, levels = item.partition("=")
        if not sep or not axis.strip() or not levels.strip():
            p.error(f"--only expects AXIS=LEVEL[,LEVEL], got {item!r}")
        only.setdefault(axis.strip(), []).extend(x.strip() for x in levels.split(","))
    try:
        select_variants(load_preset(a.name).variants(), only)
    except ValueError as e:
        p.error(str(e))
    logging.basicConfig(level=logging.INFO, format="[experiments] %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per health poll otherwise
    out = Path(a.output_dir or f"outputs/experiments/{a.name}-{a.size}")
    result = run_experiment(a.name, size=a.size, output_dir=out, num_clients=a.num_clients,
                            executor=flwr_executor(a.port, a.timeout), extra=a.extra,
                            reuse=a.reuse, only=only, jobs=a.jobs)
    logging.getLogger(__name__).info("wrote %s", ", ".join(result["files"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
