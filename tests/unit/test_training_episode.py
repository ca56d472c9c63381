"""Training episodes: the collaboration engine with a scripted policy and replayed answers."""

import gzip
import json

import pytest

from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.codec import ClientDescription
from pfedma_flwr.protocol.schema import Claim, ProcessedResponse, StructuredResponse
from pfedma_flwr.routing.llm_orchestrator import LLMOrchestrator
from pfedma_flwr.server.query_state import EngineSettings
from pfedma_flwr.training.episode import (
    PolicyBackend,
    ReplayCache,
    run_episode,
    task_from_extra_info,
)
from pfedma_flwr.training.reward import compute_score

EMB = HashingEmbedder(dim=64)
QID = "math-dev-0001"
TASK = task_from_extra_info(
    {"task_id": QID, "benchmark": "math", "domain": "math", "answer_kind": "number"},
    "Tom has 2 apples and buys 2 more. How many apples does he have?", "4")


def answer(value, qid=QID):
    claim = f"2 + 2 = {value}"
    return ProcessedResponse(query_id=qid, response=StructuredResponse(
        final_answer=value, claims=(Claim(claim, (f"Tom has 2 apples, buys 2: {claim}",)),),
        domain_fit=0.9, self_confidence=0.9), tokens=50)


def clients():
    return {
        "a": ClientDescription("math", ("math",), "A mathematician solving word problems."),
        "b": ClientDescription("math", ("math",), "A math teacher checking arithmetic."),
        "c": ClientDescription("medicine", ("medicine",), "A physician answering clinical "
                               "questions."),
    }


def cache(answers=None):
    return ReplayCache(clients=clients(), answers=answers if answers is not None else {
        (QID, "a", 1): answer("4"), (QID, "b", 1): answer("4"), (QID, "c", 1): answer("5"),
        (QID, "c", 2): answer("4"),
    })


def episode(replies, *, t_max=2, answers=None):
    it = iter(replies)
    seen = []

    def policy(messages):
        seen.append(messages)
        return next(it)

    orch = LLMOrchestrator(backend=PolicyBackend(policy), k_max=2, embedder=EMB)
    s = run_episode(TASK, cache=cache(answers), orchestrator=orch,
                    settings=EngineSettings(t_max=t_max, k_max=2), embedder=EMB)
    return s, seen


def test_select_then_stop():
    s, seen = episode(["<select>a,b</select>", "<think>two agree</think><stop/>"])
    # round 1: a and b both answer 4 → z = 4, c_1 = 1; round 2 the policy stops
    assert s.step_correct == (1.0,) and s.num_selected == (2,)
    assert s.correct and s.format_ok and s.stop_reason == "orchestrator_stop"
    assert s.policy_turns == 2 and s.tokens == 100
    # the second turn saw the first as a conversation, with z = 4 in the new user message
    assert [m["role"] for m in seen[1]] == ["system", "user", "assistant", "user"]
    assert "Collaborative answer z: '4'" in seen[1][3]["content"]
    # reward: 0 + 1 + [0.2·1 − 0.01·2] = 1.18
    assert compute_score("pfedma/math", "", "4", s.to_extra_fields())["score"] == \
        pytest.approx(1.18)


def test_round_budget_ends_the_episode():
    # T_max 2: the policy never stops; the engine ends after round 2 without a third turn
    s, seen = episode(["<select>c</select>", "<select>c,a</select>", "<select>a</select>"])
    assert len(seen) == 2 and s.rounds == 2 and s.stop_reason == "t_max"
    # round 1: c alone says 5 (wrong); round 2: c (its round-2 answer 4) and a say 4
    assert s.step_correct == (0.0, 1.0) and s.num_selected == (1, 2) and s.correct
    # 0 + 1 + [0 − 0.01] + [0.2·(1 − 0) − 0.02] = 1.17
    assert compute_score("x", "", "4", s.to_extra_fields())["score"] == pytest.approx(1.17)


def test_malformed_action_falls_back_and_fails_the_format():
    s, _ = episode(["<select>a,zz</select>", "<stop/>"])
    assert not s.format_ok and s.format_failures == {"unknown_id": 1}
    # the heuristic still routed round 1, so the episode goes on
    assert s.num_selected == (2,) and s.policy_turns == 2


def test_missing_replay_answer_is_a_failed_reply():
    s, _ = episode(["<select>a</select>"], t_max=1, answers={(QID, "b", 1): answer("4")})
    assert s.step_correct == (0.0,) and not s.correct and s.stop_reason == "too_few_replies"


def test_replay_round_falls_back_to_latest_earlier_answer():
    c = cache()
    assert c.answer(QID, "a", 3).response.final_answer == "4"
    assert c.answer(QID, "c", 2).response.final_answer == "4"
    assert c.answer(QID, "c", 1).response.final_answer == "5"
    assert c.answer("other", "a", 1) is None


def test_cache_from_jsonl_roundtrip_and_errors(tmp_path):
    lines = [{"kind": "client", "client_id": k, "description": d.to_dict()}
             for k, d in clients().items()]
    lines += [{"kind": "answer", "query_id": q, "client_id": c, "round": t,
               "response": pr.to_dict()} for (q, c, t), pr in cache().answers.items()]
    path = tmp_path / "replay.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(json.dumps(x) for x in lines) + "\n")
    got = ReplayCache.from_jsonl(path)
    assert got.answers == cache().answers and set(got.clients) == {"a", "b", "c"}

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(lines[0]) + "\n" + json.dumps({**lines[3], "round": 0}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: 'round' must be an integer >= 1"):
        ReplayCache.from_jsonl(bad)
    bad.write_text(json.dumps({"kind": "answer", "query_id": QID, "client_id": "a", "round": 1,
                               "response": {"query_id": QID, "response": {"oops": 1}}}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: .*response"):
        ReplayCache.from_jsonl(bad)
    bad.write_text('{"kind": "weird"}\n')
    with pytest.raises(ValueError, match="unknown kind 'weird'"):
        ReplayCache.from_jsonl(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ReplayCache.from_jsonl(tmp_path / "nope.jsonl")


def test_cache_rejects_answers_of_unknown_clients():
    with pytest.raises(ValueError, match=r"undeclared client\(s\) \['zz'\]"):
        ReplayCache(clients=clients(), answers={(QID, "zz", 1): answer("4")})


def test_task_from_row_names_the_missing_key():
    with pytest.raises(ValueError, match="lacks 'answer_kind'"):
        task_from_extra_info({"task_id": "t", "benchmark": "m", "domain": "math"}, "q", "1")
