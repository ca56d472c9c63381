"""Private knowledge D_i reaches the agent: per-query retrieval from the client's own partition.

Agents are built the way a ClientApp builds them (``client.components.build_agent``) for five
clients of one run; each answers the same questions, and the solved cases in its prompt are
matched against every client's partition.
"""

from __future__ import annotations

import pytest

from pfedma_flwr.agents.backends import make_backend
from pfedma_flwr.client import components
from pfedma_flwr.config import load_config
from pfedma_flwr.data.partition import partition_tasks
from pfedma_flwr.data.retrieval import clear_retrieval_cache, retrieve_examples
from pfedma_flwr.data.split import dev_pool, sample_eval_tasks
from pfedma_flwr.embeddings import get_embedder
from pfedma_flwr.protocol.schema import RespondInstruction, RoutedQuery

N = 5
OVERRIDES = ("agent.response_format=reasoning agent.few_shot=2 agent.few_shot_style=cases "
             "data.partition=dirichlet data.alpha=0.1")


@pytest.fixture(autouse=True)
def _fresh():
    components.build_agent.cache_clear()
    make_backend.cache_clear()
    clear_retrieval_cache()
    yield
    components.build_agent.cache_clear()


def _system_prompts(pid: int, queries: list[RoutedQuery], overrides: str) -> list[str]:
    agent = components.build_agent({"config-name": "tiny", "overrides": overrides},
                                   {"partition-id": pid, "num-partitions": N})
    agent.backend.prompts.clear()  # the mock backend is shared by the process's agents
    agent.respond(RespondInstruction(server_round=1, queries=tuple(queries)), agent.new_state())
    # the first generation call holds one prompt per query (repairs may follow)
    return [p[0]["content"] for p in agent.backend.prompts[: len(queries)]]


def test_each_client_retrieves_its_nearest_cases_from_its_own_partition_only():
    cfg = load_config({"config-name": "tiny", "overrides": OVERRIDES})
    d = cfg.data
    pool = dev_pool(d.benchmarks, dev_pool_per_benchmark=d.dev_pool_per_benchmark,
                    seed=cfg.seed)
    parts = [partition_tasks(pool, N, i, scheme="dirichlet", alpha=0.1, seed=cfg.seed)
             for i in range(N)]
    assert sorted(t.task_id for p in parts for t in p) == sorted(t.task_id for t in pool)
    tasks = sample_eval_tasks(d.benchmarks, 2, cfg.seed, dev_pool_per_benchmark=20)
    queries = [RoutedQuery(query_id=t.task_id, text=t.question, domain=t.domain, round=1,
                           answer_kind=t.answer_kind) for t in tasks]
    emb = get_embedder("hashing")
    shown: dict[int, list[set[str]]] = {}
    for pid in range(N):
        systems = _system_prompts(pid, queries, OVERRIDES)
        shown[pid] = []
        for q, system in zip(queries, systems, strict=True):
            seen = {t.task_id for t in pool if f". {t.question.strip()}\n" in system}
            own = [t for t in parts[pid] if t.answer_kind == q.answer_kind]
            # top-2 of the client's own tasks of the query's format by cosine, nothing else
            assert seen == {t.task_id for t in retrieve_examples(q.text, own, 2, emb)}
            assert seen <= {t.task_id for t in parts[pid]}
            shown[pid].append(seen)
    # Dirichlet(0.1): who knows what differs by client, so the same question brings other cases
    for k in range(len(queries)):
        distinct = {frozenset(shown[pid][k]) for pid in range(N) if shown[pid][k]}
        assert len(distinct) >= 2


def test_cases_carry_the_answer_also_without_a_worked_solution():
    over = OVERRIDES + " data.benchmarks=[medqa]"
    cfg = load_config({"config-name": "tiny", "overrides": over})
    t = sample_eval_tasks(["medqa"], 1, cfg.seed, dev_pool_per_benchmark=20)[0]
    q = RoutedQuery(query_id=t.task_id, text=t.question, domain=t.domain, round=1,
                    answer_kind="option")
    for pid in range(N):
        system = _system_prompts(pid, [q], over)[0]
        if "Case 1." in system:
            # MedQA has no rationale: the case states its answer letter and option text
            assert "Solution:" not in system
            assert any(line.startswith("Answer: ") and ". " in line
                       for line in system.splitlines())
            return
    pytest.fail("no client held a MedQA case")


def test_turns_style_and_few_shot_zero_show_no_cases():
    cfg = load_config({"config-name": "tiny", "overrides": OVERRIDES})
    t = sample_eval_tasks(cfg.data.benchmarks, 1, cfg.seed, dev_pool_per_benchmark=20)[0]
    q = RoutedQuery(query_id=t.task_id, text=t.question, domain=t.domain, round=1,
                    answer_kind=t.answer_kind)
    for over in (OVERRIDES.replace("cases", "turns"), OVERRIDES + " agent.few_shot=0"):
        assert all("Case 1." not in s for s in _system_prompts(0, [q], over))
