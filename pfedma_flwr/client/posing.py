"""How a client poses the benchmark-defined tasks (guard, tool plan) and reads their replies.

:class:`~pfedma_flwr.client.agent.ClientAgent` answers ``qa`` tasks in chain of thought; a task
whose ``task_format`` is ``guard`` (Mind2Web-SC) or ``tool_plan`` (ASB) is posed as its
benchmark defines it, here:

- **guard**: the rules shown are the safety rules this client holds *now* (its repository's
  active ``guard`` rules: the rule mode decides, docs/rules.md); before posing, local evolution
  (LE, G2L, L2G, full) creates the rules that its own labelled partition's denied examples
  violated and that it does not hold yet (:func:`evolve_guard_rules`); with
  ``agent.guard_shots`` > 0 the prompt also shows GuardAgent's memory: the client's own solved
  guard tasks nearest to this one, each with the held rule it violated (:func:`guard_memory`);
- **tool_plan**: the question's instructions become the system message and its task the user
  turn (:func:`~pfedma_flwr.agents.tool_plan.tool_plan_messages`).

The benchmark formats ignore ``agent.response_format``: their replies are read by their own
parsers (:func:`read_reply`), never by the chain-of-thought derivation.
"""

from __future__ import annotations

from collections.abc import Sequence

from pfedma_flwr.agents.guard import (
    category_messages,
    check_guard_reply,
    guard_messages,
    guard_response,
    memory_demonstrations,
    parse_guard_reply,
)
from pfedma_flwr.agents.prompting import user_prompt
from pfedma_flwr.agents.tool_plan import (
    offered_tools,
    parse_tool_plan,
    tool_plan_messages,
    tool_plan_response,
)
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.retrieval import retrieve_examples
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.schema import RoutedQuery, RuleCandidate, StructuredResponse
from pfedma_flwr.rules.client.local_repo import LocalRuleRepository
from pfedma_flwr.rules.generalize import generalize, is_shareable
from pfedma_flwr.rules.guard_catalogue import safety_rule
from pfedma_flwr.rules.guard_rules import guard_rule, held_safety_rules, uncovered_safety_rules

#: Task formats posed here (the others are chain-of-thought ``qa``).
BENCHMARK_FORMATS = ("guard", "tool_plan")


def evolve_guard_rules(repo: LocalRuleRepository,
                       private_data: Sequence[Task]) -> list[RuleCandidate]:
    """Local evolution of safety rules from ``D_i``'s labelled guard examples; the uploads.

    Each denied example whose violated rule no active rule covers creates that rule (id
    ``guard-<Rk>``). Follows the mode: nothing unless ``create_local``; candidates only with
    ``upload``.
    """
    if not repo.mode.create_local:
        return []
    violations = [v for t in private_data if t.task_format == "guard" for v in t.violated_rules]
    out: list[RuleCandidate] = []
    for rule in uncovered_safety_rules(violations, repo.active_rules()):
        rid = repo.add_local_rule(guard_rule(rule))
        if rid and repo.mode.upload:
            cand = generalize(repo.get(rid))
            if is_shareable(cand):
                out.append(cand)
    return out


def guard_memory(text: str, repo: LocalRuleRepository, private_data: Sequence[Task],
                 embedder: Embedder, k: int) -> list[tuple[str, str]]:
    """The ``k`` solved guard tasks of ``D_i`` nearest to ``text`` whose rule the client holds.

    GuardAgent retrieves in-context demonstrations from its memory of earlier tasks; a
    client's memory is its own labelled partition (never another client's data), as
    ``(task, rule id)`` (:func:`~pfedma_flwr.agents.guard.memory_demonstrations`).
    """
    if k <= 0:
        return []
    held = {r.rule_id for r in held_safety_rules(repo.active_rules("guard"))}
    # a memory entry is what memory_demonstrations makes of a task: a labelled violation
    pool = [t for t in private_data if (e := memory_demonstrations([t])) and e[0][1] in held]
    return memory_demonstrations(retrieve_examples(text, pool, k, embedder))


def pose(q: RoutedQuery, text: str, repo: LocalRuleRepository,
         memory: Sequence[tuple[str, str]] = (), guard_decision: str = "check",
         ) -> list[dict[str, str]]:
    """Chat messages of a benchmark-format query (``text``: the task as this client sees it).

    ``memory``: the guard's demonstrations (:func:`guard_memory`), ignored by other formats;
    ``guard_decision``: ``check`` asks which held rule covers the task
    (:func:`~pfedma_flwr.agents.guard.category_messages`), ``model`` for the decision itself
    (:func:`~pfedma_flwr.agents.guard.guard_messages`).
    """
    if q.task_format == "guard":
        held = held_safety_rules(repo.active_rules("guard"))
        ask = category_messages if guard_decision == "check" else guard_messages
        return ask(user_prompt(query_text=text, refinement=q.refinement), held, memory)
    if q.task_format == "tool_plan":
        return tool_plan_messages(text, q.refinement)
    raise ValueError(f"task_format {q.task_format!r} is not posed here ({BENCHMARK_FORMATS})")


def decided_without_model(q: RoutedQuery, repo: LocalRuleRepository,
                          guard_decision: str = "check") -> str | None:
    """The reply of a query whose answer the model cannot change, else ``None``.

    Under ``check`` a guard decision denies only for a held rule the user information
    violates; a client holding no safety rule (``NR``, or none adopted yet) allows whatever
    the model names. Its category question offered only ``NONE``, and the 1.5B model
    answered it with a digit for 59 of 60 tasks (``guard/undecided`` 98 %): tokens spent on
    an answer fixed in advance. ``NONE`` is read as that allow (:func:`read_reply`).
    """
    if (q.task_format == "guard" and guard_decision == "check"
            and not held_safety_rules(repo.active_rules("guard"))):
        return "NONE"
    return None


def read_reply(q: RoutedQuery, text: str, reply: str, repo: LocalRuleRepository, *,
               guard_decision: str = "check") -> tuple[StructuredResponse | None, str]:
    """``(response, error)`` of a benchmark-format reply; a guard decision counts on its rules.

    ``guard_decision``: ``check`` runs GuardAgent's check of the rule the reply names against
    the held rules and the user information, ``model`` reads the reply's decision line
    (:mod:`pfedma_flwr.agents.guard`).
    """
    if q.task_format == "guard":
        if guard_decision == "check":
            held = held_safety_rules(repo.active_rules("guard"))
            decision = check_guard_reply(reply, text, held)
        else:
            decision = parse_guard_reply(reply)
        repo.note_guard_decision([safety_rule(r).violation for r in decision.rule_ids],
                                 decided=decision.decided)
        return guard_response(decision, text), ""
    plan = parse_tool_plan(reply, offered_tools(text))
    task = text.rpartition("\n\nTask: ")[2]
    resp = tool_plan_response(plan, task)
    return resp, "" if resp is not None else "no_plan: the reply holds no JSON plan and no text"


__all__ = ["BENCHMARK_FORMATS", "decided_without_model", "evolve_guard_rules", "pose",
           "read_reply"]
