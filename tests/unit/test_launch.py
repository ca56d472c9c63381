"""The launcher's plumbing without Flower: log level, overrides, progress and tracking wiring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pfedma_flwr.experiments import launch
from pfedma_flwr.logs import LOG_LEVEL_ENV


def test_env_carries_the_log_level_flag_else_the_users_else_info(monkeypatch, tmp_path):
    monkeypatch.delenv(LOG_LEVEL_ENV, raising=False)
    assert launch._env(tmp_path, 39999)[LOG_LEVEL_ENV] == "INFO"
    monkeypatch.setenv(LOG_LEVEL_ENV, "warning")
    assert launch._env(tmp_path, 39999)[LOG_LEVEL_ENV] == "WARNING"
    assert launch._env(tmp_path, 39999, "debug")[LOG_LEVEL_ENV] == "DEBUG"


def test_ray_workers_keep_the_launchers_priority_unless_the_user_sets_one(monkeypatch, tmp_path):
    # Ray's default niceness 15 let any other process starve the ClientApps' generations
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    assert launch._env(tmp_path, 39999)["RAY_worker_niceness"] == "0"
    monkeypatch.setenv("RAY_worker_niceness", "10")
    assert launch._env(tmp_path, 39999)["RAY_worker_niceness"] == "10"


def test_flower_commands_come_from_this_interpreters_environment(monkeypatch, tmp_path):
    # /venv/bin/pfedma run without an activated venv: PATH's first flwr belonged to another
    # environment, which could not import the app.
    venv_bin = tmp_path / "venv" / "bin"
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", f"/usr/local/bin{os.pathsep}/usr/bin")
    env = launch._env(tmp_path, 39999)
    assert env["PATH"].split(os.pathsep) == [str(venv_bin), "/usr/local/bin", "/usr/bin"]
    monkeypatch.setenv("PATH", env["PATH"])  # already first: not added twice
    assert launch._env(tmp_path, 39999)["PATH"] == env["PATH"]
    monkeypatch.delenv("PATH")
    assert launch._env(tmp_path, 39999)["PATH"] == str(venv_bin)


@pytest.mark.parametrize(
    "given,expected",
    [
        ("", "output.progress=false"),
        ("strategy.t_max=3", "strategy.t_max=3 output.progress=false"),
        ("output.progress=true", "output.progress=true"),  # the user's choice stands
    ],
)
def test_launcher_turns_the_servers_bar_off_unless_told(given, expected):
    assert launch.with_launcher_overrides(given) == expected


def test_expected_queries_is_benchmarks_times_queries_per_benchmark():
    # tiny.yaml: gsm8k and medqa, 3 each
    assert launch.expected_queries("tiny") == 6
    assert launch.expected_queries("tiny", "data.queries_per_benchmark=5") == 10


def test_bad_log_level_is_refused_by_the_cli(capsys):
    with pytest.raises(SystemExit):
        launch.main(["run", "--log-level", "loud"])
    assert "invalid choice: 'LOUD'" in capsys.readouterr().err


class _Fake:
    """start_superlink / flwr / _follow stand-ins recording what the launcher passed."""

    def __init__(self, out: Path) -> None:
        self.out, self.calls, self.envs = out, [], []

    def superlink(self, flwr_home, port, log_dir):
        return subprocess.Popen(["true"])

    def flwr(self, args, env, **kw):
        self.calls.append(args)
        self.envs.append(env)
        return subprocess.CompletedProcess(args, 0, stdout=json.dumps({"run-id": 7}), stderr="")

    def follow(self, run_id, env, log_path, timeout):
        # the run writes its records while the launcher follows it
        (self.out / "rounds.jsonl").write_text(
            json.dumps({"round": 1, "metrics": {"cost/tokens": 50, "select/num_queries": 2}}) + "\n"
        )
        (self.out / "queries.jsonl").write_text(
            json.dumps({"query_id": "q0", "benchmark": "gsm8k", "correct": True, "rounds": 1})
            + "\n"
        )
        (self.out / "summary.json").write_text(json.dumps({"status": "completed"}))
        return "finished:completed"


@pytest.fixture
def fake(monkeypatch, tmp_path):
    f = _Fake(tmp_path / "out")
    monkeypatch.setattr(launch, "start_superlink", f.superlink)
    monkeypatch.setattr(launch, "_flwr", f.flwr)
    monkeypatch.setattr(launch, "_follow", f.follow)
    return f


def test_run_passes_level_and_progress_override_and_prints_live_lines(fake, capsys, monkeypatch):
    from pfedma_flwr import logs

    levels: list[str] = []
    monkeypatch.setattr(logs, "configure_logging", levels.append)  # the launcher's own
    rc = launch.main(
        [
            "run",
            "--config",
            "tiny",
            "--num-clients",
            "2",
            "--output-dir",
            str(fake.out),
            "--log-level",
            "debug",
        ]
    )
    assert rc == 0
    run_cfg = fake.calls[0][fake.calls[0].index("--run-config") + 1]
    assert 'overrides="output.progress=false"' in run_cfg
    assert fake.envs[0][LOG_LEVEL_ENV] == "DEBUG" and levels == ["DEBUG"]
    out = capsys.readouterr().out
    assert "[pfedma] query 1/6 gsm8k/q0: correct" in out
    assert (
        "[pfedma] round 1: 2 queries, 0 retained / 0 filtered, 0 unusable, 0 nodes failed, 50 tokens"
        in out
    )


def test_no_progress_prints_no_lines_and_leaves_the_servers_bar(fake, capsys):
    assert (
        launch.main(["run", "--config", "tiny", "--output-dir", str(fake.out), "--no-progress"])
        == 0
    )
    run_cfg = fake.calls[0][fake.calls[0].index("--run-config") + 1]
    assert 'overrides=""' in run_cfg
    assert "[pfedma] query" not in capsys.readouterr().out


def test_tensorboard_tracking_writes_event_files_from_the_round_records(fake):
    pytest.importorskip("tensorboard")
    assert (
        launch.main(
            ["run", "--config", "tiny", "--output-dir", str(fake.out), "--tracking", "tensorboard"]
        )
        == 0
    )
    events = list((fake.out / "tracking").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0


def test_missing_tracker_fails_before_a_superlink_starts(fake, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    monkeypatch.setattr(launch, "start_superlink", lambda *a: pytest.fail("started"))
    assert (
        launch.main(
            ["run", "--config", "tiny", "--output-dir", str(fake.out), "--tracking", "mlflow"]
        )
        == 1
    )
    assert "needs the 'mlflow' package: pip install mlflow" in capsys.readouterr().err


def test_stopping_the_superlink_also_stops_what_it_started_in_other_process_groups(tmp_path):
    import psutil

    pidfile = tmp_path / "child.pid"
    # the "superexec": a child in a session (process group) of its own, like Ray's actors
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
        " start_new_session=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
        "time.sleep(300)\n"
    )
    link = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    child = psutil.Process(int(pidfile.read_text()))
    assert os.getpgid(child.pid) != os.getpgid(link.pid)
    launch.stop_superlink(link)
    assert link.poll() is not None
    child.wait(timeout=10)  # gone (a leftover would raise TimeoutExpired)
    assert not child.is_running()


def test_a_status_query_that_times_out_reads_as_unknown_not_a_crash(monkeypatch):
    def slow(args, env, **kw):
        raise subprocess.TimeoutExpired(["flwr", *args], kw.get("timeout", 60))

    monkeypatch.setattr(launch, "_flwr", slow)
    assert launch._status(7, {}) == "unknown"


def test_follow_keeps_polling_until_the_status_settles(monkeypatch, tmp_path):
    answers = iter(["unknown", "running", "finished:completed"])  # "unknown": a timed-out query
    monkeypatch.setattr(launch, "_status", lambda run_id, env: next(answers))
    monkeypatch.setattr(launch.time, "sleep", lambda s: None)
    real_popen = subprocess.Popen
    monkeypatch.setattr(
        launch.subprocess,
        "Popen",
        lambda *a, **k: real_popen(
            ["echo", "\x1b[92mINFO\x1b[0m done"], stdout=subprocess.PIPE, text=True
        ),
    )
    assert launch._follow(7, {}, tmp_path / "run.log", timeout=60) == "finished:completed"
    assert (tmp_path / "run.log").read_text() == "INFO done\n"
