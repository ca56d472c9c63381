r"""Rule patterns a hostile party may write: a safe regex subset, a breadth probe, a time budget.

Rule patterns enter from outside the node that runs them: candidates from any client reach the
server's ``P_in``, and global rules reach every client's ``P_resp``. Each one is parsed here with
a small grammar before it is compiled (:func:`check_pattern`), so that what runs is bounded:

- **Subset.** Literals, escapes (``\d \w \s \D \W \S``, escaped punctuation, ``\t \n \r``), ``.``,
  character classes, anchors (``^ $ \b \B \A \Z``), groups ``(...)`` / ``(?:...)`` with ``|``,
  and a leading ``(?i)``. No backreferences, lookarounds, lazy/possessive quantifiers or other
  inline flags.
- **Bounded repetition.** Only single-character atoms repeat; a group takes at most ``?`` (a
  quantified group is the shape behind ``(a+)+`` and ``(\w|\s)+\d``). ``+``, ``*`` and ``{m,}``
  match at most :data:`MAX_REPEAT` more characters (the pattern is rewritten so), ``{m,n}``
  needs ``n <= MAX_EXPLICIT_REPEAT``.
- **Bounded backtracking.** A variable repeat whose characters can also start what follows it
  (``\w+\d``: a ``\d`` is a ``\w``) can be re-split at every length; the product of such repeat
  widths, alternation branches and optional groups (an upper bound on the ways one start
  position can be tried) must stay at or below :data:`MAX_PATHS`.
- **Normal form.** Text is matched in NFKC form without invisible characters
  (:mod:`~pfedma_flwr.rules.normalize`), so a pattern must be written in that form (a long s or
  a zero-width space in a pattern is refused, ``unnormalized``).
- **Not too broad.** A pattern that can match the empty string, or that matches anything in
  the probe corpus (:mod:`~pfedma_flwr.rules.probe`: a sample of every benchmark's task text
  with option lines, numbers of every shape, bare answers, ``X_i``-shaped items, and
  :data:`PROBE_TEXT`), would redact task content or answers; it is rejected.

What remains runs under :class:`MatchBudget`: a per-match timeout and one deadline for all
patterns of a message, so a pattern that is slow anyway costs a bounded, reported amount of time.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import regex

from pfedma_flwr.rules.normalize import is_normalized
from pfedma_flwr.rules.pattern_grammar import MAX_EXPLICIT_REPEAT as MAX_EXPLICIT_REPEAT
from pfedma_flwr.rules.pattern_grammar import MAX_PATHS, _Node, _Parser, _paths, _render, _widen
from pfedma_flwr.rules.pattern_grammar import MAX_REPEAT as MAX_REPEAT
from pfedma_flwr.rules.pattern_grammar import UnsafePatternError as UnsafePatternError
from pfedma_flwr.rules.probe import first_hit, probe_corpus, shape_texts

MAX_PATTERN_CHARS = 500
MAX_PATTERNS_PER_RULE = 8
#: Per-match budget; texts are capped by ``Limits.max_text_chars`` so honest patterns finish in µs.
MATCH_TIMEOUT_S = 0.05
#: Matching one rule may spend in one message (all its patterns, all fields and responses).
RULE_MATCH_BUDGET_S = 0.25

#: Ordinary task text that no privacy pattern may touch (what P_in and P_resp must preserve).
PROBE_TEXT = (
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
    "muffins for her friends every day with four. She sells the remainder at the farmers' market "
    "daily for $2 per fresh duck egg. How much in dollars does she make every day?\n"
    "A shop sold 1,250 shirts at 12.50 each with a 15% discount; 3/4 of 120 is 90, 2 + 3 = 5, "
    "x^2 - 4x + 4 = 0 and 0.5 * 8 = 4. The train left at 10:30 and arrived 2 hours later.\n"
    "A 45-year-old man comes to the emergency department because of chest pain for 3 days. His "
    "temperature is 38.5°C (101.3°F), pulse is 110/min, and blood pressure is 90/60 mm Hg. He "
    "takes lisinopril 10 mg and metformin. HbA1c is 7.2%, CD4+ count 350/mm3, COVID-19 negative. "
    "Which of the following is the most likely diagnosis, e.g. in the U.S. of well-being?\n"
    "A. Midodrine\nB. Rivastigmine\nC. Mirtazapine\nD) Acute myocardial infarction\n"
    "E) Pulmonary embolism\n(F) None of the above\n"
    "Self-explanatory state-of-the-art non-steroidal anti-inflammatory drugs (NSAIDs) are "
    "common. Über naïve café résumé — “quoted” text… 中文 ٣ Ωmega."
)

class PatternTimeoutError(ValueError):
    """A rule's pattern ran past its own per-match timeout (:data:`MATCH_TIMEOUT_S`)."""


class BudgetExhaustedError(PatternTimeoutError):
    """The message's matching budget ran out; the rule was not (fully) evaluated."""


@dataclass
class MatchBudget:
    """One deadline for all pattern matching of a message, and a share of it per rule.

    Parameters
    ----------
    seconds : float
        Total wall-clock seconds that pattern matching may use from construction on. Start
        one where the matching happens (after generation, not before it: issue 30 measured a
        1 s budget spent by a 1.2 s generation, so no adopted pattern rule ever fired).
    per_rule : float
        Seconds of matching one rule may spend in the message (its own cost, charged by
        :meth:`charge`); past it the rule is at fault (:class:`PatternTimeoutError`) and its
        owner quarantines it, where the shared deadline only skips what is left.
    """

    seconds: float
    per_rule: float = RULE_MATCH_BUDGET_S
    _deadline: float = field(init=False)
    spent_out: bool = field(default=False, init=False)
    _spent: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if not self.seconds > 0 or not self.per_rule > 0:
            raise ValueError(f"MatchBudget seconds and per_rule must be > 0, got "
                             f"{self.seconds}, {self.per_rule}")
        self._deadline = time.perf_counter() + self.seconds

    def remaining(self) -> float:
        """Seconds left (may be negative)."""
        return self._deadline - time.perf_counter()

    def timeout(self, rule_id: str | None = None) -> float:
        """The timeout for ``rule_id``'s next match: the per-match cap or what is left, if less.

        Raises :class:`BudgetExhaustedError` when the message's budget is spent and
        :class:`PatternTimeoutError` when ``rule_id`` spent its own share.
        """
        return self.bound(rule_id)[0]

    def bound(self, rule_id: str | None = None) -> tuple[float, bool]:
        """:meth:`timeout` and whether the message's deadline (not the rule's cost) binds it."""
        left = self.remaining()
        if left <= 0:
            self.spent_out = True
            raise BudgetExhaustedError("message pattern-matching budget exhausted")
        own = self.per_rule - self._spent.get(rule_id, 0.0) if rule_id else MATCH_TIMEOUT_S
        if own <= 0:
            raise PatternTimeoutError(f"rule {rule_id!r} spent its {self.per_rule}s of "
                                      "matching in this message")
        t = min(MATCH_TIMEOUT_S, own)
        return (left, True) if left < t else (t, False)

    def charge(self, rule_id: str, seconds: float) -> None:
        """Add ``seconds`` of matching to ``rule_id``'s own cost in this message."""
        self._spent[rule_id] = self._spent.get(rule_id, 0.0) + max(0.0, seconds)


@dataclass(frozen=True)
class CheckedPattern:
    """A pattern that passed :func:`check_pattern`: its bounded rewrite, compiled."""

    source: str
    compiled: regex.Pattern[str]


@functools.lru_cache(maxsize=4096)
def check_pattern(pattern: str, *, shared: bool = True, probe: bool = True) -> CheckedPattern:
    r"""Parse, bound and probe a rule pattern; raise :class:`UnsafePatternError` with a code.

    ``shared`` (every pattern that crosses a node: candidates, global rules) probes it by
    shape; a client's own local rule (``shared=False``) acts on that client's responses only
    and is probed on the corpus text as written, so a pattern for a name the client protects
    (``(?i)ann\s+lee``) stays usable there.

    Codes: ``empty``, ``too_long``, ``unnormalized``, ``syntax``, ``unsupported``,
    ``quantified_group``, ``repeat_too_large``, ``ambiguous``, ``matches_empty``,
    ``too_broad`` (it alters the probe corpus of :mod:`~pfedma_flwr.rules.probe`), ``slow``.
    ``probe=False`` skips the corpus probe (``too_broad``, ``slow``): for a pattern that was
    probed where it entered, or that never redacts (a catalogue safety rule's relevance
    keywords, :mod:`~pfedma_flwr.rules.guard_catalogue`).
    """
    if not isinstance(pattern, str) or not pattern:
        raise UnsafePatternError("empty", str(pattern), "rule pattern must not be empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UnsafePatternError("too_long", pattern,
                                 f"{len(pattern)} chars exceeds {MAX_PATTERN_CHARS}")
    if not is_normalized(pattern):
        raise UnsafePatternError("unnormalized", pattern,
                                 "write the pattern in NFKC form without invisible characters "
                                 "(text is matched in that form)")
    flags, body = 0, pattern
    if pattern.startswith("(?i)"):
        flags, body = regex.IGNORECASE, pattern[4:]
    parser = _Parser(body, flags)
    branches = parser.alternation(0)
    if parser.i != len(body):
        raise parser.fail("syntax", "unbalanced ')'")
    root = _Node("group", "", branches=branches)
    if _paths([root], frozenset()) > MAX_PATHS:
        raise UnsafePatternError(
            "ambiguous", pattern,
            f"repeats that can also match what follows them, alternations and optional groups "
            f"allow more than {MAX_PATHS} ways to try one position (backtracking risk); make "
            "adjacent repeats use disjoint characters")
    if root.nullable():
        raise UnsafePatternError("matches_empty", pattern, "the pattern can match empty text")
    source = "|".join("".join(_render(n) for n in b) for b in branches)
    try:
        compiled = regex.compile(source, flags | regex.VERSION0)
    except regex.error as e:  # the grammar admitted something the engine does not
        raise UnsafePatternError("syntax", pattern, str(e)) from None
    if not probe:
        return CheckedPattern(source=source, compiled=compiled)
    # shared: probed by shape, letters and digits widened to their classes, on the corpus and
    # on its shapes (every letter x/X, digit 5) plus every 3-symbol shape string
    wide = "|".join("".join(_widen(n) for n in b) for b in branches) if shared else source
    try:
        wide_re = regex.compile(wide, flags | regex.VERSION0)
        hit = first_hit(wide_re, (*probe_corpus().texts(), *(shape_texts() if shared else ())),
                        per_match_s=MATCH_TIMEOUT_S)
    except TimeoutError:
        raise UnsafePatternError("slow", pattern, "timed out on ordinary text") from None
    except regex.error as e:
        raise UnsafePatternError("syntax", pattern, str(e)) from None
    if hit is not None:
        raise UnsafePatternError(
            "too_broad", pattern,
            f"matches the shape of ordinary task text ({hit[:30]!r}); a privacy pattern must "
            "not fire on task text, numbers, option lines or bare answers, nor on text of their "
            "shape (letters and digits count as their classes)")
    return CheckedPattern(source=source, compiled=compiled)
