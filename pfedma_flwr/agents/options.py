"""Ways of answering multiple choice that make agents of one model err independently.

Two medical agents of one model reasoning the same way agreed on the same wrong option in 11 of
20 MedQA questions, and agreement ends a query (issue 33). Three switchable differences:

- **option order** (``agent.permute_options``): each agent sees the options in its own seeded
  order (:func:`permute_options`), so a position bias of the model (never answering "A" in one
  run) falls on different options for different agents; its letter is mapped back
  (:func:`original_letter`) before anything leaves the client, and the letters quoted in a
  refinement (``'C'``) are mapped into the agent's order (:func:`remap_quoted_letters`);
- **elimination** (``option_reasoning: eliminate``): rule the options out one by one, then
  choose among the rest (:data:`ELIMINATE_INSTRUCTION`);
- **verification** (``verify``): answer in chain of thought, then check that answer against
  every finding of the question in one more short generation (:func:`verify_messages`); the
  verdict's answer statement is the final answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pfedma_flwr.agents.reasoning import derive_response
from pfedma_flwr.protocol.schema import Claim, StructuredResponse

#: Ways of answering multiple choice (``agent.option_reasoning``, besides ``profile``).
OPTION_WAYS: tuple[str, ...] = ("cot", "eliminate", "verify")

_OPTION = re.compile(r"^([A-J])[.)]\s*(.*)$")
_QUOTED = re.compile(r"'([A-J])'")
# option labels in an agent's own text: "B. ...", "(B)", "C:" at a line's start; "option D"
_LINE_LABEL = re.compile(r"(?m)^(\s*\(?)([A-J])(?=[.):])")
_NAMED = re.compile(r"\b([Oo]ption\s+)([A-J])\b")
# and an answer statement's letter: "The answer is C.", "Answer: (C)" (a capital letter
# ending the statement or followed by its option text, never the article "A" of a sentence)
_STATED = re.compile(r"\b([Aa]nswer\s*(?:is|:|=)\s*:?\s*\(?)([A-J])(?=[.):,]|\s*$)", re.M)

ELIMINATE_INSTRUCTION = (
    "Go through the options one at a time. For each option write one short line: the letter, "
    "then 'ruled out' or 'possible', and the finding of the question that decides it. Then "
    "compare the options still possible and finish with a last line of the form "
    "'The answer is X.' where X is only the letter of the single best option."
)

VERIFY_PROMPT = (
    "Check your answer {letter} once more against the question: does every key finding fit "
    "it, and does any other option fit the findings better? Reply in at most four short "
    "lines, then finish with a last line of the form 'The answer is X.' where X is only the "
    "letter of the option that fits best (your answer again if it holds)."
)
#: Token budget of the verification reply.
VERIFY_TOKENS = 160


def split_options(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The question stem and its trailing option lines ``[(letter, text), ...]``.

    Options are the consecutive ``"A. ..."`` lines at the end of ``text`` whose letters run
    A, B, C, ... in order; anything else returns ``(text, [])``.
    """
    lines = text.rstrip().split("\n")
    opts: list[tuple[str, str]] = []
    k = len(lines)
    while k > 0 and (m := _OPTION.match(lines[k - 1].strip())):
        opts.insert(0, (m.group(1), m.group(2)))
        k -= 1
    letters = [chr(ord("A") + i) for i in range(len(opts))]
    if len(opts) < 2 or [o[0] for o in opts] != letters:
        return text, []
    return "\n".join(lines[:k]).rstrip(), opts


def option_order(n: int, key: str) -> list[int]:
    """A permutation of ``range(n)`` seeded by ``key`` (an agent and a query)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return [int(i) for i in np.random.default_rng(int.from_bytes(digest, "little"))
            .permutation(n)]


def permute_options(text: str, key: str) -> tuple[str, dict[str, str]]:
    """``text`` with its options in ``key``'s order, and shown letter → original letter.

    Without recognizable options the text comes back unchanged with an empty map.
    """
    stem, opts = split_options(text)
    if not opts:
        return text, {}
    order = option_order(len(opts), key)
    shown = [chr(ord("A") + i) for i in range(len(opts))]
    lines = [f"{shown[i]}. {opts[j][1]}" for i, j in enumerate(order)]
    return f"{stem}\n" + "\n".join(lines), {shown[i]: opts[j][0] for i, j in enumerate(order)}


def original_letter(letter: str, shown_to_original: Mapping[str, str]) -> str:
    """The original option of a letter the agent chose in its own order (unknown: as is)."""
    return shown_to_original.get(letter.strip().upper(), letter)


def original_labels(text: str, shown_to_original: Mapping[str, str]) -> str:
    """An agent's claim or evidence with its option labels in the original order."""
    if not shown_to_original:
        return text

    def back(m: re.Match[str]) -> str:
        return m.group(1) + shown_to_original.get(m.group(2), m.group(2))

    return _STATED.sub(back, _NAMED.sub(back, _LINE_LABEL.sub(back, text)))


def remap_quoted_letters(text: str, shown_to_original: Mapping[str, str]) -> str:
    """Letters quoted as ``'C'`` (the refinement's earlier answers) in the agent's order."""
    if not shown_to_original:
        return text
    back = {o: s for s, o in shown_to_original.items()}
    return _QUOTED.sub(lambda m: f"'{back.get(m.group(1), m.group(1))}'", text)


def verify_messages(prompt: Sequence[Mapping[str, str]], reasoning: str, letter: str
                    ) -> list[dict[str, str]]:
    """The follow-up that asks an agent to check its own answer ``letter``."""
    return [*({"role": m["role"], "content": m["content"]} for m in prompt),
            {"role": "assistant", "content": reasoning.strip() or "..."},
            {"role": "user", "content": VERIFY_PROMPT.format(letter=letter)}]


def agent_view(text: str, refinement: str, *, permute: bool, key: str
               ) -> tuple[str, str, dict[str, str]]:
    """The task and refinement an agent sees, and its shown → original letters.

    With ``permute`` the options come in ``key``'s order (an agent and a query: the same in
    every round of the query), the refinement's quoted letters too; else all as given.
    """
    if not permute:
        return text, refinement, {}
    shown_text, shown = permute_options(text, key)
    return shown_text, remap_quoted_letters(refinement, shown), shown


def unpermuted(raw: StructuredResponse | None, shown: Mapping[str, str]
               ) -> StructuredResponse | None:
    """A response derived in an agent's option order, in the original order."""
    if raw is None or not shown:
        return raw
    claims = tuple(Claim(claim=original_labels(c.claim, shown),
                         evidence=tuple(original_labels(e, shown) for e in c.evidence))
                   for c in raw.claims)
    return dataclasses.replace(raw, final_answer=original_letter(raw.final_answer, shown),
                               claims=claims)


def verify_answers(backend: Any, questions: Sequence[str], kinds: Sequence[str],
                   prompts: Sequence[Sequence[Mapping[str, str]]], gens: Sequence[Any],
                   texts: list[str]) -> dict[int, int]:
    """Ask each multiple-choice answer of ``texts`` to be checked once more (greedy, short).

    A check with an explicit answer statement is appended to its text in place, so its answer
    is the final one; a failed or inconclusive check leaves the first answer. Returns the
    check's tokens per item.
    """
    todo, letters = [], []
    for k, (kind, g) in enumerate(zip(kinds, gens, strict=True)):
        if kind != "option" or g.error or texts[k].lstrip().startswith("{"):
            continue
        der = derive_response(texts[k], question=questions[k], answer_kind="option")
        if der.response is not None:
            todo.append(k)
            letters.append(der.response.final_answer)
    if not todo:
        return {}
    extra = backend.generate([verify_messages(prompts[k], texts[k], a)
                              for k, a in zip(todo, letters, strict=True)],
                             max_tokens=VERIFY_TOKENS, temperature=0.0)
    out: dict[int, int] = {}
    for k, g in zip(todo, extra, strict=True):
        out[k] = g.tokens
        if not g.error and derive_response(g.text, question=questions[k],
                                           answer_kind="option").explicit:
            texts[k] = f"{texts[k].rstrip()}\nCheck: {g.text.strip()}"
    return out
