"""Privacy audit: per-message field/size summaries, summaries of a log, and a canary test.

The canary test plants unique strings in every private place of one client — ``D_i`` (a task's
``sensitive_items``), ``X_i`` (experience), a local rule's literal — and makes its model write
them (plus a PII canary) into the raw responses, then runs the real ClientApp/ServerApp over
the FakeGrid federation and checks that no canary appears in anything the server received or
wrote.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest
from flwr.app import Message, RecordDict

import client_apps.agent_app as agent_app
from pfedma_flwr.client.agent import AgentState
from pfedma_flwr.client.audit import (
    add_to_counters,
    append_record,
    main,
    read_records,
    summarize_audit_log,
    summarize_counters,
    summarize_payload,
    summarize_records,
)
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.protocol.codec import JSON_FIELD, PAYLOAD_KEY, QUERY_RESPOND
from pfedma_flwr.rules.model import PrivacyRule
from tests.strategy.conftest import answer_json, federation  # noqa: F401  (fixture)

REPLY = {
    "schema_version": 1,
    "responses": [
        {"query_id": "q1", "response": {"final_answer": "42", "claims": [
            {"claim": "abc", "evidence": ["de", "f"]}], "domain_fit": 0.5,
            "self_confidence": 0.5}, "format_ok": True, "refused": False, "error": "",
         "tokens": 3},
        {"query_id": "q22", "response": None, "format_ok": False, "refused": False,
         "error": "bad", "tokens": 0},
    ],
    "candidates": [{"text": "Redact emails", "category": "contact", "scope": "response",
                    "action": "redact", "entity_types": ["EMAIL_ADDRESS"], "patterns": []}],
    "feedback": [{"rule_id": "g1", "d_trigger": 2, "d_valid": 1, "d_conflict": 0}],
    "backend_calls": 1, "tokens": 3, "gen_seconds": 0.1, "extra": {},
}


def test_summarize_payload_counts_fields_and_bytes():
    payload = json.dumps(REPLY)
    rec = summarize_payload("query.respond", payload)
    assert rec["message_type"] == "query.respond" and rec["v"] == 1
    assert (rec["responses"], rec["candidates"], rec["feedback_rows"]) == (2, 1, 1)
    assert rec["total_bytes"] == len(payload.encode())
    # chars per field kind, list indices dropped:
    #   query_id: "q1" + "q22" = 2 + 3; final_answer "42" = 2; claim "abc" = 3;
    #   evidence "de" + "f" = 3; error "" + "bad" = 3; candidate text 13, category 7,
    #   scope 8, action 6, entity_types 13; feedback rule_id 2.
    assert rec["chars"] == {
        "candidates.action": 6, "candidates.category": 7, "candidates.entity_types": 13,
        "candidates.scope": 8, "candidates.text": 13, "feedback.rule_id": 2,
        "responses.error": 3, "responses.query_id": 5,
        "responses.response.claims.claim": 3, "responses.response.claims.evidence": 3,
        "responses.response.final_answer": 2,
    }


def test_non_ascii_bytes_and_non_object_payload():
    rec = summarize_payload("query.describe", json.dumps({"d": "é"}, ensure_ascii=False))
    # '{"d": "é"}' = 10 characters, é is 2 bytes in UTF-8 -> 11 bytes; 1 char in field d
    assert rec["total_bytes"] == 11 and rec["chars"] == {"d": 1}
    rec = summarize_payload("x", "[1, 2]")
    assert rec["responses"] == 0 and rec["chars"] == {}


def test_counters_and_log_summaries_agree(tmp_path: Path):
    r1 = summarize_payload("query.respond", json.dumps(REPLY))
    r2 = summarize_payload("query.describe", json.dumps({"profile_name": "abcd"}))
    counters = add_to_counters(add_to_counters({}, r1), r2)
    assert counters["messages"] == 2 and counters["messages:query.respond"] == 1
    assert counters["chars:profile_name"] == 4
    log = tmp_path / "audit.jsonl"
    append_record(log, r1)
    append_record(log, r2)
    s = summarize_audit_log(log)
    assert s == summarize_counters(counters) == summarize_records([r1, r2])
    assert s["messages"] == 2 and s["responses"] == 2 and s["candidates"] == 1
    assert s["by_message_type"] == {"query.describe": 1, "query.respond": 1}
    assert s["total_bytes"] == r1["total_bytes"] + r2["total_bytes"]
    assert s["chars"]["responses.response.final_answer"] == 2


def test_torn_last_line_skipped_but_middle_garbage_is_an_error(tmp_path: Path):
    log = tmp_path / "a.jsonl"
    rec = summarize_payload("q", "{}")
    log.write_text(json.dumps(rec) + "\n" + '{"v": 1, "resp')  # crash mid-append
    assert len(read_records(log)) == 1
    log.write_text('garbage\n' + json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match="line 1"):
        read_records(log)


def test_audit_log_is_owner_only_and_survives_a_torn_append(tmp_path: Path):
    d = tmp_path / "state"
    d.mkdir()
    os.chmod(d, 0o755)  # a state-dir made by a deployment script under umask 022
    log = d / "audit-p0.jsonl"
    rec = summarize_payload("q", "{}")
    log.write_text(json.dumps(rec) + "\n" + '{"v": 1, "resp')  # a crash mid-append, 0644
    os.chmod(log, 0o644)
    append_record(log, rec)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    # the fragment was cut before appending, so no damaged line is left mid-file
    assert len(read_records(log)) == 2 and log.read_text().count("\n") == 2


def test_cli_prints_summary(tmp_path: Path, capsys):
    log = tmp_path / "a.jsonl"
    append_record(log, summarize_payload("query.respond", json.dumps(REPLY)))
    assert main([str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["responses"] == 2


# --------------------------------------------------------------------------- canaries

C_DATA = "zq-canary-dataitem-7731"        # in D_i: a task's sensitive item (and its text)
C_EXP = "zq-canary-experience-5524"       # in X_i only
C_LIT = "zq-canary-ruleliteral-9083"      # a local rule literal
C_EMAIL = "zq.canary.8812@example.org"    # PII written by the model
CANARIES = (C_DATA, C_EXP, C_LIT, C_EMAIL)


def _canary_task() -> Task:
    return Task(task_id="canary-dev-0", benchmark="gsm8k", domain="math",
                question=f"How many apples does {C_DATA} have? 3 + 4", gold="7",
                answer_kind="number", sensitive_items=(C_DATA,))


def _seed(ctx) -> None:
    """Client 0's prior private state: X_i and a local rule with a literal."""
    agent = agent_app.build_agent(dict(ctx.run_config), dict(ctx.node_config))
    state = agent.new_state()
    state.experience.append(f"earlier query about {C_EXP}")
    rid = state.rules.next_local_id()
    state.rules.add_local_rule(PrivacyRule(
        rule_id=rid, text="Redact the internal project code name", category="internal code",
        literals=(C_LIT,)))
    agent_app.save_state(ctx, state)


def test_canaries_never_reach_the_server(federation, tmp_path: Path,  # noqa: F811
                                          monkeypatch):
    real_build = agent_app.build_agent
    owner_prompt: list[str] = []  # client 0's profile prompt: its model writes the canaries

    def build_with_canary_data(run_config, node_config):
        agent = real_build(run_config, node_config)
        if node_config["partition-id"] == 0 and C_DATA not in agent.sensitive_items:
            owner_prompt.append(agent.profile.prompt)
            agent.private_data.append(_canary_task())
            agent.sensitive_items = sorted({*agent.sensitive_items, C_DATA})
        return agent

    monkeypatch.setattr(agent_app, "build_agent", build_with_canary_data)
    received: list[str] = []
    calls = {"owner": 0}
    seeded: set[int] = set()

    def recorder(msg: Message, ctx) -> Message:
        if ctx.node_id not in seeded:
            seeded.add(ctx.node_id)
            if ctx.node_config["partition-id"] == 0:
                _seed(ctx)
        reply = agent_app.app(msg, ctx)
        assert not reply.has_error(), reply.error.reason
        received.append(json.dumps(_content_json(reply.content)))
        return reply

    def responder(msgs):
        # Client 0's raw responses carry every canary (claims, evidence and the answer); the
        # strings are only secrets of client 0, so the other clients answer plainly.
        if not owner_prompt or owner_prompt[0] not in msgs[0]["content"]:
            return answer_json("7")
        calls["owner"] += 1
        return json.dumps({
            "claims": [{"claim": f"{C_DATA} has 7 apples per {C_LIT}.",
                        "evidence": [f"Told by {C_EMAIL}", f"Seen before: {C_LIT}"]}],
            "final_answer": f"7 ({C_DATA})", "domain_fit": 0.9, "self_confidence": 0.9})

    summary, grid = federation(num_nodes=3, responder=responder,
                               behaviour={i: recorder for i in range(3)})
    out = tmp_path / "out"
    assert summary["num_queries"] == 6
    respond_replies = [r for r in received if '"responses"' in r]
    assert respond_replies, "no respond reply was recorded"
    # the canaries really reached the clients' raw responses (else the test proves nothing)
    assert calls["owner"] >= 1 and any("[REDACTED" in r for r in respond_replies)
    blobs = {"reply": "\n".join(received)}
    for name in ("rounds.jsonl", "queries.jsonl", "summary.json"):
        blobs[name] = (out / name).read_text(encoding="utf-8")
    for where, text in blobs.items():
        for c in CANARIES:
            assert c.lower() not in text.lower(), f"canary {c!r} leaked into {where}"
    # ...while the client kept them locally (X_i and the rule literal survive in its state)
    ctx0 = grid.contexts[grid.node_ids[0]]
    st = AgentState.from_dict(json.loads(str(ctx0.state[agent_app.STATE_KEY]["json"])))
    assert any(C_EXP in x for x in st.experience)
    assert any(C_LIT in r.literals for r in st.rules.all_rules())
    # The audit counters (no state-dir) count what left, by field kind.
    audit = summarize_counters(dict(ctx0.state[agent_app.AUDIT_KEY]))  # type: ignore[arg-type]
    assert audit["by_message_type"]["query.describe"] == 1
    assert audit["responses"] >= 1 and audit["chars"]["responses.response.final_answer"] > 0


def _content_json(content: RecordDict) -> object:
    return json.loads(str(content.config_records[PAYLOAD_KEY][JSON_FIELD]))


def test_respond_with_state_dir_persists_and_audits(federation, tmp_path: Path,  # noqa: F811
                                                     monkeypatch):
    # Give every FakeGrid node a state-dir like a deployed SuperNode.
    state_root = tmp_path / "nodes"

    def with_state_dir(msg, ctx):
        ctx.node_config.setdefault("state-dir", str(state_root / f"n{ctx.node_id}"))
        return agent_app.app(msg, ctx)

    summary, grid = federation(num_nodes=2, behaviour={0: with_state_dir, 1: with_state_dir},
                               responder=lambda m: answer_json("7"))
    for k, n in enumerate(grid.node_ids):
        d = state_root / f"n{n}"
        payload = json.loads((d / f"agent-p{k}.json").read_text())["payload"]
        st = AgentState.from_dict(payload)
        assert st.rounds >= 1
        recs = read_records(d / f"audit-p{k}.jsonl")
        assert recs[0]["message_type"] == "query.describe"
        assert sum(r["message_type"] == QUERY_RESPOND for r in recs) == st.rounds
        assert agent_app.AUDIT_KEY not in grid.contexts[n].state.config_records


def test_restart_restores_state_from_disk(tmp_path: Path, federation, monkeypatch):  # noqa: F811
    from flwr.app import Context

    summary, grid = federation(num_nodes=2, responder=lambda m: answer_json("7"))
    # Simulate a SuperNode restart / new run: a fresh Context (empty state) with a state dir.
    agent_ctx = grid.contexts[grid.node_ids[0]]
    state_dir = tmp_path / "sd"
    node_config = {**agent_ctx.node_config, "state-dir": str(state_dir)}
    old = AgentState.from_dict(json.loads(str(agent_ctx.state[agent_app.STATE_KEY]["json"])))
    old.experience.append("kept across restarts")
    ctx = Context(run_id=2, node_id=agent_ctx.node_id, node_config=node_config,
                  state=RecordDict(), run_config=dict(agent_ctx.run_config))
    agent_app.save_state(ctx, old)
    fresh = Context(run_id=3, node_id=agent_ctx.node_id, node_config=node_config,
                    state=RecordDict(), run_config=dict(agent_ctx.run_config))
    agent = agent_app.build_agent(dict(fresh.run_config), dict(fresh.node_config))
    restored = agent_app.load_state(fresh, agent)
    assert restored.experience == old.experience and restored.rounds == old.rounds
    assert dataclasses.asdict(restored)["rounds"] == old.rounds
    # A payload the agent cannot read is moved aside (kept, not dropped) and the node goes on
    # from a fresh state, so every later message does not fail.
    (state_dir / "agent-p0.json").write_text(json.dumps(
        {"format": "pfedma-client-state", "version": 1, "payload": {"version": 99}}))
    again = agent_app.load_state(Context(run_id=4, node_id=1, node_config=node_config,
                                         state=RecordDict(), run_config={}), agent)
    assert again.rounds == 0 and again.experience == agent.new_state().experience
    assert list(state_dir.glob("agent-p0.json.corrupt-*"))
