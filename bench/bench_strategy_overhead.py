"""Strategy overhead per round vs the round's wall time, N=100 clients with instant agents.

    python3 bench/bench_strategy_overhead.py [--num-clients 100] [--embedder minilm]

The real ServerApp (``run_server``: strategy, engine, anomaly judge, rule promotion, results
files) runs over an in-process :class:`~pfedma_flwr.testing.FakeGrid` whose clients are the real
ClientApp with scripted instant agents (``--agents``), so "client time" is the ClientApp's own
work (rule enforcement, PII detection, feedback) with zero LLM time. Each Flower round is split
at the grid call into:

- **clients**: inside ``send_and_receive`` (every selected ClientApp, one after another);
- **strategy**: the rest of the round, i.e. from the end of the previous round's replies to the
  start of this round's sends (aggregate + anomaly + promotion + H-scores + Resolve + results
  files + checkpoint + the next configure), plus, for the last round, up to the summary.

Both are measured in one run; the table reports strategy / round wall as a ratio. With a real
LLM the clients' part grows by orders of magnitude (tens of seconds per answer on CPU) while the
strategy's does not, so this ratio is an upper bound on the strategy's share.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from flwr.app import Message  # noqa: E402

from client_apps.agent_app import app as client_app  # noqa: E402
from pfedma_flwr.config import load_config  # noqa: E402
from pfedma_flwr.protocol.codec import QUERY_RESPOND  # noqa: E402
from pfedma_flwr.server_app import run_server  # noqa: E402
from pfedma_flwr.testing import FakeGrid  # noqa: E402

logger = logging.getLogger("bench_strategy_overhead")
REPO = Path(__file__).resolve().parents[1]
SECTION = "## Strategy overhead"


class TimedGrid(FakeGrid):
    """FakeGrid that records when each round's ``send_and_receive`` starts and ends."""

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.calls: list[tuple[float, float, int]] = []
        self.handshake_end = 0.0

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None
                         ) -> Iterable[Message]:
        msgs = list(messages)
        t0 = time.perf_counter()
        replies = super().send_and_receive(msgs, timeout=timeout)
        if msgs and msgs[0].metadata.message_type == QUERY_RESPOND:
            self.calls.append((t0, time.perf_counter(), len(msgs)))
        else:  # the one-off handshake (builds every ClientApp's agent): not a round
            self.handshake_end = time.perf_counter()
        return replies


def split_rounds(calls: list[tuple[float, float, int]], t_start: float, t_end: float
                 ) -> list[dict[str, float]]:
    """Per round: clients (inside the grid call) and strategy (the gap before it, + tail).

    ``t_start`` is the end of the handshake, so round 1's strategy part is registering the
    clients plus planning round 1.
    """
    rows = []
    prev_end = t_start
    for i, (s, e, n) in enumerate(calls):
        strategy = s - prev_end
        if i == len(calls) - 1:
            strategy += t_end - e  # last aggregate, results and summary
        rows.append({"clients_s": e - s, "strategy_s": strategy, "messages": n})
        prev_end = e
    return rows


def write_section(path: Path, body: str, section: str = SECTION) -> None:
    """Replace ``section`` of the results file (other sections untouched)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    head, _, rest = text.partition(section)
    tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
    path.write_text(head.rstrip() + "\n\n" + section + "\n\n" + body.strip() + "\n" + tail,
                    encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-clients", type=int, default=100)
    ap.add_argument("--queries-per-benchmark", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=20)
    ap.add_argument("--t-max", type=int, default=3)
    ap.add_argument("--k-max", type=int, default=5)
    ap.add_argument("--agents", choices=["simulated", "mock"], default="simulated",
                    help="simulated: scripted experts with profile-dependent skill (an answer "
                         "mix like the experiments' tiny size); mock: all answer alike")
    ap.add_argument("--embedder", choices=["minilm", "hashing"], default="minilm",
                    help="embedding model of server and clients (minilm = the default config's)")
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results" / "overhead.md",
                    help="markdown file whose strategy-overhead section is replaced")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("flwr").setLevel(logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        overrides = (f"output.progress=false embedding.name={a.embedder} "
                     f"data.queries_per_benchmark={a.queries_per_benchmark} "
                     f"strategy.batch_size={a.batch_size} strategy.t_max={a.t_max} "
                     f"strategy.k_max={a.k_max} strategy.min_nodes={a.num_clients}")
        if a.agents == "simulated":
            overrides += " agent.backend.name=simulated"
        rc = {"config-name": "tiny", "output-dir": str(Path(tmp) / "out"), "overrides": overrides}
        cfg = load_config(rc)
        grid = TimedGrid(client_app, a.num_clients, rc)
        t0 = time.perf_counter()
        summary = run_server(grid, cfg)
        t1 = time.perf_counter()
    if summary.get("status") != "completed":
        logger.error("run did not complete: %s", summary.get("status"))
        return 1
    rows = split_rounds(grid.calls, grid.handshake_end or t0, t1)
    strat = [r["strategy_s"] for r in rows]
    clients = [r["clients_s"] for r in rows]
    walls = [s + c for s, c in zip(strat, clients, strict=True)]
    ratio = sum(strat) / sum(walls)
    per_round = [s / w for s, w in zip(strat, walls, strict=True)]
    body = (
        f"`bench/bench_strategy_overhead.py --num-clients {a.num_clients} --agents {a.agents} "
        f"--embedder {a.embedder}`: the real ServerApp over an in-process grid, N={a.num_clients} "
        f"ClientApps with instant ({a.agents}) agents, {summary['num_queries']} queries, "
        f"{summary.get('rounds_per_query', 0):.2f} rounds per query, batch {a.batch_size}, "
        f"T_max={a.t_max}, K_max={a.k_max}; one run, {time.strftime('%Y-%m-%d')}. Strategy = "
        "aggregate, anomaly, promotion, H-scores, Resolve, results files, checkpoint, next "
        "configure; clients = inside the grid call.\n\n"
        "| N | rounds | messages/round | strategy s/round (median) | clients s/round (median) "
        "| strategy / round wall (all rounds) | per-round ratio min-max |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| {a.num_clients} | {len(rows)} | {statistics.mean(r['messages'] for r in rows):.1f} "
        f"| {statistics.median(strat):.3f} | {statistics.median(clients):.3f} | {ratio:.2f} "
        f"| {min(per_round):.2f}-{max(per_round):.2f} |\n\n"
        "With instant agents the clients' part is only their rule/PII bookkeeping, so this ratio "
        "is an upper bound; one real CPU answer (tens of seconds) dwarfs the strategy's share."
    )
    print(body)
    a.results.parent.mkdir(parents=True, exist_ok=True)
    write_section(a.results, body)
    logger.info("wrote %s", a.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
