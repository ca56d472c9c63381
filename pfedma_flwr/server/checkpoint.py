"""An engine's state between two Flower rounds, as plain data, and its restoration.

The strategy writes :func:`engine_state` after every round (``checkpoint.json``) so a run that
stops can continue where it was (``--resume``). Like :mod:`~.transaction`, this module is the
engine's own: it reads the engine's queue and RNG so no caller names them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pfedma_flwr.baselines import hooks
from pfedma_flwr.routing.state import RoutingTable
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.server.query_state import QueryState
from pfedma_flwr.server.totals import EngineTotals

if TYPE_CHECKING:
    from pfedma_flwr.server.engine import CollaborationEngine

CHECKPOINT_VERSION = 1


def engine_state(engine: CollaborationEngine, server_round: int) -> dict[str, Any]:
    """Everything needed to continue after ``server_round`` (taken between rounds)."""
    return {
        "version": CHECKPOINT_VERSION, "server_round": server_round,
        "task_ids": engine._task_ids, "finished": engine.finished,
        "active": [q.to_dict() for q in engine._active],
        "pending": [t.task_id for t in engine._pending],
        "routing": engine.routing.to_dict(), "rules": engine.rules.to_dict(),
        "totals": engine.totals.to_dict(), "rng": engine._rng.bit_generator.state,
        "orchestrator": hooks.orchestrator_state(engine.orchestrator),
    }


def load_engine_state(engine: CollaborationEngine, d: Mapping[str, Any]) -> int:
    """Restore an :func:`engine_state` into ``engine``; return the last completed round.

    Raises ``ValueError`` for another checkpoint version or another task stream (a changed
    seed, benchmark list or size would otherwise resume with the wrong questions).
    """
    if d.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"checkpoint version {d.get('version')!r} != {CHECKPOINT_VERSION}")
    if list(d["task_ids"]) != engine._task_ids:
        raise ValueError("checkpoint was written for a different task stream "
                         "(seed, benchmarks or sizes changed); cannot resume")
    tasks = {t.task_id: t for t in engine._tasks}
    engine.finished = [dict(r) for r in d["finished"]]
    engine._active = [QueryState.from_dict(q, tasks[q["task_id"]]) for q in d["active"]]
    engine._pending = [tasks[i] for i in d["pending"]]
    engine.routing = RoutingTable.from_dict(d["routing"])
    engine.rules = GlobalRuleRepository.from_dict(d["rules"], embedder=engine.embedder)
    engine.totals = EngineTotals.from_dict(d["totals"])
    engine._rng.bit_generator.state = d["rng"]
    hooks.load_orchestrator_state(engine.orchestrator, d.get("orchestrator"))
    return int(d["server_round"])
