"""Validators for untrusted payloads: each failure is a :class:`SchemaError` naming the field."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


class SchemaError(ValueError):
    """A value that crossed (or would cross) the wire is malformed; ``path`` names where."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    """Size caps for untrusted payloads (configurable under ``protocol.limits``)."""

    max_text_chars: int = 8000
    max_claims: int = 16
    max_evidence: int = 8
    max_items: int = 256
    max_rules: int = 512
    # whole-message cap, checked before JSON parsing so a huge reply costs no parse time
    max_payload_chars: int = 16_000_000

    def __post_init__(self) -> None:
        for name in ("max_text_chars", "max_claims", "max_evidence", "max_items", "max_rules",
                     "max_payload_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be >= 1, got {getattr(self, name)}")


DEFAULT_LIMITS = Limits()


# --------------------------------------------------------------------------- validators


def obj_(v: Any, path: str) -> dict[str, Any]:
    """A JSON object."""
    if not isinstance(v, dict):
        raise SchemaError(path, f"expected an object, got {type(v).__name__}")
    return v


def str_(v: Any, path: str, lim: Limits, *, allow_empty: bool = True) -> str:
    """A string within the text cap."""
    if not isinstance(v, str):
        raise SchemaError(path, f"expected a string, got {type(v).__name__}")
    if len(v) > lim.max_text_chars:
        raise SchemaError(path, f"string of {len(v)} chars exceeds cap {lim.max_text_chars}")
    if not allow_empty and not v.strip():
        raise SchemaError(path, "must not be empty")
    return v


def int_(v: Any, path: str, *, lo: int = 0, hi: int = 2**62) -> int:
    """An integer (not a bool) in ``[lo, hi]``."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise SchemaError(path, f"expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise SchemaError(path, f"{v} outside [{lo}, {hi}]")
    return v


def float_(v: Any, path: str, *, lo: float = -math.inf, hi: float = math.inf) -> float:
    """A finite number (not a bool) in ``[lo, hi]``."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SchemaError(path, f"expected a number, got {type(v).__name__}")
    f = float(v)
    if not math.isfinite(f):
        raise SchemaError(path, f"must be finite, got {v!r}")
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
    if v not in choices:
        raise SchemaError(path, f"{v!r} is not one of {list(choices)}")
    return str(v)


def no_extra(d: dict[str, Any], path: str, allowed: set[str]) -> None:
    """Reject unknown fields (hostile or version-skewed payloads)."""
    extra = sorted(set(d) - allowed)
    if extra:
        raise SchemaError(path, f"unexpected field(s) {extra}")


def req(d: dict[str, Any], key: str, path: str) -> Any:
    """A required field."""
    if key not in d:
        raise SchemaError(f"{path}.{key}", "missing required field")
    return d[key]
