"""The launcher without Flower: checks before anything starts, nothing lost, clean stops.

Each case of issue 32's "Measured" list that needs no Ray is replayed here with the SuperLink,
`flwr run` and `flwr log` stubbed out: a busy port with --overwrite, --set data.data_dir,
--log-level reaching the SuperLink, unknown plug-in names and too few clients refused at once, a
dead endpoint / unserved model id / missing weights failing in under a second with exit 2 and
the cause in one line, SIGTERM and Ctrl-C ending as ``interrupted`` with the resume command.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pfedma_flwr import cli
from pfedma_flwr.experiments import launch, processes
from pfedma_flwr.logs import LOG_LEVEL_ENV

OLD_SUMMARY = {"status": "completed", "accuracy": 0.5}


def test_ray_workers_keep_the_launchers_priority_unless_the_user_sets_one(monkeypatch, tmp_path):
    # Ray's default niceness 15 let any other process starve the ClientApps' generations
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    assert launch._env(tmp_path, 39999)["RAY_worker_niceness"] == "0"
    monkeypatch.setenv("RAY_worker_niceness", "10")
    assert launch._env(tmp_path, 39999)["RAY_worker_niceness"] == "10"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _old_run(out: Path) -> Path:
    """A dir holding an earlier run (summary, report, run_info)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(OLD_SUMMARY))
    (out / "report.md").write_text("old report")
    (out / "run_info.json").write_text('{"command": ["old"]}')
    return out


def _untouched(out: Path) -> bool:
    return (
        json.loads((out / "summary.json").read_text()) == OLD_SUMMARY
        and (out / "report.md").read_text() == "old report"
        and json.loads((out / "run_info.json").read_text()) == {"command": ["old"]}
    )


class _Fake:
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


@pytest.fixture
def fake(monkeypatch, tmp_path):
    f = _Fake(tmp_path / "out")
    monkeypatch.setattr(launch, "start_superlink", f.superlink)
    monkeypatch.setattr(launch, "_flwr", f.flwr)
    monkeypatch.setattr(launch, "_follow", f.follow)
    monkeypatch.setenv("PATH", os.environ["PATH"])
    return f


def _run(*args: str) -> int:
    return cli.main(["run", "--config", "tiny", "--num-clients", "2", *args])


# ----------------------------------------------------------------------------- environment


def test_env_carries_the_log_level_flag_else_the_users_else_info(monkeypatch, tmp_path):
    monkeypatch.delenv(LOG_LEVEL_ENV, raising=False)
    assert launch._env(tmp_path, 39999)[LOG_LEVEL_ENV] == "INFO"
    monkeypatch.setenv(LOG_LEVEL_ENV, "warning")
    assert launch._env(tmp_path, 39999)[LOG_LEVEL_ENV] == "WARNING"
    assert launch._env(tmp_path, 39999, "debug")[LOG_LEVEL_ENV] == "DEBUG"
    assert launch._env(tmp_path, 39999)["PYTHONUNBUFFERED"] == "1"  # flwr log: line by line


def test_flower_commands_come_from_this_interpreters_environment(monkeypatch, tmp_path):
    venv_bin = tmp_path / "venv" / "bin"
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", f"/usr/local/bin{os.pathsep}/usr/bin")
    env = launch._env(tmp_path, 39999)
    assert env["PATH"].split(os.pathsep) == [str(venv_bin), "/usr/local/bin", "/usr/bin"]
    wrappers = tmp_path / "wrappers"
    assert launch._env(tmp_path, 39999, bin_dir=wrappers)["PATH"].split(os.pathsep)[0] == str(
        wrappers
    )


def test_flower_wrappers_run_on_the_invoking_interpreter(tmp_path):
    # A --system-site-packages venv: its bin has no `flwr`, so PATH found another
    # interpreter's. The wrappers exec this venv's python whatever PATH says.
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    py = venv / "bin" / "python"
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from pfedma_flwr.experiments.processes import flower_bin; "
        "from pathlib import Path; print(flower_bin(Path(sys.argv[2])))"
    )
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run([str(py), "-c", code, root, str(tmp_path / "bin")], check=True)
    flwr = tmp_path / "bin" / "flwr"
    assert f"'{py}'" in flwr.read_text()  # the venv's python, not sys.executable's realpath
    names = {p.name for p in (tmp_path / "bin").iterdir()}
    assert {"flwr", "flower-superlink", "flower-superexec", "flwr-simulation"} <= names
    out = subprocess.run(
        [str(flwr), "--version"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert out.returncode == 0 and "1.42.0" in out.stdout


# ----------------------------------------------------------------------------- nothing lost


def test_busy_named_port_with_overwrite_refuses_and_keeps_the_old_run(fake, capsys):
    out = _old_run(fake.out)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        rc = _run("--output-dir", str(out), "--overwrite", "--port", str(port))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and len(err) == 1
    assert f"port {port} on 127.0.0.1 is in use" in err[0] and "(exit 3)" in err[0]
    assert _untouched(out) and fake.links == []


def test_busy_default_port_is_replaced_by_a_free_one_and_said(fake, monkeypatch, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        monkeypatch.setattr(processes, "DEFAULT_PORT", busy.getsockname()[1])
        assert _run("--output-dir", str(fake.out)) == 0
    port = fake.links[0][0]
    assert port != processes.DEFAULT_PORT
    assert f"is in use; the SuperLink uses port {port}" in capsys.readouterr().out


def test_overwrite_removes_the_old_run_only_after_the_superlink_started(fake, monkeypatch, capsys):
    out = _old_run(fake.out)

    def fails(*a, **k):
        raise RuntimeError("flower-superlink exited with code 1")

    monkeypatch.setattr(launch, "start_superlink", fails)
    assert _run("--output-dir", str(out), "--overwrite") == 1
    assert _untouched(out)
    assert capsys.readouterr().err.strip().endswith("exited with code 1 (exit 1)")
    monkeypatch.setattr(launch, "start_superlink", fake.superlink)
    assert _run("--output-dir", str(out), "--overwrite") == 0
    assert not (out / "report.md").read_text().startswith("old")  # the new run's report
    info = json.loads((out / "run_info.json").read_text())
    assert info["exit_code"] == 0 and info["status"] == "completed"
    assert info["command"][-3:] == ["--output-dir", str(out), "--overwrite"]


def test_overwrite_keeps_the_old_run_when_flower_refuses_the_new_one(fake, monkeypatch, capsys):
    out = _old_run(fake.out)
    refused = subprocess.CompletedProcess([], 1, stdout="", stderr="[code: 15] Invalid run config")
    monkeypatch.setattr(launch, "_flwr", lambda args, env, **kw: refused)
    assert _run("--output-dir", str(out), "--overwrite") == 1
    assert _untouched(out) and not list(out.glob(".replaced-*"))
    assert capsys.readouterr().err.strip().endswith(f"the run already in {out} is kept")


def test_a_dir_holding_a_run_is_refused_without_overwrite_or_resume(fake, capsys):
    out = _old_run(fake.out)
    assert _run("--output-dir", str(out)) == 3
    assert "already holds a run" in capsys.readouterr().err and _untouched(out)
    assert _run("--output-dir", str(out), "--resume") == 0


# ----------------------------------------------------------------------------- the user's settings


def test_set_data_dir_is_what_the_run_gets(fake, tmp_path, capsys):
    data = Path(launch.__file__).resolve().parents[2] / "data"
    assert _run("--output-dir", str(fake.out), "--set", f"data.data_dir={data}") == 0
    assert f'data-dir="{data}"' in fake.run_config()
    other = tmp_path / "other"
    other.mkdir()
    assert (
        _run(
            "--output-dir",
            str(tmp_path / "o2"),
            "--data-dir",
            str(other),
            "--set",
            f"data.data_dir={data}",
        )
        == 3
    )
    assert "disagree" in capsys.readouterr().err
    assert _run("--output-dir", str(tmp_path / "o3"), "--data-dir", str(tmp_path / "no")) == 3
    assert f"{tmp_path / 'no'}' (from data-dir) does not exist" in capsys.readouterr().err


def test_launcher_owned_keys_are_refused_in_set(fake, capsys):
    assert _run("--output-dir", str(fake.out), "--set", "output.dir=/tmp/x") == 3
    assert "--set output.dir is set by --output-dir" in capsys.readouterr().err


def test_log_level_reaches_the_superlink_and_everything_it_starts(fake, monkeypatch, capsys):
    from pfedma_flwr import logs

    levels: list[str | None] = []
    monkeypatch.setattr(logs, "configure_logging", levels.append)
    assert _run("--output-dir", str(fake.out), "--log-level", "debug") == 0
    env = fake.links[0][1]  # the SuperLink's environment, inherited by its children
    assert env[LOG_LEVEL_ENV] == "DEBUG" and levels == ["DEBUG"]
    assert env[processes.LAUNCH_TAG]  # every process of the launch carries the tag
    assert fake.envs[0][LOG_LEVEL_ENV] == "DEBUG"
    assert 'overrides="output.progress=false"' in fake.run_config()
    out = capsys.readouterr().out
    assert "[pfedma] query 1/6 gsm8k/q0: correct" in out
    assert "[pfedma] round 1: partition-1 replied (3 answers) | 3/6 answers from 1/2" in out
    assert "[pfedma] round 1: 2 queries, 0 retained / 0 filtered" in out


def test_quiet_runs_every_process_at_warning_and_prints_only_the_outcome(fake, capsys):
    assert _run("--output-dir", str(fake.out), "--quiet") == 0
    assert fake.links[0][1][LOG_LEVEL_ENV] == "WARNING"
    out = capsys.readouterr().out
    assert "[pfedma] query" not in out and "submitted" not in out
    assert "[pfedma] run 7 finished" in out


def test_bad_log_level_is_refused_by_the_cli(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "--log-level", "loud"])
    assert e.value.code == 3 and "invalid choice: 'LOUD'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- fast failures


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("strategy.name", "fedavgg", "strategy.name: unknown strategy 'fedavgg'; available"),
        ("routing.orchestrator", "smart", "routing.orchestrator: unknown orchestrator 'smart'"),
        ("anomaly.judge", "gpt", "anomaly.judge: unknown judge 'gpt'"),
        ("data.benchmarks", "[gsm9k]", "data.benchmarks: unknown benchmark 'gsm9k'"),
        ("agent.profiles", "[wizard]", "agent.profiles: unknown agent profile 'wizard'"),
        ("agent.backend.name", "mymod:Backend", "PFEDMA_ALLOW_PLUGINS=1"),
    ],
)
def test_unknown_names_are_refused_before_anything_starts(fake, capsys, key, value, words):
    t0 = time.monotonic()
    assert _run("--output-dir", str(fake.out), "--set", f"{key}={value}") == 3
    assert time.monotonic() - t0 < 10 and fake.links == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_too_few_clients_are_refused_at_once(fake, capsys):
    assert (
        cli.main(["run", "--config", "tiny", "--num-clients", "1", "--output-dir", str(fake.out)])
        == 3
    )
    assert "--num-clients 1 is below strategy.min_nodes=2" in capsys.readouterr().err
    assert fake.links == []


class _Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = json.dumps(
            {
                "object": "list",
                "data": [{"id": "served-model", "object": "model", "owned_by": "me"}],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802  (vLLM: 404 for a model it does not serve)
        body = json.dumps({"error": {"message": "The model `wrong` does not exist."}}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def models_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def _model_case(case: str, url: str, tmp_path: Path) -> tuple[list[str], str]:
    if case == "dead endpoint":
        dead = f"http://127.0.0.1:{_closed_port()}/v1"
        return (
            [
                "agent.backend.name=openai",
                f"agent.backend.base_url={dead}",
                "agent.backend.model=m",
            ],
            f"openai backend at {dead} (model 'm'): cannot connect to the endpoint",
        )
    if case == "wrong model id":
        return (
            [
                "agent.backend.name=openai",
                f"agent.backend.base_url={url}",
                "agent.backend.model=wrong",
            ],
            "(model 'wrong'): model 'wrong' is not served; it lists ['served-model']",
        )
    if case == "uncached hub model":
        return (
            ["agent.backend.name=transformers", "agent.backend.model=NoOrg/not-cached-lm"],
            "not in the Hugging Face cache",
        )
    missing = tmp_path / "no-weights"
    return (
        ["agent.backend.name=transformers", f"agent.backend.model={missing}"],
        f"model '{missing}': no such local directory or .gguf file",
    )


@pytest.mark.parametrize(
    "case", ["dead endpoint", "wrong model id", "missing weights", "uncached hub model"]
)
def test_an_agent_model_that_cannot_answer_fails_fast_with_exit_2(
    fake, capsys, tmp_path, models_server, case
):
    sets, cause = _model_case(case, models_server, tmp_path)
    t0 = time.monotonic()
    rc = _run("--output-dir", str(fake.out), *(x for s in sets for x in ("--set", s)))
    assert time.monotonic() - t0 < 10 and rc == 2 and fake.links == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("[pfedma] failed:generation, nothing started: agent.backend: ")
    assert cause in err[0] and err[0].endswith("(exit 2)")


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
    rc = _run("--output-dir", str(fake.out), "--overwrite")
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

    class _Proc:
        pid = os.getpid()

        def __init__(self):
            self.stdout = self._lines()

        def _lines(self):
            yield "\x1b[92mINFO\x1b[0m first\n"
            seen.append(log.read_text())  # read while the stream is still open
            yield "second\n"

        def poll(self):
            return 0

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(launch.subprocess, "Popen", lambda *a, **k: _Proc())
    monkeypatch.setattr(launch, "_status", lambda run_id, env: "finished:completed")
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
    assert _run("--output-dir", str(fake.out), "--no-progress") == 0
    assert 'overrides=""' in fake.run_config()
    assert "[pfedma] query" not in capsys.readouterr().out


def test_tensorboard_tracking_writes_the_config_and_the_rounds(fake):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert _run("--output-dir", str(fake.out), "--tracking", "tensorboard") == 0
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
    assert _run("--output-dir", str(fake.out), "--tracking", "mlflow") == 3
    assert "needs the 'mlflow' package: pip install mlflow" in capsys.readouterr().err
    assert fake.links == []
