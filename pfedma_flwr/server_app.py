"""ServerApp: load config, build the strategy ``strategy.name`` names, run it, write results."""

from __future__ import annotations

import os
import time
from logging import INFO, WARNING
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr.app import Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from pfedma_flwr.config import ConfigError, PFedMAConfig, load_config, to_yaml
from pfedma_flwr.data.split import sample_eval_tasks
from pfedma_flwr.logs import configure_logging
from pfedma_flwr.protocol.startup import StartupFailed, one_line
from pfedma_flwr.server import report
from pfedma_flwr.server.progress import RoundProgress
from pfedma_flwr.server.results import ResultsWriter
from strategies.registry import build_strategy

if TYPE_CHECKING:
    from pfedma_flwr.data.benchmarks import Task

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
    tasks = _eval_tasks(cfg)
    progress = RoundProgress(total=len(tasks), enabled=cfg.output.progress)
    finished_lines: list[dict[str, object]] = []

    def on_query_end(rec: dict[str, object]) -> None:
        finished_lines.append(rec)
        progress.query_done(rec)

    def on_progress(event: dict[str, object]) -> None:
        writer.progress(event)
        progress.delivery(event)

    strategy = build_strategy(cfg, tasks=tasks, on_query_end=on_query_end,
                              on_round_end=lambda r, rec: on_round_end(r, rec))
    if hasattr(strategy, "on_progress"):  # a plug-in strategy may not report progress
        strategy.on_progress = on_progress
    engine = strategy.engine
    writer, start_round = _open_results(cfg, out, engine)
    writer.text("config.yaml", to_yaml(cfg))

    def on_round_end(server_round: int, record: dict[str, object]) -> None:
        # Round line, the queries it finished, then the checkpoint: a crash between these
        # writes is repaired on resume (ResultsWriter.resume trims to the checkpoint).
        writer.round(record)
        for rec in finished_lines:
            writer.query(rec)
        finished_lines.clear()
        writer.checkpoint(engine.state_dict(server_round))
        progress.round_done(server_round, record)

    try:
        with progress:
            result = strategy.start(grid, start_round=start_round)
    except BaseException as e:
        # Keep what was computed: finished queries are on disk; record the failure and its
        # cause in one line (the launcher's last message and exit code come from these).
        for rec in finished_lines:
            writer.query(rec)
        status = e.status if isinstance(e, StartupFailed) else "failed"
        cause = e.cause if isinstance(e, StartupFailed) else one_line(f"{type(e).__name__}: {e}")
        writer.summary({**engine.summary(), "status": status, "cause": cause})
        raise
    for rec in finished_lines:  # queries ended by finish_all() after the last round
        writer.query(rec)
    summary = {**result.summary, "status": result.summary.get("status", "completed"),
               "output_dir": str(out), "strategy": cfg.strategy.name,
               "resumed_from_round": start_round,
               "global_rules": [r.to_dict() for r in engine.rules.rules()]}
    writer.summary(summary)
    return summary


def _eval_tasks(cfg: PFedMAConfig) -> list[Task]:
    """The evaluation queries of the run (``data`` section, the split seed of ``cfg.seed``)."""
    d = cfg.data
    return sample_eval_tasks(
        d.benchmarks, d.queries_per_benchmark, d.seed_for_split(cfg.seed), d.data_dir or None,
        dev_pool_per_benchmark=d.dev_pool_per_benchmark, offset=d.eval_offset,
        question_set=d.question_set,
    )


def _open_results(cfg: PFedMAConfig, out: Path, engine: Any) -> tuple[ResultsWriter, int]:
    """The run's results writer and the round it starts after (0 unless resumed).

    On ``output.resume`` with a checkpoint in ``out``, ``engine`` takes the checkpoint's state
    and the results files are trimmed to it; without one the run starts over (a warning).
    """
    ckpt = ResultsWriter.load_checkpoint(out) if cfg.output.resume else None
    if ckpt is None:
        if cfg.output.resume:
            log(WARNING, "resume requested but %s has no checkpoint: starting over", out)
        return ResultsWriter(out), 0
    start_round = engine.load_state_dict(ckpt)
    writer = ResultsWriter.resume(out, start_round, engine.finished)
    log(INFO, "Resuming from %s after round %d (%d queries already finished)",
        writer.checkpoint_path, start_round, len(engine.finished))
    return writer, start_round


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower entry point."""
    configure_logging()  # PFEDMA_LOG_LEVEL from the launcher's --log-level
    if "runtime-envs" in os.environ.get("VIRTUAL_ENV", ""):  # Flower ran `uv sync` for this run
        log(WARNING, "Flower installed this run's dependencies into %s (a CUDA torch and a "
            "llama.cpp build on Linux); set FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 "
            "before the SuperLink starts, or use `pfedma run` (docs/flwr_run.md)",
            os.environ["VIRTUAL_ENV"])
    started = report.now()
    cfg = load_config(dict(context.run_config))
    cfg.output.dir = str(output_dir(cfg))  # one dir for the run and its report, also if unset
    try:
        run_server(grid, cfg)
    finally:  # report.md, plots and run_info.json, also for a failed run (never raises)
        report.finish_server_run(Path(cfg.output.dir), cfg, flower_run_id=context.run_id,
                                 started_at=started)
