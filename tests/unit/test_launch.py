"""The launcher without Flower: checks before anything starts, nothing lost, clean stops.

Each case of issue 32's "Measured" list that needs no Ray is replayed here with the SuperLink,
`flwr run` and `flwr log` stubbed out: a busy port with --overwrite, --set data.data_dir,
--log-level reaching the SuperLink, unknown plug-in names and too few clients refused at once, a
dead endpoint / unserved model id / missing weights failing in under a second with exit 2 and
the cause in one line. SIGTERM and Ctrl-C ending as ``interrupted`` with the resume command,
and the run log: ``test_launch_stops.py``; the stand-ins: ``launch_fakes.py``.
"""

from __future__ import annotations

import http.server
import json
import os
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
from tests.unit.launch_fakes import closed_port, old_run, run_cli, untouched


def test_ray_workers_keep_the_launchers_priority_unless_the_user_sets_one(monkeypatch, tmp_path):
    # Ray's default niceness 15 let any other process starve the ClientApps' generations
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    assert launch._env(tmp_path, 39999)["RAY_worker_niceness"] == "0"
    monkeypatch.setenv("RAY_worker_niceness", "10")
    assert launch._env(tmp_path, 39999)["RAY_worker_niceness"] == "10"


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
    out = old_run(fake.out)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        rc = run_cli("--output-dir", str(out), "--overwrite", "--port", str(port))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and len(err) == 1
    assert f"port {port} on 127.0.0.1 is in use" in err[0] and "(exit 3)" in err[0]
    assert untouched(out) and fake.links == []


def test_busy_default_port_is_replaced_by_a_free_one_and_said(fake, monkeypatch, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        monkeypatch.setattr(processes, "DEFAULT_PORT", busy.getsockname()[1])
        assert run_cli("--output-dir", str(fake.out)) == 0
    port = fake.links[0][0]
    assert port != processes.DEFAULT_PORT
    assert f"is in use; the SuperLink uses port {port}" in capsys.readouterr().out


def test_overwrite_removes_the_old_run_only_after_the_superlink_started(fake, monkeypatch, capsys):
    out = old_run(fake.out)

    def fails(*a, **k):
        raise RuntimeError("flower-superlink exited with code 1")

    monkeypatch.setattr(launch, "start_superlink", fails)
    assert run_cli("--output-dir", str(out), "--overwrite") == 1
    assert untouched(out)
    assert capsys.readouterr().err.strip().endswith("exited with code 1 (exit 1)")
    monkeypatch.setattr(launch, "start_superlink", fake.superlink)
    assert run_cli("--output-dir", str(out), "--overwrite") == 0
    assert not (out / "report.md").read_text().startswith("old")  # the new run's report
    info = json.loads((out / "run_info.json").read_text())
    assert info["exit_code"] == 0 and info["status"] == "completed"
    assert info["command"][-3:] == ["--output-dir", str(out), "--overwrite"]


def test_overwrite_keeps_the_old_run_when_flower_refuses_the_new_one(fake, monkeypatch, capsys):
    out = old_run(fake.out)
    refused = subprocess.CompletedProcess([], 1, stdout="", stderr="[code: 15] Invalid run config")
    monkeypatch.setattr(launch, "_flwr", lambda args, env, **kw: refused)
    assert run_cli("--output-dir", str(out), "--overwrite") == 1
    assert untouched(out) and not list(out.glob(".replaced-*"))
    assert capsys.readouterr().err.strip().endswith(f"the run already in {out} is kept")


def test_a_dir_holding_a_run_is_refused_without_overwrite_or_resume(fake, capsys):
    out = old_run(fake.out)
    assert run_cli("--output-dir", str(out)) == 3
    assert "already holds a run" in capsys.readouterr().err and untouched(out)
    assert run_cli("--output-dir", str(out), "--resume") == 0


# ----------------------------------------------------------------------------- the user's settings


def test_set_data_dir_is_what_the_run_gets(fake, tmp_path, capsys):
    data = Path(launch.__file__).resolve().parents[2] / "data"
    assert run_cli("--output-dir", str(fake.out), "--set", f"data.data_dir={data}") == 0
    assert f'data-dir="{data}"' in fake.run_config()
    other = tmp_path / "other"
    other.mkdir()
    assert (
        run_cli(
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
    assert run_cli("--output-dir", str(tmp_path / "o3"), "--data-dir", str(tmp_path / "no")) == 3
    assert f"{tmp_path / 'no'}' (from data-dir) does not exist" in capsys.readouterr().err


def test_launcher_owned_keys_are_refused_in_set(fake, capsys):
    assert run_cli("--output-dir", str(fake.out), "--set", "output.dir=/tmp/x") == 3
    assert "--set output.dir is set by --output-dir" in capsys.readouterr().err


def test_log_level_reaches_the_superlink_and_everything_it_starts(fake, monkeypatch, capsys):
    from pfedma_flwr import logs

    levels: list[str | None] = []
    monkeypatch.setattr(logs, "configure_logging", levels.append)
    assert run_cli("--output-dir", str(fake.out), "--log-level", "debug") == 0
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
    assert run_cli("--output-dir", str(fake.out), "--quiet") == 0
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
    assert run_cli("--output-dir", str(fake.out), "--set", f"{key}={value}") == 3
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
        dead = f"http://127.0.0.1:{closed_port()}/v1"
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
    rc = run_cli("--output-dir", str(fake.out), *(x for s in sets for x in ("--set", s)))
    assert time.monotonic() - t0 < 10 and rc == 2 and fake.links == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("[pfedma] failed:generation, nothing started: agent.backend: ")
    assert cause in err[0] and err[0].endswith("(exit 2)")
