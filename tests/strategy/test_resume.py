"""Server checkpoint/resume: a crashed run continues from the last completed round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client_apps.agent_app import app as client_app
from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client import components as client_components
from pfedma_flwr.config import load_config
from pfedma_flwr.server_app import run_server
from pfedma_flwr.testing import FakeGrid
from tests.strategy.conftest import answer_json, read_jsonl


class CrashingGrid(FakeGrid):
    """Raises (like a dying ServerApp) on the ``crash_at``-th send_and_receive call."""

    def __init__(self, *a, crash_at: int, **k):
        super().__init__(*a, **k)
        self.calls, self.crash_at = 0, crash_at

    def send_and_receive(self, messages, *, timeout=None):
        self.calls += 1
        if self.calls == self.crash_at:
            raise RuntimeError("server killed")
        return super().send_and_receive(messages, timeout=timeout)


def _disagree(msgs):
    return answer_json(str(len(msgs[0]["content"]) % 5))


def _run(tmp: Path, monkeypatch, *, crash_at: int | None, resume: bool, name: str):
    monkeypatch.setattr(client_components, "make_configured_backend",
                        lambda cfg: MockBackend(_disagree))
    client_components.build_agent.cache_clear()
    rc = {"config-name": "tiny", "output-dir": str(tmp / name), "resume": resume,
          "overrides": "output.progress=false strategy.t_max=3 strategy.batch_size=2"}
    grid = (CrashingGrid(client_app, 4, rc, crash_at=crash_at) if crash_at
            else FakeGrid(client_app, 4, rc))
    return run_server(grid, load_config(rc))


def test_resume_loses_and_duplicates_nothing(tmp_path: Path, monkeypatch):
    reference = _run(tmp_path, monkeypatch, crash_at=None, resume=False, name="ref")
    # handshake is call 1, rounds are calls 2.. -> crash inside round 3
    with pytest.raises(RuntimeError, match="server killed"):
        _run(tmp_path, monkeypatch, crash_at=4, resume=False, name="crash")
    out = tmp_path / "crash"
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"
    assert json.loads((out / "checkpoint.json").read_text())["server_round"] == 2
    resumed = _run(tmp_path, monkeypatch, crash_at=None, resume=True, name="crash")
    assert resumed["resumed_from_round"] == 2
    rounds = [r["round"] for r in read_jsonl(out / "rounds.jsonl")]
    assert rounds == list(range(1, len(rounds) + 1))  # no round lost or duplicated
    ids = [q["query_id"] for q in read_jsonl(out / "queries.jsonl")]
    assert len(ids) == len(set(ids)) == 6
    ref = {q["query_id"]: q for q in read_jsonl(tmp_path / "ref" / "queries.jsonl")}
    for q in read_jsonl(out / "queries.jsonl"):
        assert q["answer"] == ref[q["query_id"]]["answer"]
        assert q["rounds"] == ref[q["query_id"]]["rounds"]
    assert resumed["accuracy"] == reference["accuracy"]
    assert len(rounds) == len(read_jsonl(tmp_path / "ref" / "rounds.jsonl"))


def test_resume_refuses_a_different_task_stream(tmp_path: Path, monkeypatch):
    _run(tmp_path, monkeypatch, crash_at=None, resume=False, name="a")
    monkeypatch.setattr(client_components, "make_configured_backend",
                        lambda cfg: MockBackend(_disagree))
    rc = {"config-name": "tiny", "output-dir": str(tmp_path / "a"), "resume": True,
          "overrides": "output.progress=false seed=7"}
    with pytest.raises(ValueError, match="different task stream"):
        run_server(FakeGrid(client_app, 4, rc), load_config(rc))
