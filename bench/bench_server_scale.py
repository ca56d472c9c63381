"""Server time per query-round at N = 100 and N = 1,000 instant clients, both in one run.

    python3 bench/bench_server_scale.py [--num-clients 100 1000] [--embedder hashing]

The real ServerApp (``run_server``: strategy, engine, orchestrator, anomaly judge, rule
promotion, results files, checkpoint) over an in-process FakeGrid of N real ClientApps whose
agents are scripted and instant (``agent.backend.name=simulated``), with as many queries in
flight as clients (``strategy.batch_size = N``). Server time is everything outside the grid
call (:func:`bench_strategy_overhead.split_rounds`), divided by the query-rounds the run
carried (one query routed, answered and aggregated in one Flower round). The issue's target:
<= 5 ms per query-round at N = 100, and at most 2x that per query-round at N = 1,000.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_strategy_overhead import (  # noqa: E402
    REPO,
    TimedGrid,
    client_app,
    load_config,
    run_server,
    split_rounds,
    write_section,
)

logger = logging.getLogger("bench_server_scale")
SECTION = "## Server scale"


def measure(n: int, embedder: str, k_max: int, t_max: int) -> dict[str, Any]:
    """One run at N = ``n`` clients and ``n`` queries in flight."""
    per_benchmark = -(-n // 2)  # tiny's two benchmarks
    with tempfile.TemporaryDirectory() as tmp:
        overrides = (f"output.progress=false embedding.name={embedder} "
                     f"agent.backend.name=simulated data.queries_per_benchmark={per_benchmark} "
                     f"strategy.batch_size={2 * per_benchmark} strategy.t_max={t_max} "
                     f"strategy.k_max={k_max} strategy.min_nodes={n}")
        rc = {"config-name": "tiny", "output-dir": str(Path(tmp) / "out"), "overrides": overrides}
        grid = TimedGrid(client_app, n, rc)
        t0 = time.perf_counter()
        summary = run_server(grid, load_config(rc))
        t1 = time.perf_counter()
    if summary.get("status") != "completed":
        raise RuntimeError(f"N={n}: run ended {summary.get('status')!r}: "
                           f"{summary.get('generation')}")
    rows = split_rounds(grid.calls, grid.handshake_end or t0, t1)
    query_rounds = summary["num_queries"] * summary["rounds_per_query"]
    server = sum(r["strategy_s"] for r in rows)
    return {"n": n, "queries": summary["num_queries"], "rounds": len(rows),
            "query_rounds": query_rounds, "server_s": server,
            "clients_s": sum(r["clients_s"] for r in rows),
            "ms_per_qr": 1000 * server / query_rounds, "accuracy": summary["accuracy"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-clients", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--embedder", choices=["minilm", "hashing"], default="hashing")
    ap.add_argument("--k-max", type=int, default=5)
    ap.add_argument("--t-max", type=int, default=3)
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results" / "overhead.md",
                    help="markdown file whose server-scale section is replaced")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    rows = [measure(n, a.embedder, a.k_max, a.t_max) for n in a.num_clients]
    base = rows[0]["ms_per_qr"]
    table = "\n".join(
        f"| {r['n']} | {r['queries']} | {r['rounds']} | {r['query_rounds']:.0f} "
        f"| {r['server_s']:.2f} | {r['clients_s']:.2f} | {r['ms_per_qr']:.2f} "
        f"| {r['ms_per_qr'] / base:.2f} |" for r in rows)
    body = (
        f"`bench/bench_server_scale.py --num-clients {' '.join(map(str, a.num_clients))} "
        f"--embedder {a.embedder}`: the real ServerApp over an in-process grid of N real "
        f"ClientApps with instant scripted agents, N queries in flight, T_max={a.t_max}, "
        f"K_max={a.k_max}; one run, {time.strftime('%Y-%m-%d')}. Server = everything outside "
        "the grid call (routing, anomaly, aggregation, rules, results files, checkpoint); a "
        "query-round = one query routed, answered and aggregated in one Flower round.\n\n"
        "| N | queries | Flower rounds | query-rounds | server s | clients s "
        "| server ms per query-round | ratio to first N |\n"
        "|---|---|---|---|---|---|---|---|\n" + table)
    print(body)
    a.results.parent.mkdir(parents=True, exist_ok=True)
    write_section(a.results, body, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
