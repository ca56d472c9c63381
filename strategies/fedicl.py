"""``fedicl``: Fed-ICL (Wang et al., 2025), federated in-context learning with a majority vote.

Clients answer with in-context examples from their private data (``agent.few_shot``), the server
votes and re-broadcasts the vote for refinement rounds up to T_max
(:mod:`pfedma_flwr.baselines.fedicl`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pfedma_flwr.baselines.fedicl import FedICLOrchestrator
from pfedma_flwr.baselines.voting import vote_latest
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.routing.orchestrator import Orchestrator
from strategies.baseline import BaselineStrategy


class FedICL(BaselineStrategy):
    """Seeded K_max clients per query; the vote of the last round is the answer."""

    aggregator: ClassVar[Any] = staticmethod(vote_latest)

    @classmethod
    def orchestrator(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> Orchestrator:
        """See :class:`~pfedma_flwr.baselines.fedicl.FedICLOrchestrator`."""
        return FedICLOrchestrator(k_max=cfg.strategy.k_max, seed=cfg.seed,
                                  embedder=parts["embedder"])
