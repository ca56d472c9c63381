"""Absorbing a round as a transaction: a client whose reply makes the engine raise is rolled back.

Nothing a client sends may crash the server (DEVELOPERS.md), yet a plug-in judge or aggregator
can still raise on one hostile reply. :func:`absorb_isolated` absorbs a Flower round's replies
on a copy of the engine's state; when the engine raises, it finds the replies that provoke it
(each alone, then, if none does alone, the one whose removal lets the rest through), records
them as ``engine_error`` failures of their clients, and absorbs the round without them. The
engine declares what a copy shares instead of copying (:attr:`CollaborationEngine.SHARED`:
plug-ins, callbacks, read-only data), so no caller names its attributes.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pfedma_flwr.protocol.schema import ClientReply

if TYPE_CHECKING:
    from pfedma_flwr.server.engine import CollaborationEngine

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineSnapshot:
    """A deep copy of an engine's state, with the objects it shares kept by reference."""

    state: dict[str, Any]
    shared: tuple[Any, ...]
    n_finished: int


def snapshot(engine: CollaborationEngine) -> EngineSnapshot:
    """Copy ``engine``'s state (raises whatever ``copy.deepcopy`` raises on a plug-in)."""
    e = vars(engine)
    shared = tuple(o for k in engine.SHARED if (o := e.get(k)) is not None)
    state = copy.deepcopy(e, {id(o): o for o in shared})
    return EngineSnapshot(state=state, shared=shared, n_finished=len(engine.finished))


def restore(engine: CollaborationEngine, snap: EngineSnapshot) -> None:
    """Put ``engine`` back to ``snap`` (a fresh copy each time: the engine mutates its state)."""
    fresh = copy.deepcopy(snap.state, {id(o): o for o in snap.shared})
    vars(engine).update(fresh)
    del engine.finished[snap.n_finished:]


def culprits(engine: CollaborationEngine, server_round: int,
             parsed: Mapping[str, ClientReply], snap: EngineSnapshot) -> dict[str, str]:
    """Clients whose reply makes ``absorb_round`` raise, each tried on a fresh copy.

    First each reply alone; if none raises alone (the fault needs two replies together), the
    first client whose removal lets the rest through. Values are the exception type names.
    """

    def fails(subset: dict[str, ClientReply]) -> str | None:
        restore(engine, snap)
        engine.on_query_end = None
        try:
            engine.absorb_round(server_round, subset, {})
        except Exception as e:  # noqa: BLE001 - the point is to find who provokes one
            return type(e).__name__
        return None

    out: dict[str, str] = {}
    for cid in sorted(parsed):
        if (err := fails({cid: parsed[cid]})) is not None:
            out[cid] = err
    first = None if out else fails(dict(parsed))
    if first is None:
        return out
    for cid in sorted(parsed):
        if fails({c: r for c, r in parsed.items() if c != cid}) is None:
            return {cid: first}
    return out


def absorb_isolated(engine: CollaborationEngine, server_round: int,
                    parsed: dict[str, ClientReply], failures: dict[str, str]) -> dict[str, Any]:
    """``engine.absorb_round``; a client whose content makes it raise becomes a failure.

    The engine state is copied first and queries it finishes are held back until the round is
    absorbed, so a failed attempt leaves no trace; the clients that provoke the error are
    removed from ``parsed`` and added to ``failures`` (``engine_error: ...``) and the round is
    absorbed without them. An error no single client provokes is a bug and propagates (the
    last checkpoint stays intact). An engine whose plug-ins cannot be copied is absorbed
    unguarded, with a warning.
    """
    try:
        snap = snapshot(engine)
    except Exception as e:  # noqa: BLE001 - a plug-in that cannot be copied: no guard
        logger.warning("engine state cannot be copied (%s): absorbing unguarded", e)
        return engine.absorb_round(server_round, parsed, failures)
    sink, held = engine.on_query_end, list[dict[str, Any]]()
    engine.on_query_end = held.append
    try:
        try:
            record = engine.absorb_round(server_round, parsed, failures)
        except Exception as first:  # noqa: BLE001 - isolated below, re-raised if a bug
            restore(engine, snap)
            held.clear()
            found = culprits(engine, server_round, parsed, snap)
            if not found:
                raise first
            if len(found) == len(parsed) > 1:
                # every reply provokes it: hostile round or an engine bug; say so loudly
                logger.error("Round %s: the engine raised on every reply (%s); all recorded as "
                             "failures. If the replies look honest this is a bug.",
                             server_round, first)
            for cid, err in found.items():
                logger.warning("Round %s: the engine raised %s on %s's reply: recorded as a "
                               "failure", server_round, err, cid)
                failures[cid] = f"engine_error: {err} while absorbing this client's reply"
                del parsed[cid]
            restore(engine, snap)
            engine.on_query_end = held.append
            record = engine.absorb_round(server_round, parsed, failures)
    finally:
        engine.on_query_end = sink
    if sink is not None:
        for rec in held:
            sink(rec)
    return record
