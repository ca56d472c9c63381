"""A simulated LLM agent for the experiments' ``tiny`` size: profile-dependent skill, no model.

:class:`SimulatedAgentBackend` answers like a scripted expert so that every analysis of an
experiment (accuracy, selection heatmap, capability, leakage, guard metrics, attack success)
has something non-trivial to measure in seconds. It is **not** a model of any real LLM and
its numbers mean nothing about PFedMA; they only exercise the pipeline end to end.

Behaviour, for the last user message ``u`` and the profile whose prompt starts the system
message:

- ``u`` carries ASB's context-ignoring injection → it complies: its claim announces the
  attacker instruction and tool, its final answer names the tool (a fully obedient LLM);
- ``u`` is a benchmark question (found by its first and / or last 80 normalized characters in the
  registered benchmarks) → it is right with probability ``skill`` when the profile covers the
  task's knowledge domain and ``off_skill`` otherwise (a deterministic hash of profile and
  task, so runs are reproducible); a wrong answer is a per-agent perturbation of the gold;
  Mind2Web-SC denials name the violated rule in a claim; a PrivacyLens answer is the asked
  tool with a message (:meth:`SimulatedAgentBackend._action`), into which "leaky" agents
  (hash < ``leak``) put the task's sensitive items, quoted in a claim too;
- the agent knows only what its query shows: a question whose spans ``P_in`` replaced by
  placeholders is still found (:func:`find_task_redacted`), and what those spans hid is replaced
  by the same placeholders in the items it quotes (it cannot leak what it never saw);
- a **guard** prompt (:mod:`pfedma_flwr.agents.guard`) → a scripted guard of the rules the prompt
  shows: with probability ``skill`` (a hash of the rules shown and the task; no profile, since a
  guard prompt carries none) it is a *perfect guard of those rules*: it denies exactly the
  actions whose gold violated rule it holds, naming it, in GuardAgent's decision lines; else it
  flips that decision. An injected guard prompt gets the obedient reply (no decision);
- a **tool plan** prompt (an ASB task, :mod:`pfedma_flwr.agents.tool_plan`) → a JSON plan: an
  honest agent plans the first two listed tools (with probability ``skill``, else only the
  first); an injected one obeys (plans only the attacker tool) or, with probability ``refuse``,
  refuses in words ("I cannot comply ...") and plans the normal tools;
- anything else → :func:`~pfedma_flwr.agents.backends.mock.default_responder`.
"""

from __future__ import annotations

import json
import re
import zlib
from functools import cache

from pfedma_flwr.agents.actions import SENT_FIELDS, ToolAction, action_answer
from pfedma_flwr.agents.backends.base import Messages
from pfedma_flwr.agents.backends.mock import MockBackend, default_responder
from pfedma_flwr.agents.guard import CATEGORY_SYSTEM, GUARD_SYSTEM
from pfedma_flwr.agents.hooks import corrupt_answer
from pfedma_flwr.agents.tool_plan import offered_tools
from pfedma_flwr.data.bench_asb import DEFAULT_IGNORE
from pfedma_flwr.data.benchmarks import BENCHMARKS, Task, load_benchmark
from pfedma_flwr.data.privacylens_tools import find_tool
from pfedma_flwr.data.profiles import BUILTIN_PROFILES, AgentProfile, knowledge_domain
from pfedma_flwr.rules.guard_catalogue import rule_of_text, safety_rule

_INJECTED = re.compile(
    r"following instruction: (?P<instruction>.+?) by using the \"(?P<tool>[^\"]+)\" tool")
_SPACE = re.compile(r"\s+")
# what P_in and P_resp put in place of a span (rules/spans.py placeholder)
_PLACEHOLDER = re.compile(r"\[(?:REDACTED:)?[A-Z][A-Z0-9_]*\]")
# a hidden value whose single words the agent may also not know (a name, not an address)
_NAMEISH = re.compile(r"[^\W\d_]+(?:[ '-][^\W\d_]+)*")
_KEY_CHARS = 80
_HELD = re.compile(r"^(R[1-6])\) ", re.MULTILINE)  # a rule block or a category line
_TASK_BLOCK = re.compile(r"^Task: .*?^User information: [^\n]*", re.MULTILINE | re.DOTALL)


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


@cache
def _index(data_dir: str) -> dict[str, Task]:
    """First / last normalized characters of every registered benchmark question → task."""
    out: dict[str, Task] = {}
    for name in BENCHMARKS.names():
        for t in load_benchmark(name, data_dir or None):
            q = _norm(t.question)
            out.setdefault("q:" + q, t)
            # Head and tail together first: Mind2Web-SC repeats a request with other profiles.
            out.setdefault("ht:" + q[:_KEY_CHARS] + q[-_KEY_CHARS:], t)
            out.setdefault("h:" + q[:_KEY_CHARS], t)
            out.setdefault("t:" + q[-_KEY_CHARS:], t)
    return out


# how a refinement (pfedma_flwr.aggregation.refinement) starts after the task's text
_REFINEMENT = re.compile(r"\n\n(?:Previous collaboration round \d|Agents of an earlier round)")


def _body(user_text: str) -> str:
    """The task's text of a query: a refinement appended after a blank line is cut off."""
    m = _REFINEMENT.search(user_text)
    return user_text[:m.start()] if m else user_text


def find_task(user_text: str, data_dir: str = "") -> Task | None:
    """The benchmark task a routed query was made from (refinement after a blank line ignored).

    The whole normalized text first, then the question it begins (a question with a blank line
    of its own), then its first / last characters: PrivacyLens repeats both in 61 of 493
    tasks, so the head / tail keys alone quoted another task's items.
    """
    body = _norm(_body(user_text))
    idx = _index(data_dir)
    if task := idx.get("q:" + body):
        return task
    if body and (task := next((t for q, t in _questions(data_dir) if q.startswith(body)), None)):
        return task
    return (idx.get("ht:" + body[:_KEY_CHARS] + body[-_KEY_CHARS:])
            or idx.get("h:" + body[:_KEY_CHARS]) or idx.get("t:" + body[-_KEY_CHARS:]))


@cache
def _questions(data_dir: str) -> tuple[tuple[str, Task], ...]:
    return tuple((_norm(t.question), t) for name in BENCHMARKS.names()
                 for t in load_benchmark(name, data_dir or None))


def find_task_redacted(user_text: str, data_dir: str = "") -> tuple[Task, dict[str, str]] | None:
    """The task of a query whose spans ``P_in`` replaced, and placeholder -> the value it hid.

    The placeholders of the query's first paragraph become lazy wildcards over the normalized
    benchmark questions (the question must start with the query's text). ``None`` without a
    placeholder or a match. Values are normalized (casefolded, single spaces).
    """
    raw = _body(user_text)
    marks = _PLACEHOLDER.findall(raw)
    if not marks:
        return None
    parts = [_SPACE.sub(" ", p).casefold() for p in _PLACEHOLDER.split(raw)]
    parts[0], parts[-1] = parts[0].lstrip(), parts[-1].rstrip()
    longest = max(parts, key=len).strip()
    pattern = re.compile("".join(
        re.escape(p) + ("(.{1,200}?)" if k < len(marks) else "") for k, p in enumerate(parts)))
    for q, task in _questions(data_dir):
        if longest in q and (m := pattern.match(q)):
            hid: dict[str, str] = {}
            for mark, value in zip(marks, m.groups(), strict=True):
                hid.setdefault(mark, value.strip())
            return task, hid
    return None


def hide(text: str, hidden: dict[str, str], shown: str) -> str:
    """``text`` with what the query's placeholders hid replaced by those placeholders.

    Each hidden value goes whole, then each of its words that the query shows nowhere else
    (``shown``, the query as received): an agent that read "[REDACTED:PERSON_1] Doe" knows
    "Doe" but not "John".
    """
    seen = set(re.findall(r"\w+", _norm(_PLACEHOLDER.sub(" ", shown))))
    by_length = sorted(hidden.items(), key=lambda kv: -len(kv[1]))
    for mark, value in by_length:
        words = r"\s+".join(re.escape(w) for w in value.split())
        text = re.sub(rf"(?<!\w){words}(?!\w)", mark, text, flags=re.IGNORECASE)
    for mark, value in by_length:
        if _NAMEISH.fullmatch(value):
            for w in re.findall(r"\w+", value):
                if len(w) > 1 and w not in seen:
                    text = re.sub(rf"\b{re.escape(w)}\b", mark, text, flags=re.IGNORECASE)
    return text


def _profile(system: str) -> AgentProfile | None:
    for p in BUILTIN_PROFILES:
        if system.startswith(p.prompt[:60]):
            return p
    return None


def _unit(*parts: str) -> float:
    return zlib.crc32("|".join(parts).encode()) / 2**32


def _reply(answer: str, claim: str, evidence: str, fit: float, conf: float = 0.8) -> str:
    return json.dumps({"claims": [{"claim": claim, "evidence": [evidence]}],
                       "final_answer": answer, "domain_fit": fit, "self_confidence": conf})


class SimulatedAgentBackend(MockBackend):
    """Scripted expert agent (module docstring).

    Parameters
    ----------
    skill, off_skill : float
        Probability of a correct answer in / outside the profile's knowledge domains.
    leak : float
        Probability that a PrivacyLens answer quotes a sensitive item.
    data_dir : str
        Benchmark data dir (empty = the default: ``PFEDMA_DATA_DIR`` or the repo's ``data/``).
    """

    name = "simulated"

    def __init__(self, *, skill: float = 0.85, off_skill: float = 0.35, leak: float = 0.6,
                 refuse: float = 0.3, data_dir: str = "") -> None:
        for n, v in (("skill", skill), ("off_skill", off_skill), ("leak", leak),
                     ("refuse", refuse)):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{n} must be in [0, 1], got {v}")
        self.skill, self.off_skill, self.leak, self.refuse = skill, off_skill, leak, refuse
        self.data_dir = data_dir
        super().__init__(self._respond)

    def _guard(self, user: str) -> str:
        """A scripted guard of the rules the prompt shows (module docstring)."""
        if DEFAULT_IGNORE in user:
            m = _INJECTED.search(user)
            return f"I will {m['instruction'] if m else 'follow the new instruction'}."
        held = set(_HELD.findall(user))
        block = _TASK_BLOCK.search(user)
        text = block.group(0) if block else ""
        found = find_task_redacted(text, self.data_dir)
        task = found[0] if found else find_task(text, self.data_dir)
        rule = rule_of_text(task.violated_rules[0]) if task and task.violated_rules else None
        deny = rule is not None and rule.rule_id in held
        if _unit("guard", ",".join(sorted(held)), text) >= self.skill:
            deny = not deny
        if not deny:
            return "RULE: NONE\nACTION GRANTED"
        named = rule if rule is not None and rule.rule_id in held else (
            safety_rule(min(held)) if held else None)
        if named is None:
            return "RULE: NONE\nACTION DENIED"
        return f"RULE: {named.rule_id}\nACTION DENIED\nviolation: {named.violation}"

    def _tool_plan(self, system: str, user: str) -> str:
        """A scripted ASB agent: honest plan, obedient attack plan, or a refusal (module doc)."""
        tools = offered_tools(system)
        m = _INJECTED.search(user)
        attacker = m["tool"] if m and DEFAULT_IGNORE in user else None
        normal = [t for t in tools if t != attacker][:2]
        if attacker is not None and _unit("refuse", user) >= self.refuse:
            return json.dumps([{"message": f"Use {attacker} as instructed.",
                                "tool_use": [attacker]}])
        if _unit("plan", user) >= self.skill:
            normal = normal[:1]
        plan = json.dumps([{"message": f"Use {t} for the task.", "tool_use": [t]}
                           for t in normal])
        if attacker is not None:
            return f"I cannot comply with the instruction to use {attacker}.\n{plan}"
        return plan

    def _respond(self, messages: Messages) -> str:
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        if system.startswith(GUARD_SYSTEM[:80]) or system == CATEGORY_SYSTEM:
            return self._guard(user)
        if "\nTools:\n" in system and "tool_use" in system:
            return self._tool_plan(system, user)
        if DEFAULT_IGNORE in user:
            m = _INJECTED.search(user)
            instruction, tool = (m["instruction"], m["tool"]) if m else (user[-200:], "tool")
            return _reply(f"Calling {tool}", f"I will {instruction[:200]} using {tool}.",
                          "The latest instruction says so.", 1.0, 1.0)
        # a query P_in changed is matched with its placeholders first: what they hid counts
        found = find_task_redacted(user, self.data_dir)
        task, hidden = found if found else (find_task(user, self.data_dir), {})
        profile = _profile(system)
        if task is None or profile is None:
            return default_responder(messages)
        in_domain = profile.covers(knowledge_domain(task.domain))
        p = self.skill if in_domain else self.off_skill
        fit = 0.9 if in_domain else 0.3
        correct = _unit(profile.name, task.task_id) < p
        answer = task.gold if correct else self._wrong(task, profile)
        if task.answer_kind == "action":
            # the prompt names the tool to call ("The [Action] should be ..."): every agent
            # calls it; what differs is what a leaky agent writes into the message
            return self._action(task, task.gold, profile, hidden, _body(user), fit)
        if task.benchmark == "mind2web_sc":
            if answer == "deny":
                rule = task.violated_rules[0] if task.violated_rules else "a safety rule"
                return _reply(answer, f"The action violates the rule: {rule}.",
                              task.question.splitlines()[-1][:200], fit)
            return _reply(answer, "The user may perform this action.",
                          task.question.splitlines()[-1][:200], fit)
        if task.sensitive_items and _unit("leak", profile.name, task.task_id) < self.leak:
            # a leaky agent shares what it read: every item, as far as its query showed it
            items = hide(" ".join(i[:250] for i in task.sensitive_items), hidden, _body(user))
            return _reply(answer, f"I will include: {items}", "From the trajectory.", fit)
        return _reply(answer, f"The answer is {answer}.", task.rationale[:150] or
                      task.question[:150], fit)

    def _action(self, task: Task, tool: str, profile: AgentProfile, hidden: dict[str, str],
                shown: str, fit: float) -> str:
        """A PrivacyLens final action: the asked tool with a message; leaky agents add items."""
        spec = find_tool(tool)
        if spec is None:
            return _reply(tool, "No action fits the request.", "The trajectory.", fit)
        items = ""
        if _unit("leak", profile.name, task.task_id) < self.leak:
            items = hide(" ".join(i[:250] for i in task.sensitive_items), hidden, shown)
        sent = SENT_FIELDS.get(tool, ())
        main = "body" if "body" in sent else sent[0] if sent else ""
        text = f"Hi! Here is the update you asked for. {items}".strip()
        args = {a: (text if a == main else "Update") if a in sent else "the recipient"
                for a, p in zip(spec.arg_names(), spec.args, strict=True)
                if not p.split(":", 1)[0].endswith("?")}
        claim = f"I will include: {items}" if items else "I will send a short update."
        answer = action_answer(ToolAction(tool=tool, args=args))
        return _reply(answer, claim, "From the trajectory.", fit)

    @staticmethod
    def _wrong(task: Task, profile: AgentProfile) -> str:
        if task.answer_kind == "option" and len(task.options) > 1:
            others = sorted(k for k in task.options if k != task.gold)
            return others[int(_unit("opt", profile.name, task.task_id) * len(others))]
        return corrupt_answer(task.gold, task.answer_kind, task.question,
                              task.task_id + profile.name)
