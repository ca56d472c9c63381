"""ServerApp: load config, build the strategy from registries, run it, write the results."""

from __future__ import annotations

import os
import time
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from pfedma_flwr.config import ConfigError, PFedMAConfig, load_config, to_yaml
from pfedma_flwr.data.split import sample_eval_tasks
from pfedma_flwr.progress import RoundProgress
from pfedma_flwr.results import ResultsWriter
from pfedma_flwr.schema import Limits
from pfedma_flwr.server_components import build_engine
from strategies.pfedma import PFedMA

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

app = ServerApp()


def output_dir(cfg: PFedMAConfig) -> Path:
    """The run's absolute output directory (``outputs/<timestamp>`` under the home if unset)."""
    if cfg.output.dir:
        p = Path(cfg.output.dir).expanduser()
        if not p.is_absolute():
            raise ConfigError(
                f"output-dir must be absolute (the ServerApp's cwd is the SuperLink's), got {p}"
            )
        return p
    return Path.home() / "pfedma-outputs" / time.strftime("%Y%m%d-%H%M%S")


def run_server(grid: Grid, cfg: PFedMAConfig) -> dict[str, object]:
    """Everything ``main`` does, callable from tests with any grid."""
    out = output_dir(cfg)
    writer = ResultsWriter(out)
    writer.text("config.yaml", to_yaml(cfg))
    tasks = sample_eval_tasks(
        cfg.data.benchmarks, cfg.data.queries_per_benchmark, cfg.seed,
        cfg.data.data_dir or None, dev_pool_per_benchmark=cfg.data.dev_pool_per_benchmark,
    )
    progress = RoundProgress(total=len(tasks), enabled=cfg.output.progress)

    def on_query_end(rec: dict[str, object]) -> None:
        writer.query(rec)
        progress.query_done(bool(rec["correct"]))

    engine = build_engine(cfg, tasks, on_query_end=on_query_end)

    def on_round_end(server_round: int, record: dict[str, object]) -> None:
        writer.round(record)
        progress.round_done(server_round, record)

    p = cfg.protocol
    strategy = PFedMA(
        engine=engine, round_timeout=cfg.strategy.round_timeout,
        min_nodes=cfg.strategy.min_nodes, node_wait_timeout=cfg.strategy.node_wait_timeout,
        limits=Limits(p.max_text_chars, p.max_claims, p.max_evidence, p.max_items, p.max_rules),
        on_round_end=on_round_end,
    )
    try:
        with progress:
            result = strategy.start(grid)
    except BaseException:
        # Keep what was computed: queries finished so far are already in queries.jsonl.
        writer.summary({**engine.summary(), "status": "failed"})
        raise
    summary = {**result.summary, "status": "completed", "output_dir": str(out),
               "global_rules": [r.to_dict() for r in engine.rules.rules()]}
    writer.summary(summary)
    return summary


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower entry point."""
    cfg = load_config(dict(context.run_config))
    run_server(grid, cfg)
