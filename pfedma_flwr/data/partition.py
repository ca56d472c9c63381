"""Client private datasets ``D_i``: IID or Dirichlet(α) partitions of the dev pool (DESIGN §5).

The partitioning itself is flwr-datasets' (``IidPartitioner`` / ``DirichletPartitioner`` with
``partition_by="domain"``) over an in-memory ``datasets.Dataset`` of ``(idx, domain)`` rows; the
rows point back into the task list, so nested task fields never pass through Arrow.

``DirichletPartitioner`` settings, checked against flwr-datasets 0.6.1:

- ``min_partition_size=0``: any positive minimum makes it resample the Dirichlet draw whenever
  a partition falls short, and raise ``ValueError`` after 10 draws. With small pools, many
  clients or a small α that fails routinely; empty partitions are fine here (an agent with
  empty ``D_i`` answers zero-shot), so the first draw is always accepted.
- ``self_balancing=False``: balancing stops giving the later domain classes to partitions already
  above the mean size, which with only two domains rewrites the α-controlled skew, and its
  renormalisation divides by zero if every remaining proportion underflows (tiny α).
- ``shuffle=True, seed=seed``: deterministic order inside each partition.

Both partitioners reject ``num_partitions`` above the number of rows (``DirichletPartitioner``
raises, ``Dataset.shard`` indexes out of range), so with ``num_partitions > len(tasks)`` the
data is split over ``len(tasks)`` partitions and the remaining partition ids are empty.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from pfedma_flwr.data.benchmarks import Task

if TYPE_CHECKING:
    from flwr_datasets.partitioner import Partitioner

logger = logging.getLogger(__name__)

SCHEMES = ("iid", "dirichlet")
#: Not a flwr-datasets partitioner: each domain's tasks go to the clients whose profile covers
#: it (:func:`partition_by_expertise`), so a math client knows math and a medical one medicine.
PROFILE_SCHEME = "profile"


def partition_tasks(
    tasks: Sequence[Task],
    num_partitions: int,
    partition_id: int,
    *,
    scheme: str = "iid",
    alpha: float = 0.5,
    seed: int = 0,
) -> list[Task]:
    """Client ``partition_id``'s private dataset ``D_i`` out of ``num_partitions``.

    Parameters
    ----------
    tasks : Sequence[Task]
        The dev pool (``split.dev_pool``); task ids must be unique.
    num_partitions : int
        Number of clients N (>= 1). More partitions than tasks leaves some empty.
    partition_id : int
        Client index in ``[0, num_partitions)``.
    scheme : str
        ``"iid"`` (seeded shuffle, then contiguous equal shards) or ``"dirichlet"``
        (per-domain Dirichlet(α) proportions over the partitions).
    alpha : float
        Dirichlet concentration (> 0); smaller is more skewed. Ignored for ``"iid"``.
    seed : int
        Seed of the shuffle / Dirichlet draws.

    Returns
    -------
    list[Task]
        The partition, in the partitioner's (deterministic) order. Partitions of one
        ``(tasks, num_partitions, scheme, alpha, seed)`` are disjoint and cover ``tasks``.

    Raises
    ------
    ValueError
        On an unknown scheme, non-positive ``num_partitions``/``alpha``, an out-of-range
        ``partition_id`` or duplicate task ids.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition_id must be in [0, {num_partitions}), got {partition_id}")
    if scheme == "dirichlet" and not alpha > 0:
        raise ValueError(f"alpha must be > 0 for the dirichlet scheme, got {alpha}")
    keys = tuple((t.task_id, t.domain) for t in tasks)
    if len({k for k, _ in keys}) != len(keys):
        raise ValueError("tasks must have unique task_id values to be partitioned")
    effective = min(num_partitions, len(keys))
    if partition_id >= effective:
        return []
    # alpha does not affect IID shards; normalise it so IID calls share one cache entry.
    partitioner = _partitioner(keys, effective, scheme, float(alpha) if scheme != "iid" else 0.0,
                               seed)
    rows = partitioner.load_partition(partition_id)["idx"]
    return [tasks[i] for i in rows]


def partition_by_expertise(
    tasks: Sequence[Task], client_domains: Sequence[Sequence[str]], partition_id: int, *,
    seed: int = 0, domain_of: Callable[[str], str] = lambda d: d,
) -> list[Task]:
    """Client ``partition_id``'s ``D_i`` when clients hold the data of their expertise.

    The tasks of each knowledge domain (``domain_of(task.domain)``) are shuffled with ``seed``
    and dealt in turn to the clients whose ``client_domains[i]`` include that domain; a
    domain no client covers is dealt to all clients. Partitions are disjoint and cover
    ``tasks``; a client covering no domain of the pool holds only such uncovered tasks.

    Raises
    ------
    ValueError
        On an out-of-range ``partition_id`` or duplicate task ids.
    """
    n = len(client_domains)
    if not 0 <= partition_id < n:
        raise ValueError(f"partition_id must be in [0, {n}), got {partition_id}")
    if len({t.task_id for t in tasks}) != len(tasks):
        raise ValueError("tasks must have unique task_id values to be partitioned")
    by_domain: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        by_domain.setdefault(domain_of(t.domain), []).append(i)
    mine: list[int] = []
    for k, (dom, idx) in enumerate(sorted(by_domain.items())):
        holders = [c for c in range(n) if dom in client_domains[c]] or list(range(n))
        order = np.random.default_rng([seed, k]).permutation(len(idx))
        if partition_id in holders:
            share = holders.index(partition_id)
            mine.extend(idx[int(j)] for j in order[share::len(holders)])
    return [tasks[i] for i in sorted(mine)]


def partition_sizes(
    tasks: Sequence[Task],
    num_partitions: int,
    *,
    scheme: str = "iid",
    alpha: float = 0.5,
    seed: int = 0,
) -> list[int]:
    """``|D_i|`` for every client, for logging the partition's skew."""
    return [
        len(partition_tasks(tasks, num_partitions, i, scheme=scheme, alpha=alpha, seed=seed))
        for i in range(num_partitions)
    ]


@functools.lru_cache(maxsize=8)
def _partitioner(
    keys: tuple[tuple[str, str], ...], num_partitions: int, scheme: str, alpha: float, seed: int
) -> Partitioner:
    """One fitted partitioner per process and configuration (its assignment is computed once)."""
    # Everything is in memory; keep the datasets library off the hub.
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

    partitioner: Partitioner
    order = np.arange(len(keys))
    if scheme == "iid":
        # IidPartitioner shards contiguously: shuffle first or shards follow the pool's
        # benchmark blocks.
        order = np.random.default_rng(seed).permutation(len(keys))
        partitioner = IidPartitioner(num_partitions=num_partitions)
    else:
        partitioner = DirichletPartitioner(
            num_partitions=num_partitions, partition_by="domain", alpha=alpha,
            min_partition_size=0, self_balancing=False, shuffle=True, seed=seed,
        )
    partitioner.dataset = datasets.Dataset.from_list(
        [{"idx": int(i), "domain": keys[i][1]} for i in order]
    )
    logger.debug("built %s partitioner: %d tasks, %d partitions", scheme, len(keys), num_partitions)
    return partitioner


def clear_partition_cache() -> None:
    """Drop the cached partitioners (tests; or after the dev pool changed in-process)."""
    _partitioner.cache_clear()
