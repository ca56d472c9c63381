import json

import pytest

from pfedma_flwr.agents.parsing import parse_structured_response
from pfedma_flwr.agents.prompting import (
    MAX_CLAIMS,
    RESPONSE_JSON_SCHEMA,
    build_agent_messages,
    example_answer,
)


def test_schema_orders_claims_before_answer_and_bounds_lists():
    props = list(RESPONSE_JSON_SCHEMA["properties"])
    assert props.index("claims") < props.index("final_answer")
    assert RESPONSE_JSON_SCHEMA["properties"]["claims"]["maxItems"] == MAX_CLAIMS
    assert set(RESPONSE_JSON_SCHEMA["required"]) == {
        "claims",
        "final_answer",
        "domain_fit",
        "self_confidence",
    }


@pytest.mark.parametrize(
    "kind,needle",
    [("number", "final number"), ("option", "letter of the correct option"), ("math", "LaTeX")],
)
def test_answer_kind_rules(kind, needle):
    msgs = build_agent_messages(profile_prompt="P", query_text="Q?", answer_kind=kind)
    assert needle in msgs[0]["content"]


def test_message_layout_with_few_shot_experience_refinement():
    msgs = build_agent_messages(
        profile_prompt="You are a cardiologist.",
        query_text="Which drug? A) x B) y",
        refinement="Current answer B has support 0.6; verify it.",
        answer_kind="option",
        few_shot=[("Q1", "A"), ("Q2", "C")],
        experience=["Double-check dosages.", "  "],
    )
    # system + 2 * (user, assistant) + final user = 6 messages
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0]["content"].startswith("You are a cardiologist.")
    assert "- Double-check dosages." in msgs[0]["content"]
    assert msgs[0]["content"].count("\n- ") == 1  # blank snippet dropped
    assert (
        msgs[-1]["content"]
        == "Which drug? A) x B) y\n\nCurrent answer B has support 0.6; verify it."
    )
    assert json.loads(msgs[2]["content"])["final_answer"] == "A"


def test_few_shot_answers_parse_with_our_parser():
    # GSM8K answer: 2 calculation lines become 2 claims, annotations stripped, commas dropped
    ans = example_answer(
        "48/2 = <<48/2=24>>24 in May.\n48+24 = <<48+24=72>>72.\n#### 1,072", "number"
    )
    out = parse_structured_response(ans)
    assert out.ok and out.response is not None
    assert out.response.final_answer == "1072"
    assert [c.claim for c in out.response.claims] == ["48/2 = 24 in May.", "48+24 = 72."]


def test_empty_profile_gets_default_and_validation():
    msgs = build_agent_messages(profile_prompt="", query_text="2+2?")
    assert msgs[0]["content"].startswith("You are a careful expert assistant.")
    with pytest.raises(ValueError, match="query_text"):
        build_agent_messages(profile_prompt="p", query_text="  ")
    with pytest.raises(ValueError, match="answer_kind"):
        build_agent_messages(profile_prompt="p", query_text="q", answer_kind="essay")


def test_few_shot_claims_carry_evidence_from_question_and_earlier_steps():
    q = "James runs 3 sprints 3 times a week. He runs 60 meters each sprint. How far a week?"
    ans = json.loads(example_answer("He sprints 3*3=9 times.\nSo he runs 9*60=540 meters.\n#### 540",
                                    "number", q))
    # step 1 shares "3" (3x weight) and "sprints" with sentence 1; step 2 shares "9" with step 1
    # and "60" with sentence 2: a tie (3+1 "runs" vs 3+1 "runs"), the question sentence wins.
    assert ans["claims"][0]["evidence"] == ["James runs 3 sprints 3 times a week."]
    assert ans["claims"][1]["evidence"] == ["He runs 60 meters each sprint."]
    assert ans["final_answer"] == "540"


def test_few_shot_long_solutions_merge_the_tail_instead_of_dropping_steps():
    steps = "\n".join(f"Step {i} gives {i}." for i in range(1, 8))
    claims = json.loads(example_answer(steps + "\n#### 7", "number", "Q with 1 and 2."))["claims"]
    assert len(claims) == MAX_CLAIMS
    assert MAX_CLAIMS == 3
    assert claims[-1]["claim"] == ("Step 3 gives 3. Step 4 gives 4. Step 5 gives 5. "
                                   "Step 6 gives 6. Step 7 gives 7.")


def test_few_shot_option_answer_names_the_option_with_supporting_sentence():
    q = ("A man has chest pain radiating to the left arm. His ECG shows ST elevation.\n"
         "Which is the diagnosis?\nA. Gastritis\nB. Myocardial infarction with ST elevation")
    ans = json.loads(example_answer("B", "option", q))
    assert ans["claims"] == [{
        "claim": "The findings point to option B: Myocardial infarction with ST elevation.",
        "evidence": ["His ECG shows ST elevation."],
    }]
    # schema: every generated claim needs at least one evidence item
    items = RESPONSE_JSON_SCHEMA["properties"]["claims"]["items"]["properties"]["evidence"]
    assert items["minItems"] == 1
