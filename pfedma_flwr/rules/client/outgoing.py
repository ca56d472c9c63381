"""The client's last check on what it sends: no ``D_i`` sensitive item, no local literal (issue 12).

Rules protect by detection, and detection can be switched off (a global rule displacing a local
one, a quarantined pattern, a spent matching budget). This check does not depend on any rule
being active: it scans every string of the outgoing
:class:`~pfedma_flwr.protocol.schema.ClientReply` (responses, error codes, candidates,
feedback ids) for the client's secrets, and withholds what holds one. It is the invariant
behind "protection only grows": whatever the rule state, a secret of ``D_i`` never leaves
the client.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pfedma_flwr.protocol.schema import ClientReply, ProcessedResponse
from pfedma_flwr.rules.normalize import normalize_text
from pfedma_flwr.rules.spans import literal_regex

logger = logging.getLogger(__name__)

#: Error code of a response withheld by the outgoing check (no detail: it would echo the item).
BLOCKED = "blocked:outgoing"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def holds_secret(payload: Any, secrets: Sequence[str]) -> bool:
    """Whether any string inside ``payload`` (a JSON-ready value) contains one of ``secrets``.

    Matching is that of literal rules (case-insensitive, word-bounded at word characters), on
    the normal form of both (a zero-width space inside a secret does not hide it).
    """
    texts = [normalize_text(t) for t in _strings(payload)]
    return any(literal_regex(normalize_text(s)).search(t) for s in secrets for t in texts)


def client_secrets(sensitive_items: Iterable[str], literals: Iterable[str]) -> list[str]:
    """The strings the check blocks: ``D_i``'s sensitive items and every local rule literal."""
    return sorted({s.strip() for s in (*sensitive_items, *literals) if s and s.strip()})


@dataclass(frozen=True)
class OutgoingCheck:
    """What :func:`check_outgoing` withheld (counts only: never the secret)."""

    responses: int = 0
    candidates: int = 0
    feedback: int = 0

    @property
    def blocked(self) -> int:
        """Parts withheld in all."""
        return self.responses + self.candidates + self.feedback


def check_outgoing(reply: ClientReply, secrets: Sequence[str]) -> tuple[ClientReply, OutgoingCheck]:
    """``reply`` with every part that holds a secret withheld.

    A response holding one becomes a refusal (``response=None``, ``refused=True``, error
    :data:`BLOCKED`, its tokens kept); a candidate or feedback row holding one is dropped.
    """
    if not secrets:
        return reply, OutgoingCheck()
    responses: list[ProcessedResponse] = []
    n_resp = 0
    for r in reply.responses:
        if holds_secret(r.to_dict(), secrets):
            n_resp += 1
            responses.append(ProcessedResponse(r.query_id, None, refused=True, error=BLOCKED,
                                               tokens=r.tokens, cached_tokens=r.cached_tokens,
                                               round=r.round))
        else:
            responses.append(r)
    cands = tuple(c for c in reply.candidates if not holds_secret(c.to_dict(), secrets))
    rows = tuple(f for f in reply.feedback if not holds_secret(f.to_dict(), secrets))
    report = OutgoingCheck(n_resp, len(reply.candidates) - len(cands),
                           len(reply.feedback) - len(rows))
    if not report.blocked:
        return reply, report
    logger.warning("outgoing check withheld %d response(s), %d candidate(s), %d feedback row(s)",
                   report.responses, report.candidates, report.feedback)
    return dataclasses.replace(reply, responses=tuple(responses), candidates=cands,
                               feedback=rows), report


__all__ = ["BLOCKED", "OutgoingCheck", "check_outgoing", "client_secrets", "holds_secret"]
