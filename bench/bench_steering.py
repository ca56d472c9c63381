"""Replay issue 30's steering attacks end to end and print what each one steered.

Scripted agents (no LLM), 5 nodes, one real ClientApp per node; a hostile node edits the reply
its honest ClientApp produced (``tests/strategy/steering.py``). Per attack and seed: accuracy
(beside the all-honest run of the same seed), tasks the server altered, honest final answers a
rule altered, the server's seeded rules still active, refinements that carried an injected
answer, rejected items and the size of ``rounds.jsonl``.

    HF_HUB_OFFLINE=1 python3 bench/bench_steering.py --seeds 0 1
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.strategy.steering import ATTACKS, replay  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--only", nargs="*", default=[], help="attack names (default: all)")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    names = args.only or list(ATTACKS)
    print(f"{'attack':<26} seed  acc  (honest)  altered_tasks  altered_answers  "
          f"seeded_active  refine_inj  rejected  rounds_KB  tokens/q")
    for seed in args.seeds:
        base = replay(None, seed)
        rows = [("all honest", base)] + [(n, replay(n, seed)) for n in names]
        for name, r in rows:
            print(f"{name:<26} {seed:>4}  {r.accuracy:.2f} ({base.accuracy:.2f})  "
                  f"{r.altered_tasks:>13}  {r.altered_answers:>8}/{r.honest_answers:<6}  "
                  f"{r.seeded_active:>6}/{r.seeded_total:<6}  {r.injected_in_refinement:>10}  "
                  f"{r.rejected:>8}  {r.rounds_bytes / 1000:>9.0f}  {r.tokens_per_query:>9.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
