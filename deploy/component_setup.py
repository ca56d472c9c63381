"""What each component of a local Flower deployment is set up with; nothing here starts one.

Split from ``local_deployment.py``: the credentials (private CA, server certificate, one key pair
per SuperNode), the command line of the SuperLink, the Fleet gateway and a SuperNode, a
SuperNode's node config (its own security policy), the ``flwr`` CLI's connection and the
environment every component runs in, as functions of the deployment's settings. The security
setup (TLS files, node authentication, the node policy) thus reads in one place, apart from the
lifecycle that starts, waits for and stops the processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pfedma_flwr.experiments.launch import toml_str

DEPLOY_DIR = Path(__file__).resolve().parent
#: the ``flwr`` CLI's name of the deployment's SuperLink connection
CONNECTION = "pfedma-local"


def ensure_credentials(certs: Path, keys: Path, num_nodes: int) -> None:
    """CA + server certificate and one key pair per SuperNode (kept if already there)."""
    if not (certs / "ca.crt").exists():
        subprocess.run([str(DEPLOY_DIR / "make_certs.sh"), "--out", str(certs)],
                       check=True, capture_output=True)
    for i in range(num_nodes):
        if not (keys / f"node{i}").exists():
            subprocess.run([str(DEPLOY_DIR / "make_node_key.sh"), str(keys / f"node{i}")],
                           check=True, capture_output=True)


def component_env(flwr_home: Path) -> dict[str, str]:
    """Environment of every component (no telemetry, no runtime ``uv sync``, offline HF)."""
    env = os.environ.copy()
    env.update(FLWR_HOME=str(flwr_home), FLWR_TELEMETRY_ENABLED="0",
               FLWR_DISABLE_UPDATE_CHECK="1",
               FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def cli_config_text(port: int, certs: Path, *, insecure: bool) -> str:
    """``$FLWR_HOME/config.toml`` of the ``flwr`` CLI: the :data:`CONNECTION` to ``port``."""
    tls = "insecure = true" if insecure else \
        f"root-certificates = {toml_str(str(certs / 'ca.crt'))}"
    return (f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "127.0.0.1:{port}"\n{tls}\n')


def superlink_command(port: int, certs: Path, *, insecure: bool) -> list[str]:
    """The SuperLink on 127.0.0.1:``port`` (TLS and SuperNode authentication unless insecure)."""
    cmd = ["flower-superlink", "--host", "127.0.0.1", "--port", str(port),
           "--disable-runtime-dependency-installation"]
    if insecure:
        cmd.append("--insecure")
    else:
        cmd += ["--ssl-ca-certfile", str(certs / "ca.crt"),
                "--ssl-certfile", str(certs / "server.pem"),
                "--ssl-keyfile", str(certs / "server.key"), "--enable-supernode-auth"]
    return cmd


def gateway_command(listen_port: int, upstream_port: int, certs: Path, *,
                    insecure: bool) -> list[str]:
    """``deploy/fleet_gateway.py`` on ``listen_port``, forwarding the Fleet API upstream."""
    scheme = "http" if insecure else "https"
    cmd = [sys.executable, str(DEPLOY_DIR / "fleet_gateway.py"), "--listen-host",
           "127.0.0.1", "--listen-port", str(listen_port),
           "--upstream", f"{scheme}://127.0.0.1:{upstream_port}"]
    cmd += ["--insecure"] if insecure else [
        "--upstream-ca", str(certs / "ca.crt"),
        "--ssl-certfile", str(certs / "server.pem"),
        "--ssl-keyfile", str(certs / "server.key")]
    return cmd


def supernode_command(fleet_port: int, port: int, node_config: str, certs: Path, key: Path, *,
                      insecure: bool) -> list[str]:
    """A SuperNode reaching the gateway on ``fleet_port``, its app runtime on ``port``.

    ``key`` is its private key (SuperNode authentication); unused when insecure.
    """
    cmd = ["flower-supernode", "--superlink", f"127.0.0.1:{fleet_port}",
           "--port", str(port), "--node-config", node_config]
    if insecure:
        cmd.append("--insecure")
    else:
        cmd += ["--root-certificates", str(certs / "ca.crt"),
                "--auth-supernode-private-key", str(key)]
    return cmd


def supernode_config(i: int, num_nodes: int, *, state_dir: Path, data_dir: str,
                     private_facts: bool, profile: str = "") -> str:
    """The ``--node-config`` of SuperNode ``i`` (TOML-typed values, explicit policy)."""
    parts = [f"partition-id={i}", f"num-partitions={num_nodes}",
             f"state-dir={toml_str(str(state_dir))}",
             f"data-dir={toml_str(data_dir)}", 'min-rule-mode="full"',
             "allow-run-endpoint=false", "allow-plugins=false",
             f"private-facts={str(private_facts).lower()}"]
    if profile:
        parts.append(f"profile={toml_str(profile)}")
    return " ".join(parts)
