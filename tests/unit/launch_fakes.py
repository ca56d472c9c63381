"""Stand-ins for the launcher's SuperLink, ``flwr`` and ``flwr log`` (``test_launch*.py``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pfedma_flwr import cli
from pfedma_flwr.experiments import launch

OLD_SUMMARY = {"status": "completed", "accuracy": 0.5}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def old_run(out: Path) -> Path:
    """A dir holding an earlier run (summary, report, run_info)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(OLD_SUMMARY))
    (out / "report.md").write_text("old report")
    (out / "run_info.json").write_text('{"command": ["old"]}')
    return out


def untouched(out: Path) -> bool:
    return (
        json.loads((out / "summary.json").read_text()) == OLD_SUMMARY
        and (out / "report.md").read_text() == "old report"
        and json.loads((out / "run_info.json").read_text()) == {"command": ["old"]}
    )


class FakeLauncher:
    """start_superlink / flwr / _follow stand-ins recording what the launcher passed."""

    def __init__(self, out: Path) -> None:
        self.out, self.calls, self.envs, self.links = out, [], [], []
        self.during = None  # called inside _follow (e.g. sends a signal)

    def superlink(self, flwr_home, port, log_dir, env=None):
        self.links.append((port, env))
        return subprocess.Popen(["sleep", "60"], start_new_session=True)

    def flwr(self, args, env, **kw):
        self.calls.append(args)
        self.envs.append(env)
        return subprocess.CompletedProcess(args, 0, stdout=json.dumps({"run-id": 7}), stderr="")

    def follow(self, run_id, env, log_path, timeout, echo=True):
        (self.out / "rounds.jsonl").write_text(
            json.dumps({"round": 1, "metrics": {"cost/tokens": 50, "select/num_queries": 2}}) + "\n"
        )
        (self.out / "queries.jsonl").write_text(
            json.dumps({"query_id": "q0", "benchmark": "gsm8k", "correct": True, "rounds": 1})
            + "\n"
        )
        (self.out / "progress.jsonl").write_text(
            json.dumps(
                {
                    "event": "reply",
                    "round": 1,
                    "replied": 1,
                    "nodes": 2,
                    "answers": 3,
                    "answers_total": 6,
                    "elapsed": 12.0,
                    "node": 5,
                    "answers_of": 3,
                    "client": "partition-1",
                }
            )
            + "\n"
        )
        if self.during is not None:
            self.during()
        (self.out / "summary.json").write_text(json.dumps({"status": "completed"}))
        return "finished:completed"

    def run_config(self) -> str:
        return self.calls[0][self.calls[0].index("--run-config") + 1]


def run_cli(*args: str) -> int:
    return cli.main(["run", "--config", "tiny", "--num-clients", "2", *args])


class FinishedLogStream:
    """A ``flwr log`` process that streams ``lines`` and has already exited (status 0)."""

    pid = os.getpid()

    def __init__(self, lines: Iterable[str]) -> None:
        self.stdout = iter(lines)

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0


def follow_finished_run(monkeypatch: Any, lines: Iterable[str]) -> None:
    """``launch._follow`` reads ``lines`` from ``flwr log`` of a run the SuperLink calls finished."""
    monkeypatch.setattr(launch.subprocess, "Popen", lambda *a, **k: FinishedLogStream(lines))
    monkeypatch.setattr(launch, "_status", lambda run_id, env: "finished:completed")
