"""The launcher without Flower: clean stops, the run log and the status it follows.

Split from ``test_launch.py`` (same stand-ins, ``launch_fakes.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pfedma_flwr.experiments import launch, processes
from tests.unit.launch_fakes import follow_finished_run, run_cli

# ----------------------------------------------------------------------------- stops


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_run_interrupted_with_the_resume_command(
    fake, capsys, monkeypatch, signum
):
    stopped: list[str] = []
    real = launch.stop_superlink
    monkeypatch.setattr(
        launch, "stop_superlink", lambda proc, tag="": (stopped.append(tag), real(proc, tag))
    )
    fake.during = lambda: os.kill(os.getpid(), signum)
    rc = run_cli("--output-dir", str(fake.out), "--overwrite")
    assert rc == 128 + signum and stopped and stopped[0]  # the tag sweep ran
    assert json.loads((fake.out / "summary.json").read_text())["status"] == "interrupted"
    info = json.loads((fake.out / "run_info.json").read_text())
    assert info["status"] == "interrupted" and info["exit_code"] == 128 + signum
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"[pfedma] interrupted (exit {128 + signum})")
    assert last.endswith(f"run --config tiny --num-clients 2 --output-dir {fake.out} --resume")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


def test_stop_tree_also_stops_tagged_processes_outside_the_tree(tmp_path):
    import psutil

    tag = "test-" + os.urandom(4).hex()
    pidfile = tmp_path / "pid"
    # a grandchild that re-parents away (double fork), like Ray's daemons
    code = (
        "import os, subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
        " start_new_session=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, processes.LAUNCH_TAG: tag}, check=True
    )
    orphan = psutil.Process(int(pidfile.read_text()))
    assert processes.leftovers(tag) == [orphan.pid]
    processes.stop_tree(None, tag=tag, grace=5)
    orphan.wait(timeout=10)
    assert processes.leftovers(tag) == []


def test_stopping_the_superlink_also_stops_what_it_started_in_other_process_groups(tmp_path):
    import psutil

    pidfile = tmp_path / "child.pid"
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
    child.wait(timeout=10)
    assert not child.is_running()


def test_a_second_signal_during_clean_up_is_noted_not_raised():
    with processes.stop_on_signals() as seen:
        with pytest.raises(processes.Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)  # clean-up goes on
        time.sleep(0.1)
    assert seen == [signal.SIGTERM, signal.SIGTERM]


# ----------------------------------------------------------------------------- log and status


def test_run_log_is_written_line_by_line_while_the_run_goes(monkeypatch, tmp_path):
    log = tmp_path / "run.log"
    seen: list[str] = []

    def lines():
        yield "\x1b[92mINFO\x1b[0m first\n"
        seen.append(log.read_text())  # read while the stream is still open
        yield "second\n"

    follow_finished_run(monkeypatch, lines())
    assert launch._follow(1, {}, log, timeout=5, echo=False) == "finished:completed"
    assert seen == ["INFO first\n"] and log.read_text() == "INFO first\nsecond\n"


def test_a_status_query_that_times_out_reads_as_unknown_not_a_crash(monkeypatch):
    def slow(args, env, **kw):
        raise subprocess.TimeoutExpired(["flwr", *args], kw.get("timeout", 60))

    monkeypatch.setattr(launch, "_flwr", slow)
    assert launch._status(7, {}) == "unknown"


def test_follow_keeps_polling_until_the_status_settles(monkeypatch, tmp_path):
    answers = iter(["unknown", "running", "finished:completed"])
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


@pytest.mark.parametrize(
    "given, expected",
    [
        ("", "output.progress=false"),
        ("strategy.t_max=3", "strategy.t_max=3 output.progress=false"),
        ("output.progress=true", "output.progress=true"),  # the user's choice stands
    ],
)
def test_launcher_turns_the_servers_lines_off_unless_told(given, expected):
    assert launch.with_launcher_overrides(given) == expected


def test_expected_queries_is_benchmarks_times_queries_per_benchmark():
    assert launch.expected_queries("tiny") == 6  # tiny.yaml: gsm8k and medqa, 3 each
    assert launch.expected_queries("tiny", "data.queries_per_benchmark=5") == 10


def test_no_progress_prints_no_lines(fake, capsys):
    assert run_cli("--output-dir", str(fake.out), "--no-progress") == 0
    assert 'overrides=""' in fake.run_config()
    assert "[pfedma] query" not in capsys.readouterr().out


def test_tensorboard_tracking_writes_the_config_and_the_rounds(fake):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert run_cli("--output-dir", str(fake.out), "--tracking", "tensorboard") == 0
    [events] = list((fake.out / "tracking").glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events), size_guidance={"tensors": 0})
    acc.Reload()
    assert "config/text_summary" in acc.Tags()["tensors"]
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "t_max: 2" in text and "name: mock" in text
    assert "cost/tokens" in acc.Tags()["scalars"]


def test_missing_tracker_fails_before_a_superlink_starts(fake, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    assert run_cli("--output-dir", str(fake.out), "--tracking", "mlflow") == 3
    assert "needs the 'mlflow' package: pip install mlflow" in capsys.readouterr().err
    assert fake.links == []
