r"""One normal form of text for rule matching and rule identity: NFKC, no invisible characters.

Measured (issue 30): ``(?i)haſ \d{1,6}`` (a long s) passed the breadth probe and redacted
"has 5", and a candidate with the text of the server's ``contact_query`` plus zero-width spaces
looked identical to it but was admitted as a new rule. So patterns and literals are matched on
the normal form of a text (:func:`normalized_with_map`, spans mapped back to the original), the
safety check probes the same form, and rule texts are compared by :func:`text_key`.

The normal form is NFKC of each base character with its combining marks, with format
characters (category ``Cf``: zero-width space/joiners, soft hyphen, BOM, bidi controls) removed.
"""

from __future__ import annotations

import functools
import re
import unicodedata

_SPACES = re.compile(r"\s+")


def _invisible(c: str) -> bool:
    return unicodedata.category(c) == "Cf"


def normalize_text(text: str) -> str:
    """NFKC of ``text`` without format (``Cf``) characters."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFKC", "".join(c for c in text if not _invisible(c)))


def is_normalized(text: str) -> bool:
    """Whether ``text`` is already in the normal form (NFKC, no ``Cf`` characters)."""
    return text.isascii() or normalize_text(text) == text


@functools.lru_cache(maxsize=512)
def normalized_with_map(text: str) -> tuple[str, tuple[int, ...]]:
    """The normal form of ``text`` and, per normal-form char + 1, its offset in ``text``.

    ``starts[k]`` is the offset in ``text`` of the cluster (a base character with its combining
    marks) that normal-form character ``k`` came from, and ``starts[len(norm)]`` is
    ``len(text)``; a span ``norm[a:b]`` covers ``text[starts[a]:ends(b)]`` where the end is the
    start of the first cluster not produced before ``b`` (:func:`original_span`). ASCII text is
    its own normal form (the map is the identity).
    """
    if text.isascii():
        return text, ()
    out: list[str] = []
    starts: list[int] = []
    i, n = 0, len(text)
    while i < n:
        j = i + 1
        while j < n and unicodedata.combining(text[j]):
            j += 1
        piece = "".join(c for c in text[i:j] if not _invisible(c))
        norm = unicodedata.normalize("NFKC", piece) if piece else ""
        out.append(norm)
        starts.extend([i] * len(norm))
        i = j
    starts.append(n)
    return "".join(out), tuple(starts)


def original_span(starts: tuple[int, ...], text_len: int, a: int, b: int) -> tuple[int, int]:
    """The span of the original text that normal-form span ``[a, b)`` came from."""
    if not starts:
        return a, b
    start = starts[a] if a < len(starts) else text_len
    # the end is where the cluster after the last matched char begins
    last = starts[b - 1] if b > 0 else start
    end = next((s for s in starts[b:] if s > last), text_len)
    return start, max(end, start)


def text_key(text: str) -> str:
    """What makes two rule texts the same text: normal form, casefolded, single spaces."""
    return _SPACES.sub(" ", normalize_text(text)).strip().casefold()


__all__ = ["is_normalized", "normalize_text", "normalized_with_map", "original_span",
           "text_key"]
