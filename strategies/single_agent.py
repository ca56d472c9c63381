"""``single-agent``: one agent answers once (the paper's single-agent baseline)."""

from __future__ import annotations

from typing import Any

from pfedma_flwr.baselines.single import SingleAgentOrchestrator
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.routing.orchestrator import Orchestrator
from strategies.baseline import BaselineStrategy


class SingleAgent(BaselineStrategy):
    """The best-matching agent alone, one round (the main preset runs it with one client)."""

    @classmethod
    def orchestrator(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> Orchestrator:
        """See :class:`~pfedma_flwr.baselines.single.SingleAgentOrchestrator`."""
        return SingleAgentOrchestrator(k_max=cfg.strategy.k_max, embedder=parts["embedder"])
