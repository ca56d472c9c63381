r"""Canonical answers: one parser for every place that compares final answers.

Voting (DESIGN §3.9), consensus anomaly (§3.7), the routing quality signal (§3.8) and scoring
against gold all go through :func:`canonical_answer` / :func:`answers_equal`, so they cannot
drift apart. Kinds:

``number``
    GSM8K-style: thousands separators, ``$``, units and trailing zeros dropped; the ``#### x``
    marker or ``\boxed{x}`` wins, else the last number of the text.
``option``
    Multiple-choice letter ``A``–``E`` from ``"B"``, ``"(B)"``, ``"Answer: B"``,
    ``"B. Hypertension"``, or the option text itself when the options are given.
``math``
    LaTeX / plain expressions normalized with math-verify (``\boxed{}``, fractions, ...).
``text``
    Free text: casefolded, punctuation dropped, whitespace collapsed.

math-verify's timeouts use ``signal.alarm``, which raises off the main thread (the Flower
server runs strategies in a thread). We pass a timeout only on the main thread and otherwise
disable it, bounding the work instead by refusing inputs longer than ``_MATH_MAX_CHARS``.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

logger = logging.getLogger(__name__)


class AnswerKind(StrEnum):
    """How a task's final answer is written and compared (the one definition of the kinds).

    A ``str`` enum: members compare equal to their values (``AnswerKind.NUMBER == "number"``),
    so tasks, wire messages and configs keep plain strings.
    """

    NUMBER = "number"
    OPTION = "option"
    MATH = "math"
    TEXT = "text"
    #: a tool-use agent's next action, ``"<tool>\nAction Input: <json>"`` (PrivacyLens)
    ACTION = "action"
    #: an open-ended response, judged against a reference, not matched (AlpacaEval)
    RESPONSE = "response"


# The kinds' values, in declaration order: what validation and error messages list.
ANSWER_KINDS: tuple[str, ...] = tuple(k.value for k in AnswerKind)


class TaskFormat(StrEnum):
    """How a client poses a task to its model and reads the reply (issue 28).

    ``qa``: the task text is the question; the agent reasons and states ``The answer is ...``
    (:mod:`pfedma_flwr.agents.reasoning`). ``guard``: a GuardAgent guard decision (Mind2Web-SC):
    the client adds the safety rules *it holds* and asks for ``ACTION GRANTED/DENIED`` and the
    violated rule (:mod:`pfedma_flwr.agents.guard`). ``tool_plan``: an ASB agent task: the
    client asks its model for a JSON plan of tool calls (:mod:`pfedma_flwr.agents.tool_plan`).
    """

    QA = "qa"
    GUARD = "guard"
    TOOL_PLAN = "tool_plan"


TASK_FORMATS: tuple[str, ...] = tuple(f.value for f in TaskFormat)
#: Kinds whose answers are free text (compared by embeddings besides equality).
FREE_TEXT_KINDS: tuple[str, ...] = ("text", "action", "response")
#: Kinds whose whole reply is the answer (no answer statement), never clipped.
OPEN_KINDS: tuple[str, ...] = ("action", "response")
#: Kinds a judge scores: no gold equality, so ``is_correct`` is undefined (``None``).
JUDGED_KINDS: tuple[str, ...] = ("response",)
OPTION_LETTERS = "ABCDE"

Options = Mapping[str, str] | Sequence[str] | None

_MATH_TIMEOUT_S = 5
# Longer than any real final answer; keeps un-timed sympy work bounded off the main thread.
_MATH_MAX_CHARS = 400
_NUM_REL_TOL = 1e-6

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# A minus right after a word character is a hyphen or a subtraction ("3-4"), not a sign.
_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d+(?:\.\d*)?|\.\d+)")
_GSM_MARKER = re.compile(r"####\s*(.+)")
_PUNCT = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s+")

_OPT_BARE = re.compile(r"^\W*([A-Ea-e])\W*$")
# Only an upper-case letter counts after the keyword: "the answer is a rash" names no option.
_OPT_KEYWORD = re.compile(
    r"(?i:answer|option|choice)\s*(?i:is|:|=)?\s*(?i:option\s*)?[\(\[]?\s*([A-E])\b"
)
_OPT_LEADING = re.compile(r"^\W*\(?([A-E])\s*[\.\):]")
_OPT_PAREN = re.compile(r"\(([A-E])\)")


def _check_kind(kind: str) -> None:
    if kind not in ANSWER_KINDS:
        raise ValueError(f"unknown answer kind {kind!r}; expected one of {list(ANSWER_KINDS)}")


_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*")


def _box_at(text: str, start: int) -> tuple[str, int] | None:
    r"""Parse the box whose ``\boxed`` starts at ``start``: ``(content, end)`` or ``None``.

    ``\boxed{...}`` takes the balanced-brace group; the brace-less form ``\boxed 5`` (seen in
    model outputs) takes the following token up to ``$`` or whitespace.
    """
    m = _BOX_START.match(text, start)
    if m is None:
        return None
    i = m.end()
    if i < len(text) and text[i] == "{":
        depth = 0
        for j in range(i, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j], j + 1
        return None  # unbalanced: the box never closes
    if m.end() == start + len(m.group().rstrip()):
        return None  # "\boxed" directly followed by a non-brace, non-space: not a box
    tail = re.match(r"[^\s$]+", text[i:])
    return (tail.group(), i + tail.end()) if tail else None


def last_boxed(text: str) -> str | None:
    r"""Content of the last outermost ``\boxed{...}`` / ``\fbox{...}`` of ``text``, or ``None``.

    The one ``\boxed`` parser (answers, reasoning texts and MATH golds). Braces are balanced
    (``\boxed{\frac{1}{2}}`` → ``\frac{1}{2}``); boxes nested inside an earlier box are skipped
    (the outer box is the answer), a box whose whole content is another box is unwrapped
    (``\boxed{\boxed{5}}`` → ``5``), and a box that never closes (a cut-off generation) is
    ignored in favour of the last complete one. The content is stripped.
    """
    found: str | None = None
    pos = 0
    for m in _BOX_START.finditer(text):
        if m.start() < pos:
            continue  # inside the previous box
        parsed = _box_at(text, m.start())
        if parsed is not None:
            found, pos = parsed
    while found is not None:
        inner = _box_at(found.strip(), 0)
        if inner is None or inner[1] != len(found.strip()):
            break
        found = inner[0]
    return found.strip() if found is not None else None


def normalize_text(text: str) -> str:
    """Casefold, drop punctuation, collapse whitespace (the ``text`` kind)."""
    return _SPACE.sub(" ", _PUNCT.sub(" ", text.casefold())).strip()


# --------------------------------------------------------------------------- number


def _number_string(token: str) -> str:
    try:
        d = Decimal(token)
    except InvalidOperation:
        return token
    if d == d.to_integral_value():
        try:
            return str(d.quantize(Decimal(1)))
        except InvalidOperation:  # more digits than the context's 28 (a model's runaway number)
            return format(d.to_integral_value(), "f")
    return format(d.normalize(), "f")


def _canonical_number(text: str) -> str:
    body = text
    marker = _GSM_MARKER.search(body)
    if marker:
        body = marker.group(1)
    else:
        boxed = last_boxed(body)
        if boxed is not None:
            body = boxed
    body = _THOUSANDS.sub("", body.replace("\\$", "$").replace("\\!", ""))
    numbers = _NUMBER.findall(body)
    if not numbers:
        return normalize_text(text)
    return _number_string(numbers[-1])


def _as_float(canonical: str) -> float | None:
    try:
        value = float(canonical)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# --------------------------------------------------------------------------- option


def _option_map(options: Options) -> dict[str, str]:
    if options is None:
        return {}
    if isinstance(options, Mapping):
        return {str(k).strip().upper(): str(v) for k, v in options.items()}
    return {OPTION_LETTERS[k]: str(v) for k, v in enumerate(options[: len(OPTION_LETTERS)])}


def _canonical_option(text: str, options: Options) -> str:
    body = text.strip()
    boxed = last_boxed(body)
    if boxed is not None:
        body = boxed.replace("\\text{", "{").strip()
    for pattern in (_OPT_BARE, _OPT_KEYWORD, _OPT_LEADING):
        m = pattern.search(body)
        if m:
            return m.group(1).upper()
    opts = _option_map(options)
    if opts:
        norm = normalize_text(body)
        exact = [k for k, v in opts.items() if normalize_text(v) == norm]
        if len(exact) == 1:
            return exact[0]
        # "The most likely diagnosis is hypertension." names exactly one option's text.
        contained = [k for k, v in opts.items() if normalize_text(v) and
                     f" {normalize_text(v)} " in f" {norm} "]
        if len(contained) == 1:
            return contained[0]
    parens: list[str] = _OPT_PAREN.findall(body)
    if parens:
        return parens[-1]
    return normalize_text(body)


# --------------------------------------------------------------------------- math


def _timeout() -> int | None:
    return _MATH_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=4096)
def _math_parse(text: str) -> tuple[Any, ...]:
    """math-verify parse of ``text`` (bare LaTeX is wrapped in ``$...$`` so it is found)."""
    from math_verify import parse

    if len(text) > _MATH_MAX_CHARS:
        logger.debug("math answer of %d chars not parsed (cap %d)", len(text), _MATH_MAX_CHARS)
        return ()
    tries = [text] if ("$" in text or "\\boxed" in text or "\\(" in text) else [f"${text}$", text]
    for candidate in tries:
        parsed = parse(candidate, parsing_timeout=_timeout())
        if parsed:
            return tuple(parsed)
    return ()


def _sympy_string(value: Any) -> str:
    import sympy

    if isinstance(value, sympy.Float):
        # 0.5 and \frac{1}{2} must canonicalize alike.
        value = sympy.Rational(str(value))
    return str(value).replace(" ", "")


def _canonical_math(text: str) -> str:
    parsed = _math_parse(text.strip())
    if parsed and not isinstance(parsed[0], str):
        return _sympy_string(parsed[0])
    inner = last_boxed(text)
    body = inner if inner is not None else text
    for old, new in (("\\left", ""), ("\\right", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"),
                     ("$", ""), ("\\!", ""), ("\\,", "")):
        body = body.replace(old, new)
    return _SPACE.sub("", body)


def _math_equal(a: str, b: str) -> bool:
    from math_verify import verify

    pa, pb = _math_parse(a.strip()), _math_parse(b.strip())
    if not pa or not pb:
        return False
    return bool(verify(list(pa), list(pb), timeout_seconds=_timeout()))


# --------------------------------------------------------------------------- public API


def canonical_answer(text: str, kind: str, *, options: Options = None) -> str:
    """Canonical form of a final answer, used as the vote key and for gold comparison.

    Parameters
    ----------
    text : str
        The response's ``final_answer`` (or a gold answer).
    kind : str
        One of :data:`ANSWER_KINDS`.
    options : Mapping[str, str] or Sequence[str], optional
        Multiple-choice options (letter → text, or texts in letter order); lets ``option``
        answers that only repeat an option's text map to its letter.

    Returns
    -------
    str
        ``"1000"``, ``"B"``, ``"1/2"``, ``"the capital is paris"``; ``""`` for blank input.
    """
    _check_kind(kind)
    if not text.strip():
        return ""
    if kind == "number":
        return _canonical_number(text)
    if kind == "option":
        return _canonical_option(text, options)
    if kind == "math":
        return _canonical_math(text)
    return normalize_text(text)


def answers_equal(a: str, b: str, kind: str, *, options: Options = None) -> bool:
    """Whether two answers agree; blank answers agree with nothing.

    ``number`` compares floats with relative tolerance 1e-6; ``math`` compares canonical
    strings, then math-verify equivalence (``b`` is treated as the reference); ``option`` and
    ``text`` compare canonical strings.
    """
    ca = canonical_answer(a, kind, options=options)
    cb = canonical_answer(b, kind, options=options)
    if not ca or not cb:
        return False
    if ca == cb:
        return True
    if kind == "number":
        fa, fb = _as_float(ca), _as_float(cb)
        if fa is None or fb is None:
            return False
        return math.isclose(fa, fb, rel_tol=_NUM_REL_TOL, abs_tol=_NUM_REL_TOL)
    if kind == "math":
        return _math_equal(b, a)
    return False


#: a number as it is written in a claim ("1,200", "-3.5"): the candidates :func:`names_answer` reads
_WRITTEN_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def names_answer(text: str, answer: str, kind: str, *, options: Options = None) -> bool:
    """Whether ``text`` names ``answer``: one convention for a response's claims.

    ``number``: some number written in ``text`` equals ``answer`` (:func:`answers_equal`);
    ``option``: the answer's letter stands alone, or the option's text appears (when
    ``options`` are given); other kinds are not checked (``True``). The server's evidence term
    (:func:`pfedma_flwr.anomaly.evidence.states_answer`) and the client's derivation of claims
    (:func:`pfedma_flwr.agents.reasoning.derive_response`) both read it.
    """
    if kind == "number":
        return any(answers_equal(m.group(0), answer, kind)
                   for m in _WRITTEN_NUMBER.finditer(text))
    if kind != "option":
        return True
    letter = canonical_answer(answer, kind, options=options)
    if re.search(rf"(?<![A-Za-z]){re.escape(letter)}(?![A-Za-z])", text):
        return True
    opts = dict(options) if isinstance(options, Mapping) else {}
    option_text = str(opts.get(letter, "")).strip().casefold()
    return bool(option_text) and option_text in text.casefold()


def is_correct(pred: str, gold: str, kind: str, *, options: Options = None) -> bool | None:
    """Whether a predicted answer matches the gold answer (gold is math-verify's reference).

    ``action``: the action names the gold tool (PrivacyLens's final action; what it sends is
    judged apart). ``response``: ``None``, a judge scores it (:data:`JUDGED_KINDS`).
    """
    if kind in JUDGED_KINDS:
        return None
    if kind == "action":
        return bool(pred.strip()) and pred.strip().split("\n", 1)[0].strip() == gold.strip()
    return answers_equal(pred, gold, kind, options=options)
