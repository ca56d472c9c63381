"""``pfedma run``: one `flwr run .` simulation that fails loudly, fast and with its cause.

Flower 1.42 pitfalls handled here (see README): `flwr run` auto-starts a detached SuperLink that
outlives the run and takes its cwd/env from whoever started it first; `--stream` exits 0 even when
the ServerApp raised; runtime dependency installation needs the network. So this launcher starts
its own in-memory SuperLink with the right environment, submits the run, streams its log, checks
the run status and the result files, and stops the SuperLink and everything it started again.

Order of work (nothing the user ran before is lost): every check that can fail runs first
(config keys and values, plug-in names, ``--num-clients``, data dir, the model backends, the
tracker, an output dir holding a run, the port, Flower for this interpreter; refused: exit 3,
a model that cannot answer: exit 2), then the SuperLink starts, and only then does
``--overwrite`` remove the earlier run's files. Exit codes: 0 completed, 1 failed, 2
``failed:generation`` (most agent answers failed, or the agents' model cannot answer at
start-up), 3 refused before anything started, 128+N stopped by signal N (status
``interrupted``; the resume command is printed). The last line names the cause.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pfedma_flwr.experiments import processes
from pfedma_flwr.experiments.outcome import (  # noqa: F401  (re-exported: tests, harness)
    EXIT_FAILED,
    existing_results,
    finish,
    log_problems,
    outcome,
    summary_problem,
)
from pfedma_flwr.experiments.preflight import (  # noqa: F401  (re-exported)
    EXIT_GENERATION,
    EXIT_REFUSED,
    Plan,
    Refused,
    cpus_per_client_for,
    expected_queries,
    prepare,
)
from pfedma_flwr.logs import ANSI, LOG_LEVEL_ENV, plain_log_line
from pfedma_flwr.persistence import private_dir
from pfedma_flwr.resources import app_dir
from pfedma_flwr.server import report as rep
from pfedma_flwr.server.progress import LiveProgress, TerminalBar

APP_DIR = app_dir()  # the clone's root, or the installed package's minimal app dir
_ANSI = ANSI
DEFAULT_PORT = processes.DEFAULT_PORT


def _env(flwr_home: Path, port: int, log_level: str | None = None, *,
         bin_dir: Path | None = None, tag: str = "") -> dict[str, str]:
    env = os.environ.copy()
    # Flower's commands (flwr, flower-superlink and the superexec/simulation it starts) must
    # run on this interpreter: ``bin_dir`` holds wrappers that do (processes.flower_bin); else
    # this interpreter's own bin dir. A venv's python is a symlink out of the venv: not resolved.
    first = str(bin_dir or Path(sys.executable).parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != first:
        env["PATH"] = os.pathsep.join([first, path]) if path else first
    # The SuperLink's children (ServerApp, simulation, Ray workers) inherit it:
    # logs.configure_logging reads it in each of them.
    env[LOG_LEVEL_ENV] = (log_level or env.get(LOG_LEVEL_ENV) or "INFO").upper()
    if log_level:  # Flower's own processes read theirs before any app code runs
        env["FLWR_LOG_LEVEL"] = log_level.upper()
    if tag:
        env[processes.LAUNCH_TAG] = tag
    env.update(
        FLWR_HOME=str(flwr_home), FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(port), FLWR_LOCAL_CONTROL_API_PORT=str(port),
        RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0", RAY_DEDUP_LOGS="0", TOKENIZERS_PARALLELISM="false",
        # Flower's processes write to pipes: unbuffered, the log arrives line by line
        PYTHONUNBUFFERED="1",
    )
    # Offline unless the user said otherwise: nothing downloads from a hub at run time by
    # default, but an explicit HF_HUB_OFFLINE=0 (e.g. to fill the cache) is theirs to give.
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", env["HF_HUB_OFFLINE"])
    # Ray renices its workers to 15: the ClientApps (the run's generations) then lose the cores
    # to any other work; measured on a shared 2-core machine, 1.3 decode tok/s against 21
    # idle (docs/throughput.md). They are the run's main work: same priority as the rest.
    env.setdefault("RAY_worker_niceness", "0")
    return env


def _healthy(port: int) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).is_success
    except httpx.HTTPError:
        return False


def start_superlink(flwr_home: Path, port: int, log_dir: Path,
                    env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start an in-memory simulation SuperLink on ``port`` and wait until it answers.

    One port serves its Runtime, Control and Fleet APIs (Flower 1.42).
    """
    if _healthy(port):
        raise RuntimeError(f"a SuperLink already answers on 127.0.0.1:{port}; stop it or "
                           "pass another --port")
    private_dir(log_dir)  # the SuperLink's logs carry the ServerApp's output: owner-only
    cmd = ["flower-superlink", "--insecure", "--simulation", "--isolation", "subprocess",
           "--host", "127.0.0.1", "--port", str(port), "--disable-runtime-dependency-installation",
           "--log-file", str(log_dir / "superlink.log")]
    proc = subprocess.Popen(
        cmd, env=env or _env(flwr_home, port), cwd=log_dir, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=open(log_dir / "superlink.stderr", "wb"),  # noqa: SIM115
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"flower-superlink exited with code {proc.returncode}; see {log_dir}/superlink.*")
        if _healthy(port):
            return proc
        time.sleep(0.5)
    stop_superlink(proc)
    raise RuntimeError(f"flower-superlink did not become healthy in 60 s; see {log_dir}")


def stop_superlink(proc: subprocess.Popen[bytes] | None, tag: str = "") -> None:
    """Stop the SuperLink, every process it started and every process tagged ``tag``."""
    processes.stop_tree(proc, tag=tag)


def _flwr(args: list[str], env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["flwr", *args], env=env, cwd=APP_DIR, text=True, capture_output=True,
                          **kw)


def toml_str(s: str) -> str:
    """``s`` as a TOML basic string (a JSON string literal is one)."""
    return json.dumps(s)


def run_config_text(*, config: str, output_dir: Path, data_dir: str, overrides: str,
                    resume: bool) -> str:
    """The app's ``--run-config`` value (keys of ``[tool.flwr.app.config]``)."""
    return " ".join([
        f"config-name={toml_str(config)}", f"output-dir={toml_str(str(output_dir))}",
        f"data-dir={toml_str(data_dir)}", f"overrides={toml_str(overrides)}",
        f"resume={'true' if resume else 'false'}",
    ])


def with_launcher_overrides(overrides: str) -> str:
    """``overrides`` plus ``output.progress=false`` unless the user set ``output.progress``.

    The launcher prints the progress itself (from the run's files), so the ServerApp's own
    lines would repeat it.
    """
    if "output.progress" in overrides:
        return overrides
    return f"{overrides} output.progress=false".strip()


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _discard(line: str) -> None:
    pass


def run(
    *, config: str, num_clients: int, output_dir: Path, overrides: str = "",
    data_dir: str = "", port: int | None = None, cpus_per_client: float | None = None,
    timeout: float = 3600.0, resume: bool = False, log_level: str | None = None,
    progress: bool = True, tracking: str = "none", tracking_dir: str = "",
    gpus_per_client: float = 0.0, overwrite: bool = False, quiet: bool = False,
    command: list[str] | None = None, backend_check: bool = True,
) -> int:
    """Run one simulation; return 0 only if Flower reports success and the results exist.

    ``port=None`` takes :data:`DEFAULT_PORT`, or a free port when that one is busy.
    ``progress`` prints a line per finished query, round and in-round reply (a bar on a
    terminal); ``quiet`` prints neither those nor the streamed log (``run.log`` keeps it) and
    runs every process at WARNING unless ``log_level`` says otherwise. ``tracking`` names the
    experiment tracker fed with the resolved config and the round records
    (:mod:`pfedma_flwr.experiments.tracking`), writing under ``tracking_dir`` (default
    ``<output-dir>/tracking``). ``gpus_per_client`` is the Ray GPU share per ClientApp.
    ``command`` is what ``run_info.json`` records and the resume hint repeats.
    ``backend_check=False`` skips the launcher's check of the model backends (the ClientApps
    still check theirs at the handshake).
    """
    output_dir = Path(output_dir).expanduser().resolve()
    if quiet and log_level is None:
        log_level = "WARNING"
    try:
        plan = prepare(config=config, num_clients=num_clients, output_dir=output_dir,
                       overrides=overrides, data_dir=data_dir, port=port,
                       cpus_per_client=cpus_per_client, resume=resume, log_level=log_level,
                       tracking=tracking, tracking_dir=tracking_dir, overwrite=overwrite,
                       backend_check=backend_check)
    except Refused as e:
        what = "failed:generation, nothing started" if e.code == EXIT_GENERATION else "refused"
        sys.stderr.write(f"[pfedma] {what}: {e} (exit {e.code})\n")
        return e.code
    if plan.port_note:
        _say(f"[pfedma] {plan.port_note}")
    if not output_dir.is_dir():  # results are private (answers, claims); an existing dir is kept
        private_dir(output_dir)
    cmd = command or ["pfedma", "run"]

    def submit(env: dict[str, str], accepted: Callable[[], None]) -> tuple[int, str, str]:
        return _submit(plan, env, output_dir, num_clients=num_clients, config=config,
                       resume=resume, progress=progress and not quiet, quiet=quiet,
                       gpus_per_client=gpus_per_client, timeout=timeout, accepted=accepted)

    rc, status, verdict, started = _supervise(plan, output_dir, log_level, cmd, submit,
                                              set_aside=overwrite and not resume)
    if started:
        finish(output_dir, cmd, rc, status, verdict)
    elif verdict:
        sys.stderr.write(f"{verdict}; the run already in {output_dir} is kept\n")
    elif status == "interrupted":
        sys.stderr.write(f"[pfedma] interrupted before the run started (exit {rc}); nothing in "
                         f"{output_dir} was changed\n")
    return rc


def _supervise(plan: Plan, output_dir: Path, log_level: str | None, cmd: list[str],
               submit: Callable[[dict[str, str], Callable[[], None]], tuple[int, str, str]], *,
               set_aside: bool) -> tuple[int, str, str, bool]:
    """Start the SuperLink, record the run, ``submit`` it; stop all it started, even on a signal.

    Returns ``(exit code, status, verdict line, started)``; ``started``: ``run_info.json`` records
    this run and ``output_dir`` is its own (an earlier run set aside was not put back).
    """
    tag = uuid.uuid4().hex
    flwr_home = output_dir / ".flwr"
    bin_dir = processes.flower_bin(flwr_home / "bin")
    env = _env(flwr_home, plan.port, log_level, bin_dir=bin_dir, tag=tag)
    rc, status, verdict, started = EXIT_FAILED, "failed", "", False
    link = aside = None
    with processes.stop_on_signals():
        try:
            link = start_superlink(flwr_home, plan.port, output_dir / "superlink", env)
            # the earlier run is set aside now and removed once Flower accepted this one
            aside = _set_aside(output_dir) if set_aside else None
            rep.update_run_info(output_dir, {
                **rep.base_run_info(plan.cfg), "command": cmd, "cwd": str(Path.cwd()),
                "launcher_python": sys.executable, "started_at": rep.now(), "finished_at": "",
                "exit_code": "", "status": ""})
            started = True
            if plan.tracker is not None:
                from pfedma_flwr.config import to_yaml

                plan.tracker.config(to_yaml(plan.cfg))
            rc, status, verdict = submit(env, lambda: _drop(aside))
        except processes.Interrupted as e:
            rc, status = 128 + e.signum, "interrupted"
        except RuntimeError as e:  # the SuperLink did not start: nothing was removed
            sys.stderr.write(f"[pfedma] failed: {e} (exit {EXIT_FAILED})\n")
        finally:
            stop_superlink(link, tag)
            if plan.tracker is not None:
                plan.tracker.close()
            if aside is not None and aside.exists():  # Flower never took the run: put it back
                _restore(aside, output_dir)
                started = False
    return rc, status, verdict, started


def _set_aside(out: Path) -> Path:
    """Move the files of the run in ``out`` into a hidden dir of it; return that dir."""
    aside = out / f".replaced-{uuid.uuid4().hex[:8]}"
    private_dir(aside)
    for name in rep.RUN_FILES:
        if (out / name).exists():
            os.replace(out / name, aside / name)
    return aside


def _restore(aside: Path, out: Path) -> None:
    """Put the set-aside run back; what the refused attempt wrote meanwhile goes."""
    for name in rep.RUN_FILES:
        if not (aside / name).exists():
            (out / name).unlink(missing_ok=True)
    for f in aside.iterdir():
        os.replace(f, out / f.name)
    aside.rmdir()


def _drop(aside: Path | None) -> None:
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _submit(plan: Plan, env: dict[str, str], output_dir: Path, *, num_clients: int,
            config: str, resume: bool, progress: bool, quiet: bool, gpus_per_client: float,
            timeout: float, accepted: Callable[[], None]) -> tuple[int, str, str]:
    """Submit the run, follow it, judge its outcome: ``(exit code, status, verdict line)``.

    ``accepted`` is called once Flower has accepted the run (it has a run id).
    """
    run_cfg = run_config_text(config=config, output_dir=output_dir, data_dir=plan.data_dir,
                              overrides=with_launcher_overrides(plan.overrides) if progress
                              else plan.overrides, resume=resume)
    # Flower wants an integer CPU count when the value is integral ("1", not "1.0").
    cpus = int(plan.cpus) if float(plan.cpus).is_integer() else plan.cpus
    gpus = int(gpus_per_client) if float(gpus_per_client).is_integer() else gpus_per_client
    fed_cfg = (f"num-supernodes={num_clients} client-resources-num-cpus={cpus} "
               f"client-resources-num-gpus={gpus}")
    sub = _flwr(["run", ".", "--format", "json", "--run-config", run_cfg,
                 "--federation-config", fed_cfg], env)
    try:
        run_id = int(json.loads(sub.stdout)["run-id"])
    except (ValueError, KeyError, TypeError):
        why = " ".join(ANSI.sub("", f"{sub.stdout} {sub.stderr}").split())[:600]
        return EXIT_FAILED, "failed", (f"[pfedma] failed: flwr run did not start the run (rc="
                                       f"{sub.returncode}): {why} (exit {EXIT_FAILED})")
    accepted()
    if not quiet:
        _say(f"[pfedma] submitted run {run_id}; results -> {output_dir}")
    bar = TerminalBar(plan.total) if progress and sys.stdout.isatty() else None
    live = LiveProgress(output_dir=output_dir, total=plan.total,
                        emit=_say if progress else _discard, bar=bar,
                        on_round=plan.tracker.round if plan.tracker is not None else None)
    if resume:
        live.skip_existing()
    with live:
        flower = _follow(run_id, env, output_dir / "run.log", timeout, echo=not quiet)
    return outcome(run_id, flower, output_dir, timeout)


def _status(run_id: int, env: dict[str, str]) -> str:
    try:
        res = _flwr(["list", "--run-id", str(run_id), "--format", "json"], env, timeout=60)
    except subprocess.TimeoutExpired:  # an overloaded machine: ask again, do not crash
        return "unknown"
    try:
        return str(json.loads(res.stdout)["runs"][0]["status"])
    except (ValueError, KeyError, IndexError, TypeError):
        return "unknown"


def _follow(run_id: int, env: dict[str, str], log_path: Path, timeout: float,
            echo: bool = True) -> str:
    """Stream the run's log to ``log_path`` (and stdout) until it finishes; return its status."""
    deadline = time.monotonic() + timeout
    # The log carries agent answers: owner-only, like the other result files; line-buffered
    # so that it can be followed while the run goes.
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", buffering=1) as log:
        proc = subprocess.Popen(["flwr", "log", str(run_id), "--stream"], env=env, cwd=APP_DIR,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1, start_new_session=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                log.write(plain_log_line(line))
                if time.monotonic() > deadline:
                    break
        finally:
            if proc.poll() is None:
                processes.stop_tree(proc, grace=5)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
    # `flwr log --stream` ends with the run; poll until the status settles.
    while time.monotonic() < deadline:
        status = _status(run_id, env)
        if status.startswith("finished"):
            return status
        time.sleep(2)
    with contextlib.suppress(subprocess.TimeoutExpired):  # the SuperLink is stopped next anyway
        _flwr(["stop", str(run_id)], env, timeout=60)
    return "timeout"

