r"""What no privacy rule may alter: a probe corpus of real task text, numbers and bare answers.

Measured (issue 30): one probe string let ``^(?:-?\d{1,12}(?:\.\d{1,6})?|[A-E])$`` through (it
redacted 40 of 48 honest final answers), and query patterns such as ``(?i)how many`` or
``\d{2,3} (?:years?|pages?)`` altered 10–15 of 20 tasks. A rule must hold for the *class* of
inputs, so it is probed against:

- **tasks**: a deterministic sample of each benchmark's questions with their option lines
  (:func:`task_sample`; the privacy benchmarks are left out: their task text is the private
  content rules exist to protect);
- **answers**: numbers in the shapes tasks and answers take (integers up to 12 digits,
  decimals, negatives, thousands separators, fractions, percents, money, times, units), option
  letters in every spelling, short math answers, decisions, and the sample's gold answers, each
  as a whole field (so ``^...$`` anchors are probed as a final answer sees them);
- **items**: ``X_i``-shaped experience items, ``"{question} => {answer} The answer is ..."``.

:func:`probe_corpus` builds it once per process (all texts in normal form,
:mod:`~pfedma_flwr.rules.normalize`). Where the benchmark data is absent, the built-in
``safety.PROBE_TEXT`` and the generated numbers and answers remain (logged). The half of the
sample the corpus does not use (``part="heldout"``) is what tests check accepted patterns on.
"""

from __future__ import annotations

import functools
import logging
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import regex

from pfedma_flwr.rules.normalize import normalize_text

if TYPE_CHECKING:
    from pfedma_flwr.data.benchmarks import Task
    from pfedma_flwr.rules.pii import PiiRecognizer

logger = logging.getLogger(__name__)

#: Benchmarks whose task text holds the secrets rules protect (never probed).
PRIVACY_BENCHMARKS = frozenset({"privacylens", "privacylens_confaide", "privacylens_culturebank"})
#: Tasks per benchmark in the probe corpus (and as many more held back).
PROBE_TASKS = 40
#: Tasks (interleaved over the benchmarks) on which an entity-type rule is run through ``P_in``
#: (a recognizer is slower than a regex: ~10 ms a text for Presidio).
ENTITY_PROBE_TEXTS = 64
#: Bare answers per recognizer call (one a line) when entity types are probed.
ANSWERS_PER_CALL = 48
#: Wall-clock seconds for one pattern over the whole corpus (a slower pattern is refused).
PROBE_BUDGET_S = 2.0
_OPTION_SPELLINGS = ("{}", "({})", "{})", "{}.", "Option {}", "{}. ")
_MATH = ("\\frac{1}{2}", "\\dfrac{9}{7}", "2\\sqrt{3}", "x^2+1", "\\pi", "3\\pi/4", "(1,2)",
         "[0,1)", "\\infty", "-\\frac{3}{4}", "y = 2x + 3", "i", "\\sqrt{2}/2", "10^{6}",
         "2^{10}", "\\{1, 2\\}", "(-\\infty, 3]", "45^\\circ", "x = 4")
_DECISIONS = ("allow", "deny", "Allow", "Deny", "yes", "no", "True", "False")


@dataclass(frozen=True)
class ProbeCorpus:
    """The texts no rule may alter, each a whole field, all in normal form."""

    tasks: tuple[str, ...]
    answers: tuple[str, ...]
    items: tuple[str, ...]

    def texts(self) -> tuple[str, ...]:
        """Every probe text: answers first (short, the most likely hit), then items, tasks."""
        return self.answers + self.items + self.tasks


def numbers() -> list[str]:
    """Numbers in the shapes of task text and bare answers (deterministic, ~400)."""
    out = [str(k) for k in range(0, 121)]
    out += [str(k) for k in (125, 150, 200, 250, 360, 365, 500, 999, 1000, 1024, 1500, 2000,
                             2024, 3600, 4096, 9999)]
    out += [str(y) for y in range(1900, 2031, 7)]
    out += ["1" + "0" * n for n in range(4, 12)] + ["123456789"[: n] for n in range(4, 10)]
    out += ["1234567890", "12345678901", "987654321012", "5551234", "8675309"]
    out += ["0.5", "0.25", "2.25", "3.14159", "12.50", "0.001", "1.5", "99.99", "7.2", "38.5"]
    out += ["-1", "-7", "-3.5", "-120", "-0.75", "+5"]
    out += ["1,000", "1,250", "12,345", "1,250,000", "10,000,000", "1.000.000"]
    out += ["3/4", "1/2", "22/7", "1/3", "5/8", "110/min", "90/60", "120/80"]
    out += ["15%", "7.2%", "100%", "0.5%", "$2", "$12.50", "$1,200", "$0.99", "€40", "£5"]
    out += ["10:30", "2:05", "12:00", "07:45", "3 hours", "45 minutes", "2 days", "6 weeks"]
    out += ["1e5", "6.02e23", "3x10^8", "2.5 x 10^6", "38.5°C", "101.3°F", "10 mg", "5 mL",
            "350/mm3", "7.4", "140 mEq/L", "60 kg", "1.8 m", "12 cm", "3 km", "40 mph"]
    return out


def bare_answers(golds: Iterable[str] = ()) -> list[str]:
    """Whole final answers: numbers, option letters in every spelling, math, decisions, golds."""
    letters = [chr(c) for c in range(ord("A"), ord("K"))]
    out = numbers()
    out += [s.format(x) for s in _OPTION_SPELLINGS for x in letters + [x.lower() for x in
                                                                        letters]]
    out += list(_MATH) + list(_DECISIONS)
    out += [g for g in golds if g and len(g) <= 40]
    return list(dict.fromkeys(out))


def _ordered(tasks: Sequence[Task]) -> list[Task]:
    # a fixed order independent of file order and of the run's seed
    return sorted(tasks, key=lambda t: (zlib.crc32(t.task_id.encode()), t.task_id))


def task_sample(part: str = "probe", per_benchmark: int = PROBE_TASKS,
                data_dir: str | None = None) -> list[Task]:
    """``per_benchmark`` tasks of each non-privacy benchmark: the probe half or the held-out one.

    Each benchmark's tasks are ordered by a hash of their id; the first ``2·per_benchmark`` are
    split alternately into ``probe`` (even positions) and ``heldout`` (odd positions).
    """
    from pfedma_flwr.data.benchmarks import BENCHMARKS, load_benchmark

    if part not in ("probe", "heldout"):
        raise ValueError(f"part must be 'probe' or 'heldout', got {part!r}")
    offset = 0 if part == "probe" else 1
    out: list[Task] = []
    for name in BENCHMARKS.names():
        if name in PRIVACY_BENCHMARKS:
            continue
        ordered = _ordered(load_benchmark(name, data_dir))
        out.extend(ordered[offset : 2 * per_benchmark : 2])
    return out


def _interleaved(tasks: Sequence[Task]) -> list[Task]:
    """Round-robin over benchmarks, so any prefix samples every benchmark."""
    by: dict[str, list[Task]] = {}
    for t in tasks:
        by.setdefault(t.benchmark, []).append(t)
    rows = list(by.values())
    return [r[k] for k in range(max((len(r) for r in rows), default=0)) for r in rows
            if k < len(r)]


def xi_item(task: Task) -> str:
    """An experience item as the client writes it (``client/agent.py``)."""
    return f"{task.question[:300]} => {task.gold[:100]} The answer is {task.gold[:100]}."


@functools.cache
def probe_corpus() -> ProbeCorpus:
    """The process's probe corpus (module docstring), built on first use."""
    from pfedma_flwr.rules.safety import PROBE_TEXT

    try:
        tasks = task_sample("probe")
    except (OSError, ValueError) as e:  # no data dir on this node: the built-in probe only
        logger.warning("rule probe corpus without benchmark text (%s): using the built-in "
                       "probe only", str(e)[:120])
        tasks = []
    texts = [PROBE_TEXT, *(t.question for t in _interleaved(tasks))]
    return ProbeCorpus(
        tasks=tuple(normalize_text(t) for t in texts),
        answers=tuple(normalize_text(a) for a in bare_answers(t.gold for t in tasks)),
        items=tuple(normalize_text(xi_item(t)) for t in tasks),
    )


#: The shape alphabet: a lowercase (or uncased) letter, an uppercase one, a digit, a space and
#: a punctuation character (what :func:`shape` keeps of a text).
SHAPE_SYMBOLS = "xX5 ."
#: Every string of this many shape symbols is probed (5^6 = 15,625 of them).
SHAPE_GRAM = 6


def shape(text: str) -> str:
    """``text`` by class (what :data:`SHAPE_SYMBOLS` names).

    A lowercase or uncased letter is ``x``, an uppercase one ``X``, a digit ``5``, whitespace
    a space and anything else ``.``.
    """
    return "".join("5" if c.isdigit() else ("X" if c.isupper() else "x") if c.isalpha()
                   else " " if c.isspace() else "." for c in text)


def _de_bruijn(alphabet: str, n: int) -> str:
    """A cyclic sequence holding every length-``n`` string over ``alphabet`` once."""
    k, a, out = len(alphabet), [0] * (len(alphabet) * n), []

    def db(t: int, p: int) -> None:
        if t > n:
            if n % p == 0:
                out.extend(a[1 : p + 1])
            return
        a[t] = a[t - p]
        db(t + 1, p)
        for j in range(a[t - p] + 1, k):
            a[t] = j
            db(t + 1, t)

    db(1, 1)
    seq = "".join(alphabet[i] for i in out)
    return seq + seq[: n - 1]


@functools.cache
def shape_texts() -> tuple[str, ...]:
    """Every string of :data:`SHAPE_GRAM` shape symbols, then the probe corpus in shape space.

    A pattern whose characters are widened to their classes (``pattern_grammar._widen``) and
    that matches here matches text of the same shape: task text the sample does not hold.
    """
    corpus = probe_corpus()
    return (_de_bruijn(SHAPE_SYMBOLS, SHAPE_GRAM),
            *dict.fromkeys(shape(t) for t in corpus.texts()))


def first_hit(compiled: regex.Pattern[str], texts: Iterable[str], *,
              budget_s: float = PROBE_BUDGET_S, per_match_s: float = 0.05) -> str | None:
    """The first text fragment ``compiled`` matches (non-empty), else ``None``.

    Raises ``TimeoutError`` when one search exceeds ``per_match_s`` or all exceed ``budget_s``.
    """
    deadline = time.perf_counter() + budget_s
    for text in texts:
        for m in compiled.finditer(text, timeout=per_match_s):
            if m.end() > m.start():
                return m.group(0)
        if time.perf_counter() > deadline:
            raise TimeoutError("probe budget exhausted")
    return None


# (id(recognizer), entity type, scope) -> (the recognizer, what it alters); the recognizer is
# kept so its id cannot be reused by another object while the entry lives
_ENTITY_CACHE: dict[tuple[int, str, str], tuple[Any, str | None]] = {}


def _entity_alters(entity_type: str, scope: str, recognizer: PiiRecognizer) -> str | None:
    """What one entity type of a ``scope`` rule alters in the probe (``None``: nothing)."""
    key = (id(recognizer), entity_type, scope)
    if key not in _ENTITY_CACHE:
        _ENTITY_CACHE[key] = (recognizer, _probe_entity(entity_type, scope, recognizer))
    return _ENTITY_CACHE[key][1]


def _probe_entity(entity_type: str, scope: str, recognizer: PiiRecognizer) -> str | None:
    from pfedma_flwr.rules.model import PrivacyRule
    from pfedma_flwr.rules.query_rules import apply_query_rules

    corpus = probe_corpus()
    if scope == "response":
        # one recognizer call per block of answers, one answer a line (Presidio: ~30 ms a call)
        answers = [a for a in corpus.answers if "\n" not in a]
        for k in range(0, len(answers), ANSWERS_PER_CALL):
            block = answers[k : k + ANSWERS_PER_CALL]
            text = "\n".join(block)
            starts = [0]
            for a in block[:-1]:
                starts.append(starts[-1] + len(a) + 1)
            for span in recognizer.analyze(text, [entity_type]):
                line = max(i for i, st in enumerate(starts) if st <= span.start)
                return block[line]
        return None
    rule = PrivacyRule(rule_id="probe", text="probe", category="sensitive record",
                       scope="query", entity_types=(entity_type,))
    for t in corpus.tasks[: 1 + ENTITY_PROBE_TEXTS]:
        if apply_query_rules(t, [rule], recognizer)[1]:
            return t[:60]
    return None


def entity_problem(entity_types: Sequence[str], scope: str,
                   recognizer: PiiRecognizer | None) -> str:
    """``""`` if no entity type of a ``scope`` rule alters probe text, else why (short).

    Response rules must leave every bare answer intact; query rules every sampled task (run
    through ``P_in``, with its option-line and name filters). Without a recognizer nothing
    can fire, so nothing is refused.
    """
    if recognizer is None:
        return ""
    supported = set(recognizer.supported_entities)
    for t in sorted(set(entity_types) & supported):
        hit = _entity_alters(t, scope, recognizer)
        if hit is not None:
            what = "a bare answer" if scope == "response" else "task text"
            return f"entity type {t} alters {what} ({hit[:30]!r})"
    return ""


__all__ = ["ENTITY_PROBE_TEXTS", "PRIVACY_BENCHMARKS", "PROBE_TASKS", "SHAPE_GRAM", "SHAPE_SYMBOLS",
           "ProbeCorpus", "bare_answers", "entity_problem", "first_hit", "numbers", "probe_corpus",
           "shape", "shape_texts", "task_sample", "xi_item"]
