"""The engine's run counters, typed (issue 31 item 5).

One field per counter, so a misspelt key is an attribute error at the line that made it rather
than a new entry in ``summary.json``. The per-answer failure accounting itself is a pure
function over the mapping form (:func:`~pfedma_flwr.server.query_state.with_answer_failures`),
which the checkpoint stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class EngineTotals:
    """Counters of a run, all starting at zero.

    Attributes
    ----------
    failures : int
        Client messages that failed (timeouts, errors, rejected replies).
    filtered, retained : int
        Answers the anomaly filter removed / kept.
    rejected_items : int
        Items of replies the server refused (wrong query, duplicates, over the caps).
    invalid_selections : int
        Orchestrator actions that failed validation (each ended its query).
    answers, answers_failed, generation_failed : int
        Answers asked of agents; of those, not usable; of those, never produced by the agent.
    failed_by_client : dict
        ``{client: {reason code: n}}`` of the failed answers.
    """

    failures: int = 0
    filtered: int = 0
    retained: int = 0
    rejected_items: int = 0
    invalid_selections: int = 0
    answers: int = 0
    answers_failed: int = 0
    generation_failed: int = 0
    failed_by_client: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint and summary form (a plain JSON object)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EngineTotals:
        """Read :meth:`to_dict`'s form; a counter it lacks (an older checkpoint) starts at 0."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"engine totals: unknown counters {unknown}")
        kw: dict[str, Any] = {k: int(v) for k, v in d.items() if k != "failed_by_client"}
        kw["failed_by_client"] = {str(c): {str(code): int(n) for code, n in dict(per).items()}
                                  for c, per in dict(d.get("failed_by_client", {})).items()}
        return cls(**kw)
