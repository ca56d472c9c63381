"""``kabb``: KABB (Zhang et al., 2025b), a knowledge-aware Bayesian bandit over the experts.

Thompson sampling with time decay and knowledge distance picks the top K_max experts, their
majority vote answers, and each expert's agreement with it updates its posterior, which is
saved in the checkpoint (:mod:`pfedma_flwr.baselines.kabb`).
"""

from __future__ import annotations

from typing import Any

from pfedma_flwr.baselines.kabb import KABBOrchestrator
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.routing.orchestrator import Orchestrator
from strategies.baseline import BaselineStrategy


class KABB(BaselineStrategy):
    """Bandit expert selection learned from outcome agreement."""

    @classmethod
    def orchestrator(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> Orchestrator:
        """See :class:`~pfedma_flwr.baselines.kabb.KABBOrchestrator`."""
        return KABBOrchestrator(k_max=cfg.strategy.k_max, seed=cfg.seed,
                                embedder=parts["embedder"])
