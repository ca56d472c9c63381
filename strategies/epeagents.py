"""``epeagents``: EPEAgents (Shi et al., 2025), a server-side privacy-enhancing agent.

Each selected agent receives only the fields of the task it is authorized for, then the
experts' majority vote answers (:mod:`pfedma_flwr.baselines.epe`).
"""

from __future__ import annotations

from typing import Any

from pfedma_flwr.baselines.epe import EPEOrchestrator
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.routing.orchestrator import Orchestrator
from strategies.baseline import BaselineStrategy


class EPEAgents(BaselineStrategy):
    """Top-K_max experts, one round, fields filtered per agent by the run's PII recognizer."""

    @classmethod
    def orchestrator(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> Orchestrator:
        """See :class:`~pfedma_flwr.baselines.epe.EPEOrchestrator`."""
        return EPEOrchestrator(k_max=cfg.strategy.k_max, recognizer=parts["recognizer"],
                               embedder=parts["embedder"])
