"""Client partitions of the dev pool, retrieval from D_i, agent profiles (split from test_data.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from pfedma_flwr.data.benchmarks import (
    Task,
)
from pfedma_flwr.data.partition import clear_partition_cache, partition_sizes, partition_tasks
from pfedma_flwr.data.profiles import (
    BUILTIN_PROFILES,
    KNOWLEDGE_DOMAINS,
    AgentProfile,
    knowledge_domain,
    profile_for_client,
)
from pfedma_flwr.data.retrieval import retrieve_examples
from pfedma_flwr.data.split import (
    dev_pool,
)
from pfedma_flwr.embeddings import HashingEmbedder
from tests.unit.conftest import synth_task

REPO_DATA = Path(__file__).resolve().parents[2] / "data"


pytestmark = pytest.mark.usefixtures("fresh_data_caches")


# ---------------------------------------------------------------- partitions


def _pool(n_math: int = 20, n_med: int = 10) -> list[Task]:
    return [synth_task(i) for i in range(n_math)] + [
        synth_task(1000 + i, "medicine") for i in range(n_med)
    ]


def _parts(pool: list[Task], n: int, **kw) -> list[list[Task]]:
    return [partition_tasks(pool, n, i, **kw) for i in range(n)]


def _assert_disjoint_cover(pool: list[Task], parts: list[list[Task]]) -> None:
    ids = [t.task_id for p in parts for t in p]
    assert len(ids) == len(set(ids)) == len(pool)
    assert set(ids) == {t.task_id for t in pool}


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
@pytest.mark.parametrize("n", [1, 4, 30, 100])
def test_partitions_disjoint_cover_deterministic(scheme: str, n: int) -> None:
    pool = _pool()
    parts = _parts(pool, n, scheme=scheme, alpha=0.5, seed=3)
    _assert_disjoint_cover(pool, parts)
    clear_partition_cache()  # recomputed from scratch, not served from the cache
    assert _parts(pool, n, scheme=scheme, alpha=0.5, seed=3) == parts
    if n == 100:
        # 30 tasks over 100 clients: only ids < 30 can be non-empty.
        assert all(p == [] for p in parts[30:])


def test_iid_sizes_and_mixing() -> None:
    pool = _pool()
    # Contiguous shards of 30 over 4: div 7, mod 2 -> [8, 8, 7, 7].
    assert partition_sizes(pool, 4, scheme="iid", seed=0) == [8, 8, 7, 7]
    # 30 over 100: effective 30 partitions of one task each, 70 empty.
    assert partition_sizes(pool, 100, scheme="iid", seed=0) == [1] * 30 + [0] * 70
    # Shuffled before sharding, so partition 0 is not just the first 8 (math) tasks.
    domains = {t.domain for p in _parts(pool, 2, scheme="iid", seed=0) for t in p[:15]}
    assert domains == {"math", "medicine"}
    assert _parts(pool, 4, scheme="iid", seed=1) != _parts(pool, 4, scheme="iid", seed=0)


def test_dirichlet_is_skewed_at_small_alpha() -> None:
    pool = _pool(200, 200)

    def top_client_share(parts: list[list[Task]], domain: str) -> float:
        counts = [sum(t.domain == domain for t in p) for p in parts]
        return max(counts) / sum(counts)

    # Dir(0.01 * 1_10) puts nearly all mass on one component, so one client holds (almost) a
    # whole domain; 10 IID shards of a shuffled pool give each client about 1/10 of it.
    skewed = _parts(pool, 10, scheme="dirichlet", alpha=0.01, seed=0)
    iid = _parts(pool, 10, scheme="iid", seed=0)
    _assert_disjoint_cover(pool, skewed)
    for domain in ("math", "medicine"):
        assert top_client_share(skewed, domain) > 0.9
        assert top_client_share(iid, domain) < 0.25


def test_partition_on_real_dev_pool_n100() -> None:
    pool = dev_pool(["gsm8k", "medqa"], dev_pool_per_benchmark=200, seed=0, data_dir=REPO_DATA)
    for scheme in ("iid", "dirichlet"):
        parts = _parts(pool, 100, scheme=scheme, alpha=0.5, seed=0)
        _assert_disjoint_cover(pool, parts)
    assert partition_sizes(pool, 100, scheme="iid") == [4] * 100  # 400 / 100


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((4, 0), {"scheme": "noniid"}, "scheme must be one of"),
        ((0, 0), {}, "num_partitions must be >= 1"),
        ((4, 4), {}, r"partition_id must be in \[0, 4\)"),
        ((4, -1), {}, r"partition_id must be in \[0, 4\)"),
        ((4, 0), {"scheme": "dirichlet", "alpha": 0.0}, "alpha must be > 0"),
    ],
)
def test_partition_errors(args: tuple[int, int], kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        partition_tasks(_pool(), *args, **kwargs)


def test_partition_edge_inputs() -> None:
    assert partition_tasks([], 5, 0) == []
    with pytest.raises(ValueError, match="unique task_id"):
        partition_tasks([synth_task(1), synth_task(1)], 2, 0)


# ---------------------------------------------------------------- retrieval


class TableEmbedder:
    """Explicit unit vectors per text, counting how many texts it encodes."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.encoded = 0

    @property
    def dim(self) -> int:
        return 2

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.encoded += len(texts)
        return np.asarray([self.table[t] for t in texts], dtype=np.float32)


def test_retrieval_exact_order_ties_and_cache() -> None:
    emb = TableEmbedder({"p1": [1, 0], "p2": [0.6, 0.8], "p3": [0.6, 0.8], "q": [0.8, 0.6]})
    pool = [synth_task(1, question="p1"), synth_task(2, question="p2"), synth_task(3, question="p3")]
    # cos(q, p1) = 0.8; cos(q, p2) = cos(q, p3) = 0.48 + 0.48 = 0.96 (tie: pool order).
    assert [t.question for t in retrieve_examples("q", pool, 2, emb)] == ["p2", "p3"]
    assert [t.question for t in retrieve_examples("q", pool, 10, emb)] == ["p2", "p3", "p1"]
    # The pool (3 texts) was embedded once; each call embedded the query once.
    assert emb.encoded == 3 + 1 + 1
    assert retrieve_examples("q", pool, 0, emb) == [] and retrieve_examples("q", [], 3, emb) == []
    # A pool task with the query's own question is never shown as its own example.
    assert [t.question for t in retrieve_examples("p2", pool, 1, emb)] == ["p3"]
    assert [t.question for t in retrieve_examples("p2", pool, 1, emb,
                                                  exclude_same_question=False)] == ["p2"]
    with pytest.raises(ValueError, match="k must be >= 0"):
        retrieve_examples("q", pool, -1, emb)


def test_retrieval_hashing_embedder_nearest() -> None:
    pool = [
        synth_task(1, question="The cardiologist treats atrial fibrillation with anticoagulants"),
        synth_task(2, question="Tom buys 3 apples and 5 oranges at the market for 2 dollars each"),
        synth_task(3, question="A contract requires consideration to be legally binding"),
    ]
    got = retrieve_examples("How many apples and oranges did Tom buy at the market",
                            pool, 1, HashingEmbedder())
    assert [t.task_id for t in got] == ["t0002"]


# ---------------------------------------------------------------- profiles


def test_builtin_profiles_cover_12_domains() -> None:
    assert len(BUILTIN_PROFILES) == 20
    assert len({p.name for p in BUILTIN_PROFILES}) == 20
    assert len(KNOWLEDGE_DOMAINS) == 12
    assert {d for p in BUILTIN_PROFILES for d in p.domains} == set(KNOWLEDGE_DOMAINS)
    assert all(len(p.prompt) > 80 and p.backbone == "default" for p in BUILTIN_PROFILES)
    # Both task domains have several specialists among the first few clients.
    first5 = BUILTIN_PROFILES[:5]
    for task_domain in ("math", "medicine"):
        assert sum(p.covers(knowledge_domain(task_domain)) for p in first5) >= 2


@pytest.mark.parametrize(
    ("index", "names", "expected"),
    [
        (0, None, "mathematician"),
        (1, None, "physician"),
        (20, None, "mathematician"),  # 20 % 20 = 0
        (21, [], "physician"),  # empty list = built-in rotation
        (3, ["lawyer", "chemist"], "chemist"),  # 3 % 2 = 1
        (0, ["pfedma_flwr.data.profiles:BUILTIN_PROFILES"], None),  # not a profile -> error
    ],
)
def test_profile_for_client(index: int, names, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="not an AgentProfile"):
            profile_for_client(index, names)
    else:
        assert profile_for_client(index, names).name == expected


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: profile_for_client(0, ["astronaut"]), r"unknown agent profile 'astronaut'"),
        (lambda: profile_for_client(-1), "client_index must be >= 0"),
        (lambda: profile_for_client(0, "lawyer"), "list of profile names"),
        (lambda: knowledge_domain("law"), "no knowledge domain"),
        (lambda: AgentProfile(name="x", domains=("cooking",), prompt="p"), "unknown domains"),
        (lambda: AgentProfile(name="x", domains=(), prompt="p"), "at least one domain"),
        (lambda: AgentProfile(name="a:b", domains=("math",), prompt="p"), "without ':'"),
        (lambda: AgentProfile(name="x", domains=("math",), prompt=" "), "non-empty prompt"),
    ],
)
def test_profile_errors(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_knowledge_domain_of_real_tasks() -> None:
    assert knowledge_domain("math") == "math" and knowledge_domain("medicine") == "medicine"
