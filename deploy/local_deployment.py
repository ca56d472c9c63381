"""A real Flower 1.42 deployment on loopback: SuperLink + N SuperNodes with TLS and node auth.

Every component is a separate OS process, started exactly as on separate machines (see
``docs/deploy.md``); only the addresses are ``127.0.0.1``. Used by
``deploy/run_local_deployment.sh`` and ``tests/e2e/test_deployment.py``.

Security defaults: TLS (private CA from ``deploy/make_certs.sh``) and CLI-managed SuperNode
authentication (``--enable-supernode-auth``; each SuperNode has its own EC key pair from
``deploy/make_node_key.sh`` whose public key is registered with ``flwr supernode register``).
The SuperLink listens on loopback only (its one port also serves the unauthenticated Control
API); SuperNodes reach it through ``deploy/fleet_gateway.py``, which forwards the Fleet API and
nothing else. Each SuperNode's node config states its own security policy
(``pfedma_flwr.client.node_security``). ``insecure=True`` turns TLS and node authentication off and
exists for local debugging only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pfedma_flwr.experiments.launch import run_config_text

# deploy/ is a script folder, not a package: make its siblings importable however we are loaded
sys.path.insert(0, str(Path(__file__).resolve().parent))
from component_setup import (  # noqa: E402
    CONNECTION,
    cli_config_text,
    component_env,
    ensure_credentials,
    gateway_command,
    superlink_command,
    supernode_command,
    supernode_config,
)
from processes import (  # noqa: E402
    Proc,
    serverapp_pids,
    signal_and_wait,
    superexec_pids,
    wait_ready,
)

APP_DIR = Path(__file__).resolve().parent.parent
logger = logging.getLogger("pfedma.deploy")


@dataclass
class LocalDeployment:
    """SuperLink + ``num_nodes`` SuperNodes on 127.0.0.1, torn down by :meth:`stop`.

    Parameters
    ----------
    workdir : Path
        Certificates, keys, FLWR_HOMEs, node state dirs and logs go here (keep it outside the
        app directory: files there would be bundled into the app).
    num_nodes : int
        SuperNodes to start; node ``i`` gets ``partition-id=i num-partitions=num_nodes``.
    port : int
        SuperLink HTTP port on 127.0.0.1 (Fleet, Control and Runtime APIs: the CLI's port);
        the Fleet gateway for SuperNodes listens on ``port + 1``; SuperNode ``i`` serves its
        local app runtime on ``port + 10 + i``.
    insecure : bool
        Plain HTTP without node authentication. Local tests only.
    profiles : list of str
        Optional profile name per node (``profile`` in the node config).
    data_dir : str
        Benchmark data directory for the clients (default: the repository's ``data/``).
    private_facts : bool
        The nodes' ``private-facts`` key (their PRIVATE_FACT detector; on by default, as on
        any deployed node). It loads MiniLM in every ClientApp process, which a test of
        something else on 2 cores may not have time for.
    """

    workdir: Path
    num_nodes: int = 3
    port: int = 39611
    insecure: bool = False
    profiles: list[str] = field(default_factory=list)
    data_dir: str = str(APP_DIR / "data")
    private_facts: bool = True
    link: Proc | None = None
    gateway: Proc | None = None
    nodes: list[Proc] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {self.num_nodes}")
        self.workdir = Path(self.workdir).resolve()
        if " " in str(self.workdir) or " " in self.data_dir:
            raise ValueError("workdir and data_dir must not contain spaces (node-config syntax)")
        self.certs = self.workdir / "certs"
        self.keys = self.workdir / "keys"
        self.cli_home = self.workdir / "cli"

    # ------------------------------------------------------------------ environment

    def env(self, flwr_home: Path) -> dict[str, str]:
        """Environment of every component (:func:`component_setup.component_env`)."""
        return component_env(flwr_home)

    def flwr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the ``flwr`` CLI against this deployment's connection."""
        return subprocess.run(["flwr", *args], env=self.env(self.cli_home), cwd=APP_DIR,
                              text=True, capture_output=True, timeout=timeout)

    def _spawn(self, name: str, cmd: list[str], home: Path) -> Proc:
        home.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            popen = subprocess.Popen(cmd, cwd=home, env=self.env(home), stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        logger.info("started %s (pid %d): %s", name, popen.pid, shlex.join(cmd))
        return Proc(name, popen, log)

    # ------------------------------------------------------------------ credentials

    def make_credentials(self) -> None:
        """CA + server certificate and one key pair per SuperNode (none when insecure)."""
        if not self.insecure:
            ensure_credentials(self.certs, self.keys, self.num_nodes)

    def write_cli_config(self) -> Path:
        """``$FLWR_HOME/config.toml`` for the ``flwr`` CLI with the ``pfedma-local`` connection."""
        self.cli_home.mkdir(parents=True, exist_ok=True)
        path = self.cli_home / "config.toml"
        path.write_text(cli_config_text(self.port, self.certs, insecure=self.insecure),
                        encoding="utf-8")
        return path

    # ------------------------------------------------------------------ lifecycle

    def start(self, ready_timeout: float = 90) -> None:
        """Start everything and wait until all SuperNodes are online."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.make_credentials()
        self.write_cli_config()
        self.start_superlink(ready_timeout)
        self.start_gateway(ready_timeout)
        if not self.insecure:
            for i in range(self.num_nodes):
                res = self.flwr("supernode", "register", str(self.keys / f"node{i}.pub"),
                                CONNECTION, "--format", "json")
                if res.returncode != 0:
                    raise RuntimeError(f"registering node{i} failed:\n{res.stdout}{res.stderr}")
        for i in range(self.num_nodes):
            self.nodes.append(self.start_supernode(i))
        self.wait_online(self.num_nodes, ready_timeout)

    def start_superlink(self, ready_timeout: float) -> None:
        """Start the SuperLink and wait for its health endpoint."""
        cmd = superlink_command(self.port, self.certs, insecure=self.insecure)
        self.link = self._spawn("superlink", cmd, self.workdir / "superlink")
        wait_ready(self.link, self.healthy, ready_timeout, "SuperLink")

    @property
    def fleet_port(self) -> int:
        """Port of the Fleet gateway, the only port SuperNodes use."""
        return self.port + 1

    def start_gateway(self, ready_timeout: float) -> None:
        """Start ``deploy/fleet_gateway.py`` in front of the SuperLink and wait for it."""
        cmd = gateway_command(self.fleet_port, self.port, self.certs, insecure=self.insecure)
        self.gateway = self._spawn("fleet-gateway", cmd, self.workdir / "gateway")
        wait_ready(self.gateway, lambda: self.healthy(self.fleet_port), ready_timeout,
                   "Fleet gateway")

    def request(self, port: int, path: str, method: str = "GET") -> int:
        """HTTP status of ``method path`` on 127.0.0.1:``port`` (TLS verified); 0 if none."""
        import ssl

        import httpx

        scheme = "http" if self.insecure else "https"
        verify: Any = False if self.insecure else \
            ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        try:
            return httpx.request(method, f"{scheme}://127.0.0.1:{port}{path}", timeout=2.0,
                                 verify=verify).status_code
        except httpx.HTTPError:
            return 0

    def healthy(self, port: int | None = None) -> bool:
        """True when the SuperLink (or the service on ``port``) answers ``/health``."""
        return 200 <= self.request(self.port if port is None else port, "/health") < 300

    def node_config(self, i: int) -> str:
        """The ``--node-config`` of SuperNode ``i`` (:func:`component_setup.supernode_config`)."""
        return supernode_config(i, self.num_nodes, state_dir=self.workdir / f"node{i}" / "state",
                                data_dir=self.data_dir, private_facts=self.private_facts,
                                profile=self.profiles[i] if i < len(self.profiles) else "")

    def start_supernode(self, i: int) -> Proc:
        """Start SuperNode ``i`` (also used to restart one)."""
        cmd = supernode_command(self.fleet_port, self.port + 10 + i, self.node_config(i),
                                self.certs, self.keys / f"node{i}", insecure=self.insecure)
        return self._spawn(f"supernode{i}", cmd, self.workdir / f"node{i}" / "flwr")

    def online_nodes(self) -> list[str]:
        """Node ids the SuperLink reports as online."""
        res = self.flwr("supernode", "list", CONNECTION, "--format", "json", timeout=60)
        try:
            nodes = json.loads(res.stdout)["nodes"]
        except (ValueError, KeyError, TypeError):
            return []
        return [str(n["node-id"]) for n in nodes if n.get("status") == "online"]

    def wait_online(self, n: int, timeout: float) -> list[str]:
        """Block until ``n`` nodes are online (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p.name for p in self.nodes if not p.alive()]
            if dead:
                raise RuntimeError(f"{dead} exited; see {self.workdir / 'logs'}")
            online = self.online_nodes()
            if len(online) >= n:
                return online
            time.sleep(1.0)
        raise RuntimeError(f"fewer than {n} SuperNodes online after {timeout:.0f}s")

    def kill_node(self, i: int, sig: int = signal.SIGKILL) -> None:
        """Kill SuperNode ``i`` and its app processes (SIGKILL = machine loss, no goodbye)."""
        proc = self.nodes[i]
        proc.signal_group(sig)
        proc.popen.wait(timeout=30)

    def superexec_pids(self) -> list[int]:
        """PIDs of the SuperExec the SuperLink auto-launched (outside our process groups)."""
        return [] if self.link is None else superexec_pids(self.link.popen.pid)

    def serverapp_pids(self) -> list[int]:
        """PIDs of the running ``flwr-serverapp`` processes of this deployment."""
        return serverapp_pids(self.superexec_pids())

    def kill_serverapp(self, sig: int = signal.SIGKILL, timeout: float = 30) -> list[int]:
        """Kill the running ServerApp process(es) (a server crash); return the killed PIDs."""
        pids = self.serverapp_pids()
        if not pids:
            raise RuntimeError("no flwr-serverapp process found under this SuperLink's SuperExec")
        signal_and_wait(pids, sig, timeout)
        return pids

    def stop(self) -> None:
        """SIGTERM every component's process group, then SIGKILL what is left after 15 s."""
        procs = [*self.nodes, *([self.gateway] if self.gateway else []),
                 *([self.link] if self.link else [])]
        superexecs = self.superexec_pids()
        for p in procs:
            if p.alive():
                p.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in procs:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            p.signal_group(signal.SIGKILL)  # children (superexec, apps) even if the leader exited
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                logger.error("%s (pid %d) did not exit", p.name, p.popen.pid)
        for pid in superexecs:  # it exits with its parent; make sure, with its ServerApps
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def __enter__(self) -> LocalDeployment:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ runs

    def submit(self, *, config: str, output_dir: Path, overrides: str = "",
               resume: bool = False) -> int:
        """``flwr run . pfedma-local``; return the run id.

        ``resume`` continues from ``output_dir/checkpoint.json`` (the last completed round of an
        earlier run that crashed or was stopped) instead of starting over.
        """
        run_cfg = run_config_text(config=config, output_dir=Path(output_dir).resolve(),
                                  data_dir=self.data_dir, overrides=overrides, resume=resume)
        res = self.flwr("run", ".", CONNECTION, "--format", "json", "--run-config", run_cfg,
                        timeout=180)
        try:
            return int(json.loads(res.stdout)["run-id"])
        except (ValueError, KeyError, TypeError):
            raise RuntimeError(f"flwr run failed (rc={res.returncode}):\n{res.stdout}\n"
                               f"{res.stderr}") from None

    def status(self, run_id: int) -> str:
        """The run's status (``finished:completed``, ``running``, ...) or ``unknown``."""
        res = self.flwr("list", CONNECTION, "--run-id", str(run_id), "--format", "json",
                        timeout=60)
        try:
            return str(json.loads(res.stdout)["runs"][0]["status"])
        except (ValueError, KeyError, IndexError, TypeError):
            return "unknown"

    def wait(self, run_id: int, timeout: float, poll: float = 2.0) -> str:
        """Poll until the run finishes; on timeout stop it and return ``"timeout"``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status(run_id)
            if st.startswith("finished"):
                return st
            if self.link is not None and not self.link.alive():
                return "superlink-died"
            time.sleep(poll)
        self.flwr("stop", str(run_id), CONNECTION, timeout=60)
        return "timeout"

    def save_log(self, run_id: int, path: Path) -> None:
        """Write the ServerApp log (held by the SuperLink) to ``path``."""
        res = self.flwr("log", str(run_id), CONNECTION, "--show", timeout=60)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(res.stdout + res.stderr, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``deploy/run_local_deployment.sh``."""
    p = argparse.ArgumentParser(prog="deploy/run_local_deployment.sh", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=3, help="SuperNodes to start (default 3)")
    p.add_argument("--config", default="tiny", help="preset in conf/ (default tiny)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   help="dotted config override, e.g. --set strategy.round_timeout=60")
    p.add_argument("--workdir", default="/tmp/pfedma-deployment",
                   help="certs, keys, node state and logs (outside the app dir)")
    p.add_argument("--output-dir", default="", help="results (default WORKDIR/results)")
    p.add_argument("--port", type=int, default=39611, help="SuperLink port")
    p.add_argument("--profile", action="append", default=[], help="profile of node i, in order")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before the run is stopped")
    p.add_argument("--resume", action="store_true",
                   help="continue OUTPUT_DIR's run from its checkpoint (last completed round)")
    p.add_argument("--keep-running", action="store_true",
                   help="leave the federation up after the run (Ctrl-C to stop)")
    p.add_argument("--insecure", action="store_true",
                   help="LOCAL TESTING ONLY: plain HTTP and no SuperNode authentication")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[deploy] %(message)s")
    if a.insecure:
        logger.warning("--insecure: NO TLS and NO SuperNode authentication. Never use this "
                       "outside a local test on a trusted machine.")
    dep = LocalDeployment(workdir=Path(a.workdir), num_nodes=a.nodes, port=a.port,
                          insecure=a.insecure, profiles=a.profile)
    out = Path(a.output_dir or Path(a.workdir) / "results").resolve()
    # SIGTERM (e.g. from a CI runner) must tear the federation down like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with dep:
        t0 = time.monotonic()
        run_id = dep.submit(config=a.config, output_dir=out, overrides=" ".join(a.overrides),
                            resume=a.resume)
        logger.info("run %d submitted; results -> %s; logs -> %s", run_id, out,
                    dep.workdir / "logs")
        status = dep.wait(run_id, a.timeout)
        dep.save_log(run_id, out / "run.log")
        logger.info("run %d: %s after %.0fs (ServerApp log: %s)", run_id, status,
                    time.monotonic() - t0, out / "run.log")
        if a.keep_running:
            logger.info("federation still up (connection %s, FLWR_HOME=%s); Ctrl-C to stop",
                        CONNECTION, dep.cli_home)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    return 0 if status == "finished:completed" and (out / "summary.json").is_file() else 1


if __name__ == "__main__":
    sys.exit(main())
