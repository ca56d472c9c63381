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
from pfedma_flwr.rules.probe import first_hit, probe_corpus, shape_texts

MAX_PATTERN_CHARS = 500
MAX_PATTERNS_PER_RULE = 8
#: ``+`` / ``*`` / ``{m,}`` are matched as ``{1,64}`` / ``{0,64}`` / ``{m,m+64}``.
MAX_REPEAT = 64
MAX_EXPLICIT_REPEAT = 255
#: Upper bound on the ways the engine can try one start position (see module docstring).
MAX_PATHS = 256
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

_CLASS_ESCAPES = frozenset("dDwWsS")
_ANCHOR_ESCAPES = frozenset("bBAZ")
_CONTROL_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v"}
_META = frozenset("\\.^$|?*+()[]{}")
#: Alphabet over which character sets are compared (ASCII plus representative non-ASCII).
_ALPHABET = tuple(chr(c) for c in range(9, 127)) + tuple("éßÜΩ中٣\u00a0’“—…")


class UnsafePatternError(ValueError):
    """A rule pattern outside the safe subset; ``code`` is a fixed reason code."""

    def __init__(self, code: str, pattern: str, detail: str) -> None:
        excerpt = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        super().__init__(f"invalid rule pattern {excerpt!r} ({code}): {detail}")
        self.code = code


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


# --------------------------------------------------------------------------- parser


@dataclass
class _Node:
    kind: str  # "char" | "anchor" | "group"
    src: str
    chars: frozenset[str] = frozenset()
    branches: list[list[_Node]] = field(default_factory=list)
    lo: int = 1
    hi: int = 1

    def first(self) -> frozenset[str]:
        if self.kind == "char":
            return self.chars
        if self.kind == "group":
            return frozenset().union(*(_seq_first(b) for b in self.branches))
        return frozenset()

    def nullable(self) -> bool:
        if self.lo == 0 or self.kind == "anchor":
            return True
        return self.kind == "group" and any(_seq_nullable(b) for b in self.branches)


def _seq_first(seq: list[_Node]) -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for n in seq:
        out |= n.first()
        if not n.nullable():
            break
    return out


def _seq_nullable(seq: list[_Node]) -> bool:
    return all(n.nullable() for n in seq)


class _Parser:
    def __init__(self, pattern: str, flags: int) -> None:
        self.p, self.i, self.flags = pattern, 0, flags

    def fail(self, code: str, detail: str) -> UnsafePatternError:
        return UnsafePatternError(code, self.p, f"{detail} (at offset {self.i})")

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def charset(self, src: str) -> frozenset[str]:
        return _chars_of(src, self.flags)

    def alternation(self, depth: int) -> list[list[_Node]]:
        branches = [self.sequence(depth)]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence(depth))
        return branches

    def sequence(self, depth: int) -> list[_Node]:
        seq: list[_Node] = []
        while self.peek() not in ("", "|", ")"):
            node = self.atom(depth)
            self.quantifier(node)
            seq.append(node)
        return seq

    def atom(self, depth: int) -> _Node:
        c = self.peek()
        if c == "(":
            return self.group(depth)
        if c == "[":
            return self.char_class()
        if c == "\\":
            return self.escape()
        if c in "^$":
            self.i += 1
            return _Node("anchor", c)
        if c in "?*+{":
            raise self.fail("syntax", f"quantifier {c!r} with nothing to repeat")
        if c == "]" or c == "}":
            raise self.fail("syntax", f"unbalanced {c!r} (escape it)")
        self.i += 1
        src = "." if c == "." else regex.escape(c)
        return _Node("char", src, self.charset(src))

    def group(self, depth: int) -> _Node:
        if depth >= 4:
            raise self.fail("unsupported", "groups nest deeper than 4")
        start = self.i
        self.i += 1
        head = "("
        if self.p.startswith("?:", self.i):
            self.i += 2
            head = "(?:"
        elif self.peek() == "?":
            raise self.fail("unsupported", "only (...) and (?:...) groups are allowed "
                            "(no lookaround, named, atomic or flag groups)")
        branches = self.alternation(depth + 1)
        if self.peek() != ")":
            self.i = start
            raise self.fail("syntax", "missing ')'")
        self.i += 1
        src = head + "|".join("".join(_render(n) for n in b) for b in branches) + ")"
        return _Node("group", src, branches=branches)

    def escape(self) -> _Node:
        self.i += 1
        c = self.peek()
        if not c:
            raise self.fail("syntax", "pattern ends with a backslash")
        self.i += 1
        if c in _CLASS_ESCAPES:
            return _Node("char", "\\" + c, self.charset("\\" + c))
        if c in _ANCHOR_ESCAPES:
            return _Node("anchor", "\\" + c)
        if c in _CONTROL_ESCAPES:
            return _Node("char", "\\" + c, frozenset(_CONTROL_ESCAPES[c]))
        if c.isalnum() or c == "_":
            raise self.fail("unsupported", f"escape \\{c} (backreferences, \\p, \\x, \\N ... "
                            "are outside the safe subset)")
        src = regex.escape(c)
        return _Node("char", src, self.charset(src))

    def char_class(self) -> _Node:
        start = self.i
        self.i += 1
        if self.peek() == "^":
            self.i += 1
        if self.peek() == "]":
            raise self.fail("syntax", "empty or ']'-first class (write \\])")
        while self.peek() != "]":
            c = self.peek()
            if not c:
                self.i = start
                raise self.fail("syntax", "missing ']'")
            if c == "[":
                raise self.fail("unsupported", "'[' inside a class (write \\[)")
            if c == "\\":
                e = self.p[self.i + 1 : self.i + 2]
                if not e or (e.isalnum() and e not in _CLASS_ESCAPES and e not in _CONTROL_ESCAPES):
                    raise self.fail("unsupported", f"escape \\{e} in a class")
                self.i += 2
            else:
                self.i += 1
        self.i += 1
        src = self.p[start : self.i]
        return _Node("char", src, self.charset(src))

    def quantifier(self, node: _Node) -> None:
        c = self.peek()
        if c not in ("?", "*", "+", "{"):
            return
        if node.kind == "anchor":
            raise self.fail("syntax", "an anchor cannot be repeated")
        if c == "{":
            m = regex.match(r"\{(\d{1,4})(?:(,)(\d{0,4}))?\}", self.p[self.i :])
            if m is None:
                raise self.fail("syntax", "malformed {m,n} repeat")
            self.i += m.end()
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else lo + MAX_REPEAT)
        else:
            self.i += 1
            lo, hi = {"?": (0, 1), "*": (0, MAX_REPEAT), "+": (1, MAX_REPEAT)}[c]
        if self.peek() in ("?", "+"):
            raise self.fail("unsupported", "lazy or possessive quantifiers")
        if lo > hi or hi > MAX_EXPLICIT_REPEAT:
            raise self.fail("repeat_too_large",
                            f"repeat {{{lo},{hi}}} (needs m <= n <= {MAX_EXPLICIT_REPEAT})")
        if node.kind == "group" and (lo, hi) not in ((0, 1), (1, 1)):
            raise self.fail("quantified_group",
                            "a repeated group nests quantifiers (catastrophic backtracking "
                            "risk); only '?' may follow a group: repeat single characters")
        node.lo, node.hi = lo, hi


def _render(n: _Node) -> str:
    if (n.lo, n.hi) == (1, 1):
        return n.src
    if (n.lo, n.hi) == (0, 1):
        return n.src + "?"
    return n.src + (f"{{{n.lo}}}" if n.lo == n.hi else f"{{{n.lo},{n.hi}}}")


_LOWER = frozenset(c for c in _ALPHABET if c.isalpha() and not c.isupper())
_UPPER = frozenset(c for c in _ALPHABET if c.isupper())
_DIGITS = frozenset(c for c in _ALPHABET if c.isdigit())
_BROAD = frozenset({".", r"\w", r"\W", r"\S", r"\D", r"\s", r"\d"})


def _widen(n: _Node) -> str:
    """``n`` rendered with each letter and digit widened to its whole class (probing only).

    ``MRN`` becomes ``[A-ZM][A-ZR][A-ZN]``: a pattern must not match text of the same shape
    as task text either, so a word that happens to be absent from the probe sample (``:s`` of
    ``std::string``) does not make a pattern safe.
    """
    if n.kind == "anchor":
        return n.src
    if n.kind == "group":
        body = "(?:" + "|".join("".join(_widen(c) for c in b) for b in n.branches) + ")"
        return _render(_Node("group", body, lo=n.lo, hi=n.hi))
    adds = "".join(r for cls, r in ((_LOWER, "a-z"), (_UPPER, "A-Z"), (_DIGITS, "0-9"))
                   if n.chars & cls)
    src = n.src
    if adds and src not in _BROAD and not src.startswith("[^"):
        src = "[" + adds + src[1:] if src.startswith("[") else f"[{adds}{src}]"
    return _render(_Node("char", src, n.chars, lo=n.lo, hi=n.hi))


@functools.lru_cache(maxsize=4096)
def _chars_of(src: str, flags: int) -> frozenset[str]:
    try:
        compiled = regex.compile(src, flags | regex.VERSION0)
    except regex.error as e:  # e.g. a reversed range [z-a]
        raise UnsafePatternError("syntax", src, str(e)) from None
    return frozenset(c for c in _ALPHABET if compiled.fullmatch(c))


def _paths(seq: list[_Node], follow: frozenset[str], tail: bool = False) -> int:
    r"""Upper bound on the ways a start position can be tried (see the module docstring).

    A variable repeat multiplies the bound when its characters can also start what follows
    (it can be re-split), and also, once an earlier choice exists, whenever anything after it
    can still fail (``tail``: something follows the sequence): each earlier choice then
    retries each of its lengths (``\w+\w+\s{4}`` took 1.6 s on 10,000 letters).
    """
    total = 1
    for k, n in enumerate(seq):
        after = _seq_first(seq[k + 1 :])
        if _seq_nullable(seq[k + 1 :]):
            after |= follow
        can_fail_after = tail or k + 1 < len(seq)
        if n.kind == "char" and n.hi > n.lo and (n.chars & after
                                                 or (total > 1 and can_fail_after)):
            total *= n.hi - n.lo + 1
        elif n.kind == "group":
            total *= len(n.branches) * (2 if n.lo == 0 else 1)
            for b in n.branches:
                total *= _paths(b, after, can_fail_after)
        if total > MAX_PATHS:
            return total
    return total


@dataclass(frozen=True)
class CheckedPattern:
    """A pattern that passed :func:`check_pattern`: its bounded rewrite, compiled."""

    source: str
    compiled: regex.Pattern[str]


@functools.lru_cache(maxsize=4096)
def check_pattern(pattern: str) -> CheckedPattern:
    """Parse, bound and probe a rule pattern; raise :class:`UnsafePatternError` with a code.

    Codes: ``empty``, ``too_long``, ``unnormalized``, ``syntax``, ``unsupported``,
    ``quantified_group``, ``repeat_too_large``, ``ambiguous``, ``matches_empty``,
    ``too_broad`` (it alters the probe corpus of :mod:`~pfedma_flwr.rules.probe`), ``slow``.
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
    # probed by shape: letters and digits widened to their classes, on the corpus and on its
    # shapes (every letter x/X, digit 5) plus every 3-symbol shape string
    wide = "|".join("".join(_widen(n) for n in b) for b in branches)
    try:
        wide_re = regex.compile(wide, flags | regex.VERSION0)
        hit = first_hit(wide_re, (*probe_corpus().texts(), *shape_texts()),
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
