"""Program-aided reasoning: the static check, the limited child run, the client's fallback."""

from __future__ import annotations

import pytest

from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.agents.program import (
    check_program,
    extract_code,
    format_number,
    last_number,
    program_reasoning,
    run_program,
)
from pfedma_flwr.client.agent import ClientAgent
from pfedma_flwr.client.node_security import NodePolicy
from pfedma_flwr.data.profiles import get_profile
from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import RespondInstruction, RoutedQuery

QUESTION = ("A shop sells pens at 3 dollars each. Ann buys 4 pens and pays with a 20 dollar "
            "bill. How much change does she get?")
PROGRAM = ("```python\nprice = 3  # dollars per pen\npens = 4\ncost = price * pens  # 12\n"
           "answer = 20 - cost\nprint(answer)\n```")


@pytest.mark.parametrize("code, why", [
    ("import os\nprint(1)", "import of 'os'"),
    ("from subprocess import run", "import of 'subprocess'"),
    ("from . import x", "import of ''"),
    ("print(open('/etc/passwd').read())", "name 'open'"),
    ("print(().__class__)", "attribute '__class__'"),
    ("__import__('os')", "name '__import__'"),
    ("eval('1+1')", "name 'eval'"),
    ("getattr(1, 'real')", "name 'getattr'"),
    ("import math as _m", "alias '_m'"),
    ("x = (", "syntax error"),
    ("", "empty program"),
    ("x = 1\n" * 1000, "longer than"),
])
def test_check_program_rejects_what_reaches_outside_the_computation(code, why):
    assert why in check_program(code)


def test_check_program_allows_plain_arithmetic_and_math_modules():
    assert check_program("import math\nfrom fractions import Fraction\n"
                         "x = [i * 2 for i in range(3)]\nprint(math.floor(sum(x) / 4))") == ""


def test_run_program_prints_the_answer():
    run = run_program(extract_code(PROGRAM))
    assert run.ok and run.answer == "8" and run.output == "8\n"


@pytest.mark.parametrize("code, error", [
    ("print(1/0)", "runtime: ZeroDivisionError"),
    ("x = 1", "no_output"),
    ("print('no number here')", "no_output"),
    ("import os", "rejected"),
    ("x = ' ' * (2 * 1024 ** 3)\nprint(len(x))", "runtime"),  # over the address-space limit
])
def test_run_program_failures_are_results_not_exceptions(code, error):
    run = run_program(code)
    assert not run.ok and run.error.startswith(error)


def test_run_program_stops_an_endless_loop():
    run = run_program("while True:\n    pass", timeout_s=20, cpu_s=1)
    assert not run.ok and run.error.startswith("runtime: killed by signal")


def test_run_program_cannot_write_files(tmp_path):
    # open is rejected statically; the file-size limit backs it up for what slips past
    assert run_program(f"open({str(tmp_path / 'x')!r}, 'w')").error.startswith("rejected")
    assert not (tmp_path / "x").exists()


def test_run_program_sees_no_environment(monkeypatch):
    monkeypatch.setenv("PFEDMA_SECRET_FOR_TEST", "s3cret")
    # os is not importable; sys neither: the child's globals hold nothing but the program's
    assert run_program("import sys").error.startswith("rejected")
    assert run_program("print(len(globals()))").error.startswith("rejected")


@pytest.mark.parametrize("value, text", [
    (54.0, "54"), (1240, "1240"), (1.5, "1.5"), (0.30000000000000004, "0.3"),
    (2 / 3, "0.666667"), (-4199.890476190476, "-4199.890476"), (float("inf"), ""),
])
def test_format_number(value, text):
    assert format_number(value) == text


def test_last_number_reads_the_last_printed_number():
    assert last_number("cost 12\nchange: $1,240.00\n") == "1240"
    assert last_number("none\n") == ""


def test_program_reasoning_keeps_the_steps_and_states_the_answer():
    code = extract_code(PROGRAM)
    text = program_reasoning(code, run_program(code))
    lines = text.splitlines()
    assert lines[0] == "price = 3  # dollars per pen"
    assert "print(answer)" not in text
    assert lines[-2:] == ["The program prints 8.", "The answer is 8."]


def _ask(agent: ClientAgent, text: str = QUESTION, kind: str = "number"):
    ins = RespondInstruction(server_round=1, queries=(RoutedQuery(
        query_id="q1", text=text, domain="math", round=1, answer_kind=kind),))
    return agent.respond(ins, agent.new_state())


def _agent(backend: MockBackend, reasoning: str | None = None) -> ClientAgent:
    return ClientAgent(profile=get_profile("statistician"), backend=backend, private_data=[],
                       embedder=HashingEmbedder(), recognizer=None, few_shot=0,
                       reasoning=reasoning)


def test_program_agent_answers_with_the_programs_output_and_its_steps_as_claims():
    backend = MockBackend(lambda messages: PROGRAM)
    reply = _ask(_agent(backend))
    r = reply.responses[0].response
    assert r is not None and r.final_answer == "8"
    assert r.claims[0].claim.startswith("price = 3")
    # the claim about the price quotes the question sentence that states it
    assert any("3 dollars each" in e for c in r.claims for e in c.evidence)
    assert "Python program" in backend.prompts[0][0]["content"]
    assert reply.backend_calls == 1


def test_a_failing_program_falls_back_to_chain_of_thought():
    def respond(messages):
        if "Python program" in messages[0]["content"]:
            return "```python\nprint(1/0)\n```"
        return "Ann pays 12 dollars for the pens.\nThe answer is 8."
    backend = MockBackend(respond)
    reply = _ask(_agent(backend))
    r = reply.responses[0].response
    assert r is not None and r.final_answer == "8"
    assert len(backend.prompts) == 2 and "step by step" in backend.prompts[1][0]["content"]
    assert reply.backend_calls == 2
    # the tokens of both generations are counted on the response and the reply
    assert reply.responses[0].tokens == reply.tokens > 0


def test_non_numeric_tasks_and_cot_agents_never_write_programs():
    seen: list[str] = []

    def respond(messages):
        seen.append(messages[0]["content"])
        return "The findings point to A.\nThe answer is A."
    _ask(_agent(MockBackend(respond)), "Which? A. yes B. no", kind="option")
    _ask(_agent(MockBackend(respond), reasoning="cot"))
    assert seen and not any("Python program" in s for s in seen)
    with pytest.raises(ValueError, match="reasoning must be one of"):
        _agent(MockBackend(), reasoning="tool")


def test_a_deployed_node_runs_programs_only_when_its_operator_allows():
    assert NodePolicy.from_node_config({"partition-id": 0, "num-partitions": 2}).reasoning(
        "program") == "program"
    assert NodePolicy.from_node_config({"state-dir": "/tmp/s"}).reasoning("program") == "cot"
    assert NodePolicy.from_node_config({"state-dir": "/tmp/s", "allow-programs": "true"}
                                       ).reasoning("program") == "program"
    assert NodePolicy.from_node_config({"state-dir": "/tmp/s"}).reasoning("cot") == "cot"


def test_the_agent_announces_the_way_it_actually_reasons():
    # the orchestrator's mix_reasoning reads it; a node without allow-programs reasons in text
    assert _agent(MockBackend()).describe().reasoning == "program"
    assert _agent(MockBackend(), reasoning="cot").describe().reasoning == "cot"
    json_agent = ClientAgent(profile=get_profile("statistician"), backend=MockBackend(),
                             private_data=[], embedder=HashingEmbedder(), recognizer=None,
                             response_format="json")
    assert json_agent.describe().reasoning == "cot"  # programs run only under reasoning


def test_a_fallback_that_is_cut_is_repaired_and_every_call_is_counted():
    from pfedma_flwr.agents.prompting import REPAIR_PROMPT

    def respond(messages):
        if messages[-1]["content"] == REPAIR_PROMPT:
            return "The answer is 8."
        if "Python program" in messages[0]["content"]:
            return "```python\nprint(1/0)\n```"
        return "Ann first pays for the pens"  # cut before any answer statement
    backend = MockBackend(respond)
    reply = _ask(_agent(backend))
    r = reply.responses[0].response
    assert r is not None and r.final_answer == "8"
    # program, fallback chain of thought, repair: three generations, all counted
    assert len(backend.prompts) == 3 and reply.backend_calls == 3
    assert reply.responses[0].tokens == reply.tokens > 0
