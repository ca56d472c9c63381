"""``router-r1``: Router-R1 (Zhang et al., 2025a) with a heuristic router policy.

One agent per turn over up to T_max turns, chosen by capability for the query's domain; stops
when the answer repeats; the last turn's answer is final (:mod:`pfedma_flwr.baselines.router`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pfedma_flwr.baselines.router import RouterR1Orchestrator
from pfedma_flwr.baselines.voting import vote_latest
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.routing.orchestrator import Orchestrator
from strategies.baseline import BaselineStrategy


class RouterR1(BaselineStrategy):
    """A multi-turn router consulting one expert per turn."""

    aggregator: ClassVar[Any] = staticmethod(vote_latest)

    @classmethod
    def orchestrator(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> Orchestrator:
        """See :class:`~pfedma_flwr.baselines.router.RouterR1Orchestrator`."""
        return RouterR1Orchestrator(k_max=cfg.strategy.k_max,
                                    use_capability=cfg.routing.use_capability,
                                    embedder=parts["embedder"])
