"""Strategies by name (``strategy.name``): PFedMA and the paper's baselines, or ``module:Class``.

Every built-in runs on the same ClientApp, agents, backends, data and agent pool, with the
same round budget (``strategy.t_max``, ``strategy.k_max``); only the server's method differs.
A strategy from outside the repo is a class (or any object) with the classmethod
``from_config(cfg, *, tasks, on_query_end, on_round_end)`` returning an object with an
``engine`` (:class:`~pfedma_flwr.server.engine.CollaborationEngine`, for checkpoints and the
summary) and ``start(grid, *, start_round) -> result`` whose ``result.summary`` is a dict.
Subclassing :class:`~strategies.pfedma.PFedMA` and overriding ``engine_parts`` is the short way
(docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pfedma_flwr.config import ConfigError, PFedMAConfig
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.registry import Registry
from strategies.epeagents import EPEAgents
from strategies.fedicl import FedICL
from strategies.kabb import KABB
from strategies.moa import MixtureOfAgents
from strategies.optagent import OptAgent
from strategies.pfedma import PFedMA, RoundHook
from strategies.router_r1 import RouterR1
from strategies.single_agent import SingleAgent

STRATEGIES: Registry[Any] = Registry("strategy")
STRATEGIES.add("pfedma", PFedMA)
STRATEGIES.add("single-agent", SingleAgent)
STRATEGIES.add("fedicl", FedICL)
STRATEGIES.add("epeagents", EPEAgents)
STRATEGIES.add("router-r1", RouterR1)
STRATEGIES.add("kabb", KABB)
STRATEGIES.add("optagent", OptAgent)
STRATEGIES.add("moa", MixtureOfAgents)

#: The methods of the paper's Tables 1 and 2, in table order.
METHODS: tuple[str, ...] = ("pfedma", "single-agent", "fedicl", "epeagents", "router-r1",
                            "kabb", "optagent", "moa")


def build_strategy(
    cfg: PFedMAConfig, *, tasks: Sequence[Task],
    on_query_end: Callable[[dict[str, Any]], None] | None = None,
    on_round_end: RoundHook | None = None,
) -> Any:
    """The strategy ``cfg.strategy.name`` names, built from the run config.

    Raises
    ------
    ConfigError
        For an unknown name, a ``module:Class`` that cannot be imported, or an object that is
        not a strategy (no ``from_config``, or a result without ``engine`` / ``start``).
    """
    name = cfg.strategy.name
    try:
        obj = STRATEGIES.get(name)
    except ValueError as e:
        raise ConfigError(f"strategy.name: {e}") from e
    make = getattr(obj, "from_config", None)
    if not callable(make):
        raise ConfigError(f"strategy.name {name!r} resolves to {obj!r}, which has no "
                          "from_config(cfg, *, tasks, on_query_end, on_round_end) classmethod")
    strategy = make(cfg, tasks=tasks, on_query_end=on_query_end, on_round_end=on_round_end)
    missing = [a for a in ("engine", "start") if not hasattr(strategy, a)]
    if missing:
        raise ConfigError(f"strategy {name!r}: from_config returned {type(strategy).__name__} "
                          f"without {missing}")
    return strategy
