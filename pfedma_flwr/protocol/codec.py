"""The one seam between Flower messages and PFedMA dataclasses.

Each message carries a single ``ConfigRecord`` under :data:`PAYLOAD_KEY` whose ``json`` value is
the dataclass as JSON (``schema_version`` inside). Decoding never raises anything but
:class:`~pfedma_flwr.protocol.schema.SchemaError`, whose text names the offending field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

from flwr.app import ConfigRecord, MessageType, RecordDict

from pfedma_flwr.protocol.schema import (
    DEFAULT_LIMITS,
    ClientReply,
    Limits,
    RespondInstruction,
    SchemaError,
)
from pfedma_flwr.protocol.validation import excerpt

# Flower-free wire types live in pfedma_flwr.protocol.wire; re-exported for the shells.
from pfedma_flwr.protocol.wire import (  # noqa: F401
    IDENTITY_MODES,
    ClientDescription,
    assign_client_keys,
    node_client_key,
)

QUERY_RESPOND = f"{MessageType.QUERY}.respond"
QUERY_DESCRIBE = f"{MessageType.QUERY}.describe"
PAYLOAD_KEY = "pfedma"
JSON_FIELD = "json"

T = TypeVar("T")


def _encode(obj: dict[str, Any]) -> RecordDict:
    return RecordDict({PAYLOAD_KEY: ConfigRecord({JSON_FIELD: json.dumps(obj, allow_nan=False)})})


# Longest number literals accepted: every integer field is below 2**62 (19 digits); a float
# repr needs at most 24 chars. Python's int() refuses > 4300 digits with ValueError and
# float() of a 400-digit int overflows, so the literal is checked before converting.
_MAX_INT_CHARS = 20
_MAX_FLOAT_CHARS = 40
_STRING_LITERAL = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _skeleton(raw: str) -> str:
    """The JSON text with every string literal removed (linear time, no backtracking).

    Escaped backslashes, then escaped quotes, are dropped first, so the remaining quotes
    delimit strings exactly as a JSON parser reads them (up to the first syntax error).
    """
    return _STRING_LITERAL.sub("", raw.replace("\\\\", "").replace('\\"', ""))


def value_cap(lim: Limits) -> int:
    """Most JSON values (containers, keys, scalars) a valid message can hold under ``lim``.

    Twice the count of the fullest valid reply: ``max_items`` responses of ``max_claims``
    claims with ``max_evidence`` evidence each, ``max_items`` candidates and ``max_rules``
    feedback entries or global rules with 64 patterns/entity types each.
    """
    per_response = 16 + lim.max_claims * (4 + lim.max_evidence)
    per_rule = 16 + 2 * 32
    return 2 * (lim.max_items * (per_response + per_rule + 2) + lim.max_rules * per_rule + 64)


def _prescan(raw: str, what: str, lim: Limits, max_values: int) -> None:
    """Bound the number of values and the nesting depth before anything is parsed.

    Parsing 16 MB of ``{}`` builds millions of objects (~350 MB); counting the structure of
    the string-free skeleton costs one linear pass and no allocation per value.
    """
    sk = _skeleton(raw)
    n = sk.count("{") + sk.count("[") + sk.count(",")
    if n > max_values:
        raise SchemaError(what, f"about {n} JSON values exceed cap {max_values}",
                          code="too_large")
    depth = deepest = 0
    for c in _NOT_BRACKET.sub("", sk):
        depth += 1 if c in "[{" else -1
        deepest = max(deepest, depth)
    if deepest > lim.max_depth:
        raise SchemaError(what, f"JSON nested {deepest} deep exceeds cap {lim.max_depth}",
                          code="too_deep")


def _parse_int(s: str) -> int:
    if len(s) > _MAX_INT_CHARS:
        raise SchemaError("json", f"integer literal of {len(s)} digits", code="int_too_long")
    return int(s)


def _parse_float(s: str) -> float:
    if len(s) > _MAX_FLOAT_CHARS:
        raise SchemaError("json", f"number literal of {len(s)} chars", code="bad_float")
    f = float(s)
    if not math.isfinite(f):  # 1e999 parses to inf
        raise SchemaError("json", f"number {excerpt(s)} overflows a float", code="bad_float")
    return f


def _reject_constant(c: str) -> float:
    raise SchemaError("json", f"non-finite number {c} in JSON", code="bad_float")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        # a second value for a key would silently win over the first one that was checked
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise SchemaError("json", f"duplicate key {excerpt(k, 40)}",
                                  code="duplicate_key")
            seen.add(k)
    return d


def _decode_json(content: RecordDict, what: str, max_chars: int, lim: Limits,
                 max_values: int | None = None) -> Any:
    """The payload's JSON value, or a :class:`SchemaError` with a code (never anything else)."""
    try:
        records = content.config_records
        rec = records[PAYLOAD_KEY] if PAYLOAD_KEY in records else None
        raw = rec.get(JSON_FIELD) if rec is not None else None
    except Exception as e:  # noqa: BLE001 - a malformed record is the sender's fault
        raise SchemaError(what, f"unreadable record ({type(e).__name__})",
                          code="bad_record") from None
    if rec is None:
        raise SchemaError(what, f"message has no ConfigRecord {PAYLOAD_KEY!r}", code="bad_record")
    if not isinstance(raw, str):
        raise SchemaError(what, f"record field {JSON_FIELD!r} must be a JSON string",
                          code="bad_record")
    if len(raw) > max_chars:
        raise SchemaError(what, f"payload of {len(raw)} chars exceeds cap {max_chars}",
                          code="too_large")
    _prescan(raw, what, lim, value_cap(lim) if max_values is None else max_values)
    try:
        return json.loads(raw, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except SchemaError as e:
        raise SchemaError(what, e.reason, code=e.code) from None
    except json.JSONDecodeError as e:
        # the decoder's message names a position, never the content
        raise SchemaError(what, f"invalid JSON: {e.msg} at char {e.pos}",
                          code="bad_json") from None
    except RecursionError:
        raise SchemaError(what, "JSON nested too deeply", code="too_deep") from None
    except MemoryError:
        raise SchemaError(what, "payload too large to parse", code="too_large") from None
    except Exception as e:  # noqa: BLE001 - nothing but SchemaError may cross the seam
        raise SchemaError(what, f"invalid JSON ({type(e).__name__})", code="bad_json") from None


def payload_cap(lim: Limits) -> int:
    """Largest JSON payload accepted (chars).

    The configured cap, or less when the field caps cannot add up to it.
    """
    per_text = lim.max_text_chars + 64
    per_response = per_text * (2 + lim.max_claims * (1 + lim.max_evidence))
    derived = lim.max_items * per_response + lim.max_rules * per_text * 8
    return min(derived, lim.max_payload_chars)


def encode_instruction(ins: RespondInstruction) -> RecordDict:
    """Server → client ``query.respond`` content."""
    return _encode(ins.to_dict())


def decode_instruction(content: RecordDict, lim: Limits = DEFAULT_LIMITS) -> RespondInstruction:
    """Client side: parse the ``query.respond`` content."""
    data = _decode_json(content, "instruction", payload_cap(lim), lim)
    return _guarded(RespondInstruction.from_dict, data, "instruction", lim)


def encode_reply(reply: ClientReply) -> RecordDict:
    """Client → server reply content."""
    return _encode(reply.to_dict())


def decode_reply(content: RecordDict, lim: Limits = DEFAULT_LIMITS) -> ClientReply:
    """Server side: parse and validate one client's reply (raises SchemaError with a reason)."""
    data = _decode_json(content, "reply", payload_cap(lim), lim)
    return _guarded(ClientReply.from_dict, data, "reply", lim)


def encode_description(desc: ClientDescription) -> RecordDict:
    """Client → server ``query.describe`` reply content."""
    return _encode(desc.to_dict())


def decode_description(content: RecordDict, lim: Limits = DEFAULT_LIMITS) -> ClientDescription:
    """Server side: parse a ``query.describe`` reply."""
    data = _decode_json(content, "description", 1 << 20, lim, max_values=1024)
    return _guarded(lambda d, _w, li: ClientDescription.from_dict(d, li), data, "description", lim)


def _guarded(parse: Callable[[Any, str, Limits], T], data: Any, what: str, lim: Limits) -> T:
    """``parse(data)``; any exception but :class:`SchemaError` becomes one (code ``internal``).

    The validators raise only SchemaError; this keeps the seam's contract if one of them (or a
    dataclass check) ever raises something else on an input nobody thought of.
    """
    try:
        return parse(data, what, lim)
    except SchemaError:
        raise
    except RecursionError:
        raise SchemaError(what, "value nested too deeply", code="too_deep") from None
    except Exception as e:  # noqa: BLE001 - nothing but SchemaError may cross the seam
        raise SchemaError(what, f"invalid value ({type(e).__name__})", code="internal") from None


def empty_content() -> RecordDict:
    """Content of a ``query.describe`` request."""
    return RecordDict({PAYLOAD_KEY: ConfigRecord({JSON_FIELD: "{}"})})
