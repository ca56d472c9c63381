"""Failures visible and state durable, end to end through the strategy (issue 13 items 7, 8).

Agents whose OpenAI-compatible endpoint is a closed loopback port (no LLM anywhere): the
handshake fails naming the node and endpoint; an endpoint that dies after the handshake ends
the run ``failed:generation`` with the failed answers counted per client and reason code; one
dead node of four leaves the run completed with exactly its answers counted. Client state
files that do not decode are quarantined and the node answers from a fresh state; result and
state files are owner-only; resume survives a torn last line of ``rounds.jsonl``.
"""

from __future__ import annotations

import json
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Message

from client_apps.agent_app import app as client_app
from pfedma_flwr.agents.backends import Backend, MockBackend
from pfedma_flwr.agents.backends.openai_backend import OpenAIBackend
from pfedma_flwr.client import components as client_components
from pfedma_flwr.config import load_config
from pfedma_flwr.protocol.codec import QUERY_DESCRIBE, empty_content
from pfedma_flwr.protocol.startup import StartupFailed
from pfedma_flwr.server_app import run_server
from pfedma_flwr.testing import FakeGrid
from tests.strategy.conftest import answer_json, read_jsonl
from tests.strategy.test_resume import CrashingGrid

MODEL = "qwen-test"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _dead_backend(port: int) -> OpenAIBackend:
    return OpenAIBackend(base_url=f"http://127.0.0.1:{port}/v1", model=MODEL, timeout=2.0,
                         max_retries=0, backoff=0.0)


def _via(backend: Backend) -> Callable[..., Any]:
    """A node whose agent is built on ``backend`` (build_agent caches one agent per node)."""
    def handler(msg, ctx):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(client_components, "make_configured_backend", lambda cfg: backend)
            return client_app(msg, ctx)
    return handler


def _summary_json(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "summary.json").read_text())


def _answers_asked(rounds: list[dict[str, Any]], client: str | None = None) -> int:
    return sum(len(q["selected"]) if client is None else q["selected"].count(client)
               for rec in rounds for q in rec["queries"])


def test_dead_endpoint_fails_the_handshake_naming_node_and_endpoint(federation, tmp_path,
                                                                    caplog):
    port = _closed_port()
    dead = _dead_backend(port)
    with pytest.raises(StartupFailed) as ei:
        federation(num_nodes=3, behaviour={i: _via(dead) for i in range(3)})
    # one line names every client and the endpoint; the status says the model cannot answer
    cause = (f"only 0 of 3 nodes started their agent (need strategy.min_nodes=2): clients p0, "
             f"p1, p2: openai backend at http://127.0.0.1:{port}/v1 (model '{MODEL}'): cannot "
             "connect to the endpoint ([Errno 111] Connection refused)")
    assert str(ei.value).startswith(cause) and "\n" not in str(ei.value)
    summary = _summary_json(tmp_path)
    assert summary["status"] == "failed:generation" and summary["cause"] == str(ei.value)
    # the server log names each node and the endpoint (whatever the strategy's wording)
    warned = [r.getMessage() for r in caplog.records
              if r.levelname == "WARNING" and f"127.0.0.1:{port}" in r.getMessage()]
    assert len(warned) == 3
    for k, line in enumerate(warned):  # nodes sorted by id: partition k
        assert f"client p{k}: openai backend at" in line
    # the node's error reply says what is wrong, where, and for which node
    grid = FakeGrid(client_app, 1, {"config-name": "tiny"})
    grid.behaviour = {grid.node_ids[0]: _via(dead)}
    [reply] = grid.send_and_receive([Message(content=empty_content(),
                                             dst_node_id=grid.node_ids[0],
                                             message_type=QUERY_DESCRIBE, group_id="0")])
    assert reply.has_error()
    assert (f"agent start-up failed on client p0 [generation]: openai backend at "
            f"http://127.0.0.1:{port}/v1 (model '{MODEL}'): cannot connect to the endpoint"
            ) in reply.error.reason


def test_endpoint_dying_after_the_handshake_ends_failed_generation(federation, tmp_path,
                                                                   monkeypatch):
    # The endpoint answered the health check, then went down for every generation.
    monkeypatch.setattr(OpenAIBackend, "health_check", lambda self, **kw: None)
    dead = _dead_backend(_closed_port())
    federation(num_nodes=3, behaviour={i: _via(dead) for i in range(3)})
    summary = _summary_json(tmp_path)
    rounds = read_jsonl(tmp_path / "out" / "rounds.jsonl")
    asked = _answers_asked(rounds)
    gen = summary["generation"]
    assert summary["status"] == "failed:generation"
    assert asked > 0 and gen["answers"] == gen["failed"] == gen["generation_failed"] == asked
    assert gen["failed_share"] == gen["generation_failed_share"] == 1.0
    assert set(gen["failed_by_code"]) == {"backend:connect"}
    assert gen["failed_by_client"] == {
        c: {"backend:connect": _answers_asked(rounds, c)}
        for c in ("partition-0", "partition-1", "partition-2") if _answers_asked(rounds, c)}
    assert summary["accuracy"] == 0.0 and summary["totals"]["answers_failed"] == asked


def test_one_dead_node_of_four_is_counted_and_the_run_completes(federation, tmp_path,
                                                                monkeypatch):
    monkeypatch.setattr(OpenAIBackend, "health_check", lambda self, **kw: None)
    live = MockBackend(lambda m: answer_json("7"))
    federation(num_nodes=4, behaviour={0: _via(_dead_backend(_closed_port())),
                                       **{i: _via(live) for i in (1, 2, 3)}})
    summary = _summary_json(tmp_path)
    rounds = read_jsonl(tmp_path / "out" / "rounds.jsonl")
    n0, asked = _answers_asked(rounds, "partition-0"), _answers_asked(rounds)
    gen = summary["generation"]
    assert n0 > 0 and gen["failed_by_client"] == {"partition-0": {"backend:connect": n0}}
    assert gen["failed"] == gen["generation_failed"] == n0 and gen["answers"] == asked
    assert gen["generation_failed_share"] == pytest.approx(n0 / asked) and n0 / asked <= 0.5
    assert summary["status"] == "completed"


# ----------------------------------------------------------------------------- client state


def _with_state_dir(root: Path) -> Callable[..., Any]:
    """A node with a deployment-style ``state-dir`` (``<root>/p<partition-id>``)."""
    def handler(msg, ctx):
        ctx.node_config.setdefault("state-dir",
                                   str(root / f"p{ctx.node_config['partition-id']}"))
        return client_app(msg, ctx)
    return handler


def _envelope(payload: bytes) -> bytes:
    return (b'{"format": "pfedma-client-state", "version": 1, "saved_at": 1.0, "payload": '
            + payload + b"}")


BAD_STATE = {
    "invalid_utf8": _envelope(b'{"version": 1, "experience": ["\xff\xfe"], "rounds": 1}'),
    "int_5000_digits": _envelope(b'{"version": 1, "rounds": ' + b"9" * 5000 + b"}"),
    "int_400_digits": _envelope(b'{"version": 1, "rounds": ' + b"9" * 400 + b"}"),
    "lone_surrogate": _envelope(b'{"version": 1, "experience": ["\\ud800"], "rounds": 1}'),
    "bad_json": b'{"format": "pfedma-client-state", "version": 1, "payl',
    "nan": _envelope(b'{"version": 1, "rounds": NaN}'),
    "wrong_types": _envelope(b'{"version": 1, "rules": 5, "rounds": "x"}'),
}


@pytest.mark.parametrize("form", list(BAD_STATE))
def test_undecodable_state_file_is_quarantined_and_the_node_answers(federation, tmp_path,
                                                                    form):
    root = tmp_path / "nodes"
    state = root / "p0"
    state.mkdir(parents=True)
    (state / "agent-p0.json").write_bytes(BAD_STATE[form])
    federation(num_nodes=3, behaviour={i: _with_state_dir(root) for i in range(3)},
               responder=lambda m: answer_json("7"))
    summary = _summary_json(tmp_path)
    assert summary["status"] == "completed"
    # node 0 answered everything asked of it: no failed message, no failed answer
    assert "partition-0" not in summary["generation"]["failed_by_client"]
    [backup] = state.glob("agent-p0.json.corrupt-*")
    assert backup.read_bytes() == BAD_STATE[form]  # kept for inspection, not deleted
    doc = json.loads((state / "agent-p0.json").read_text())
    assert doc["payload"]["rounds"] >= 1  # a fresh state, saved again


def test_state_and_result_files_are_owner_only(federation, tmp_path):
    root = tmp_path / "nodes"
    federation(num_nodes=2, behaviour={i: _with_state_dir(root) for i in range(2)},
               responder=lambda m: answer_json("7"))

    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    out = tmp_path / "out"
    assert mode(out) == 0o700
    for name in ("rounds.jsonl", "queries.jsonl", "checkpoint.json", "summary.json",
                 "config.yaml"):
        assert mode(out / name) == 0o600, name
    for d in root.iterdir():
        assert mode(d) == 0o700
        files = sorted(d.iterdir())
        assert {p.name.split("-")[0] for p in files} == {"agent", "audit"}
        assert all(mode(p) == 0o600 for p in files), [(p.name, oct(mode(p))) for p in files]


# ----------------------------------------------------------------------------- resume


def _disagree(msgs):
    return answer_json(str(len(msgs[0]["content"]) % 5))


def _run(tmp: Path, monkeypatch, *, crash_at: int | None, resume: bool) -> dict[str, Any]:
    monkeypatch.setattr(client_components, "make_configured_backend",
                        lambda cfg: MockBackend(_disagree))
    client_components.build_agent.cache_clear()
    rc = {"config-name": "tiny", "output-dir": str(tmp / "run"), "resume": resume,
          "overrides": "output.progress=false strategy.t_max=3 strategy.batch_size=2"}
    grid = (CrashingGrid(client_app, 4, rc, crash_at=crash_at) if crash_at
            else FakeGrid(client_app, 4, rc))
    return run_server(grid, load_config(rc))


def test_resume_after_a_torn_last_line(tmp_path: Path, monkeypatch, caplog):
    with pytest.raises(RuntimeError, match="server killed"):
        _run(tmp_path, monkeypatch, crash_at=4, resume=False)  # dies inside round 3
    out = tmp_path / "run"
    checkpointed = json.loads((out / "checkpoint.json").read_text())["server_round"]
    rounds_before = read_jsonl(out / "rounds.jsonl")
    # the process was killed while appending the next round and a finished query
    with open(out / "rounds.jsonl", "ab") as f:
        f.write(b'{"round": ' + str(checkpointed + 1).encode() + b', "queries": [{"qu')
    with open(out / "queries.jsonl", "ab") as f:
        f.write(b'{"query_id": "gsm8k-')
    resumed = _run(tmp_path, monkeypatch, crash_at=None, resume=True)
    assert resumed["resumed_from_round"] == checkpointed
    assert "dropped a torn last line" in caplog.text
    rounds = [r["round"] for r in read_jsonl(out / "rounds.jsonl")]
    assert rounds == list(range(1, len(rounds) + 1)) and len(rounds) > len(rounds_before)
    ids = [q["query_id"] for q in read_jsonl(out / "queries.jsonl")]
    assert len(ids) == len(set(ids)) == 6
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
