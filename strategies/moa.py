"""``moa``: Mixture-of-Agents, layered proposers then an aggregator agent whose answer is final.

(:mod:`pfedma_flwr.baselines.moa`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pfedma_flwr.baselines.moa import MoAOrchestrator
from pfedma_flwr.baselines.voting import vote_latest
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.routing.orchestrator import Orchestrator
from strategies.baseline import BaselineStrategy


class MixtureOfAgents(BaselineStrategy):
    """K_max proposers per layer for T_max − 1 layers, one aggregator in round T_max."""

    aggregator: ClassVar[Any] = staticmethod(vote_latest)

    @classmethod
    def orchestrator(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> Orchestrator:
        """See :class:`~pfedma_flwr.baselines.moa.MoAOrchestrator`."""
        return MoAOrchestrator(k_max=cfg.strategy.k_max, t_max=cfg.strategy.t_max,
                               embedder=parts["embedder"])
