"""End-to-end: `python -m pfedma_flwr run` = a real `flwr run .` Ray simulation (tiny config)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pfedma_flwr.launch import run

pytestmark = pytest.mark.slow


def _superlinks(port: int) -> int:
    out = subprocess.run(["pgrep", "-f", f"flower-superlink.*--port {port}"],
                         capture_output=True, text=True)
    return len(out.stdout.split())


def test_flwr_run_completes_and_writes_results(tmp_path: Path):
    out = tmp_path / "run"
    rc = run(config="tiny", num_clients=3, output_dir=out, overrides="output.progress=false",
             port=39411, timeout=600)
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["num_queries"] == 6
    assert summary["num_clients"] == 3
    queries = [json.loads(x) for x in (out / "queries.jsonl").read_text().splitlines()]
    assert len(queries) == 6 and all(1 <= q["rounds"] <= 2 for q in queries)
    assert (out / "rounds.jsonl").read_text().count("\n") >= 1
    assert "PFedMA finished" in (out / "run.log").read_text()
    assert _superlinks(39411) == 0  # the launcher stops the SuperLink it started


def test_failed_server_app_makes_the_launcher_fail(tmp_path: Path):
    # A missing data directory fails inside the ServerApp; `flwr run --stream` alone would
    # exit 0.
    out = tmp_path / "bad"
    missing = tmp_path / "no-such-data"
    rc = run(config="tiny", num_clients=2, output_dir=out, overrides="output.progress=false",
             data_dir=str(missing), port=39421, timeout=600)
    assert rc == 1
    assert str(missing) in (out / "run.log").read_text()
    assert not (out / "summary.json").exists()
    assert _superlinks(39421) == 0


def test_config_typo_fails_before_anything_starts(tmp_path: Path, capsys):
    out = tmp_path / "typo"
    rc = run(config="tiny", num_clients=2, output_dir=out, overrides="strategy.tmax=3",
             port=39431, timeout=600)
    assert rc == 1
    assert "tmax" in capsys.readouterr().err
    assert not (out / "superlink").exists() and _superlinks(39431) == 0
