"""Validators for untrusted payloads: each failure is a :class:`SchemaError` naming the field.

Every rejection carries a fixed ``code`` (``too_large``, ``bad_json``, ``int_too_long``,
``bad_float``, ``bad_string``, ``too_deep``, ``duplicate_key``, ``schema:<field>``) and a reason
of bounded length: untrusted values appear only as short ``repr``-escaped excerpts, so a 5 MB
field can never be echoed into the round log.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any

# The fixed rejection codes (``schema:<field>`` is formed from the field name).
CODES: tuple[str, ...] = ("too_large", "bad_json", "int_too_long", "bad_float", "bad_string",
                          "too_deep", "duplicate_key", "bad_record", "internal")
EXCERPT_CHARS = 80
_MAX_PATH_CHARS = 120
_MAX_REASON_CHARS = 240
# Lone surrogates cannot be encoded as UTF-8: tokenizers and log writers raise on them.
_SURROGATE = re.compile("[\ud800-\udfff]")
# C0/C1 controls (not tab/newline/CR), DEL, and the extra line breaks of ``str.splitlines``
# (U+2028/U+2029): they forge log lines and terminal escapes but carry no task content.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,40}$")


def excerpt(v: Any, n: int = EXCERPT_CHARS) -> str:
    """A ``repr``-escaped excerpt of at most ``n`` chars of an untrusted value (never raises)."""
    try:
        if isinstance(v, str):
            r = repr(v[: n + 1])
        elif isinstance(v, bool) or v is None:
            r = repr(v)
        elif isinstance(v, int):
            # str() of a > 4300-digit int raises ValueError; describe huge ones by size
            r = repr(v) if abs(v) < 10**30 else f"<{v.bit_length()}-bit integer>"
        elif isinstance(v, float):
            r = repr(v)
        else:
            r = f"<{type(v).__name__}>"
    except Exception:  # noqa: BLE001 - an excerpt must never be the thing that fails
        r = f"<{type(v).__name__}>"
    return r if len(r) <= n else r[: n - 3] + "..."


def _field_of(path: str) -> str:
    last = path.rsplit(".", 1)[-1].split("[", 1)[0]
    return last if _FIELD.match(last) else "value"


class SchemaError(ValueError):
    """A value that crossed (or would cross) the wire is malformed; ``path`` names where.

    ``code`` is one of :data:`CODES` or ``schema:<field>``; ``path`` and ``reason`` are
    bounded (untrusted text only as escaped excerpts), so ``str(e)`` is safe to log.
    """

    def __init__(self, path: str, reason: str, *, code: str | None = None) -> None:
        path = path if len(path) <= _MAX_PATH_CHARS else path[: _MAX_PATH_CHARS - 3] + "..."
        if len(reason) > _MAX_REASON_CHARS:
            reason = reason[: _MAX_REASON_CHARS - 3] + "..."
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.code = code or f"schema:{_field_of(path)}"

    def coded(self) -> str:
        """``"<code> at <path>: <reason>"``: the bounded form written to round logs."""
        return f"{self.code} at {self.path}: {self.reason}"


@dataclass(frozen=True)
class Limits:
    """Caps on untrusted payloads, checked by every decoder (the config section protocol)."""

    # characters of one text field, claims and evidence items per answer, items (queries,
    # answers) and rules per message
    max_text_chars: int = 8000
    max_claims: int = 16
    max_evidence: int = 8
    max_items: int = 256
    max_rules: int = 512
    # whole reply cap in characters, checked before JSON parsing so a huge reply costs no parse
    # time
    max_payload_chars: int = 16_000_000
    # ids (query, rule, client keys, domains) are echoed in round logs and prompts: far shorter
    # than free text
    max_id_chars: int = 128
    # JSON nesting of a message (a valid one nests 7 deep: reply > responses > response > ...)
    max_depth: int = 16
    # self-reported tokens of one answer (the reply's total: max_items times this); 10^9 per
    # answer inflated summary.json's cost columns 10^6x (issue 30)
    max_answer_tokens: int = 65_536

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"protocol.{f.name} must be an integer >= 1, got {value!r}")


DEFAULT_LIMITS = Limits()


# --------------------------------------------------------------------------- validators


def obj_(v: Any, path: str) -> dict[str, Any]:
    """A JSON object."""
    if not isinstance(v, dict):
        raise SchemaError(path, f"expected an object, got {type(v).__name__}")
    return v


def clean_text(v: str, path: str) -> str:
    """``v`` without control characters; lone surrogates are rejected (``bad_string``)."""
    m = _SURROGATE.search(v)
    if m is not None:
        raise SchemaError(path, f"lone surrogate {m.group()!r} at char {m.start()}",
                          code="bad_string")
    return _CONTROL.sub("", v) if _CONTROL.search(v) else v


def str_(v: Any, path: str, lim: Limits, *, allow_empty: bool = True,
         cap: int | None = None) -> str:
    """A string within the text cap (or ``cap``), control characters stripped."""
    if not isinstance(v, str):
        raise SchemaError(path, f"expected a string, got {type(v).__name__}")
    cap = lim.max_text_chars if cap is None else cap
    if len(v) > cap:
        raise SchemaError(path, f"string of {len(v)} chars exceeds cap {cap}")
    v = clean_text(v, path)
    if not allow_empty and not v.strip():
        raise SchemaError(path, "must not be empty")
    return v


def id_(v: Any, path: str, lim: Limits) -> str:
    """A non-empty identifier within the id cap."""
    return str_(v, path, lim, allow_empty=False, cap=lim.max_id_chars)


def short_id(v: str, n: int = 40) -> str:
    """An id as logged: whole up to ``n`` chars, else its start and ``…``.

    Issue 30: 128-char ids echoed whole made ``rounds.jsonl`` 30x larger.
    """
    return v if len(v) <= n else v[: n - 1] + "\u2026"


def int_(v: Any, path: str, *, lo: int = 0, hi: int = 2**62) -> int:
    """An integer (not a bool) in ``[lo, hi]``."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise SchemaError(path, f"expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise SchemaError(path, f"{excerpt(v)} outside [{lo}, {hi}]")
    return v


def float_(v: Any, path: str, *, lo: float = -math.inf, hi: float = math.inf) -> float:
    """A finite number (not a bool) in ``[lo, hi]``."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SchemaError(path, f"expected a number, got {type(v).__name__}")
    try:
        f = float(v)
    except OverflowError:  # an int beyond float range (a 400-digit number)
        raise SchemaError(path, f"{excerpt(v)} is too large for a float",
                          code="bad_float") from None
    if not math.isfinite(f):
        raise SchemaError(path, f"must be finite, got {f!r}", code="bad_float")
    if not lo <= f <= hi:
        raise SchemaError(path, f"{f} outside [{lo}, {hi}]")
    return f


def unit_(v: Any, path: str) -> float:
    """A finite number in [0, 1]."""
    return float_(v, path, lo=0.0, hi=1.0)


def list_(v: Any, path: str, cap: int) -> list[Any]:
    """A list of at most ``cap`` items."""
    if not isinstance(v, list):
        raise SchemaError(path, f"expected a list, got {type(v).__name__}")
    if len(v) > cap:
        raise SchemaError(path, f"list of {len(v)} items exceeds cap {cap}")
    return v


def strs_(v: Any, path: str, lim: Limits, cap: int | None = None) -> tuple[str, ...]:
    """A capped list of capped strings."""
    items = list_(v, path, cap if cap is not None else lim.max_items)
    return tuple(str_(x, f"{path}[{k}]", lim) for k, x in enumerate(items))


def choice_(v: Any, path: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``."""
    if not isinstance(v, str) or v not in choices:
        raise SchemaError(path, f"{excerpt(v)} is not one of {list(choices)}")
    return v


def no_extra(d: dict[str, Any], path: str, allowed: set[str]) -> None:
    """Reject unknown fields (hostile or version-skewed payloads); names only as excerpts."""
    extra = [k for k in d if k not in allowed]
    if extra:
        shown = ", ".join(excerpt(k, 40) for k in sorted(extra, key=str)[:3])
        more = f" and {len(extra) - 3} more" if len(extra) > 3 else ""
        raise SchemaError(path, f"unexpected field(s) [{shown}]{more}")


def req(d: dict[str, Any], key: str, path: str) -> Any:
    """A required field."""
    if key not in d:
        raise SchemaError(f"{path}.{key}", "missing required field")
    return d[key]
