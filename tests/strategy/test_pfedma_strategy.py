"""PFedMA strategy with mock agents over a FakeGrid: bounds, STOP, failures, rule flow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flwr.app import ConfigRecord, Message, RecordDict

from pfedma_flwr.protocol.codec import PAYLOAD_KEY, QUERY_RESPOND, decode_instruction
from tests.strategy.conftest import answer_json, read_jsonl


def _respond_msgs(grid):
    return [m for m in grid.sent if m.metadata.message_type == QUERY_RESPOND]


def test_run_writes_results_and_respects_selection_bounds(federation, tmp_path: Path):
    summary, grid = federation(num_nodes=4)
    out = tmp_path / "out"
    queries = read_jsonl(out / "queries.jsonl")
    rounds = read_jsonl(out / "rounds.jsonl")
    # tiny.yaml: 3 queries x 2 benchmarks, T_max = 2, K_max = 2
    assert summary["num_queries"] == len(queries) == 6
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert "t_max: 2" in (out / "config.yaml").read_text()
    for q in queries:
        assert 1 <= q["rounds"] <= 2
        assert all(1 <= len(sel) <= 2 for sel in q["selections"])
        assert len(set(q["selections"][0])) == len(q["selections"][0])
    assert len(rounds) == max(r["round"] for r in rounds)
    # each query's round record says why its clients were chosen: every chosen client's score
    # parts, and at most one more (the first left out) that scored no higher in the same tier
    for r in rounds:
        for q in r["queries"]:
            why = q["routing"]
            assert set(q["selected"]) <= set(why) and len(why) <= len(q["selected"]) + 1
            for parts in why.values():
                assert parts["score"] == pytest.approx(
                    (parts["C"] + parts["sim"]) / 2 * parts["S"] + parts["bonus"] - parts["cost"],
                    abs=2e-4)
    # one message per selected node per Flower round, never more
    for r in rounds:
        sent = [m for m in _respond_msgs(grid) if m.metadata.group_id == str(r["round"])]
        assert len(sent) == len({m.metadata.dst_node_id for m in sent})


def test_agreement_stops_after_one_round(federation, tmp_path: Path):
    # Every agent answers 42: z.support = 1 with 2 agreeing responses -> STOP before round 2.
    summary, _ = federation(responder=lambda msgs: answer_json("42"), overrides="strategy.t_max=3")
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert all(q["rounds"] == 1 and q["stop_reason"] == "orchestrator_stop" for q in queries)
    assert summary["stop_reasons"] == {"orchestrator_stop": 6}


def test_disagreement_uses_the_round_budget(federation, tmp_path: Path):
    # Answers depend on the agent's profile prompt, so the two selected agents disagree
    # (support 0.5 < 0.7) and every query runs to T_max = 2 with fresh agents in round 2.
    def responder(msgs):
        return answer_json(str(len(msgs[0]["content"])))

    # adaptive_k off: round 2 gets the full K_max = 2 places (adaptive_k, the default, would
    # ask only the one vote a split still needs)
    summary, _ = federation(responder=responder, overrides="routing.adaptive_k=false")
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert all(q["rounds"] == 2 and q["stop_reason"] == "t_max" for q in queries)
    # round 2 prefers in-domain clients (not yet asked, then again) over off-domain ones
    # (DESIGN §3.12 revision); tiny's 4 profiles: 2 math clients, 1 medicine client
    domain_of = {"math": "math", "medicine": "medicine"}
    for q in queries:
        dom = domain_of[q["domain"]]
        in_dom = {c for c, d in summary["clients"].items() if dom in d["domains"]}
        first, second = set(q["selections"][0]), set(q["selections"][1])
        assert in_dom <= second  # every in-domain client is in round 2 (k_max = 2 >= |in_dom|)
        off_new = second - in_dom
        assert not off_new & first  # off-domain places go to clients not yet asked


def test_failures_recorded_with_reasons(federation, tmp_path: Path):
    calls = {"n": 0}

    def crash(msg, ctx):
        if msg.metadata.message_type != QUERY_RESPOND:
            from client_apps.agent_app import app
            return app(msg, ctx)
        raise RuntimeError("agent crashed")

    def garbage(msg, ctx):
        if msg.metadata.message_type != QUERY_RESPOND:
            from client_apps.agent_app import app
            return app(msg, ctx)
        return Message(RecordDict({PAYLOAD_KEY: ConfigRecord(
            {"json": '{"schema_version": 1, "responses": "nope"}'})}), reply_to=msg)

    def silent(msg, ctx):
        if msg.metadata.message_type != QUERY_RESPOND:
            from client_apps.agent_app import app
            return app(msg, ctx)
        calls["n"] += 1
        return None

    summary, grid = federation(num_nodes=5, behaviour={0: crash, 1: garbage, 2: silent},
                               responder=lambda m: answer_json("7"),
                               overrides="strategy.k_max=5")
    out = tmp_path / "out"
    rounds = read_jsonl(out / "rounds.jsonl")
    reasons = {n: r for rec in rounds for n, r in rec["failures"].items()}
    bad = ["partition-0", "partition-1", "partition-2"]
    assert "agent crashed" in reasons[bad[0]] and "error reply" in reasons[bad[0]]
    assert "malformed reply" in reasons[bad[1]] and "responses" in reasons[bad[1]]
    assert reasons[bad[2]].startswith("timeout")
    assert calls["n"] >= 1
    # the run completed with every query answered by the two healthy nodes
    assert summary["num_queries"] == 6 and summary["totals"]["failures"] >= 3
    routing = summary["routing"]["clients"]
    for n in bad:
        assert routing[n]["reliability"] < 0.5  # S decays for failing clients
    for n in ("partition-3", "partition-4"):
        assert routing[n]["reliability"] > 0.5


def test_promoted_rule_reaches_clients_next_round(federation, tmp_path: Path):
    # Every agent leaks a contact email (a PII span no rule covers yet): each creates a local
    # rule, uploads its generalization; two identical candidates support each other -> promoted.
    canary = "alice.canary@example.com"

    def responder(msgs):
        return answer_json(str(len(msgs[0]["content"])), claim=f"Ask {canary} for details.")

    summary, grid = federation(responder=responder)
    rounds = read_jsonl(tmp_path / "out" / "rounds.jsonl")
    assert rounds[0]["rules"]["promoted"] >= 1
    assert summary["rules"]["global_total"] >= 1
    later = [decode_instruction(m.content) for m in _respond_msgs(grid)
             if int(m.metadata.group_id) >= 2]
    assert later and all(ins.global_rules for ins in later)
    assert any("EMAIL_ADDRESS" in r.entity_types for r in later[0].global_rules)
    # nothing the server logged contains the leaked address
    for name in ("rounds.jsonl", "queries.jsonl", "summary.json"):
        assert canary not in (tmp_path / "out" / name).read_text()


def test_departed_node_is_not_routed_to_again(federation, tmp_path: Path):
    # After the handshake node 0 leaves the federation (get_node_ids drops it, as after a
    # SIGTERM or heartbeat expiry): no query may be routed to it.
    from pfedma_flwr.testing import FakeGrid

    gone = []

    def get_node_ids(self):
        return [n for n in self.node_ids if n not in gone]

    original = FakeGrid.get_node_ids
    FakeGrid.get_node_ids = get_node_ids
    try:
        def responder(msgs):
            return answer_json(str(len(msgs[0]["content"])))

        def leave_after_handshake(msg, ctx):
            from client_apps.agent_app import app
            reply = app(msg, ctx)
            gone.append(ctx.node_id)
            return reply

        summary, grid = federation(num_nodes=4, behaviour={0: leave_after_handshake},
                                   responder=responder)
    finally:
        FakeGrid.get_node_ids = original
    assert all(m.metadata.dst_node_id != grid.node_ids[0] for m in _respond_msgs(grid))
    assert summary["num_queries"] == 6


def test_a_lone_answer_teaches_no_capability_under_skip(federation, tmp_path: Path):
    # One client per query, one round: nobody else answered, so the leave-one-out z is empty
    # and with routing.lone_answers=skip C stays at its prior for every client (with its own
    # vote in z, every lone answer agreed with z and raised C). S still moves: all retained.
    summary, _ = federation(responder=lambda msgs: answer_json("42"),
                            overrides="strategy.k_max=1 strategy.t_max=1 "
                                      "routing.lone_answers=skip")
    clients = summary["routing"]["clients"]
    asked = [c for c, st in clients.items() if st["n_asked"]]
    assert asked and all(clients[c]["capability"] == {} for c in asked)
    assert all(clients[c]["reliability"] > 0.5 for c in asked)


def test_a_lone_answer_moves_capability_at_the_prior_of_agreement(federation, tmp_path: Path):
    # The default (prior): an answer never compared with another gets g = (1 - A) * 0.5 when
    # its query ends; replayed by hand from rounds.jsonl, one EMA step (eta 0.2) per client,
    # domain and Flower round over the mean g of that round.
    summary, _ = federation(responder=lambda msgs: answer_json("42"),
                            overrides="strategy.k_max=1 strategy.t_max=1")
    expected: dict[tuple[str, str], float] = {}
    domain = {"math": "math", "medicine": "medicine"}
    for rnd in read_jsonl(tmp_path / "out" / "rounds.jsonl"):
        gs: dict[tuple[str, str], list[float]] = {}
        for q in rnd["queries"]:
            d = domain["math" if q["query_id"].startswith("gsm8k") else "medicine"]
            for c, a in q["anomaly"].items():
                assert a["retained"]
                gs.setdefault((c, d), []).append((1 - a["score"]) * 0.5)
        for key, v in gs.items():
            expected[key] = 0.8 * expected.get(key, 0.5) + 0.2 * sum(v) / len(v)
    clients = summary["routing"]["clients"]
    assert expected
    for (c, d), cap in expected.items():
        assert abs(clients[c]["capability"][d] - cap) < 1e-9
        assert cap < 0.5  # no agreement seen: C at most the prior


def test_quality_is_measured_against_the_others(federation, tmp_path: Path):
    # Three agents per query; the physician dissents ("9") from the two others ("7").
    # Leave-one-out: each agreeing agent's answer equals the z of the others -> g > 0; the
    # dissenter's answer differs from the others' z -> g = 0, so its C falls below the prior.
    def responder(msgs):
        return answer_json("9" if "physician" in msgs[0]["content"].lower() else "7")

    summary, _ = federation(num_nodes=3, responder=responder,
                            overrides="strategy.k_max=3 strategy.t_max=1 anomaly.tolerance=1.0")
    clients = summary["routing"]["clients"]
    desc = summary["clients"]
    phys = next(c for c, d in desc.items() if d["profile_name"] == "physician")
    others = [c for c in desc if c != phys]
    for dom in ("math", "medicine"):
        assert clients[phys]["capability"][dom] < 0.5
        assert all(clients[c]["capability"][dom] > 0.5 for c in others)



def test_cost_per_query_prices_each_answer_at_its_clients_backbone(federation, tmp_path: Path):
    # tiny.yaml's profiles rotate mathematician, physician, generalist, ...; the mathematician
    # runs on backbone "big" (10 USD per million tokens), every other client on the default (2).
    summary, _ = federation(num_nodes=4, overrides=(
        "agent.profile_backbones.mathematician=big routing.prices.default=2.0 "
        "routing.prices.big=10.0"))
    out = tmp_path / "out"
    queries = read_jsonl(out / "queries.jsonl")
    clients = json.loads((out / "summary.json").read_text())["clients"]
    big = {c for c, d in clients.items() if d["backbone"] == "big"}
    assert big and len(big) < len(clients)
    for q in queries:
        asked = {c for sel in q["selections"] for c in sel}
        low, high = q["tokens"] * 2.0 / 1e6, q["tokens"] * 10.0 / 1e6
        if asked & big:  # some of its tokens were paid at the big backbone's price
            assert low < q["cost"] <= high + 1e-12, q
        else:  # all at the default price, exactly
            assert abs(q["cost"] - low) < 1e-9, q
    assert any(asked_big for asked_big in ({c for s in q["selections"] for c in s} & big
                                           for q in queries))
    assert abs(summary["cost_per_query"] - sum(q["cost"] for q in queries) / len(queries)) < 1e-6


def test_without_prices_every_query_costs_nothing(federation, tmp_path: Path):
    summary, _ = federation(num_nodes=3)
    assert all(q["cost"] == 0.0 for q in read_jsonl(tmp_path / "out" / "queries.jsonl"))
    assert summary["cost_per_query"] == 0.0


def test_more_queries_in_flight_than_a_message_holds_wait_for_room(federation, tmp_path: Path):
    # protocol.max_items = 2: a client decodes at most 2 queries per message. 6 queries in
    # flight x K_max 2 = 12 answers, but 4 clients x 2 = 8 places per round: the server routes
    # among clients with room left, and the queries without any wait a round, so no message
    # exceeds the cap (the client would reject it: every answer in it lost).
    summary, grid = federation(
        num_nodes=4, responder=lambda msgs: answer_json("42"),
        overrides="strategy.batch_size=6 protocol.max_items=2 strategy.t_max=3")
    assert summary["status"] == "completed"
    assert summary["generation"]["failed"] == 0
    sent = [decode_instruction(m.content) for m in _respond_msgs(grid)]
    assert sent and max(len(ins.queries) for ins in sent) == 2
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert len(queries) == 6 and all(q["stop_reason"] == "orchestrator_stop" for q in queries)
    # round 1 carried 8 query-answers (4 queries x 2); the other 2 queries went in round 2
    first = [ins for ins in sent if ins.server_round == 1]
    assert sum(len(ins.queries) for ins in first) == 8
