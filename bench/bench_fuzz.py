"""Fuzz the seam at scale: >= 10,000 generated payloads per decoder, plus strategy rounds.

Uses the generators of ``tests/unit/test_fuzz_seam.py`` (valid messages with hostile values
spliced in) and prints, per target, how many cases ran, how many were accepted, the rejection
codes seen, and every escape (an exception other than a coded SchemaError). Exit status 1 if
anything escaped.

    HF_HUB_OFFLINE=1 python3 bench/bench_fuzz.py --cases 10000 --rounds 300
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pfedma_flwr.protocol.codec import decode_description, decode_instruction, decode_reply  # noqa: E402
from tests.unit import test_fuzz_seam as fz  # noqa: E402


def run_target(name: str, gen: st.SearchStrategy[Any], body: Callable[[Any], str],
               cases: int) -> int:
    """Run ``body`` on ``cases`` generated inputs; print the tally; return the escapes."""
    tally: collections.Counter[str] = collections.Counter()
    escapes: list[str] = []

    @settings(max_examples=cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(gen)
    def prop(x: Any) -> None:
        try:
            tally[body(x)] += 1
        except Exception:  # noqa: BLE001 - what the bench counts
            tally["ESCAPE"] += 1
            escapes.append(traceback.format_exc(limit=3))

    t0 = time.perf_counter()
    prop()
    n = sum(tally.values())
    print(f"{name}: {n} cases in {time.perf_counter() - t0:.1f}s, accepted {tally['ok']}, "
          f"escapes {tally['ESCAPE']}")
    for code, k in sorted(tally.items(), key=lambda kv: -kv[1]):
        if code not in ("ok", "ESCAPE"):
            print(f"    {code:<28} {k}")
    for e in escapes[:5]:
        print(e)
    return tally["ESCAPE"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000, help="cases per decoder")
    ap.add_argument("--rounds", type=int, default=300, help="strategy rounds of 3 replies")
    args = ap.parse_args()
    escapes = 0
    escapes += run_target("reply decoder", fz.payloads,
                          lambda t: fz.check_decoder(decode_reply, t), args.cases)
    escapes += run_target("instruction decoder",
                          st.one_of(fz.mutated_payload(fz._instruction_base()), fz._text),
                          lambda t: fz.check_decoder(decode_instruction, t), args.cases)
    escapes += run_target("description decoder",
                          st.one_of(fz.mutated_payload(fz._description_base()), fz._text),
                          lambda t: fz.check_decoder(decode_description, t), args.cases)

    def one_round(payloads: list[str]) -> str:
        failures = fz.harness().step(payloads)
        assert all(len(w) < 400 for w in failures.values())
        return f"{3 - len(failures)} of 3 absorbed" if failures else "ok"

    escapes += run_target("strategy aggregation (rounds)", fz.round_payloads(fz.QIDS),
                          one_round, args.rounds)
    print(f"total escapes: {escapes}")
    return 1 if escapes else 0


if __name__ == "__main__":
    sys.exit(main())
