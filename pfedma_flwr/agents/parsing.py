"""Turn raw agent text into a validated :class:`~pfedma_flwr.protocol.schema.StructuredResponse`.

Small models wrap JSON in prose or ```json fences, leave trailing commas, use single quotes,
give ``claims`` as plain strings, or answer with a bare number. :func:`parse_structured_response`
repairs exactly those cases, then validates with ``StructuredResponse.from_dict`` (seed App. D
fields, strict ranges). It never raises: a failure is a :class:`ParseOutcome` with ``ok=False``
and a reason, which the client reports as ``format_ok=False`` (DESIGN §6: a bad reply is
recorded and excluded, never crashes the run).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pfedma_flwr.protocol.schema import DEFAULT_LIMITS, Limits, SchemaError, StructuredResponse

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_FIELDS = ("final_answer", "claims", "domain_fit", "self_confidence")
# Common aliases small models use for the answer field.
_ANSWER_ALIASES = ("answer", "final", "result")


@dataclass(frozen=True)
class ParseOutcome:
    """Result of parsing one raw agent output.

    Attributes
    ----------
    response : StructuredResponse or None
        The validated response, or ``None`` on failure.
    ok : bool
        Whether parsing and validation succeeded.
    error : str
        Why it failed (empty on success).
    repaired : bool
        Whether a repair (fence/prose stripping, commas, quotes, claim conversion) was needed.
    """

    response: StructuredResponse | None
    ok: bool
    error: str = ""
    repaired: bool = False


def _candidates(raw: str) -> list[str]:
    """JSON object substrings to try, most likely first."""
    out = [m.group(1).strip() for m in _FENCE.finditer(raw)]
    text = raw.strip()
    out.append(text)
    start = text.find("{")
    if start >= 0:
        end = text.rfind("}")
        if end > start:
            out.append(text[start : end + 1])
        balanced = _first_balanced(text, start)
        if balanced:
            out.append(balanced)
    return list(dict.fromkeys(c for c in out if c))


def _first_balanced(text: str, start: int) -> str:
    """The first brace-balanced ``{...}`` from ``start`` (strings respected), or ``""``."""
    depth, in_str, esc, quote = 0, False, False, ""
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                in_str = False
        elif ch in "\"'":
            in_str, quote = True, ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return ""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not allowed")


def _loads(text: str) -> Any:
    """``json.loads`` that rejects NaN/Infinity, then retries with light repairs."""
    attempts = [text, _TRAILING_COMMA.sub(r"\1", text)]
    if "'" in text and '"' not in text:
        attempts.append(_TRAILING_COMMA.sub(r"\1", text.replace("'", '"')))
    err: Exception | None = None
    for a in attempts:
        try:
            return json.loads(a, parse_constant=_reject_constant)
        except ValueError as e:  # JSONDecodeError is a ValueError
            err = e
    raise ValueError(str(err))


def _normalize(obj: Any) -> Any:
    """Map tolerated shapes onto the schema; leave anything else for validation to reject."""
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        return {"final_answer": obj}
    if not isinstance(obj, dict):
        return obj
    d = dict(obj)
    if "final_answer" not in d:
        for alias in _ANSWER_ALIASES:
            if alias in d:
                d["final_answer"] = d.pop(alias)
                break
    claims = d.get("claims")
    if isinstance(claims, list):
        d["claims"] = [{"claim": c, "evidence": []} if isinstance(c, str) else c for c in claims]
        for c in d["claims"]:
            if isinstance(c, dict) and isinstance(c.get("evidence"), str):
                c["evidence"] = [c["evidence"]]
    return d


def parse_structured_response(raw: Any, limits: Limits = DEFAULT_LIMITS) -> ParseOutcome:
    """Parse and validate one raw agent output.

    Parameters
    ----------
    raw : str
        The model's text (anything else fails with a reason).
    limits : Limits
        Size caps applied by ``StructuredResponse.from_dict``.

    Returns
    -------
    ParseOutcome
        ``ok=True`` with the response, or ``ok=False`` with the reason. Out-of-range scores,
        NaN/Infinity, missing ``final_answer`` and unknown fields are rejected, not clipped:
        the schema is the contract and silent clipping would hide a broken model.
    """
    if not isinstance(raw, str):
        return ParseOutcome(None, False, f"expected text, got {type(raw).__name__}")
    if len(raw) > 4 * limits.max_text_chars:
        return ParseOutcome(None, False, f"output of {len(raw)} chars exceeds the size cap")
    if not raw.strip():
        return ParseOutcome(None, False, "empty output")
    errors: list[str] = []
    for cand in _candidates(raw):
        try:
            obj = _loads(cand)
        except ValueError as e:
            errors.append(f"invalid JSON: {e}")
            continue
        # A bare number is accepted only when it is the whole output ("42").
        bare = isinstance(obj, int | float) and not isinstance(obj, bool) and cand == raw.strip()
        if not isinstance(obj, dict) and not bare:
            errors.append(f"expected a JSON object, got {type(obj).__name__}")
            continue
        norm = _normalize(obj)
        try:
            resp = StructuredResponse.from_dict(norm, "response", limits)
        except SchemaError as e:
            return ParseOutcome(None, False, str(e))
        if not resp.final_answer.strip():
            return ParseOutcome(None, False, "response.final_answer: must not be empty")
        repaired = cand != raw.strip() or norm != obj or _canon(cand) is None
        return ParseOutcome(resp, True, "", repaired)
    if "{" not in raw and errors:
        return ParseOutcome(None, False, "no JSON object found")
    return ParseOutcome(None, False, errors[-1] if errors else "no JSON object found")


def _canon(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return None
