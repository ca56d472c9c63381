"""The one seam between Flower messages and PFedMA dataclasses.

Each message carries a single ``ConfigRecord`` under :data:`PAYLOAD_KEY` whose ``json`` value is
the dataclass as JSON (``schema_version`` inside). Decoding never raises anything but
:class:`~pfedma_flwr.schema.SchemaError`, whose text names the offending field.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from flwr.app import ConfigRecord, MessageType, RecordDict

from pfedma_flwr.schema import (
    DEFAULT_LIMITS,
    ClientReply,
    Limits,
    RespondInstruction,
    SchemaError,
)
from pfedma_flwr.validation import excerpt, id_, no_extra, obj_, str_

QUERY_RESPOND = f"{MessageType.QUERY}.respond"
QUERY_DESCRIBE = f"{MessageType.QUERY}.describe"
PAYLOAD_KEY = "pfedma"
JSON_FIELD = "json"

T = TypeVar("T")
# Declared client keys: the node config's client-id or "partition-<i>" (log- and file-safe,
# the alphabet of persistence.validate_key).
_CLIENT_KEY = re.compile(r"[A-Za-z0-9._-]{1,128}")


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


@dataclass(frozen=True)
class ClientDescription:
    """Public metadata a client announces once: its profile (routing state M_i's profile part)."""

    profile_name: str
    domains: tuple[str, ...]
    description: str
    backbone: str = "default"
    # Stable identity across restarts (node config "client-id", else "partition-<id>"); node
    # ids are random per run, so routing states and checkpoints are keyed by this instead.
    client_key: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "client_key": self.client_key,
            "profile_name": self.profile_name,
            "domains": list(self.domains),
            "description": self.description,
            "backbone": self.backbone,
        }

    @classmethod
    def from_dict(cls, d: Any, lim: Limits = DEFAULT_LIMITS) -> ClientDescription:
        d = obj_(d, "description")
        no_extra(d, "description", {"schema_version", "client_key", "profile_name", "domains",
                                    "description", "backbone"})
        key = d.get("client_key", "")
        if key != "":
            key = id_(key, "description.client_key", lim)
            if not _CLIENT_KEY.fullmatch(key):
                raise SchemaError("description.client_key",
                                  f"{excerpt(key)} is not [A-Za-z0-9._-]{{1,128}}")
        doms = d.get("domains", [])
        if not isinstance(doms, list) or len(doms) > 32:
            raise SchemaError("description.domains", "expected a list of at most 32 strings")
        return cls(
            profile_name=str_(d.get("profile_name"), "description.profile_name", lim),
            domains=tuple(str_(x, f"description.domains[{k}]", lim, cap=lim.max_id_chars)
                          for k, x in enumerate(doms)),
            description=str_(d.get("description"), "description.description", lim),
            backbone=str_(d.get("backbone", "default"), "description.backbone", lim,
                          cap=lim.max_id_chars),
            client_key=key,
        )


# ------------------------------------------------------------------ node identity

IDENTITY_MODES: tuple[str, ...] = ("auto", "node", "declared")


def node_client_key(node_id: int, public_key: bytes) -> str:
    """The engine key of a node from what the SuperLink authenticated about it.

    In deployment every Fleet request is signed with the SuperNode's private key and its node
    id is bound to that public key (Flower 1.42 ``NodeAuthServerInterceptor``), so the key's
    fingerprint is an identity no other node can present; it is stable across runs while the
    node keeps its key file (``--auth-supernode-private-key``). Without a key: the node id.
    """
    if public_key:
        return "key-" + hashlib.sha256(public_key).hexdigest()[:16]
    return f"node-{node_id}"


def assign_client_keys(
    claims: Mapping[int, tuple[str, bytes]], mode: str
) -> tuple[dict[int, str], dict[int, str]]:
    """Engine key per node, and the nodes left out of routing with the reason.

    ``claims`` maps node id → (declared ``client_key``, public key bytes). ``mode`` ``"node"``
    ignores the declaration (a label only); ``"declared"`` (simulation, where the operator runs
    every ClientApp) uses it when present. A key that two or more nodes resolve to is given to
    none of them: neither claimant can take over the other's reputation, and nobody is renamed.
    """
    if mode not in ("node", "declared"):
        raise ValueError(f"identity mode must be 'node' or 'declared', got {mode!r}")
    keys = {n: declared if mode == "declared" and declared else node_client_key(n, pk)
            for n, (declared, pk) in claims.items()}
    holders: dict[str, list[int]] = {}
    for n, k in keys.items():
        holders.setdefault(k, []).append(n)
    rejected: dict[int, str] = {}
    for k, nodes in holders.items():
        if len(nodes) > 1:
            for n in nodes:
                rejected[n] = f"duplicate_key: {k!r} claimed by {len(nodes)} nodes"
                del keys[n]
    return keys, rejected


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
