"""README's main job twice with one fresh generation cache: how much faster is the rerun?

Usage::

    python3 bench/bench_rerun.py [--out-root /tmp/rerun] [--set key=value ...] \
        [--result bench/results/rerun.md]

Runs ``python3 -m pfedma_flwr run --num-clients 8`` (README's main job) into
``<out-root>/first`` and again, with the same seed and configuration, into
``<out-root>/second``; both use ``<out-root>/generations`` as the generation cache, which
starts empty. Reports the wall time of each launcher call, the ratio, the tokens and
``cached_share`` of each run, and whether the second run gave the same answer, route and
verdict for every query (and the same accuracy). Issue 29's target: second run >= 3x faster,
identical answers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _run(out: Path, cache: Path, extra: list[str]) -> float:
    cmd = [sys.executable, "-m", "pfedma_flwr", "run", "--num-clients", "8", "--output-dir",
           str(out), "--overwrite", "--quiet", "--set",
           f"output.generation_cache_dir={cache}"]
    for kv in extra:
        cmd += ["--set", kv]
    t0 = time.perf_counter()
    rc = subprocess.call(cmd)
    wall = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {rc}; see {out / 'run.log'}")
    return wall


def _queries(out: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "queries.jsonl").open(encoding="utf-8")]
    return {str(r["query_id"]): r for r in rows}


def _key(q: dict[str, Any]) -> tuple[Any, ...]:
    """What must not change between the runs: answer, verdict, rounds, tokens, who was asked."""
    return (q.get("answer"), q.get("correct"), q.get("rounds"), q.get("tokens"),
            json.dumps(q.get("selections"), sort_keys=True))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out-root", default="/tmp/pfedma-rerun")
    p.add_argument("--set", dest="extra", action="append", default=[])
    p.add_argument("--result", default="")
    a = p.parse_args()
    root = Path(a.out_root).resolve()
    cache = root / "generations"
    shutil.rmtree(cache, ignore_errors=True)
    walls = {name: _run(root / name, cache, a.extra) for name in ("first", "second")}
    sums = {n: json.loads((root / n / "summary.json").read_text(encoding="utf-8"))
            for n in walls}
    qa, qb = _queries(root / "first"), _queries(root / "second")
    same = [qid for qid in qa if qid in qb and _key(qa[qid]) == _key(qb[qid])]
    lines = [
        "# Main job rerun with the generation cache",
        "",
        f"`python3 bench/bench_rerun.py {' '.join('--set ' + x for x in a.extra)}`".replace(
            "  ", " "),
        "",
        "| run | wall s | accuracy | tokens per query | cached_share |",
        "|---|---|---|---|---|",
    ]
    for n, w in walls.items():
        s = sums[n]
        lines.append(f"| {n} | {w:.0f} | {s.get('accuracy')} | {s.get('tokens_per_query')} | "
                     f"{s.get('cached_share')} |")
    lines += [
        "",
        f"Speed-up of the rerun: {walls['first'] / walls['second']:.2f}x. Queries with the same "
        f"answer, verdict, rounds, tokens and selections: {len(same)}/{len(qa)} "
        f"(second run holds {len(qb)}).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.result:
        Path(a.result).write_text(text, encoding="utf-8")
    return 0 if len(same) == len(qa) == len(qb) else 1


if __name__ == "__main__":
    sys.exit(main())
