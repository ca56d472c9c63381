"""``python -m pfedma_flwr run``: one `flwr run .` simulation that fails loudly when the run fails.

Flower 1.42 pitfalls handled here (see README): `flwr run` auto-starts a detached SuperLink that
outlives the run and takes its cwd/env from whoever started it first; `--stream` exits 0 even when
the ServerApp raised; runtime dependency installation needs the network. So this launcher starts
its own in-memory SuperLink on dedicated ports with the right environment, submits the run,
streams its log, checks the run status and the result files, and stops the SuperLink again.
A run Flower calls completed still fails here when its ``summary.json`` says otherwise
(``failed:generation``: most agent answers failed, e.g. a dead model endpoint): exit code 2.
While the run goes it prints one line per finished query and Flower round
(:class:`pfedma_flwr.server.progress.LiveProgress`, read from the run's JSONL files), feeds
the round records to an optional tracker (``--tracking``), and passes ``--log-level`` to every
process of the run (``PFEDMA_LOG_LEVEL``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from pfedma_flwr.logs import ANSI, LOG_LEVEL_ENV, LOG_LEVELS, plain_log_line
from pfedma_flwr.persistence import private_dir
from pfedma_flwr.resources import app_dir
from pfedma_flwr.resources import data_dir as default_data_dir
from pfedma_flwr.server.progress import LiveProgress

# the clone's root, or the installed package's minimal app dir (pfedma_flwr/resources.py)
APP_DIR = app_dir()
# colour and cursor sequences of Flower's and rich's terminal output; run.log is plain text
_ANSI = ANSI
DEFAULT_PORT = 39291


def _env(flwr_home: Path, port: int, log_level: str | None = None) -> dict[str, str]:
    env = os.environ.copy()
    # Flower's commands (flwr, flower-superlink and the superexec/simulation it starts) must
    # be this interpreter's: `/path/venv/bin/pfedma run` without an activated venv found
    # another environment's `flwr` on PATH, which could not import the app ("No module named
    # 'pfedma_flwr'"). Not resolved: a venv's python is a symlink out of the venv.
    bin_dir = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        env["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir
    # The SuperLink's children (ServerApp, simulation, Ray workers) inherit it:
    # progress.configure_logging reads it in each of them.
    env[LOG_LEVEL_ENV] = (log_level or env.get(LOG_LEVEL_ENV) or "INFO").upper()
    env.update(
        FLWR_HOME=str(flwr_home),
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(port),
        FLWR_LOCAL_CONTROL_API_PORT=str(port + 2),
        RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0",
        RAY_DEDUP_LOGS="0",
        TOKENIZERS_PARALLELISM="false",
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
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).is_success
    except httpx.HTTPError:
        return False


def start_superlink(flwr_home: Path, port: int, log_dir: Path) -> subprocess.Popen[bytes]:
    """Start an in-memory simulation SuperLink on ``port`` and wait until it answers."""
    if _healthy(port):
        raise RuntimeError(
            f"a SuperLink already answers on 127.0.0.1:{port}; stop it or pass --port"
        )
    private_dir(log_dir)  # the SuperLink's logs carry the ServerApp's output: owner-only
    cmd = [
        "flower-superlink", "--insecure", "--simulation", "--isolation", "subprocess",
        "--control-api-address", f"127.0.0.1:{port + 2}", "--host", "127.0.0.1",
        "--port", str(port), "--disable-runtime-dependency-installation",
        "--log-file", str(log_dir / "superlink.log"),
    ]
    proc = subprocess.Popen(
        cmd, env=_env(flwr_home, port), cwd=log_dir, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=open(log_dir / "superlink.stderr", "wb"),  # noqa: SIM115
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"flower-superlink exited with code {proc.returncode}; see {log_dir}/superlink.*"
            )
        if _healthy(port):
            return proc
        time.sleep(0.5)
    stop_superlink(proc)
    raise RuntimeError(f"flower-superlink did not become healthy in 60 s; see {log_dir}")


def stop_superlink(proc: subprocess.Popen[bytes]) -> None:
    """Stop the SuperLink, its process group and every process it started.

    The superexec starts the simulation and Ray in a process group of its own, so a run
    stopped midway (Ctrl-C, timeout) left Ray's ClientApp actors behind when only the
    SuperLink's group was signalled: its descendants are collected first, then stopped too.
    """
    import psutil

    if proc.poll() is not None:
        return
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in descendants:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(descendants, timeout=10)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


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
        f"config-name={toml_str(config)}",
        f"output-dir={toml_str(str(output_dir))}",
        f"data-dir={toml_str(data_dir)}",
        f"overrides={toml_str(overrides)}",
        f"resume={'true' if resume else 'false'}",
    ])


def cpus_per_client_for(config: str, overrides: str = "", cpu_count: int | None = None) -> float:
    """Ray CPUs reserved per ClientApp: the embedded model's llama.cpp threads, else 1.

    Reserving as many CPUs as the client's llama.cpp threads keeps threads x concurrent clients
    at the core count (oversubscribed ggml thread pools slow down sharply). Capped at the
    machine's cores so that a client can always be scheduled. Also validates the configuration
    before anything starts.
    """
    from pfedma_flwr.config import load_config

    cfg = load_config({"config-name": config, "overrides": overrides})
    cores = cpu_count or os.cpu_count() or 1
    backend = cfg.agent.backend
    if backend.name != "embedded":
        return 1.0
    return float(max(1, min(backend.n_threads or cores, cores)))


def expected_queries(config: str, overrides: str = "") -> int:
    """Queries the run is set to answer (benchmarks x queries per benchmark), for progress."""
    from pfedma_flwr.config import load_config

    cfg = load_config({"config-name": config, "overrides": overrides})
    return int(cfg.data.queries_per_benchmark) * len(cfg.data.benchmarks)


def with_launcher_overrides(overrides: str) -> str:
    """``overrides`` plus ``output.progress=false`` unless the user set ``output.progress``.

    The ServerApp's rich bar reaches the streamed log only at the end (Flower relays its
    output in chunks); the launcher prints live progress lines instead.
    """
    if "output.progress" in overrides:
        return overrides
    return f"{overrides} output.progress=false".strip()


def run(
    *, config: str, num_clients: int, output_dir: Path, overrides: str = "",
    data_dir: str = "", port: int = DEFAULT_PORT, cpus_per_client: float | None = None,
    timeout: float = 3600.0, resume: bool = False, log_level: str | None = None,
    progress: bool = True, tracking: str = "none", tracking_dir: str = "",
    gpus_per_client: float = 0.0,
) -> int:
    """Run one simulation; return 0 only if Flower reports success and the results exist.

    ``cpus_per_client=None`` derives it from the configuration (:func:`cpus_per_client_for`).
    ``progress`` prints a line per finished query and round; ``tracking`` names the
    experiment tracker fed with the round records (:mod:`pfedma_flwr.experiments.tracking`;
    ``none``: off), writing under ``tracking_dir`` (default ``<output-dir>/tracking``).
    ``gpus_per_client`` is the Ray GPU share each ClientApp reserves: 0 (the default) for
    clients whose model runs elsewhere (an endpoint, llama.cpp on CPU), so a one-GPU box
    leaves its GPU to the model server.
    """
    from pfedma_flwr.config import ConfigError
    from pfedma_flwr.experiments import tracking as trk

    try:
        if cpus_per_client is None:
            cpus_per_client = cpus_per_client_for(config, overrides)
        total = expected_queries(config, overrides)
        if log_level is not None and log_level.upper() not in LOG_LEVELS:
            raise ConfigError(f"--log-level {log_level!r} is not one of {', '.join(LOG_LEVELS)}")
        tracker = trk.make_tracker(tracking, Path(tracking_dir or output_dir / "tracking"))
    except (ConfigError, trk.TrackingError) as e:  # fail before any SuperLink starts
        sys.stderr.write(f"[pfedma] {e}\n")
        return 1
    output_dir = output_dir.resolve()
    if not output_dir.is_dir():  # results are private (answers, claims); an existing dir is kept
        private_dir(output_dir)
    # The app bundle carries no data files: point the run at the repository's data/ by default.
    data_dir = str(Path(data_dir).resolve()) if data_dir else str(default_data_dir())
    flwr_home = output_dir / ".flwr"
    env = _env(flwr_home, port, log_level)
    link = start_superlink(flwr_home, port, output_dir / "superlink")
    try:
        run_cfg = run_config_text(config=config, output_dir=output_dir, data_dir=data_dir,
                                  overrides=with_launcher_overrides(overrides) if progress
                                  else overrides, resume=resume)
        # Flower wants an integer CPU count when the value is integral ("1", not "1.0").
        cpus = int(cpus_per_client) if float(cpus_per_client).is_integer() else cpus_per_client
        gpus = int(gpus_per_client) if float(gpus_per_client).is_integer() else gpus_per_client
        fed_cfg = (f"num-supernodes={num_clients} client-resources-num-cpus={cpus} "
                   f"client-resources-num-gpus={gpus}")
        sub = _flwr(["run", ".", "--format", "json", "--run-config", run_cfg,
                     "--federation-config", fed_cfg], env)
        try:
            run_id = int(json.loads(sub.stdout)["run-id"])
        except (ValueError, KeyError, TypeError):
            sys.stderr.write(
                f"flwr run failed (rc={sub.returncode}):\n{sub.stdout}\n{sub.stderr}\n")
            return 1
        print(f"[pfedma] submitted run {run_id}; results -> {output_dir}", flush=True)
        live = LiveProgress(output_dir=output_dir, total=total,
                            emit=_print if progress else _discard,
                            on_round=tracker.round if tracker is not None else None)
        if resume:
            live.skip_existing()
        with live:
            status = _follow(run_id, env, output_dir / "run.log", timeout)
        summary = output_dir / "summary.json"
        if status != "finished:completed":
            # The why (a node's dead endpoint, a config error) is in the log: repeat it here.
            why = "".join(f"[pfedma]   {ln}\n" for ln in log_problems(output_dir / "run.log"))
            sys.stderr.write(f"[pfedma] run {run_id} ended with status {status!r}; "
                             f"see {output_dir / 'run.log'}\n{why}")
            return 1
        if not summary.is_file():
            sys.stderr.write(f"[pfedma] run {run_id} completed but wrote no {summary}\n")
            return 1
        problem = summary_problem(summary)
        if problem:
            sys.stderr.write(f"[pfedma] run {run_id} finished, but {problem}; see {summary}\n")
            return 2
        print(f"[pfedma] run {run_id} finished: {summary}", flush=True)
        return 0
    finally:
        stop_superlink(link)
        if tracker is not None:
            tracker.close()


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _discard(line: str) -> None:
    pass


def summary_problem(path: Path) -> str:
    """Why the run's ``summary.json`` does not report success, or ``""`` if it does.

    ``failed:generation`` names how many agent answers failed and the commonest reason codes
    with the clients that had them, so a dead endpoint reads as one, not as accuracy 0.
    """
    try:
        summary = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as e:
        return f"its summary cannot be read ({str(e)[:120]})"
    if not isinstance(summary, dict):
        return "its summary is not a JSON object"
    status = summary.get("status")
    if status == "completed":
        return ""
    gen = _obj(summary.get("generation"))
    codes = _obj(gen.get("failed_by_code"))
    top = sorted(((str(k), v) for k, v in codes.items() if isinstance(v, int)),
                 key=lambda kv: (-kv[1], kv[0]))
    where = ", ".join(sorted(str(c) for c in _obj(gen.get("failed_by_client")))[:8])
    detail = ""
    if gen:
        detail = (f": {gen.get('generation_failed')} of {gen.get('answers')} agent answers "
                  f"were not produced (threshold {gen.get('max_failed_share')}), failures by "
                  f"reason {dict(top[:5])}" + (f" on {where}" if where else ""))
    return f"its status is {status!r}{detail}"


def log_problems(path: Path, limit: int = 6) -> list[str]:
    """The last ``limit`` WARNING/ERROR lines of a run log (each at most 300 characters)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    hits = [ln.strip() for ln in lines if "WARNING" in ln or "ERROR" in ln or "Error:" in ln]
    return [ln[:300] for ln in hits[-limit:]]


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _status(run_id: int, env: dict[str, str]) -> str:
    try:
        res = _flwr(["list", "--run-id", str(run_id), "--format", "json"], env, timeout=60)
    except subprocess.TimeoutExpired:  # an overloaded machine: ask again, do not crash
        return "unknown"
    try:
        runs = json.loads(res.stdout)["runs"]
        return str(runs[0]["status"])
    except (ValueError, KeyError, IndexError, TypeError):
        return "unknown"


def _follow(run_id: int, env: dict[str, str], log_path: Path, timeout: float) -> str:
    """Stream the run's log to stdout and ``log_path`` until it finishes; return its status."""
    deadline = time.monotonic() + timeout
    # The log carries agent answers: owner-only, like the other result files.
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(["flwr", "log", str(run_id), "--stream"], env=env, cwd=APP_DIR,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                log.write(plain_log_line(line))
                if time.monotonic() > deadline:
                    break
        finally:
            if proc.poll() is None:
                # it may exit between poll() and killpg(): nothing left to stop then
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    # `flwr log --stream` ends with the run; poll until the status settles.
    while time.monotonic() < deadline:
        status = _status(run_id, env)
        if status.startswith("finished"):
            return status
        time.sleep(2)
    try:
        _flwr(["stop", str(run_id)], env, timeout=60)
    except subprocess.TimeoutExpired:  # the SuperLink is stopped next in any case
        pass
    return "timeout"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pfedma_flwr``."""
    p = argparse.ArgumentParser(prog="python -m pfedma_flwr", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a PFedMA simulation with `flwr run .`")
    r.add_argument("--config", default="pfedma", help="preset name in conf/ (default: pfedma)")
    r.add_argument("--num-clients", type=int, default=8, help="simulated SuperNodes (default 8)")
    r.add_argument("--output-dir", default="outputs/latest", help="results directory")
    r.add_argument("--data-dir", default="", help="benchmark data dir (default: repo data/)")
    r.add_argument("--set", dest="overrides", action="append", default=[],
                   help="dotted config override, e.g. --set strategy.t_max=3 (repeatable)")
    r.add_argument("--port", type=int, default=DEFAULT_PORT, help="SuperLink port (+2 control)")
    r.add_argument("--cpus-per-client", type=float, default=None,
                   help="Ray CPUs per ClientApp (default: the embedded model's "
                        "agent.backend.n_threads, capped at the cores; 1 for other backends)")
    r.add_argument("--resume", action="store_true",
                   help="continue from <output-dir>/checkpoint.json (last completed round)")
    r.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds before the run is stopped")
    r.add_argument("--gpus-per-client", type=float, default=0.0,
                   help="Ray GPUs per ClientApp (default 0: agents on an endpoint or on CPU "
                        "reserve none; e.g. 0.25 for the transformers backend on a GPU)")
    r.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=None,
                   help=f"level of the project's and Flower's loggers in every process of the "
                        f"run (default: ${LOG_LEVEL_ENV}, else INFO)")
    r.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no per-query/per-round progress lines (the ServerApp's own bar, "
                        "output.progress, is left as configured)")
    r.add_argument("--tracking", default="none", choices=("none", "tensorboard", "mlflow"),
                   help="experiment tracker fed with each round's metrics (default none)")
    r.add_argument("--tracking-dir", default="",
                   help="tracker output (default <output-dir>/tracking; mlflow: a tracking URI "
                        "or dir)")
    # ``experiment`` is dispatched by pfedma_flwr.cli: the harness imports this module
    # (experiments.runner), so this module never imports the harness back.
    a = p.parse_args(argv)
    if a.log_level:
        from pfedma_flwr.logs import configure_logging

        configure_logging(a.log_level)
    return run(
        config=a.config, num_clients=a.num_clients, output_dir=Path(a.output_dir),
        overrides=" ".join(shlex.quote(o) for o in a.overrides), data_dir=a.data_dir,
        port=a.port, cpus_per_client=a.cpus_per_client, timeout=a.timeout, resume=a.resume,
        log_level=a.log_level, progress=a.progress, tracking=a.tracking,
        tracking_dir=a.tracking_dir, gpus_per_client=a.gpus_per_client,
    )
