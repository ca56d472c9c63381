import json

import pytest

from pfedma_flwr.agents.parsing import parse_structured_response
from pfedma_flwr.protocol.schema import Limits

GOOD = {
    "claims": [{"claim": "5+7=12", "evidence": ["5 apples", "7 more"]}],
    "final_answer": "12",
    "domain_fit": 0.9,
    "self_confidence": 0.8,
}

# (case, raw, ok, expected final_answer or error substring, expected n_claims)
CASES = [
    ("plain json", json.dumps(GOOD), True, "12", 1),
    ("prose around", "Sure! Here it is: " + json.dumps(GOOD) + " Hope that helps.", True, "12", 1),
    ("json fence", "```json\n" + json.dumps(GOOD) + "\n```", True, "12", 1),
    ("bare fence", "```\n" + json.dumps(GOOD) + "\n```", True, "12", 1),
    (
        "trailing commas",
        '{"claims": [{"claim": "a", "evidence": [],},], "final_answer": "3",}',
        True,
        "3",
        1,
    ),
    ("single quotes", "{'final_answer': '7', 'claims': ['x']}", True, "7", 1),
    (
        "claims as strings",
        '{"claims": ["step one", "step two"], "final_answer": "2"}',
        True,
        "2",
        2,
    ),
    (
        "evidence as string",
        '{"claims": [{"claim": "c", "evidence": "e"}], "final_answer": "1"}',
        True,
        "1",
        1,
    ),
    ("numeric answer", '{"final_answer": 18}', True, "18", 0),
    ("float answer", '{"final_answer": 2.5}', True, "2.5", 0),
    ("alias answer", '{"answer": "B"}', True, "B", 0),
    ("bare number", "42", True, "42", 0),
    ("two objects: first wins", '{"final_answer": "1"} then {"final_answer": "2"}', True, "1", 0),
    ("empty", "   ", False, "empty output", 0),
    ("garbage", "I think the answer is twelve.", False, "no JSON object", 0),
    ("truncated", '{"claims": [{"claim": "5+7', False, "invalid JSON", 0),
    ("NaN answer", '{"final_answer": NaN}', False, "non-finite", 0),
    ("Infinity score", '{"final_answer": "1", "domain_fit": Infinity}', False, "non-finite", 0),
    ("score > 1 rejected", '{"final_answer": "1", "domain_fit": 1.5}', False, "domain_fit", 0),
    (
        "negative score",
        '{"final_answer": "1", "self_confidence": -0.1}',
        False,
        "self_confidence",
        0,
    ),
    ("missing answer", '{"claims": []}', False, "final_answer", 0),
    ("blank answer", '{"final_answer": "  "}', False, "must not be empty", 0),
    ("unknown field", '{"final_answer": "1", "mood": "happy"}', False, "unexpected field", 0),
    ("array top level", "[1, 2]", False, "JSON object", 0),
    ("bool answer", '{"final_answer": true}', False, "final_answer", 0),
    ("claim not object", '{"final_answer": "1", "claims": [3]}', False, "claims[0]", 0),
]


@pytest.mark.parametrize("case,raw,ok,expect,n_claims", CASES, ids=[c[0] for c in CASES])
def test_parse_table(case, raw, ok, expect, n_claims):
    out = parse_structured_response(raw)
    assert out.ok is ok, out.error
    if ok:
        assert out.response is not None and out.error == ""
        assert out.response.final_answer == expect
        assert len(out.response.claims) == n_claims
    else:
        assert out.response is None
        assert expect in out.error


def test_scores_and_evidence_kept():
    r = parse_structured_response(json.dumps(GOOD)).response
    assert r is not None
    assert (r.domain_fit, r.self_confidence) == (0.9, 0.8)
    assert r.claims[0].evidence == ("5 apples", "7 more")


def test_repaired_flag():
    assert parse_structured_response(json.dumps(GOOD)).repaired is False
    assert parse_structured_response("x " + json.dumps(GOOD)).repaired is True


def test_limits_applied():
    # 3 claims against a cap of 2 -> schema rejects the list
    raw = '{"claims": ["a", "b", "c"], "final_answer": "1"}'
    out = parse_structured_response(raw, Limits(max_claims=2))
    assert not out.ok and "exceeds cap 2" in out.error


@pytest.mark.parametrize("raw", [None, 12, b"{}", ["x"]])
def test_non_text_never_raises(raw):
    out = parse_structured_response(raw)
    assert not out.ok and "expected text" in out.error


def test_huge_output_rejected_cheaply():
    out = parse_structured_response("x" * 40_001, Limits(max_text_chars=10_000))
    assert not out.ok and "size cap" in out.error
