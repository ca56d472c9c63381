"""Command line of the training package: ``build-data`` and ``check-config``.

``python3 -m pfedma_flwr.training build-data --out DIR`` writes veRL parquet rows;
``record-replay --out FILE --num-clients N`` has the configured agents answer the training
queries once (the replay cache); ``check-config [OVERRIDES...]`` composes the PPO config and
runs veRL's checks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pfedma_flwr.training.data import DEFAULT_BENCHMARKS, build_data, training_tasks


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run it; return the exit code."""
    parser = argparse.ArgumentParser(prog="python3 -m pfedma_flwr.training")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_build_data(sub)
    _add_record_replay(sub)
    _add_check_config(sub)
    args = parser.parse_args(argv)
    if args.command == "check-config":
        return _check_config(args)
    if args.command == "record-replay":
        return _record_replay(args)
    return _build_data(args)


def _add_build_data(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("build-data", help="write train.parquet and val.parquet for veRL")
    b.add_argument("--out", required=True, help="output directory")
    b.add_argument("--benchmarks", nargs="+", default=list(DEFAULT_BENCHMARKS))
    b.add_argument("--per-benchmark", type=int, default=200,
                   help="dev-pool size per benchmark (disjoint from the eval stream of --seed)")
    b.add_argument("--val-per-benchmark", type=int, default=16)
    b.add_argument("--seed", type=int, default=0, help="the runs' seed (config key seed)")
    b.add_argument("--data-dir", default=None, help="benchmark data dir (default: repo data/)")
    b.add_argument("--overwrite", action="store_true")


def _add_record_replay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("record-replay", help="record the agents' answers to the training "
                       "queries (the replay cache the agent loop reads)")
    r.add_argument("--out", required=True, help="replay file (.jsonl or .jsonl.gz)")
    r.add_argument("--num-clients", type=int, required=True)
    r.add_argument("--config", default="pfedma", help="run config preset (conf/NAME.yaml)")
    r.add_argument("--set", dest="overrides", action="append", default=[],
                   help="config override key=value (repeatable), as for a run")
    r.add_argument("--few-shot", type=int, default=0,
                   help="demonstrations per answer (0: the dev pool is also D_i's source)")
    r.add_argument("--benchmarks", nargs="+", default=list(DEFAULT_BENCHMARKS))
    r.add_argument("--per-benchmark", type=int, default=200)
    r.add_argument("--limit", type=int, default=0, help="first N tasks only (0: all)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--data-dir", default=None)
    r.add_argument("--overwrite", action="store_true")


def _add_check_config(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("check-config", help="compose conf/training/ppo_router_r1.yaml with "
                       "Hydra overrides and run veRL's validate_config (needs veRL)")
    c.add_argument("overrides", nargs="*", help="key=value Hydra overrides")


def _check_config(args: argparse.Namespace) -> int:
    """``check-config``: 0 if the PPO config composes and passes veRL's checks, else 2."""
    from pfedma_flwr.training.ppo_config import check_ppo_config

    try:
        check_ppo_config(args.overrides)
    except Exception as e:  # noqa: BLE001 - any composition/validation error is the answer
        print(f"check-config: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print("check-config: the PPO config composes and passes veRL's checks")
    return 0


def _record_replay(args: argparse.Namespace) -> int:
    """``record-replay``: 0 and the replay's info as JSON, or 2 and the cause on stderr."""
    from pfedma_flwr.training.replay import record_replay

    try:
        tasks = training_tasks(args.benchmarks, per_benchmark=args.per_benchmark,
                               seed=args.seed, data_dir=args.data_dir)
        info = record_replay(tasks[:args.limit] if args.limit > 0 else tasks, args.out,
                             num_clients=args.num_clients, config_name=args.config,
                             overrides=" ".join(args.overrides), few_shot=args.few_shot,
                             overwrite=args.overwrite)
    except (ValueError, OSError) as e:
        print(f"record-replay: {e}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=2))
    return 0


def _build_data(args: argparse.Namespace) -> int:
    """``build-data``: 0 and the written files' info as JSON, or 2 and the cause on stderr."""
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
