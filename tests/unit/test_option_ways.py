"""Ways of answering multiple choice (agents/options.py) and their use by the client agent."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pfedma_flwr.agents import options as mc
from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client.agent import ClientAgent
from pfedma_flwr.data.profiles import AgentProfile, get_profile
from pfedma_flwr.protocol.schema import RespondInstruction, RoutedQuery
from pfedma_flwr.rules.pii import get_recognizer

Q = ("A 54-year-old man with alcohol use disorder is confused and ataxic. Next step?\n"
     "A. Intravenous thiamine\nB. Intravenous glucose\nC. Head CT\nD. Lumbar puncture")


class _Emb:
    dim = 2

    def encode(self, texts):
        return np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2)


def test_split_and_permute_options_map_letters_back():
    stem, opts = mc.split_options(Q)
    assert stem.endswith("Next step?") and [o[0] for o in opts] == ["A", "B", "C", "D"]
    text, shown = mc.permute_options(Q, "agent-1|q1")
    order = mc.option_order(4, "agent-1|q1")
    # shown letter i holds original option order[i]; the map says which original it is
    assert sorted(order) == [0, 1, 2, 3]
    for i, j in enumerate(order):
        letter = "ABCD"[i]
        assert f"\n{letter}. {opts[j][1]}" in text and shown[letter] == "ABCD"[j]
    assert mc.permute_options(Q, "agent-1|q1") == (text, shown)  # same agent, same query
    keys = {tuple(mc.option_order(4, f"agent-{k}|q1")) for k in range(8)}
    assert len(keys) > 1  # other agents see other orders
    # no options: unchanged
    assert mc.permute_options("What is 2+2?", "k") == ("What is 2+2?", {})
    assert mc.split_options("Pick:\nA. x\nC. y")[1] == []  # letters must run A, B, ...


def test_letters_in_refinements_claims_and_evidence_follow_the_agent_order():
    shown = {"A": "C", "B": "A", "C": "D", "D": "B"}  # shown -> original
    assert mc.remap_quoted_letters("answers given: 'A' (50%), 'C' (50%).", shown) == \
        "answers given: 'B' (50%), 'A' (50%)."
    assert mc.original_labels("B. Intravenous thiamine", shown) == "A. Intravenous thiamine"
    assert mc.original_labels("A: ruled out\nSo option D fits.", shown) == \
        "C: ruled out\nSo option B fits."
    # an article at a line's start is not an option label
    assert mc.original_labels("A patient with B symptoms", shown) == "A patient with B symptoms"
    assert mc.original_letter("d", shown) == "B" and mc.original_letter("X", shown) == "X"
    # an answer statement's letter too (the answer line a claim can be), never an article
    assert mc.original_labels("The answer is C. Celiac artery", shown) == \
        "The answer is D. Celiac artery"
    assert mc.original_labels("Answer: (A)", shown) == "Answer: (C)"
    assert mc.original_labels("so the answer is A drug", shown) == "so the answer is A drug"


def _agent(backend, **kw) -> ClientAgent:
    return ClientAgent(profile=AgentProfile(name="doc", domains=("medicine",), prompt="Doc."),
                       backend=backend, private_data=[], embedder=_Emb(),
                       recognizer=get_recognizer("regex"),
                       few_shot=0, **kw)


def _ask(agent: ClientAgent, text: str = Q, refinement: str = ""):
    q = RoutedQuery(query_id="q1", text=text, domain="medicine", round=1,
                    refinement=refinement, answer_kind="option")
    return agent.respond(RespondInstruction(server_round=1, queries=(q,)), agent.new_state())


def test_permuted_agent_answers_in_its_order_and_uploads_the_original_letter():
    # the agent always picks whatever it sees as "Intravenous thiamine"
    def pick_thiamine(msgs):
        line = next(ln for ln in msgs[-1]["content"].splitlines() if "thiamine" in ln)
        return f"{line[0]}. Intravenous thiamine treats it.\nThe answer is {line[0]}."

    # agent a sees the original order, b and c others (option_order of "0|<key>|q1")
    assert [mc.option_order(4, f"0|{k}|q1")[0] for k in "abc"] == [0, 3, 1]
    for key in ("a", "b", "c"):
        backend = MockBackend(pick_thiamine)
        agent = _agent(backend, permute_options=True, client_key=key)
        reply = _ask(agent, refinement="answers given: 'A' (100%).")
        seen = backend.prompts[0][-1]["content"]
        letter = re.search(r"^([A-D])\. Intravenous thiamine", seen, re.M).group(1)
        assert reply.responses[0].response.final_answer == "A"  # original letter
        # the claim names the option as the original question does
        assert reply.responses[0].response.claims[0].claim.startswith("A. Intravenous")
        # the refinement's 'A' is the thiamine option in this agent's order
        assert f"'{letter}'" in seen


def test_eliminate_puts_its_instruction_in_the_system_prompt():
    backend = MockBackend(lambda m: "A possible\nB ruled out\nThe answer is A.")
    _ask(_agent(backend, option_reasoning="eliminate"))
    assert mc.ELIMINATE_INSTRUCTION in backend.prompts[0][0]["content"]
    # other tasks keep their own instruction
    backend2 = MockBackend(lambda m: "The answer is 4.")
    agent = _agent(backend2, option_reasoning="eliminate")
    q = RoutedQuery(query_id="n", text="2+2?", domain="math", round=1, answer_kind="number")
    agent.respond(RespondInstruction(server_round=1, queries=(q,)), agent.new_state())
    assert mc.ELIMINATE_INSTRUCTION not in backend2.prompts[0][0]["content"]


@pytest.mark.parametrize(("check", "final"), [
    ("Glucose first would precipitate it; thiamine fits.\nThe answer is A.", "A"),
    ("On reflection glucose is needed.\nThe answer is B.", "B"),
    ("I am not sure.", "C"),  # no answer statement: the first answer stands
])
def test_verify_checks_the_answer_once_and_the_check_decides(check: str, final: str):
    def responder(msgs):
        return check if msgs[-1]["content"].startswith("Check your answer") else \
            "Findings point to C.\nThe answer is C."

    backend = MockBackend(responder)
    reply = _ask(_agent(backend, option_reasoning="verify"))
    assert len(backend.prompts) == 2
    assert backend.prompts[1][-1]["content"] == mc.VERIFY_PROMPT.format(letter="C")
    assert reply.responses[0].response.final_answer == final
    assert reply.backend_calls == 2


def test_profiles_choose_option_ways_and_bad_values_are_refused():
    assert get_profile("pharmacologist").option_reasoning == "eliminate"
    assert get_profile("physician").option_reasoning == "cot"
    assert get_profile("plain").prompt == ""
    with pytest.raises(ValueError, match="option_reasoning"):
        _agent(MockBackend(), option_reasoning="guess")
    with pytest.raises(ValueError, match="non-empty prompt"):
        AgentProfile(name="x", domains=("math",), prompt=" ")


def test_a_json_answer_of_a_permuted_agent_is_mapped_back_too():
    import json

    def pick_thiamine(msgs):
        line = next(ln for ln in msgs[-1]["content"].splitlines() if "thiamine" in ln)
        return json.dumps({"claims": [{"claim": f"Option {line[0]} treats it.",
                                       "evidence": [line]}],
                           "final_answer": line[0], "domain_fit": 1, "self_confidence": 1})

    assert mc.option_order(4, "0|z|q1")[0] != 0  # agent z sees thiamine elsewhere than A
    agent = _agent(MockBackend(pick_thiamine), permute_options=True, client_key="z",
                   response_format="json")
    r = _ask(agent).responses[0].response
    assert r.final_answer == "A" and r.claims[0].claim == "Option A treats it."
    assert r.claims[0].evidence == ("A. Intravenous thiamine",)
