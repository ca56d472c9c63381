"""Hostile nodes beyond their replies' content (issue 13): error replies, engine errors on one
client's content, identities claimed twice or bound to a node key.

Split from ``test_hostile_replies.py`` (the helpers: ``hostile_nodes.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Error, Message
from flwr.proto.node_pb2 import NodeInfo

from client_apps.agent_app import app as client_app
from pfedma_flwr.protocol.codec import (
    QUERY_RESPOND,
    ClientDescription,
    encode_description,
)
from pfedma_flwr.testing import FakeGrid
from tests.strategy.conftest import answer_json, read_jsonl
from tests.strategy.hostile_nodes import dumps, hostile, reply, resp


def _error_reply(msg: Message, ctx: Any) -> Message:
    """A node whose ClientApp 'fails' with a 5 MB error text full of control characters."""
    if msg.metadata.message_type != QUERY_RESPOND:
        return client_app(msg, ctx)
    return Message(Error(0, "\x1b[2J" + "E" * 5_000_000), reply_to=msg)


def test_error_reply_reason_is_bounded(federation, tmp_path: Path):
    summary, _ = federation(num_nodes=4, behaviour={0: _error_reply},
                            responder=lambda m: answer_json("7"), overrides="strategy.k_max=4")
    rounds = read_jsonl(tmp_path / "out" / "rounds.jsonl")
    whys = [r["failures"]["partition-0"] for r in rounds if "partition-0" in r["failures"]]
    assert whys and all(w.startswith("error reply (code 0)") and len(w) < 300 for w in whys)
    assert all("\x1b" not in w for w in whys)  # escaped: repr shows it as \x1b
    assert (tmp_path / "out" / "rounds.jsonl").stat().st_size < 200_000
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert summary["num_queries"] == len(queries) == 6 and all(q["answer"] == "7" for q in queries)


@pytest.mark.parametrize("stage", ["evaluation", "rules"])
def test_engine_error_on_one_clients_content_is_that_clients_failure(
        federation, tmp_path: Path, monkeypatch, stage):
    """A reply that parses but makes the engine raise (here: a planted fault in the anomaly
    evaluation, or in the candidate pool after queries already finished) costs only its
    sender: recorded as ``engine_error``, the round absorbed without it, nothing duplicated."""
    from pfedma_flwr.rules.server import server_flow
    from pfedma_flwr.server import engine as collaboration

    poison = "POISON"
    if stage == "evaluation":
        real = collaboration.evaluate_batch

        def fault(groups, **kw):
            if any(r is not None and r.final_answer == poison for g in groups for r in g):
                raise TypeError("planted fault")
            return real(groups, **kw)

        monkeypatch.setattr(collaboration, "evaluate_batch", fault)
        bad = hostile(lambda q: dumps(reply([resp(x, answer=poison) for x in q])))
    else:
        real_pool = server_flow.build_candidate_pool

        def fault_pool(cands, *a, **kw):
            if any(c.text == poison for cs in cands.values() for c in cs):
                raise ValueError("planted fault")
            return real_pool(cands, *a, **kw)

        monkeypatch.setattr(server_flow, "build_candidate_pool", fault_pool)
        bad = hostile(lambda q: dumps(reply([resp(x) for x in q], candidates=[
            {"text": poison, "category": "identity"}])))
    # t_max = 1: every query finishes inside the absorb that fails first (and is retried)
    summary, _ = federation(num_nodes=4, behaviour={0: bad}, responder=lambda m: answer_json("7"),
                            overrides="strategy.k_max=4 strategy.t_max=1")
    out = tmp_path / "out"
    rounds = read_jsonl(out / "rounds.jsonl")
    whys = [r["failures"].get("partition-0", "") for r in rounds]
    exc = "TypeError" if stage == "evaluation" else "ValueError"
    assert whys[0] == f"engine_error: {exc} while absorbing this client's reply"
    assert all("partition-0" not in r["clients"] for r in rounds[:1])
    queries = read_jsonl(out / "queries.jsonl")
    ids = [q["query_id"] for q in queries]
    assert len(ids) == len(set(ids)) == summary["num_queries"] == 6  # none lost or doubled
    assert all(q["answer"] == "7" for q in queries)
    assert summary["status"] == "completed"


def test_engine_error_needing_two_replies_costs_one_of_them(federation, tmp_path: Path,
                                                            monkeypatch):
    """A fault only two replies provoke together: the first whose removal lets the round
    through (in key order) is recorded; the other is absorbed."""
    from pfedma_flwr.server import engine as collaboration

    real = collaboration.evaluate_batch

    def fault(groups, **kw):
        answers = {r.final_answer for g in groups for r in g if r is not None}
        if {"PA", "PB"} <= answers:
            raise OverflowError("planted fault")
        return real(groups, **kw)

    monkeypatch.setattr(collaboration, "evaluate_batch", fault)
    behaviour = {0: hostile(lambda q: dumps(reply([resp(x, answer="PA") for x in q]))),
                 1: hostile(lambda q: dumps(reply([resp(x, answer="PB") for x in q])))}
    summary, _ = federation(num_nodes=5, behaviour=behaviour,
                            responder=lambda m: answer_json("7"),
                            overrides="strategy.k_max=5 strategy.t_max=1")
    first = read_jsonl(tmp_path / "out" / "rounds.jsonl")[0]
    assert first["failures"] == {
        "partition-0": "engine_error: OverflowError while absorbing this client's reply"}
    assert "partition-1" in first["clients"]
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert summary["num_queries"] == len(queries) == 6 and all(q["answer"] == "7" for q in queries)


def test_engine_error_without_a_culprit_propagates(federation, monkeypatch):
    """A fault no single reply provokes is a bug: it is raised, not hidden as failures."""
    from pfedma_flwr.server import engine as collaboration

    def broken(groups, **kw):
        raise RuntimeError("engine bug")

    monkeypatch.setattr(collaboration, "evaluate_batch", broken)
    with pytest.raises(RuntimeError, match="engine bug"):
        federation(num_nodes=3, responder=lambda m: answer_json("7"))


def _describe_as(key: str) -> Callable[[Message, Any], Message]:
    """An impostor: answers the handshake claiming ``key``, then behaves honestly."""

    def fn(msg: Message, ctx: Any) -> Message:
        if msg.metadata.message_type == QUERY_RESPOND:
            return client_app(msg, ctx)
        desc = ClientDescription("impostor", ("math",), "Knows everything.", client_key=key)
        return Message(encode_description(desc), reply_to=msg)

    return fn


def test_duplicate_claim_in_simulation_is_given_to_nobody(federation, tmp_path: Path):
    # FakeGrid has no node keys: identities are the declared partition ids (simulation mode)
    summary, grid = federation(num_nodes=4, behaviour={2: _describe_as("partition-0")},
                               responder=lambda m: answer_json("7"))
    assert summary["identity"]["mode"] == "declared"
    left = summary["identity"]["left_out"]
    assert set(left) == {str(grid.node_ids[0]), str(grid.node_ids[2])}
    assert all(w.startswith("duplicate_key: 'partition-0'") for w in left.values())
    assert set(summary["clients"]) == {"partition-1", "partition-3"}  # nobody renamed
    assert not any("@" in k for k in summary["routing"]["clients"])
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert summary["num_queries"] == len(queries) == 6 and all(q["answer"] == "7" for q in queries)


class KeyedGrid(FakeGrid):
    """A FakeGrid whose nodes have SuperLink-registered public keys (as in deployment)."""

    keys: dict[int, bytes] = {}

    def get_nodes(self):
        return [NodeInfo(node_id=n, public_key=self.keys[n]) for n in self.node_ids]


def test_identity_bound_to_the_node_key_not_the_claim(tmp_path: Path, monkeypatch):
    from pfedma_flwr.agents.backends import MockBackend
    from pfedma_flwr.client import components as client_components
    from pfedma_flwr.config import load_config
    from pfedma_flwr.protocol.codec import node_client_key
    from pfedma_flwr.server_app import run_server

    monkeypatch.setattr(client_components, "make_configured_backend",
                        lambda cfg: MockBackend(lambda m: answer_json("7")))

    def run(keys: dict[int, bytes], resume: bool) -> dict[str, Any]:
        client_components.build_agent.cache_clear()
        rc = {"config-name": "tiny", "output-dir": str(tmp_path / "out"), "resume": resume,
              "overrides": "output.progress=false"}
        grid = KeyedGrid(client_app, 4, rc)
        grid.keys = keys
        grid.behaviour = {grid.node_ids[3]: _describe_as("partition-0")}
        return run_server(grid, load_config(rc))

    ids = [1000 + 7 * i for i in range(4)]
    keys = {n: bytes([i + 1]) * 32 for i, n in enumerate(ids)}
    first = run(keys, resume=False)
    assert first["identity"] == {"mode": "node", "left_out": {}}
    expected = {node_client_key(n, keys[n]) for n in ids}
    assert set(first["clients"]) == expected  # the claim "partition-0" took nothing
    assert first["clients"][node_client_key(ids[0], keys[ids[0]])]["client_key"] == "partition-0"
    # resume: node 0 went away and an impostor with its own key claims partition-0 again
    keys2 = {**keys, ids[0]: b"\xee" * 32}
    resumed = run(keys2, resume=True)
    old0, new0 = node_client_key(ids[0], keys[ids[0]]), node_client_key(ids[0], keys2[ids[0]])
    assert new0 in resumed["clients"] and old0 not in resumed["clients"]
    # the honest nodes that kept their keys keep their reputation; the newcomer starts fresh
    assert resumed["routing"]["clients"][old0] == first["routing"]["clients"][old0]
    for n in ids[1:]:
        k = node_client_key(n, keys[n])
        assert resumed["routing"]["clients"][k] == first["routing"]["clients"][k]
    assert new0 not in first["routing"]["clients"]
