"""Hostile rule candidates through the real strategy: the run completes, queries stay intact.

Issue 13 item 2, end to end over the in-process grid (each case enters at the reply seam):
``(`` used to crash the next round's planning and poison ``checkpoint.json``; ``[^\\s]+`` used
to turn every later query into ``[REDACTED:PERSONAL_NAME] ...``; two colluders x 256 candidates
used to make 768 active rules, so every client rejected every instruction.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pfedma_flwr.protocol.codec import PAYLOAD_KEY, QUERY_RESPOND
from tests.strategy.conftest import answer_json, read_jsonl
from tests.strategy.hostile_nodes import dumps, hostile, reply, resp
from tests.strategy.test_resume import _run

_WORDS = ("amber basalt cobalt dune ember fjord garnet heron iris jade kelp lumen moss nectar "
          "onyx pine quartz reed sage tide umber vale willow xenon yarrow zinc").split()


def _candidate(pattern: str, scope: str) -> dict[str, Any]:
    return {"text": f"do not reveal personal name in {scope}s", "category": "personal name",
            "scope": scope, "action": "redact", "entity_types": [], "patterns": [pattern]}


def _one_per_round(cands: list[dict[str, Any]]):
    """Upload ``cands[k]`` alone in round k: a one-candidate pool, which the seed promotes."""
    calls = iter(range(10**6))

    def make(q: list[str]) -> str:
        k = next(calls)
        return dumps(reply([resp(x) for x in q], candidates=cands[k : k + 1]))

    return hostile(make)


def _with_candidates(cands: list[dict[str, Any]]):
    return hostile(lambda q: dumps(reply([resp(x) for x in q], candidates=cands)))


def _sent_instructions(grid) -> list[dict[str, Any]]:
    return [json.loads(m.content[PAYLOAD_KEY]["json"]) for m in grid.sent
            if m.metadata.message_type == QUERY_RESPOND]


def test_bad_patterns_never_become_rules(federation, tmp_path: Path):
    cands = [_candidate("(", "query"), _candidate(r"[^\s]+", "query"),
             _candidate(r"(\w|\s)+\d", "response")]
    # the seed's singleton rule (a one-candidate pool promotes): the patterns' own check is
    # what must refuse them (the default needs two clients and promotes nothing here)
    summary, grid = federation(num_nodes=3, behaviour={0: _one_per_round(cands)},
                               responder=lambda m: answer_json("7"),
                               overrides="strategy.k_max=3 strategy.t_max=3 "
                                         "strategy.batch_size=2 rules.min_support_clients=1 "
                                         "rules.min_support_share=0.0")
    out = tmp_path / "out"
    assert summary["status"] == "completed" and summary["num_queries"] == 6
    rounds = read_jsonl(out / "rounds.jsonl")
    # each was alone in its round's pool (so promoted before) and is refused as invalid
    assert [r["rules"]["pool_size"] for r in rounds[:3]] == [1, 1, 1]
    assert [r["rules"]["update"]["refused"] for r in rounds[:3]] == [{"invalid": 1}] * 3
    assert summary["rules"]["global_total"] == 0
    assert json.loads((out / "checkpoint.json").read_text())["rules"]["rules"] == []
    # every query reached the clients as asked: nothing redacted
    for ins in _sent_instructions(grid):
        assert ins["global_rules"] == []
        assert not any("[REDACTED" in q["text"] for q in ins["queries"])
    assert all(q["answer"] == "7" for q in read_jsonl(out / "queries.jsonl"))


def test_colluders_cannot_flood_the_repository(federation, tmp_path: Path):
    def junk(seed: int) -> list[dict[str, Any]]:
        rng = np.random.default_rng(seed)
        return [{"text": " ".join(rng.choice(_WORDS, size=6)) + f" {k}",
                 "category": "government identifier", "scope": "response",
                 "action": "redact", "entity_types": ["US_SSN"], "patterns": []}
                for k in range(256)]

    cands = junk(1)
    behaviour = {0: _with_candidates(cands), 1: _with_candidates(cands)}
    summary, grid = federation(num_nodes=4, behaviour=behaviour,
                               responder=lambda m: answer_json("7"),
                               overrides="strategy.k_max=4 strategy.t_max=3 "
                                         "strategy.batch_size=2")
    rounds = read_jsonl(tmp_path / "out" / "rounds.jsonl")
    assert summary["status"] == "completed" and summary["num_queries"] == 6
    assert all(r["failures"] == {} for r in rounds)  # the honest nodes answered every round
    # at most 8 candidates per client enter a pool and 1 new rule per contributor per round
    assert all(r["rules"]["pool_size"] <= 16 for r in rounds)
    assert all(len(r["rules"]["update"]["added"]) <= 2 for r in rounds)
    assert summary["rules"]["global_active"] <= 2 * len(rounds)  # was 768 after 3 rounds
    assert all(len(ins["global_rules"]) <= 64 for ins in _sent_instructions(grid))


def test_resume_survives_a_bad_rule_in_the_checkpoint(tmp_path: Path, monkeypatch):
    with pytest.raises(RuntimeError, match="server killed"):
        _run(tmp_path, monkeypatch, crash_at=3, resume=False, name="crash")
    ckpt = tmp_path / "crash" / "checkpoint.json"
    state = json.loads(ckpt.read_text())
    # as an older version saved them: a pattern that crashed planning, and a too-broad one
    for k, pattern in enumerate(["(", r"[^\s]+"]):
        state["rules"]["rules"].append({
            "rule_id": f"g{90 + k}", "text": f"do not reveal personal name in queries {k}",
            "category": "personal name", "scope": "query", "action": "redact",
            "entity_types": [], "patterns": [pattern], "h_score": 0.0, "n_evals": 0,
            "active": True, "created_round": 1})
    ckpt.write_text(json.dumps(state))
    resumed = _run(tmp_path, monkeypatch, crash_at=None, resume=True, name="crash")
    assert resumed["status"] == "completed" and resumed["resumed_from_round"] == 1
    final = json.loads(ckpt.read_text())["rules"]
    assert final["quarantined"] == {"g90": "invalid", "g91": "invalid"}
    assert not any(r["rule_id"] in ("g90", "g91") for r in final["rules"])
