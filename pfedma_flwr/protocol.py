"""The one seam between Flower messages and PFedMA dataclasses.

Each message carries a single ``ConfigRecord`` under :data:`PAYLOAD_KEY` whose ``json`` value is
the dataclass as JSON (``schema_version`` inside). Decoding never raises anything but
:class:`~pfedma_flwr.schema.SchemaError`, whose text names the offending field.
"""

from __future__ import annotations

import json
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

QUERY_RESPOND = f"{MessageType.QUERY}.respond"
QUERY_DESCRIBE = f"{MessageType.QUERY}.describe"
PAYLOAD_KEY = "pfedma"
JSON_FIELD = "json"

T = TypeVar("T")


def _encode(obj: dict[str, Any]) -> RecordDict:
    return RecordDict({PAYLOAD_KEY: ConfigRecord({JSON_FIELD: json.dumps(obj, allow_nan=False)})})


def _decode_json(content: RecordDict, what: str, max_bytes: int) -> Any:
    if PAYLOAD_KEY not in content.config_records:
        raise SchemaError(what, f"message has no ConfigRecord {PAYLOAD_KEY!r}")
    rec = content.config_records[PAYLOAD_KEY]
    raw = rec.get(JSON_FIELD)
    if not isinstance(raw, str):
        raise SchemaError(what, f"record field {JSON_FIELD!r} must be a JSON string")
    if len(raw) > max_bytes:
        raise SchemaError(what, f"payload of {len(raw)} chars exceeds cap {max_bytes}")

    def _reject_const(c: str) -> float:
        raise SchemaError(what, f"non-finite number {c} in JSON")

    try:
        return json.loads(raw, parse_constant=_reject_const)
    except json.JSONDecodeError as e:
        raise SchemaError(what, f"invalid JSON: {e}") from None
    except RecursionError:
        raise SchemaError(what, "JSON nested too deeply") from None


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
    data = _decode_json(content, "instruction", payload_cap(lim))
    return RespondInstruction.from_dict(data, "instruction", lim)


def encode_reply(reply: ClientReply) -> RecordDict:
    """Client → server reply content."""
    return _encode(reply.to_dict())


def decode_reply(content: RecordDict, lim: Limits = DEFAULT_LIMITS) -> ClientReply:
    """Server side: parse and validate one client's reply (raises SchemaError with a reason)."""
    data = _decode_json(content, "reply", payload_cap(lim))
    return ClientReply.from_dict(data, "reply", lim)


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
        if not isinstance(d, dict):
            raise SchemaError("description", "expected an object")
        out: dict[str, Any] = {}
        for key in ("profile_name", "description", "backbone", "client_key"):
            v = d.get(key, {"backbone": "default", "client_key": ""}.get(key))
            if not isinstance(v, str) or len(v) > lim.max_text_chars:
                raise SchemaError(f"description.{key}", "expected a bounded string")
            out[key] = v
        doms = d.get("domains", [])
        if (not isinstance(doms, list) or len(doms) > 32
                or not all(isinstance(x, str) for x in doms)):
            raise SchemaError("description.domains", "expected a list of at most 32 strings")
        return cls(domains=tuple(doms), **out)


def encode_description(desc: ClientDescription) -> RecordDict:
    """Client → server ``query.describe`` reply content."""
    return _encode(desc.to_dict())


def decode_description(content: RecordDict, lim: Limits = DEFAULT_LIMITS) -> ClientDescription:
    """Server side: parse a ``query.describe`` reply."""
    return ClientDescription.from_dict(_decode_json(content, "description", 1 << 20), lim)


def empty_content() -> RecordDict:
    """Content of a ``query.describe`` request."""
    return RecordDict({PAYLOAD_KEY: ConfigRecord({JSON_FIELD: "{}"})})
