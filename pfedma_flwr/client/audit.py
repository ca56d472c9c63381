"""Client-side privacy audit: what left this node, by field and size (never the content itself).

Every outgoing message's JSON payload is reduced to counts — messages, responses, rule
candidates, feedback rows, characters per *field kind* (the JSON path with list indices
dropped, e.g. ``responses.response.claims.evidence``) and total bytes — so an operator can check
that only the fields the protocol allows (DESIGN §1: processed responses ``r̃``, generalized
candidates ``ω̄`` and Δ-count feedback) carry text, and how much. Records go to a JSONL file in
the node's ``state-dir`` or, without one, to flat counters in ``context.state``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pfedma_flwr.persistence import append_line, private_dir, read_jsonl_lines

AUDIT_FILE_VERSION = 1
# Flat counter names; field-kind character counts are stored as "chars:<field kind>".
CHARS_PREFIX = "chars:"
_COUNTS = ("messages", "responses", "candidates", "feedback_rows", "total_bytes")


def _field_chars(obj: Any, path: str, out: dict[str, int]) -> None:
    if isinstance(obj, str):
        out[path] = out.get(path, 0) + len(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _field_chars(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(obj, list):
        for v in obj:
            _field_chars(v, path, out)


def summarize_payload(message_type: str, payload_json: str) -> dict[str, Any]:
    """One audit record for an outgoing payload (the exact JSON text that is sent).

    Parameters
    ----------
    message_type : str
        Flower message type of the request being answered, e.g. ``"query.respond"``.
    payload_json : str
        The JSON text placed in the reply.

    Returns
    -------
    dict
        ``{"v", "ts", "message_type", "responses", "candidates", "feedback_rows",
        "total_bytes", "chars": {field kind: characters}}``.
    """
    doc = json.loads(payload_json)
    chars: dict[str, int] = {}
    _field_chars(doc, "", chars)
    body = doc if isinstance(doc, dict) else {}

    def _n(key: str) -> int:
        v = body.get(key)
        return len(v) if isinstance(v, list) else 0

    return {
        "v": AUDIT_FILE_VERSION, "ts": round(time.time(), 3), "message_type": message_type,
        "responses": _n("responses"), "candidates": _n("candidates"),
        "feedback_rows": _n("feedback"), "total_bytes": len(payload_json.encode("utf-8")),
        "chars": dict(sorted(chars.items())),
    }


def add_to_counters(counters: Mapping[str, int], record: Mapping[str, Any]) -> dict[str, int]:
    """Fold one audit record into flat integer counters (storable in a ``ConfigRecord``)."""
    out = dict(counters)
    out["messages"] = out.get("messages", 0) + 1
    for key in _COUNTS[1:]:
        out[key] = out.get(key, 0) + int(record.get(key, 0))
    mtype = f"messages:{record.get('message_type', '?')}"
    out[mtype] = out.get(mtype, 0) + 1
    for field_kind, n in dict(record.get("chars", {})).items():
        k = f"{CHARS_PREFIX}{field_kind}"
        out[k] = out.get(k, 0) + int(n)
    return out


def append_record(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append one record to a JSONL audit log (one line, flushed; file 0600, directory 0700).

    The log sits in the node's private ``state-dir`` and says what left the node: only its
    owner should read it.
    """
    p = Path(path)
    private_dir(p.parent)
    append_line(p, json.dumps(dict(record), sort_keys=True))


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSONL audit log; a torn last line (crash mid-write) is skipped.

    Raises
    ------
    ValueError
        For a line that does not parse anywhere but at the end (naming the line).
    """
    return [rec for _, rec in read_jsonl_lines(Path(path)) if isinstance(rec, dict)]


def summarize_records(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals over audit records: counts, bytes, characters per field kind, by message type."""
    counters: dict[str, int] = {}
    for r in records:
        counters = add_to_counters(counters, r)
    return summarize_counters(counters)


def summarize_counters(counters: Mapping[str, int]) -> dict[str, Any]:
    """Nested view of flat counters (as kept in ``context.state`` without a state dir)."""
    return {
        **{k: int(counters.get(k, 0)) for k in _COUNTS},
        "by_message_type": {k.split(":", 1)[1]: int(v) for k, v in sorted(counters.items())
                            if k.startswith("messages:")},
        "chars": {k[len(CHARS_PREFIX):]: int(v) for k, v in sorted(counters.items())
                  if k.startswith(CHARS_PREFIX)},
    }


def summarize_audit_log(path: str | Path) -> dict[str, Any]:
    """Summary of a JSONL audit log file (see :func:`summarize_records`)."""
    return summarize_records(read_records(path))


def main(argv: list[str] | None = None) -> int:
    """``python -m pfedma_flwr.client.audit <audit.jsonl>``: print the summary as JSON."""
    p = argparse.ArgumentParser(prog="python -m pfedma_flwr.client.audit", description=__doc__)
    p.add_argument("path", help="a client's audit JSONL file (in its state-dir)")
    a = p.parse_args(argv)
    sys.stdout.write(json.dumps(summarize_audit_log(a.path), indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
