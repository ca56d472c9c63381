"""Hostile replies from some nodes: each is rejected (or neutralized) with a recorded reason
while the run completes with the honest clients' results intact.

Two federations cover the corpus in few runs: (A) replies that must be rejected at the seam
(``decode_reply``) — one hostile node per case — and (B) replies that parse but are hostile in
content (prompt injection everywhere, duplicate candidates, unknown feedback ids, responses for
queries not routed to the node, duplicate query ids).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from flwr.app import ConfigRecord, RecordDict

from pfedma_flwr.protocol.codec import (
    PAYLOAD_KEY,
    QUERY_RESPOND,
)
from tests.strategy.conftest import answer_json, read_jsonl
from tests.strategy.hostile_nodes import INJECT, dumps, hostile, reply, resp


def _many_claims(q: list[str]) -> str:
    return dumps(reply([resp(x, claims=[{"claim": f"c{k}", "evidence": []}
                                       for k in range(5000)]) for x in q]))


# name -> (reply builder, substring expected in the recorded failure reason)
SEAM_CASES: dict[str, tuple[Callable[[list[str]], str | RecordDict], str]] = {
    "invalid_json": (lambda q: '{"schema_version": 1, "responses": [', "invalid JSON"),
    "not_an_object": (lambda q: "[1, 2, 3]", "expected an object"),
    "wrong_types": (lambda q: dumps(reply([resp(x, final_answer=["7"]) for x in q])),
                    "final_answer: expected a string"),
    "huge_string_50MB": (lambda q: dumps(reply([resp(x, answer="x" * 50_000_000) for x in q[:1]])),
                         "exceeds cap"),
    "nan": (lambda q: dumps(reply([resp(x) for x in q])).replace('"domain_fit": 0.9',
                                                                  '"domain_fit": NaN'),
            "non-finite number NaN"),
    "infinity": (lambda q: dumps(reply([resp(x) for x in q])).replace('"gen_seconds": 0.01',
                                                                       '"gen_seconds": Infinity'),
                 "non-finite number Infinity"),
    "score_out_of_range": (lambda q: dumps(reply([resp(x, self_confidence=7.5) for x in q])),
                           "self_confidence: 7.5 outside [0.0, 1.0]"),
    "negative_counts": (lambda q: dumps(reply([resp(x) for x in q], feedback=[
        {"rule_id": "g1", "d_trigger": 1, "d_valid": 5, "d_conflict": 0}])),
                        "cannot exceed the trigger count"),
    "extra_fields": (lambda q: dumps(reply([resp(x) for x in q], admin=True)),
                     "unexpected field(s) ['admin']"),
    "thousands_of_claims": (_many_claims, "list of 5000 items exceeds cap 16"),
    "wrong_schema_version": (lambda q: dumps(reply([resp(x) for x in q], schema_version=2)),
                             "schema_version: expected 1, got 2"),
    "missing_schema_version": (lambda q: dumps({k: v for k, v in reply([]).items()
                                             if k != "schema_version"}),
                               "schema_version: expected 1, got None"),
    "no_payload_record": (lambda q: RecordDict({"other": ConfigRecord({"json": "{}"})}),
                          "has no ConfigRecord"),
    "payload_not_a_string": (lambda q: RecordDict({PAYLOAD_KEY: ConfigRecord({"json": 5})}),
                             "must be a JSON string"),
    "deeply_nested": (lambda q: "[" * 100_000 + "]" * 100_000, "too_deep"),
    # issue 13: each of these made an exception escape the decoder and ended the ServerApp
    "int_5000_digits": (lambda q: dumps(reply([resp(x) for x in q])).replace(
        '"tokens": 5,', '"tokens": ' + "9" * 5000 + ",", 1), "int_too_long"),
    "int_400_digits_in_domain_fit": (lambda q: dumps(reply([resp(x) for x in q])).replace(
        '"domain_fit": 0.9', '"domain_fit": ' + "9" * 400, 1), "int_too_long"),
    "float_overflow": (lambda q: dumps(reply([resp(x) for x in q])).replace(
        '"self_confidence": 0.9', '"self_confidence": 1e999', 1), "bad_float"),
    "float_literal_10k_digits": (lambda q: dumps(reply([resp(x) for x in q])).replace(
        '"gen_seconds": 0.01', '"gen_seconds": 0.' + "1" * 10_000, 1), "bad_float"),
    "lone_surrogate_in_answer": (lambda q: dumps(reply([resp(x, answer="7\ud800") for x in q])),
                                 "bad_string"),
    "lone_surrogate_in_candidate": (lambda q: dumps(reply([resp(x) for x in q], candidates=[
        {"text": "Redact \udfff names", "category": "identity"}])), "bad_string"),
    "duplicate_keys": (lambda q: dumps(reply([resp(x) for x in q])).replace(
        '"schema_version": 1,', '"schema_version": 1, "schema_version": 1,', 1), "duplicate_key"),
    "16MB_of_empty_objects": (lambda q: '{"schema_version": 1, "responses": ['
                              + "{}," * 5_000_000 + "{}]}", "too_large"),
    "5MB_unknown_field_name": (lambda q: dumps(reply([resp(x) for x in q], **{"k" * 5_000_000: 1})),
                               "unexpected field(s)"),
    "5MB_extra_key": (lambda q: dumps(reply([resp(x) for x in q], extra={"k" * 5_000_000: 1.0})),
                      "schema:extra"),
    "5MB_query_id": (lambda q: dumps(reply([resp("q" * 5_000_000)])), "schema:query_id"),
    "5MB_bad_enum": (lambda q: dumps(reply([resp(x) for x in q], candidates=[
        {"text": "t", "category": "c", "action": "a" * 5_000_000}])), "schema:action"),
}


def test_malformed_replies_rejected_at_the_seam(federation, tmp_path: Path):
    names = list(SEAM_CASES)
    n_bad = len(names)
    behaviour = {i: hostile(SEAM_CASES[name][0]) for i, name in enumerate(names)}
    # k_max = all nodes: every hostile node is asked in round 1 (later rounds may skip it as
    # its reliability decays, which is the intended reaction).
    n = n_bad + 2
    summary, grid = federation(num_nodes=n, behaviour=behaviour,
                               responder=lambda m: answer_json("7"),
                               overrides=f"strategy.k_max={n}")
    rounds = read_jsonl(tmp_path / "out" / "rounds.jsonl")
    reasons: dict[str, list[str]] = {}
    for r in rounds:
        for cid, why in r["failures"].items():
            reasons.setdefault(cid, []).append(why)
    for i, name in enumerate(names):
        cid = f"partition-{i}"
        assert cid in reasons, f"{name}: no failure recorded"
        assert all(why.startswith("malformed reply") for why in reasons[cid]), (name, reasons[cid])
        assert any(SEAM_CASES[name][1] in why for why in reasons[cid]), (name, reasons[cid])
        assert all(len(why) < 400 for why in reasons[cid])  # no 5 MB value is echoed
        assert all(cid not in r["clients"] for r in rounds)  # nothing of it was absorbed
    honest = [f"partition-{i}" for i in range(n_bad, n)]
    assert not set(honest) & set(reasons)
    assert all(set(honest) <= set(r["clients"]) for r in rounds[:1])
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert summary["num_queries"] == len(queries) == 6
    assert all(q["answer"] == "7" for q in queries)  # the honest clients' answers decide
    assert summary["totals"]["failures"] >= n_bad


def _injected(q: list[str]) -> str:
    rs = [resp(x, answer=INJECT, claims=[{"claim": INJECT, "evidence": [INJECT, INJECT]}])
          for x in q]
    for r in rs:
        r["error"] = INJECT
    cand = {"text": INJECT, "category": INJECT, "scope": "response", "action": "redact",
            "entity_types": [INJECT], "patterns": []}
    return dumps(reply(rs, candidates=[cand], extra={INJECT: 1.0}))


def _duplicates_and_unknown_feedback(q: list[str]) -> str:
    cand = {"text": "Redact customer account numbers", "category": "financial",
            "scope": "response", "action": "redact", "entity_types": ["US_BANK_NUMBER"],
            "patterns": []}
    fb = [{"rule_id": f"no-such-rule-{k}", "d_trigger": 3, "d_valid": 3, "d_conflict": 0}
          for k in range(50)]
    return dumps(reply([resp(x) for x in q], candidates=[cand] * 200, feedback=fb))


def _unrouted_and_duplicate_ids(q: list[str]) -> str:
    rs = [resp(x) for x in q]
    rs += [resp(q[0], answer="13")]              # a second answer for the same query
    rs += [resp("gsm8k-test-999999", answer="13")]  # a query never routed to it
    return dumps(reply(rs))


def test_parseable_hostile_content_is_neutralized(federation, tmp_path: Path):
    behaviour = {0: hostile(_injected), 1: hostile(_duplicates_and_unknown_feedback),
                 2: hostile(_unrouted_and_duplicate_ids)}
    summary, grid = federation(num_nodes=6, behaviour=behaviour,
                               responder=lambda m: answer_json("7"),
                               overrides="strategy.k_max=6")
    out = tmp_path / "out"
    rounds = read_jsonl(out / "rounds.jsonl")
    queries = read_jsonl(out / "queries.jsonl")
    assert summary["num_queries"] == len(queries) == 6
    assert all(r["failures"] == {} for r in rounds)  # all parse: nothing fails at the seam
    # Injection: never the aggregated answer (whether it is also filtered: see below).
    assert all(q["answer"] == "7" for q in queries)
    assert any("partition-0" in q["anomaly"] for r in rounds for q in r["queries"])
    # Unrouted / duplicate query ids: rejected item by item with a reason.
    rej = [x for r in rounds for x in r["rejected"] if x["client"] == "partition-2"]
    assert {x["reason"] for x in rej} == {"duplicate", "not routed to this client"}
    assert any(x["query_id"] == "gsm8k-test-999999" for x in rej)
    # Unknown feedback ids are reported, not fatal.
    unknown = {u for r in rounds for u in r["rules"]["feedback"]["unknown"]}
    assert "no-such-rule-0" in unknown
    # 200 copies of one candidate from one client are one candidate, not 200 supporters.
    assert all(r["rules"]["pool_size"] <= 2 for r in rounds)
    assert summary["rules"]["global_total"] == 0
    # the injected text never reaches the other clients via a global rule or refinement
    for m in grid.sent:
        if m.metadata.message_type == QUERY_RESPOND:
            assert "IGNORE ALL PREVIOUS" not in str(m.content[PAYLOAD_KEY]["json"])


@pytest.mark.parametrize("n_honest", [1])
def test_all_but_one_node_hostile_still_completes(federation, tmp_path: Path, n_honest):
    behaviour = {i: hostile(SEAM_CASES[name][0])
                 for i, name in enumerate(["invalid_json", "wrong_schema_version"])}
    summary, _ = federation(num_nodes=2 + n_honest, behaviour=behaviour,
                            responder=lambda m: answer_json("7"), overrides="strategy.k_max=3")
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert summary["num_queries"] == 6 and all(q["answer"] == "7" for q in queries)


@pytest.mark.parametrize("embedding", [
    # It used to be retained (strict xfail): evidence restating the claim gave a_evi ~ 0 and
    # A = 0.39. Restated evidence now earns no support (a_evi = 1): A = .7·(.3 + .7·.595) + .3·a_con
    # ~ .50 + .3·a_con > 0.5 (issue 30, anomaly/evidence.py).
    "hashing",
    pytest.param("minilm", marks=pytest.mark.slow),
])
def test_injection_is_filtered_by_the_anomaly_evaluator(federation, tmp_path: Path, embedding):
    federation(num_nodes=4, behaviour={0: hostile(_injected)},
               responder=lambda m: answer_json("7"),
               overrides=f"strategy.k_max=4 embedding.name={embedding}")
    rounds = read_jsonl(tmp_path / "out" / "rounds.jsonl")
    inj = [q["anomaly"]["partition-0"] for r in rounds for q in r["queries"]
           if "partition-0" in q["anomaly"]]
    assert inj and not any(a["retained"] for a in inj), inj
