"""``optagent``: OPTAGENT (Bi et al., 2025), multi-agent debate over a learned graph.

Round 1 every debater answers, later rounds each sees its graph neighbours' answers; edge
weights follow debate-quality scores; the last round's majority vote answers
(:mod:`pfedma_flwr.baselines.debate`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pfedma_flwr.baselines.debate import OptAgentOrchestrator
from pfedma_flwr.baselines.voting import vote_latest
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.routing.orchestrator import Orchestrator
from strategies.baseline import BaselineStrategy


class OptAgent(BaselineStrategy):
    """Debate of K_max experts up to T_max rounds."""

    aggregator: ClassVar[Any] = staticmethod(vote_latest)

    @classmethod
    def orchestrator(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> Orchestrator:
        """See :class:`~pfedma_flwr.baselines.debate.OptAgentOrchestrator`."""
        return OptAgentOrchestrator(k_max=cfg.strategy.k_max, embedder=parts["embedder"])
