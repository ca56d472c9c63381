"""OS processes of a local Flower deployment: started components and the ones Flower detaches.

Split from ``local_deployment.py``: the component handle (:class:`Proc`) and the psutil lookups
for the SuperExec / ``flwr-serverapp`` processes, which Flower 1.42 starts outside our process
groups.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Proc:
    """A started component: its process (own session, so its children die with it) and log."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        """True while the process runs."""
        return self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the process group (SuperExec and app processes included)."""
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass


def wait_ready(proc: Proc, ready: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``ready()`` until true; fail early if ``proc`` exits, or after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{what} exited; see {proc.log}")
        if ready():
            return
        time.sleep(0.5)
    raise RuntimeError(f"{what} not healthy within {timeout:.0f}s; see {proc.log}")


def superexec_pids(superlink_pid: int) -> list[int]:
    """PIDs of the SuperExec a SuperLink auto-launched (its own session, not the link's group).

    Flower 1.42 detaches SuperExec (``start_new_session``) with ``--parent-pid <superlink>``;
    SuperExec then starts each run's ``flwr-serverapp`` as its child.
    """
    import psutil

    pids = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if (any("flower-superexec" in c for c in cmd) and "--parent-pid" in cmd
                and cmd[cmd.index("--parent-pid") + 1:][:1] == [str(superlink_pid)]):
            pids.append(int(p.info["pid"]))
    return pids


def serverapp_pids(superexecs: list[int]) -> list[int]:
    """PIDs of the running ``flwr-serverapp`` processes below the given SuperExec PIDs."""
    import psutil

    pids = []
    for sx in superexecs:
        try:
            children = psutil.Process(sx).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for c in children:
            try:
                if any("flwr-serverapp" in part for part in c.cmdline()):
                    pids.append(c.pid)
            except psutil.NoSuchProcess:
                pass
    return pids


def signal_and_wait(pids: list[int], sig: int = signal.SIGKILL, timeout: float = 30) -> None:
    """Send ``sig`` to each PID still alive and wait up to ``timeout`` s for them to exit."""
    import psutil

    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            proc.send_signal(sig)
            procs.append(proc)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=timeout)
