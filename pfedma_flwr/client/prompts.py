"""The messages a client poses each routed query with, and whether they ask for a program.

A benchmark-format task (guard, tool plan) is posed as its benchmark defines it
(:mod:`~pfedma_flwr.client.posing`); a ``qa`` task as chain of thought, as a Python program
(:mod:`pfedma_flwr.agents.program`) or, under ``response_format=json``, as a direct JSON answer,
with this client's few-shot examples of ``D_i`` and lessons of ``X_i``. Separate from
:class:`~pfedma_flwr.client.agent.ClientAgent` because choosing the prompt reads only the
agent's settings, never its answer flow (hooks, rules, memory updates).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pfedma_flwr.agents import options as mc
from pfedma_flwr.agents.program import program_messages
from pfedma_flwr.agents.prompting import (
    build_agent_messages,
    build_reasoning_messages,
    reasoning_demo,
)
from pfedma_flwr.client.posing import BENCHMARK_FORMATS, pose
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.retrieval import as_case
from pfedma_flwr.protocol.schema import RoutedQuery
from pfedma_flwr.protocol.wire import PROGRAM_KINDS
from pfedma_flwr.rules.client.local_repo import LocalRuleRepository


def query_messages(q: RoutedQuery, text: str, refinement: str, shots: Sequence[Task],
                   lessons: Sequence[str], repo: LocalRuleRepository, *, profile_prompt: str,
                   response_format: str, reasoning: str, few_shot_style: str,
                   option_way: str, guard_memory: Sequence[tuple[str, str]] = (),
                   guard_decision: str = "check") -> tuple[list[Any], bool]:
    """The messages that pose ``q`` to an agent, and whether they ask for a program.

    ``text`` and ``refinement`` are the task as this agent sees it (after its hooks and option
    order); the keyword arguments are the agent's settings of the same names
    (:class:`~pfedma_flwr.client.agent.ClientAgent`), ``reasoning`` its resolved method;
    ``guard_memory`` the demonstrations of a guard task (:func:`~.posing.guard_memory`) and
    ``guard_decision`` how it is decided (:func:`~.posing.pose`).
    """
    chain = response_format == "reasoning"
    cases = [as_case(t) for t in shots] if few_shot_style == "cases" else ()
    turns = shots if few_shot_style == "turns" else []
    if q.task_format in BENCHMARK_FORMATS:
        return pose(q, text, repo, guard_memory, guard_decision), False
    if chain and reasoning == "program" and q.answer_kind in PROGRAM_KINDS:
        return program_messages(profile_prompt=profile_prompt, query_text=text,
                                refinement=refinement, lessons=lessons, cases=cases), True
    if chain:
        return build_reasoning_messages(
            profile_prompt=profile_prompt, query_text=text,
            refinement=refinement, answer_kind=q.answer_kind,
            few_shot=[(t.question, reasoning_demo(t.rationale, t.gold, q.answer_kind))
                      for t in turns if t.rationale],
            lessons=lessons, cases=cases,
            instruction=mc.ELIMINATE_INSTRUCTION if q.answer_kind == "option"
            and option_way == "eliminate" else "",
        ), False
    return build_agent_messages(
        profile_prompt=profile_prompt, query_text=text,
        refinement=refinement, answer_kind=q.answer_kind,
        few_shot=[(t.question, demo_answer(t)) for t in shots], experience=[],
    ), False


def demo_answer(task: Task) -> str:
    """A few-shot demonstration's answer: worked steps then ``#### gold`` where available."""
    return f"{task.rationale}\n#### {task.gold}" if task.rationale else task.gold
