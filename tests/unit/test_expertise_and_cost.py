"""Who knows what (data.partition=profile) and what a cheap backbone buys (routing.cost_weight)."""

from __future__ import annotations

import numpy as np
import pytest

from pfedma_flwr.client import components
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.partition import partition_by_expertise
from pfedma_flwr.data.profiles import knowledge_domain
from pfedma_flwr.routing.orchestrator import (
    CandidateState,
    HeuristicOrchestrator,
    OrchestratorQuery,
)
from pfedma_flwr.routing.state import RoutingState


def _tasks(domain: str, n: int) -> list[Task]:
    return [Task(task_id=f"{domain}-{i}", benchmark="x", domain=domain, question=f"{domain} {i}",
                 gold="1", answer_kind="number") for i in range(n)]


def test_each_domain_goes_to_the_clients_whose_profile_covers_it():
    pool = _tasks("math", 6) + _tasks("medicine", 4) + _tasks("web", 3)
    doms = [("math",), ("medicine", "biology"), ("physics", "math"), ("law",)]
    parts = [partition_by_expertise(pool, doms, i, seed=0, domain_of=knowledge_domain)
             for i in range(4)]
    ids = [{t.task_id for t in p} for p in parts]
    # disjoint, covering
    assert sum(len(p) for p in ids) == len(pool) and set().union(*ids) == {t.task_id for t in pool}
    # math: 6 tasks dealt to clients 0 and 2 (3 each); medicine: all 4 to client 1; web
    # ("general") is covered by nobody: dealt to all four (1, 1, 1, 0)
    count = [{d: sum(t.domain == d for t in p) for d in ("math", "medicine", "web")}
             for p in parts]
    assert [c["math"] for c in count] == [3, 0, 3, 0]
    assert [c["medicine"] for c in count] == [0, 4, 0, 0]
    assert sorted(c["web"] for c in count) == [0, 1, 1, 1]
    assert parts == [partition_by_expertise(pool, doms, i, seed=0, domain_of=knowledge_domain)
                     for i in range(4)]  # deterministic
    with pytest.raises(ValueError, match="partition_id"):
        partition_by_expertise(pool, doms, 4)


def test_clients_of_a_profile_partition_hold_their_expertise():
    components.build_agent.cache_clear()
    over = "data.partition=profile agent.profiles=[mathematician,physician,lawyer]"
    agents = [components.build_agent({"config-name": "tiny", "overrides": over},
                                     {"partition-id": i, "num-partitions": 3}) for i in range(3)]
    components.build_agent.cache_clear()
    domains = [{t.domain for t in a.private_data} for a in agents]
    assert domains == [{"math"}, {"medicine"}, set()]  # the lawyer covers neither
    assert len(agents[0].private_data) == len(agents[1].private_data) == 20


def _cand(cid: str, price: float | None) -> CandidateState:
    return CandidateState(client_id=cid, state=RoutingState(), profile=cid,
                          profile_embedding=np.array([1.0, 0.0]), price=price)


def test_cost_weight_lowers_a_dear_backbone_by_its_share_of_the_top_price():
    q = OrchestratorQuery(query_id="q", text="t", domain="math", embedding=np.array([1.0, 0.0]))
    cands = [_cand("cheap", 0.1), _cand("dear", 0.3), _cand("unpriced", None)]
    blind = HeuristicOrchestrator(k_max=1).scores(q, cands)
    aware = HeuristicOrchestrator(k_max=1, cost_weight=0.3).scores(q, cands)
    # equal states and profiles: blind scores tie; aware subtracts 0.3 * price / 0.3
    assert blind[0] == blind[1] == blind[2]
    assert aware == pytest.approx([blind[0] - 0.1, blind[1] - 0.3, blind[2]])
    assert HeuristicOrchestrator(k_max=1, cost_weight=0.3).select(
        q, None, cands[:2], round=1).clients == ("cheap",)
    with pytest.raises(ValueError, match="cost_weight"):
        HeuristicOrchestrator(k_max=1, cost_weight=-1.0)
