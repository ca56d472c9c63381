"""Why a node could not start its agent, as one line that survives Flower's error relay.

A ClientApp that raises reaches the server as an error reply whose reason is whatever the
runtime made of the exception: in a Ray simulation 400-2,100 lines of tracebacks with ANSI
colours, cut to 200 characters in the server's log. The client therefore raises with
:func:`startup_message` (``agent start-up failed on client p0 [generation]: <cause>``), the
server finds that line anywhere in the reason with :func:`parse_startup`, and when too few
nodes start, :class:`StartupFailed` carries one line naming each distinct cause and the run's
status: ``failed:generation`` when a model backend cannot answer (a dead endpoint, a model id
the endpoint does not serve, missing weights), else ``failed``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "agent start-up failed on client"
#: ``generation``: the agent's model cannot answer; ``config``: the run or node config is
#: wrong; ``error``: anything else
KINDS = ("generation", "config", "error")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# the cause ends at a line break, an escaped one (reasons are often repr()s) or the end of
# Flower's "<class ...>:<'message'>" wrapper
_LINE = re.compile(rf"{PREFIX} (\S+) \[({'|'.join(KINDS)})\]: (.*?)(?=\n|\r|\\n|'>|$)")
MAX_CAUSE = 400


def one_line(text: object, limit: int = MAX_CAUSE) -> str:
    """``text`` without ANSI codes, on one line, at most ``limit`` characters."""
    s = " ".join(_ANSI.sub("", str(text)).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def startup_message(client: str, kind: str, error: object) -> str:
    """The line a ClientApp raises with when it cannot start its agent."""
    if kind not in KINDS:
        raise ValueError(f"start-up failure kind must be one of {KINDS}, got {kind!r}")
    return f"{PREFIX} {client} [{kind}]: {one_line(error)}"


@dataclass(frozen=True)
class StartupCause:
    """One node's start-up failure: its client label, kind and cause."""

    client: str
    kind: str
    cause: str


def parse_startup(reason: str) -> StartupCause | None:
    """The first start-up failure line in an error reply's ``reason``, if any."""
    m = _LINE.search(_ANSI.sub("", reason or ""))
    if m is None:
        return None
    return StartupCause(m.group(1), m.group(2), one_line(m.group(3)))


class StartupFailed(RuntimeError):
    """Too few nodes started their agent; ``status`` and ``cause`` go to ``summary.json``."""

    def __init__(self, *, started: int, asked: int, needed: int,
                 causes: Mapping[int, StartupCause | str]) -> None:
        by_cause: dict[str, list[str]] = {}
        kinds = set()
        for node, c in sorted(causes.items()):
            if isinstance(c, StartupCause):
                by_cause.setdefault(c.cause, []).append(c.client)
                kinds.add(c.kind)
            else:
                by_cause.setdefault(one_line(c, 200), []).append(f"node {node}")
        # node ids are random per run; name the clients in a stable order
        why = "; ".join(
            f"{'client' if len(who) == 1 else 'clients'} {', '.join(sorted(who))}: {cause}"
            for cause, who in by_cause.items())
        self.status = "failed:generation" if "generation" in kinds else "failed"
        self.cause = (f"only {started} of {asked} nodes started their agent (need "
                      f"strategy.min_nodes={needed})" + (f": {why}" if why else ""))
        super().__init__(self.cause)
