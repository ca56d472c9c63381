r"""The safe regex subset of rule patterns: a small parser, its bounds and its shape widening.

Used by :func:`pfedma_flwr.rules.safety.check_pattern` (which documents the subset). Kept apart
so the check itself (probe, budget) stays readable; nothing here compiles text into a matcher.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import regex

#: ``+`` / ``*`` / ``{m,}`` are matched as ``{1,64}`` / ``{0,64}`` / ``{m,m+64}``.
MAX_REPEAT = 64
MAX_EXPLICIT_REPEAT = 255
#: Upper bound on the ways the engine can try one start position (safety's module docstring).
MAX_PATHS = 256

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


#: every ASCII punctuation character, as a class body
PUNCT_CLASS = r"!-/:-@\[-`{-~"
_BROAD = frozenset({".", r"\w", r"\W", r"\S", r"\D", r"\s", r"\d"})


def _widen(n: _Node) -> str:
    r"""``n`` rendered with every character widened to its whole class (probing only).

    Letters become all letters of their case, digits all digits, whitespace ``\s`` and
    punctuation all punctuation: ``MRN-`` probes as ``[A-Z][A-Z][A-Z][punctuation]``. A
    pattern must not match text of the same *shape* as task text either, so a word or unit
    that happens to be absent from the probe sample (``:s`` of ``std::string``, ``0/mL``)
    does not make a pattern safe. Text anchors are dropped (``^HCO3`` of a held-out question
    probes as ``HCO3``, wherever it stands).
    """
    if n.kind == "anchor":  # a text anchor only narrows where it matches: probe without it
        return "" if n.src in ("^", "$", r"\A", r"\Z") else n.src
    if n.kind == "group":
        body = "(?:" + "|".join("".join(_widen(c) for c in b) for b in n.branches) + ")"
        return _render(_Node("group", body, lo=n.lo, hi=n.hi))
    adds = "".join(r for kind, r in (("lower", "a-z"), ("upper", "A-Z"), ("digit", "0-9"),
                                     ("space", r"\s"), ("punct", PUNCT_CLASS))
                   if any(_kind(c) == kind for c in n.chars))
    src = n.src
    if adds and src not in _BROAD and not src.startswith("[^"):
        src = "[" + adds + src[1:] if src.startswith("[") else f"[{adds}{src}]"
    return _render(_Node("char", src, n.chars, lo=n.lo, hi=n.hi))


def _kind(c: str) -> str:
    """The shape class of one character, as :func:`~pfedma_flwr.rules.probe.shape` draws it."""
    if c.isdigit():
        return "digit"
    if c.isalpha():
        return "upper" if c.isupper() else "lower"
    return "space" if c.isspace() else "punct"


@functools.lru_cache(maxsize=4096)
def _chars_of(src: str, flags: int) -> frozenset[str]:
    r"""The characters ``src`` matches among :data:`_ALPHABET` and the characters it names.

    A symbol outside the alphabet (``°``, ``€``) counts as the punctuation it is in the
    shape space: ``°C?\B`` probes like ``.C?\B`` (a held-out "37 °." was redacted before).
    """
    try:
        compiled = regex.compile(src, flags | regex.VERSION0)
    except regex.error as e:  # e.g. a reversed range [z-a]
        raise UnsafePatternError("syntax", src, str(e)) from None
    return frozenset(c for c in (*_ALPHABET, *src) if compiled.fullmatch(c))


def _paths(seq: list[_Node], follow: frozenset[str], tail: bool = False, prior: int = 1) -> int:
    r"""Upper bound on the ways a start position can be tried (see the module docstring).

    A variable repeat multiplies the bound when its characters can also start what follows
    (it can be re-split), and also, once an earlier choice exists (here or, ``prior``, outside
    this group), whenever anything after it can still fail (``tail``: something follows the
    sequence): each earlier choice then retries each of its lengths (``\w+\w+\s{4}`` took
    1.6 s on 10,000 letters, ``\d{2,64}(?:\w@|\d{2,64}[a-z])`` 0.8 s on 10,000 digits).
    """
    total = 1
    for k, n in enumerate(seq):
        after = _seq_first(seq[k + 1 :])
        if _seq_nullable(seq[k + 1 :]):
            after |= follow
        can_fail_after = tail or k + 1 < len(seq)
        if n.kind == "char" and n.hi > n.lo and (n.chars & after
                                                 or (prior * total > 1 and can_fail_after)):
            total *= n.hi - n.lo + 1
        elif n.kind == "group":
            # the engine tries the branches one after another: their ways add up (a product
            # rejected an eight-keyword alternation with plural s? at 2^8 * 8 ways)
            ways = sum(_paths(b, after, can_fail_after, prior * total * len(n.branches))
                       for b in n.branches)
            total *= ways * (2 if n.lo == 0 else 1)
        if total > MAX_PATHS:
            return total
    return total
