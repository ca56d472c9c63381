"""Common shell of the paper's baselines: PFedMA's Flower loop with another server method.

A baseline changes only what the server decides — who is asked (its orchestrator), what each
asked agent sees (the orchestrator's ``compose``), how answers become ``z`` (its aggregator) —
so it runs on the same ClientApp, agents, backends, data and agent pool as PFedMA, with the
same round budget (``strategy.t_max``, ``strategy.k_max``). PFedMA's own mechanisms are off
for every baseline: no anomaly filter (``ablation = -all``), no rule co-evolution on the server
(``rule_mode = NR``: no ``P_in`` policy, no promotion or redistribution; clients keep their
local rules) and no ``z`` refinement (what later rounds see is the baseline's ``compose``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.baselines.voting import vote_all
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.routing.orchestrator import Orchestrator
from strategies.pfedma import PFedMA


class BaselineStrategy(PFedMA):
    """A baseline: :meth:`orchestrator` and :attr:`aggregator` replace PFedMA's."""

    #: How the answers of a query become ``z`` (called like ``aggregation.aggregate``).
    aggregator: ClassVar[Callable[..., CollabState]] = staticmethod(vote_all)

    @classmethod
    def orchestrator(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> Orchestrator:
        """The baseline's routing policy (``parts``: embedder, recognizer, settings)."""
        raise NotImplementedError

    @classmethod
    def engine_parts(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> dict[str, Any]:
        """The orchestrator and aggregator of the method; PFedMA's mechanisms off."""
        settings = replace(parts["settings"], ablation="-all", rule_mode="NR",
                           refine_query=False)
        return {"settings": settings, "orchestrator": cls.orchestrator(cfg, parts),
                "aggregator": cls.aggregator}
