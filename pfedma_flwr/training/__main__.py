"""Command line of the training package: ``build-data`` and ``check-config``.

``python3 -m pfedma_flwr.training build-data --out DIR`` writes veRL parquet rows;
``check-config [OVERRIDES...]`` composes the PPO config and runs veRL's checks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pfedma_flwr.training.data import DEFAULT_BENCHMARKS, build_data


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run it; return the exit code."""
    parser = argparse.ArgumentParser(prog="python3 -m pfedma_flwr.training")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build-data", help="write train.parquet and val.parquet for veRL")
    b.add_argument("--out", required=True, help="output directory")
    b.add_argument("--benchmarks", nargs="+", default=list(DEFAULT_BENCHMARKS))
    b.add_argument("--per-benchmark", type=int, default=200,
                   help="dev-pool size per benchmark (disjoint from the eval stream of --seed)")
    b.add_argument("--val-per-benchmark", type=int, default=16)
    b.add_argument("--seed", type=int, default=0, help="the runs' seed (config key seed)")
    b.add_argument("--data-dir", default=None, help="benchmark data dir (default: repo data/)")
    b.add_argument("--overwrite", action="store_true")
    c = sub.add_parser("check-config", help="compose conf/training/ppo_router_r1.yaml with "
                       "Hydra overrides and run veRL's validate_config (needs veRL)")
    c.add_argument("overrides", nargs="*", help="key=value Hydra overrides")
    args = parser.parse_args(argv)
    if args.command == "check-config":
        from pfedma_flwr.training.ppo_config import check_ppo_config

        try:
            check_ppo_config(args.overrides)
        except Exception as e:  # noqa: BLE001 - any composition/validation error is the answer
            print(f"check-config: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        print("check-config: the PPO config composes and passes veRL's checks")
        return 0
    try:
        info = build_data(args.out, benchmarks=args.benchmarks, per_benchmark=args.per_benchmark,
                          val_per_benchmark=args.val_per_benchmark, seed=args.seed,
                          data_dir=args.data_dir, overwrite=args.overwrite)
    except (ValueError, OSError) as e:
        print(f"build-data: {e}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
