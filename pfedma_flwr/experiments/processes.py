"""The processes behind ``pfedma run``: Flower's commands, the SuperLink, its port, clean stops.

Four things a launcher must get right so that nothing it started outlives it and the code
that runs is the one the user invoked:

- **Interpreter.** Flower's processes find each other by command name on ``PATH``
  (``flwr``, ``flower-superlink`` -> ``flower-superexec`` -> ``flwr-simulation``). From a venv
  made with ``--system-site-packages`` the first ``flwr`` on ``PATH`` can be another
  interpreter's, which imports another install of the app. :func:`flower_bin` writes one
  wrapper per Flower console script that runs it on *this* interpreter, and the launcher puts
  that directory first on ``PATH``; Ray's workers inherit ``sys.executable`` from there.
- **Port.** :func:`choose_port` refuses a busy port the user named and replaces a busy default
  one with a free port (printed), so a SuperLink left behind does not block the next run.
- **Stop.** :func:`stop_on_signals` turns SIGINT, SIGTERM and SIGHUP into :class:`Interrupted`
  (once: a second signal during clean-up is noted, not raised), and :func:`stop_tree` stops a
  process, its descendants and, last, every process still carrying the launch's tag in its
  environment (:data:`LAUNCH_TAG`: Ray daemons re-parented away from the SuperLink's tree).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

#: the SuperLink's port unless the user names one (a free one when this is busy)
DEFAULT_PORT = 39291
#: environment variable marking every process of one launch (its value: the launch's id)
LAUNCH_TAG = "PFEDMA_LAUNCH_ID"
#: signals that stop a launch cleanly, and the exit status each gives (128 + number)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which (exit status ``128 + signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """Within the block, the first stop signal raises :class:`Interrupted` in the main thread.

    Later signals are appended to the yielded list and do not raise, so the clean-up that the
    first one starts is not cut short. Outside the main thread (where Python cannot install
    handlers) this does nothing.
    """
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        if len(seen) == 1:
            raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield seen
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _wrapper(script: str, target: str) -> str:
    """A console script running ``module:function`` on this interpreter.

    The ``/bin/sh`` line re-executes the file with ``sys.executable`` (pip's launcher trick:
    a long venv path does not fit a ``#!`` line); ``argv[0]`` keeps the script's name, which
    Flower reads (``flwr-simulation`` and friends) and ``ps``/``pgrep`` show.
    """
    module, _, func = target.partition(":")
    py = sys.executable.replace("'", "'\\''")
    return (
        "#!/bin/sh\n"
        f"'''exec' '{py}' \"$0\" \"$@\"\n"
        "' '''\n"
        f"# {script}: Flower's console script on the interpreter that ran `pfedma run`\n"
        "import sys\n"
        f"from {module} import {func.split('.')[0]}\n"
        f"sys.argv[0] = {script!r}\n"
        f"sys.exit({func}())\n"
    )


def flower_scripts() -> list[importlib.metadata.EntryPoint]:
    """The console scripts of the ``flwr`` this interpreter imports.

    Raises
    ------
    RuntimeError
        If this interpreter cannot import Flower (the reason names the interpreter).
    """
    try:
        return [ep for ep in importlib.metadata.distribution("flwr").entry_points
                if ep.group == "console_scripts"]
    except importlib.metadata.PackageNotFoundError as e:
        raise RuntimeError(
            f"Flower (flwr) is not installed for {sys.executable}; install the app into this "
            "environment (pip install -e .) or run pfedma from the environment that has it"
        ) from e


def flower_bin(directory: Path) -> Path:
    """Write a wrapper per console script of the installed ``flwr`` into ``directory``."""
    scripts = flower_scripts()
    directory.mkdir(parents=True, exist_ok=True)
    for ep in scripts:
        path = directory / ep.name
        path.write_text(_wrapper(ep.name, ep.value), encoding="utf-8")
        path.chmod(stat.S_IRWXU)
    return directory


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` can be bound now (nothing listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def choose_port(requested: int | None, default: int) -> tuple[int, str]:
    """The SuperLink's port and a note for the user (``""`` when nothing needs saying).

    ``requested=None`` means the user named none: ``default`` if free, else a free port.

    Raises
    ------
    RuntimeError
        If the port the user named is busy (the message says how to go on).
    """
    if requested is not None:
        if not 0 < requested < 65536:
            raise RuntimeError(f"--port {requested} is not a TCP port (1-65535)")
        if not port_free(requested):
            raise RuntimeError(
                f"port {requested} on 127.0.0.1 is in use (a SuperLink left from an earlier "
                "run, or another program); stop it, pass another --port, or leave --port out "
                "to get a free one"
            )
        return requested, ""
    if port_free(default):
        return default, ""
    port = free_port()
    return port, f"port {default} is in use; the SuperLink uses port {port}"


def _tagged(tag: str) -> list[Any]:
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get(LAUNCH_TAG) == tag:
                out.append(p)
        except (psutil.Error, OSError):  # gone, or another user's process
            continue
    return out


def stop_tree(proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None, *,
              tag: str = "", grace: float = 10.0) -> None:
    """Stop ``proc``'s process group and all its descendants, then every process tagged ``tag``.

    Descendants are collected first: the SuperLink's superexec starts the simulation and Ray
    in process groups of their own, so signalling only the SuperLink's group left Ray's
    ClientApp actors behind. SIGTERM first, SIGKILL after ``grace`` seconds.
    """
    import psutil

    victims: list[psutil.Process] = []
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            victims = psutil.Process(proc.pid).children(recursive=True)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
    if tag:
        known = {p.pid for p in victims}
        victims += [p for p in _tagged(tag) if p.pid not in known]
    for p in victims:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(victims, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)


def leftovers(tag: str) -> list[int]:
    """Pids of processes still tagged ``tag`` (for tests and the launcher's last check)."""
    return [p.pid for p in _tagged(tag)]
