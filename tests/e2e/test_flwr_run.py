"""End-to-end: `pfedma run` = a real `flwr run .` Ray simulation (tiny config), and plain Flower.

The cases of issue 32 that need Ray: the run completes with progress inside each round; the
right interpreter and log level reach every process (a --system-site-packages venv whose PATH
finds another `flwr`); a ServerApp that fails and agents that cannot start name their cause in
the last line with exit 1 / 2; SIGTERM stops every process (no SuperLink, `flwr log`, Ray left)
with status `interrupted` and `--resume` goes on; plain `flwr run . --run-config` with the
app's FlowerTune-style keys runs without data-dir and downloads nothing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pfedma_flwr.experiments import processes
from pfedma_flwr.experiments.launch import run

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _superlinks(port: int) -> int:
    out = subprocess.run(["pgrep", "-f", f"flower-superlink.*--port {port}( |$)"],
                         capture_output=True, text=True)
    return len(out.stdout.split())


def _free_port() -> int:
    with socket.socket() as a:
        a.bind(("127.0.0.1", 0))
        return int(a.getsockname()[1])


def _left(home: Path) -> list[str]:
    """Processes still running with ``FLWR_HOME`` under ``home`` (every process of a run has)."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("FLWR_HOME", "").startswith(str(home)):
                out.append(" ".join(p.cmdline())[:120])
        except (psutil.Error, OSError):
            continue
    return out


def _cli(*args: str, python: str = sys.executable, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen([python, "-m", "pfedma_flwr", "run", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kw)


def test_flwr_run_completes_with_progress_inside_each_round(tmp_path: Path):
    out, port = tmp_path / "run", _free_port()
    rc = run(config="tiny", num_clients=3, output_dir=out, port=port, timeout=600)
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["num_queries"] == 6
    assert summary["num_clients"] == 3
    queries = [json.loads(x) for x in (out / "queries.jsonl").read_text().splitlines()]
    assert len(queries) == 6 and all(1 <= q["rounds"] <= 2 for q in queries)
    events = [json.loads(x) for x in (out / "progress.jsonl").read_text().splitlines()]
    replies = [e for e in events if e["event"] == "reply" and e["round"] >= 1]
    assert replies and all(e["client"].startswith("partition-") for e in replies)
    assert "PFedMA finished" in (out / "run.log").read_text()
    info = json.loads((out / "run_info.json").read_text())
    assert info["status"] == "completed" and info["server_python"] == sys.executable
    assert _superlinks(port) == 0 and _left(out) == []


def test_a_system_site_packages_venv_runs_flower_on_its_own_python_at_its_log_level(
        tmp_path: Path):
    # the venv has no `flwr` of its own: PATH's first one is the system interpreter's
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    py = str(venv / "bin" / "python")
    out = tmp_path / "run"
    proc = _cli("--config", "tiny", "--num-clients", "2", "--output-dir", str(out),
                "--log-level", "WARNING", python=py)
    text, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, text[-3000:]
    info = json.loads((out / "run_info.json").read_text())
    assert info["server_python"] == info["launcher_python"] == py
    log = (out / "run.log").read_text()
    # WARNING in every process: Flower's, the ServerApp's and the ClientApps' INFO lines gone
    assert "INFO" not in log and "PFedMA finished" not in log
    assert "[pfedma] run" in text and "finished" in text


def test_a_failed_server_app_names_its_cause_in_the_last_line(tmp_path: Path):
    # resume from a checkpoint that does not decode: only the ServerApp can find out
    out = tmp_path / "bad"
    out.mkdir()
    (out / "checkpoint.json").write_text("{not json")
    proc = _cli("--config", "tiny", "--num-clients", "2", "--output-dir", str(out), "--resume")
    text, _ = proc.communicate(timeout=600)
    assert proc.returncode == 1
    last = text.strip().splitlines()[-1]
    assert "failed (Flower: finished:failed): ValueError: corrupt checkpoint" in last
    assert "(exit 1; log:" in last
    assert json.loads((out / "run_info.json").read_text())["status"] == "failed"
    assert (out / "checkpoint.json").read_text() == "{not json"  # left for the user to inspect


def test_agents_that_cannot_reach_their_endpoint_end_failed_generation_exit_2(tmp_path: Path):
    # the launcher's own check off: the ClientApps' handshake finds it, 30-60 s in
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    out = tmp_path / "dead"
    proc = _cli("--config", "tiny", "--num-clients", "2", "--output-dir", str(out),
                "--no-backend-check", "--set", "agent.backend.name=openai", "--set",
                f"agent.backend.base_url={dead}", "--set", "agent.backend.model=m")
    text, _ = proc.communicate(timeout=600)
    assert proc.returncode == 2, text[-3000:]
    last = text.strip().splitlines()[-1]
    assert last.startswith("[pfedma] run ") and " failed:generation (Flower: finished:failed): " \
        "only 0 of 2 nodes started their agent (need strategy.min_nodes=2): clients p0, p1: " \
        f"openai backend at {dead} (model 'm'): cannot connect to the endpoint" in last
    assert "\x1b" not in last and len(last) < 700
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "failed:generation" and dead in s["cause"]


def test_sigterm_stops_every_process_and_resume_goes_on(tmp_path: Path):
    out = tmp_path / "stopped"
    proc = _cli("--config", "tiny", "--num-clients", "2", "--output-dir", str(out))
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # wait until Ray and the ClientApps are up
        seen.append(line)
        if "[pfedma] handshake:" in line or "[pfedma] round" in line:
            break
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, "".join(seen) + rest
    assert time.monotonic() - t0 < 60
    assert "Traceback" not in rest
    last = rest.strip().splitlines()[-1]
    assert last.startswith("[pfedma] interrupted (exit 143)") and last.endswith("--resume")
    assert _left(out) == []  # no SuperLink, flwr log, simulation or Ray process
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    assert json.loads((out / "run_info.json").read_text())["exit_code"] == 143
    again = _cli("--config", "tiny", "--num-clients", "2", "--output-dir", str(out), "--resume")
    text, _ = again.communicate(timeout=600)
    assert again.returncode == 0, text[-3000:]
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


def test_plain_flwr_run_takes_the_apps_keys_needs_no_data_dir_and_downloads_nothing(
        tmp_path: Path):
    home, port, out = tmp_path / "flwr-home", _free_port(), tmp_path / "plain"
    tag = "plain-" + os.urandom(4).hex()
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(port),
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
           "FLWR_DISABLE_UPDATE_CHECK": "1", processes.LAUNCH_TAG: tag}

    def flwr(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["flwr", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout)

    try:
        sub = flwr("run", ".", "--format", "json", "--run-config",
                   f"config-name='tiny' strategy.t-max=1 data.queries-per-benchmark=2 "
                   f"output-dir='{out}'", "--federation-config", "num-supernodes=3")
        run_id = json.loads(sub.stdout)["run-id"]
        flwr("log", str(run_id), "--stream", timeout=600)
        for _ in range(60):
            status = json.loads(flwr("list", "--run-id", str(run_id), "--format",
                                     "json").stdout)["runs"][0]["status"]
            if status.startswith("finished"):
                break
            time.sleep(2)
        assert status == "finished:completed"
        s = json.loads((out / "summary.json").read_text())
        assert s["status"] == "completed" and s["num_queries"] == 4 and s["num_clients"] == 3
        assert "t_max: 1" in (out / "config.yaml").read_text()
        assert not (home / "runtime-envs").exists()  # uv sync never ran: nothing downloaded
        bad = flwr("run", ".", "--run-config", "strategy.tmax=3")
        assert bad.returncode != 0 and "Invalid run configuration" in bad.stdout + bad.stderr
        log = (home / "local-superlink" / "superlink.log").read_text()
        assert "Key 'strategy.tmax' is not present" in log  # where Flower names the key
    finally:
        processes.stop_tree(None, tag=tag)
    assert processes.leftovers(tag) == []


def test_config_typo_fails_before_anything_starts(tmp_path: Path, capsys):
    out, port = tmp_path / "typo", _free_port()
    rc = run(config="tiny", num_clients=2, output_dir=out, overrides="strategy.tmax=3",
             port=port, timeout=600)
    assert rc == 3
    assert "tmax" in capsys.readouterr().err
    assert not (out / "superlink").exists() and _superlinks(port) == 0
