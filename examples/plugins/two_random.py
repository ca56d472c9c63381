"""Strategy plug-in: two random agents per query, one round, majority vote.

--set strategy.name=examples.plugins.two_random:TwoRandomVote
"""

from dataclasses import replace

from pfedma_flwr.baselines.voting import vote_all
from pfedma_flwr.routing import RandomOrchestrator
from strategies.pfedma import PFedMA


class TwoRandomVote(PFedMA):
    """PFedMA's loop (filter, rules, routing state) with a random pair and an equal vote."""

    @classmethod
    def engine_parts(cls, cfg, parts):
        return {
            "settings": replace(parts["settings"], t_max=1, k_max=2),
            "orchestrator": RandomOrchestrator(k_max=2, seed=cfg.seed, stop_support=None),
            "aggregator": vote_all,
        }
