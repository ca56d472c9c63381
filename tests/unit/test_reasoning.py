"""Free-text reasoning -> structured response (pfedma_flwr.agents.reasoning), hand-derived cases."""

import pytest

from pfedma_flwr.agents.prompting import build_reasoning_messages, reasoning_demo
from pfedma_flwr.agents.reasoning import (
    MAX_CLAIM_CHARS,
    MAX_CLAIMS,
    best_support,
    derive_response,
    extract_answer,
    question_facts,
    reasoning_steps,
)
from pfedma_flwr.anomaly.evidence import states_answer

GSM_Q = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and "
         "bakes muffins for her friends every day with four. She sells the remainder at the "
         "farmers' market daily for $2 per fresh duck egg. How much in dollars does she make "
         "every day at the farmers' market?")
GSM_COT = ("Janet's ducks lay 16 eggs and she uses 3 + 4 = 7 of them each day.\n"
           "So she sells 16 - 7 = 9 eggs.\n"
           "Each egg sells for $2, so she makes 9 * 2 = $18 every day.\n"
           "The answer is 18.")
MED_Q = ("A 45-year-old man presents with crushing chest pain radiating to the left arm. "
         "ECG shows ST elevation in leads II, III and aVF. Which artery is most likely occluded?\n"
         "A. Left anterior descending artery\nB. Right coronary artery\nC. Left circumflex artery\n"
         "D. Left main coronary artery")
MED_COT = ("The key finding is ST elevation in leads II, III and aVF, the inferior leads.\n"
           "An inferior myocardial infarction is most often caused by occlusion of the right "
           "coronary artery.\n"
           "The left anterior descending artery would give anterior leads, so B fits better.\n"
           "The answer is B.")


@pytest.mark.parametrize(("text", "kind", "expected"), [
    (GSM_COT, "number", ("18", True)),
    ("She makes $1,250.00 in total.\nThe answer is $1,250.", "number", ("1250", True)),
    ("so 3/4 of 20 is 15\n#### 15", "number", ("15", True)),
    ("\\boxed{42}", "number", ("42", True)),
    # no statement: the last number of the last lines, marked as a fallback
    ("16 - 7 = 9 eggs\n9 * 2 = 18", "number", ("18", False)),
    # a statement without a number falls back to the text's last number
    ("9 * 2 = 18\nThe answer is eighteen dollars.", "number", ("18", False)),
    ("I cannot tell.", "number", ("", False)),
    (MED_COT, "option", ("B", True)),
    ("The final answer is (C) Left circumflex artery.", "option", ("C", True)),
    ("Answer: D", "option", ("D", True)),
    # an option listing alone names no answer
    ("A. foo\nB. bar\nC. baz", "option", ("", False)),
    # canonicalized by math-verify
    ("The answer is $\\boxed{\\frac{3}{4}}$", "math", ("3/4", True)),
    ("Think.\nThe answer is: deny.", "text", ("deny", True)),
])
def test_extract_answer(text, kind, expected):
    got = extract_answer(text, kind)
    assert (got[0].replace(" ", ""), got[1]) == (expected[0].replace(" ", ""), expected[1])


def test_steps_exclude_the_answer_line_and_merge_short_ones():
    assert reasoning_steps(GSM_COT) == [
        "Janet's ducks lay 16 eggs and she uses 3 + 4 = 7 of them each day.",
        "So she sells 16 - 7 = 9 eggs.",
        "Each egg sells for $2, so she makes 9 * 2 = $18 every day.",
    ]
    # "Step 1:" (7 chars) is merged into the next line
    assert reasoning_steps("Step 1:\nCompute 16 - 7 = 9 eggs sold.\nThe answer is 9.") == [
        "Step 1: Compute 16 - 7 = 9 eggs sold."]
    # no step is dropped beyond MAX_CLAIMS: the middle is merged, the last step stays whole
    many = "\n".join(f"Step number {k} computes the value {k} + 1." for k in range(12))
    steps = reasoning_steps(many)
    assert len(steps) == MAX_CLAIMS
    assert steps[-1] == "Step number 11 computes the value 11 + 1."
    assert steps[-2].startswith("Step number 6 ") and steps[-2].endswith("value 10 + 1.")


def test_a_long_reasoning_still_states_its_answer_in_its_claims():
    # Shaped like the mathematician's round-2 answers on development GSM8K questions: more
    # steps than MAX_CLAIMS, in markdown with display math. Merging the tail into one claim
    # cut at MAX_CLAIM_CHARS lost "= 68 beads", the claims stated no answer and the evidence
    # term scored 1, so the anomaly filter removed an honest, right answer.
    blocks = [
        f"{k}. **Determine quantity {k} of the necklace:**\n"
        f"   The necklace part {k} is described in the question with its own length.\n"
        f"   \\[ \\text{{Length {k}}} = {k} \\text{{ inches}} \\times 1 = {k} \\text{{ inches}} \\]"
        for k in range(1, 6)]
    text = ("To solve this problem, we need to determine how many beads Katerina uses.\n\n"
            + "\n\n".join(blocks)
            + "\n\n6. **Determine the number of beads per necklace:**\n   \\[ \\text{Number of "
            "beads per necklace} = \\frac{17 \\text{ inches}}{\\frac{1}{4} \\text{ inch/bead}}"
            " = 17 \\times 4 = 68 \\text{ beads} \\]\n\n"
            "Therefore, Katerina uses \\boxed{68} sterling silver beads per necklace.")
    assert len(reasoning_steps(text)) == MAX_CLAIMS
    r = derive_response(text, question="How many beads per necklace?",
                        answer_kind="number").response
    assert r is not None and r.final_answer == "68"
    assert all(len(c.claim) <= MAX_CLAIM_CHARS for c in r.claims)
    assert "68" in r.claims[-1].claim
    assert states_answer(r, "number")
    # one last step longer than the cap keeps its end, where the result is
    long_last = "Step one sets the beads.\n" + "x " * 300 + "so the count is 68 beads."
    last = derive_response(long_last, question="q", answer_kind="number").response
    assert last is not None and last.claims[-1].claim.endswith("68 beads.")
    assert len(last.claims[-1].claim) <= MAX_CLAIM_CHARS


def test_evidence_quotes_the_best_supporting_question_sentence_or_step():
    facts = question_facts(GSM_Q)
    assert facts[0] == "Janet's ducks lay 16 eggs per day."
    # numbers count 3x: "16" + "eggs" + "ducks" + "janet" + "lay"
    assert best_support(GSM_COT.splitlines()[0], facts) == facts[0]
    # "9 eggs" of step 2 + "sells" ... beats the question for step 3's "9 * 2"
    assert best_support("she makes 9 * 2 = 18", ["So she sells 16 - 7 = 9 eggs.", facts[0]]) \
        == "So she sells 16 - 7 = 9 eggs."
    assert best_support("zzz qqq", facts) == ""


def test_derive_gsm8k_response():
    der = derive_response(GSM_COT, question=GSM_Q, answer_kind="number", domain_fit=1.0)
    r = der.response
    assert der.explicit and r is not None
    assert r.final_answer == "18" and r.self_confidence == 1.0 and r.domain_fit == 1.0
    assert [c.claim for c in r.claims] == reasoning_steps(GSM_COT)
    assert r.claims[0].evidence == ("Janet's ducks lay 16 eggs per day.",)
    # step 2 cites step 1 (it shares 16, 7 with it) rather than the question
    assert r.claims[1].evidence == (GSM_COT.splitlines()[0],)
    # the price step cites the question's "$2 per fresh duck egg" sentence
    assert "$2 per fresh duck egg" in r.claims[2].evidence[0]


def test_derive_medqa_response_option_lines_are_evidence():
    r = derive_response(MED_COT, question=MED_Q, answer_kind="option").response
    assert r is not None and r.final_answer == "B"
    assert r.claims[0].evidence == ("ECG shows ST elevation in leads II, III and aVF.",)
    assert r.claims[1].evidence == ("B. Right coronary artery",)


# The pharmacologist's round-1 reply to unseen medqa-test-0186 (2026-12-07), in its own option
# order, with the answer line the repair follow-up added: the step argues for A, the line says C.
TURNER_Q = ("A 10-year-old Caucasian female with Turner's syndrome underwent an abdominal imaging "
            "study and was discovered that the poles of her kidneys were fused inferiorly. Normal "
            "ascension of kidney during embryological development would be prevented by which of "
            "the following anatomical structures?\nA. Splenic artery\nB. Superior mesenteric "
            "artery\nC. Inferior mesenteric artery\nD. Celiac artery")
TURNER_REPLY = ("A. Splenic artery\n\nThe poles of the kidneys are fused inferiorly because the "
                "splenic artery, which supplies blood to the spleen, is located inferior to the "
                "poles of the kidneys.\nThe answer is C. Inferior mesenteric artery")


def test_an_answer_no_step_states_gets_its_answer_line_as_the_last_claim():
    r = derive_response(TURNER_REPLY, question=TURNER_Q, answer_kind="option").response
    assert r is not None and r.final_answer == "C"
    # the step, then the answer line (without it no claim names C: the evidence term reads the
    # reply as an unreliable client's and its vote weighs half)
    assert [c.claim for c in r.claims] == [
        reasoning_steps(TURNER_REPLY)[0], "The answer is C. Inferior mesenteric artery"]
    assert r.claims[1].evidence == ("C. Inferior mesenteric artery",)
    assert states_answer(r, "option")
    # numbers: a step with another number does not state 14; the line is added once
    text = "Step 1: 3 apples plus 4 apples is 7 apples.\nStep 2: doubling gives 15.\nThe answer is 14."
    claims = [c.claim for c in derive_response(text, question="q", answer_kind="number")
              .response.claims]
    assert claims == ["Step 1: 3 apples plus 4 apples is 7 apples.", "Step 2: doubling gives 15.",
                      "The answer is 14."]


def test_steps_that_state_the_answer_get_no_extra_claim():
    # GSM_COT's last step computes 18, MED_COT names B: nothing is added
    for text, q, kind in ((GSM_COT, GSM_Q, "number"), (MED_COT, MED_Q, "option")):
        r = derive_response(text, question=q, answer_kind=kind).response
        assert [c.claim for c in r.claims] == reasoning_steps(text)
    # without an answer line (the fallback answer) there is no line to add
    fallback = derive_response("16 - 7 = 9 and 9 * 2 = 18 eggs", question=GSM_Q,
                               answer_kind="number").response
    assert [c.claim for c in fallback.claims] == ["16 - 7 = 9 and 9 * 2 = 18 eggs"]
    # an answer line that names another answer than the boxed one is not added either
    boxed = "Step 1: we add 3 and 4 first.\nThe answer is 5.\nSo it is \\boxed{7}."
    r = derive_response(boxed, question="q", answer_kind="number").response
    assert r.final_answer == "7" and all("answer is 5" not in c.claim for c in r.claims)


def test_derive_without_answer_is_a_format_failure():
    der = derive_response("Let me think about the eggs", question=GSM_Q, answer_kind="number")
    assert der.response is None and der.error.startswith("no_answer")
    fallback = derive_response("16 - 7 = 9 and 9 * 2 = 18", question=GSM_Q, answer_kind="number")
    assert fallback.response.final_answer == "18" and fallback.response.self_confidence == 0.5


def test_reasoning_prompt_and_demo():
    demo = reasoning_demo("Natalia sold 48/2 = <<48/2=24>>24 clips.\n48+24 = <<48+24=72>>72",
                          "72", "number")
    assert demo == "Natalia sold 48/2 = 24 clips.\n48+24 = 72\nThe answer is 72."
    msgs = build_reasoning_messages(profile_prompt="You are a mathematician.", query_text="Q?",
                                    answer_kind="number", few_shot=[("dq", demo)],
                                    lessons=["similar -> verified answer 3"])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert "The answer is N." in msgs[0]["content"]
    assert "- similar -> verified answer 3" in msgs[0]["content"]
    assert msgs[2]["content"] == demo and msgs[3]["content"] == "Q?"
