"""Seeded split of each benchmark into an evaluation stream and a held-apart dev pool.

Client private datasets ``D_i`` are cut from the dev pool only (``partition.py``), so no
evaluation query, nor its gold answer, can reach an agent as a few-shot example (DESIGN §5).
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pfedma_flwr.data.benchmarks import Task, load_benchmark

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchmarkSplit:
    """The two disjoint parts of one benchmark.

    Parameters
    ----------
    benchmark : str
        Benchmark name.
    eval_stream : tuple[Task, ...]
        Evaluation queries in their seeded order (take a prefix of it).
    dev_pool : tuple[Task, ...]
        Held-apart tasks that client partitions are cut from.
    """

    benchmark: str
    eval_stream: tuple[Task, ...]
    dev_pool: tuple[Task, ...]


def split_tasks(
    tasks: Sequence[Task], *, dev_pool_size: int, seed: int, benchmark: str = ""
) -> BenchmarkSplit:
    """Split ``tasks`` by one seeded permutation: dev pool = its last ``dev_pool_size`` items.

    Taking the dev pool from the end keeps the head of the evaluation stream unchanged when
    only ``dev_pool_size`` changes (as long as both fit). The permutation is seeded by
    ``(seed, crc32(benchmark))`` so benchmarks of one run are shuffled independently.

    Raises
    ------
    ValueError
        If ``dev_pool_size`` is negative or exceeds ``len(tasks)``.
    """
    if not 0 <= dev_pool_size <= len(tasks):
        raise ValueError(
            f"dev_pool_size must be in [0, {len(tasks)}] for {benchmark or 'these tasks'}, "
            f"got {dev_pool_size}"
        )
    rng = np.random.default_rng([seed, zlib.crc32(benchmark.encode())])
    order = [tasks[i] for i in rng.permutation(len(tasks))]
    cut = len(order) - dev_pool_size
    return BenchmarkSplit(benchmark, tuple(order[:cut]), tuple(order[cut:]))


def split_benchmark(
    name: str, *, dev_pool_size: int, seed: int, data_dir: str | os.PathLike[str] | None = None
) -> BenchmarkSplit:
    """Load benchmark ``name`` and split it with :func:`split_tasks`."""
    return split_tasks(
        load_benchmark(name, data_dir), dev_pool_size=dev_pool_size, seed=seed, benchmark=name
    )


def round_robin(streams: Sequence[Sequence[Task]]) -> list[Task]:
    """Interleave streams ``[a0, b0, a1, b1, ...]``; shorter streams simply run out."""
    longest = max((len(s) for s in streams), default=0)
    return [s[k] for k in range(longest) for s in streams if k < len(s)]


def sample_eval_tasks(
    benchmarks: Sequence[str],
    n_per_benchmark: int,
    seed: int,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    dev_pool_per_benchmark: int = 200,
) -> list[Task]:
    """The run's evaluation queries: ``n_per_benchmark`` per benchmark, mixed round-robin.

    Parameters
    ----------
    benchmarks : Sequence[str]
        Registered benchmark names, in mixing order; duplicates are an error.
    n_per_benchmark : int
        Queries taken from the head of each benchmark's evaluation stream.
    seed : int
        Split seed (the same seed gives the same queries and the same dev pool).
    data_dir : str | os.PathLike | None
        Data dir; ``None`` resolves through ``resolve_data_dir``.
    dev_pool_per_benchmark : int
        Tasks held apart per benchmark for client partitions (never evaluation queries).

    Raises
    ------
    ValueError
        If no or duplicate benchmarks are given, ``n_per_benchmark < 1``, or a benchmark's
        evaluation stream is shorter than ``n_per_benchmark``.
    """
    _check_names(benchmarks)
    if n_per_benchmark < 1:
        raise ValueError(f"n_per_benchmark must be >= 1, got {n_per_benchmark}")
    streams = []
    for name in benchmarks:
        split = split_benchmark(
            name, dev_pool_size=dev_pool_per_benchmark, seed=seed, data_dir=data_dir
        )
        if len(split.eval_stream) < n_per_benchmark:
            raise ValueError(
                f"benchmark {name!r} has {len(split.eval_stream)} evaluation tasks after holding "
                f"{dev_pool_per_benchmark} apart for the dev pool; n_per_benchmark="
                f"{n_per_benchmark} is too many (lower it or data.dev_pool_per_benchmark)"
            )
        streams.append(split.eval_stream[:n_per_benchmark])
    tasks = round_robin(streams)
    logger.info("sampled %d evaluation tasks from %s (seed %d)", len(tasks), list(benchmarks), seed)
    return tasks


def dev_pool(
    benchmarks: Sequence[str],
    *,
    dev_pool_per_benchmark: int,
    seed: int,
    data_dir: str | os.PathLike[str] | None = None,
) -> list[Task]:
    """The held-apart dev pools of ``benchmarks`` concatenated in the given order.

    Use the same ``seed`` and ``dev_pool_per_benchmark`` as :func:`sample_eval_tasks` so the
    pool is disjoint from the evaluation queries.
    """
    _check_names(benchmarks)
    pool: list[Task] = []
    for name in benchmarks:
        split = split_benchmark(
            name, dev_pool_size=dev_pool_per_benchmark, seed=seed, data_dir=data_dir
        )
        pool.extend(split.dev_pool)
    return pool


def _check_names(benchmarks: Sequence[str]) -> None:
    if isinstance(benchmarks, str):
        raise ValueError(f"benchmarks must be a list of names, got the string {benchmarks!r}")
    if not benchmarks:
        raise ValueError("benchmarks must name at least one benchmark")
    if len(set(benchmarks)) != len(benchmarks):
        raise ValueError(f"benchmarks must not repeat a name, got {list(benchmarks)}")
