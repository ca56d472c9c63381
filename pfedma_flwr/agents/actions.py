"""A tool-use agent's next action (ReAct ``Action:`` / ``Action Input:``) and what it would send.

PrivacyLens asks for the final ``[Action]`` and its ``[Action Input]``; what is judged is the
text the action would transmit (``o_x``): a message's ``message``, an e-mail's subject and body,
a post's ``content`` (:data:`SENT_FIELDS`). Upstream's ``post_process`` keeps the reply up to
``Observation:`` / ``Final Answer:`` and then cuts at the **first** ``}``, which truncates any
message holding a brace; here the Action Input is decoded as a whole JSON object instead
(``json.JSONDecoder.raw_decode``, control characters allowed in strings), and a reply whose JSON
does not decode (cut off by the token budget, unescaped quotes) still yields the text fields it
spells out, marked not well formed. Also accepted: markdown bold (``**Action:**``), bracketed
labels (``[Action]:``), a tool name in backticks, and a JSON object fenced in ```` ``` ````.

As upstream, the **first** action of a reply is the one taken (a ReAct agent executes it and
waits for its observation); a reply without ``Action:`` takes no action.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

#: Fields of each final-action tool whose text reaches the recipient (PrivacyLens's four).
SENT_FIELDS: dict[str, tuple[str, ...]] = {
    "MessengerSendMessage": ("message",),
    "SlackSendMessage": ("message", "file_path"),
    "GmailSendEmail": ("subject", "body", "attachments"),
    "FacebookManagerCreatePost": ("content", "media_path"),
}
# case-sensitive like upstream's 'Action:' test: prose such as "the next action: ..." is no label
_ACTION = re.compile(r"\[?\bAction\]?\s*:")
_INPUT = re.compile(r"\[?\bAction[ _]?Input\]?\s*:")
_STOPS = re.compile(r"\[?\b(?:Observation|Final Answer)\]?\s*:", re.I)
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*")
_STRING_FIELD = re.compile(r'"(\w+)"\s*:\s*"((?:[^"\\]|\\.)*)(?:"|$)', re.S)


@dataclass(frozen=True)
class ToolAction:
    """One parsed action.

    Attributes
    ----------
    tool : str
        The tool named after ``Action:`` ("" when the reply takes no action).
    args : dict or None
        The decoded Action Input (``None`` when missing or not a JSON object).
    raw_input : str
        The Action Input as written (the decoded object's exact text when it decoded).
    recovered : dict
        String fields read off an Action Input that did not decode (empty otherwise).
    """

    tool: str = ""
    args: dict[str, Any] | None = None
    raw_input: str = ""
    recovered: dict[str, str] = field(default_factory=dict)

    @property
    def taken(self) -> bool:
        """Whether the reply names an action at all."""
        return bool(self.tool)

    @property
    def well_formed(self) -> bool:
        """A tool name and an Action Input that decodes to a JSON object."""
        return bool(self.tool) and self.args is not None

    def judge_text(self) -> str:
        """What PrivacyLens's judges see: the text after ``Action:`` (tool + Action Input)."""
        if not self.tool:
            return ""
        return f"{self.tool}\nAction Input: {self.raw_input}" if self.raw_input else self.tool

    def sent_text(self) -> str:
        """``o_x``: the text the action would transmit (module docstring); "" for no action."""
        if not self.tool:
            return ""
        fields = self.args if self.args is not None else self.recovered
        keys = [k for k in SENT_FIELDS.get(self.tool, ()) if k in fields]
        if not keys:  # another tool, or the text under other names: every string passed on
            return "\n".join(_strings(fields))
        return "\n".join(s for k in keys for s in _strings(fields[k]))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _unescape(s: str) -> str:
    try:
        out = json.loads(f'"{s}"', strict=False)
        return out if isinstance(out, str) else s
    except json.JSONDecodeError:
        return s.replace('\\"', '"').replace("\\n", "\n")


def _decode_input(text: str) -> tuple[dict[str, Any] | None, str, dict[str, str]]:
    """``(args, raw, recovered)`` of the text after ``Action Input:``."""
    rest = _FENCE.sub("", text, count=1)
    start = rest.find("{")
    if start < 0:
        return None, rest.strip().split("\n", 1)[0], {}
    try:
        obj, end = json.JSONDecoder(strict=False).raw_decode(rest[start:])
    except json.JSONDecodeError:
        raw = rest[start:].split("```", 1)[0].strip()
        found = {m.group(1): _unescape(m.group(2)) for m in _STRING_FIELD.finditer(raw)}
        return None, raw, found
    raw = rest[start:start + end]
    return (obj if isinstance(obj, dict) else None), raw, {}


def parse_action(reply: str) -> ToolAction:
    """The first action of a ReAct reply (module docstring); ``ToolAction()`` when none."""
    text = reply.replace("**", "")
    stop = _STOPS.search(text)
    if stop is not None:
        text = text[:stop.start()]
    first = _ACTION.search(text)
    if first is None:
        return ToolAction()
    after = text[first.end():]
    lines = after.strip().splitlines()
    tool = lines[0].strip().strip("`'\"[]") if lines else ""
    tool = re.split(r"[\s({]", tool, maxsplit=1)[0] if tool else ""
    if not tool:
        return ToolAction()
    inp = _INPUT.search(after)
    if inp is None:
        return ToolAction(tool=tool)
    args, raw, recovered = _decode_input(after[inp.end():])
    return ToolAction(tool=tool, args=args, raw_input=raw, recovered=recovered)


def parse_answer(answer: str) -> ToolAction:
    r"""The action of an ``action``-kind final answer (``"<tool>\nAction Input: ..."``).

    Answers carry upstream's text after ``Action:`` (:func:`action_answer`); a full reply that
    still starts with its own ``Thought:`` / ``Action:`` lines parses the same.
    """
    if _ACTION.search(answer):
        return parse_action(answer)
    head = answer.strip().split("\n", 1)[0].strip()
    # a bare tool name first, as action_answer writes it; prose ("No further action is
    # needed.") is no action
    return parse_action(f"Action: {answer}") if re.fullmatch(r"\w+", head) else ToolAction()


def action_answer(action: ToolAction) -> str:
    r"""The canonical answer text of an action: ``"<tool>\nAction Input: <json>"``.

    A decoded input is re-serialised compactly (keys in the agent's order, non-ASCII kept),
    so that two agents that chose the same action vote together; a raw input is kept as is.
    """
    if action.args is not None:
        return f"{action.tool}\nAction Input: {json.dumps(action.args, ensure_ascii=False)}"
    return action.judge_text()
