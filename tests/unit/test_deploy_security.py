"""Deployment hardening: key files 0600 (also with --force) and the Fleet-only gateway."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
sys.path.insert(0, str(DEPLOY))
import fleet_gateway  # noqa: E402


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


# ---------------------------------------------------------------- key files

def test_node_key_0600_and_force_resets_a_loose_mode(tmp_path: Path):
    key = tmp_path / "keys" / "node0"
    subprocess.run([str(DEPLOY / "make_node_key.sh"), str(key)], check=True,
                   capture_output=True)
    assert (mode(key), mode(key.with_suffix(".pub"))) == (0o600, 0o644)
    old = key.read_bytes()
    key.chmod(0o644)  # e.g. copied around with a permissive umask
    again = subprocess.run([str(DEPLOY / "make_node_key.sh"), str(key)], capture_output=True)
    assert again.returncode == 1 and b"--force" in again.stderr and key.read_bytes() == old
    subprocess.run([str(DEPLOY / "make_node_key.sh"), "--force", str(key)], check=True,
                   capture_output=True)
    assert key.read_bytes() != old  # a new identity
    assert (mode(key), mode(key.with_suffix(".pub"))) == (0o600, 0o644)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="make_certs.sh needs openssl")
def test_tls_keys_0600_also_with_force(tmp_path: Path):
    out = tmp_path / "certs"
    subprocess.run([str(DEPLOY / "make_certs.sh"), "--out", str(out)], check=True,
                   capture_output=True)
    for f in ("ca.key", "server.key"):
        (out / f).chmod(0o644)
    subprocess.run([str(DEPLOY / "make_certs.sh"), "--out", str(out), "--force"], check=True,
                   capture_output=True)
    assert {f: mode(out / f) for f in ("ca.key", "server.key", "ca.crt", "server.pem")} == {
        "ca.key": 0o600, "server.key": 0o600, "ca.crt": 0o644, "server.pem": 0o644}


# ---------------------------------------------------------------- Fleet gateway

@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("POST", "/v1/fleet/pull-messages", True),
    ("POST", "/v1/fleet/register-node", True),
    ("GET", "/health", True),
    ("HEAD", "/health", True),
    ("GET", "/v1/fleet/pull-messages", False),         # fleet routes are POST only
    ("POST", "/v1/control/start-run", False),           # submit a run
    ("POST", "/v1/control/register-node", False),       # register a node key
    ("POST", "/v1/runtime/pull-messages", False),       # the ServerApp's runtime API
    ("POST", "/v1/fleet/../control/start-run", False),
    ("POST", "/v1/fleet/pull-messages/../../control/start-run", False),
    ("POST", "/v1/fleet//pull-messages", False),
    ("POST", "/v1/fleet/", False),
    ("POST", "/V1/FLEET/pull-messages", False),
    ("GET", "/docs", False),
    ("GET", "/openapi.json", False),
    ("POST", "/health", False),
])
def test_gateway_allows_only_fleet(method: str, path: str, allowed: bool):
    assert fleet_gateway.is_allowed(method, path) is allowed


@pytest.fixture
def gateway():
    seen: list[httpx.Request] = []

    def upstream(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, content=b"pb-reply",
                              headers={"content-type": "application/protobuf"})

    app = fleet_gateway.create_app("https://superlink.invalid:9091",
                                   transport=httpx.MockTransport(upstream))
    with TestClient(app) as client:
        yield client, seen


def test_gateway_forwards_fleet_with_auth_headers(gateway):
    client, seen = gateway
    r = client.post("/v1/fleet/pull-messages", content=b"\x08\x01",
                    headers={"x-flwr-public-key": "pk", "x-flwr-signature": "sig"})
    assert (r.status_code, r.content) == (200, b"pb-reply")
    [req] = seen
    assert req.url.path == "/v1/fleet/pull-messages" and req.content == b"\x08\x01"
    assert req.headers["x-flwr-public-key"] == "pk" and req.headers["x-flwr-signature"] == "sig"


@pytest.mark.parametrize("path", [
    "/v1/control/start-run", "/v1/control/register-node", "/v1/runtime/push-messages",
    "/v1/fleet/..%2Fcontrol%2Fstart-run", "/v1/fleet/%2e%2e/control/start-run",
    "/v1/fleet/pull%2Dmessages",  # an encoded spelling of an allowed route: refused too
])
def test_gateway_refuses_control_and_runtime_without_forwarding(gateway, path: str):
    client, seen = gateway
    r = client.post(path, content=b"x")
    assert r.status_code == 403 and seen == []
