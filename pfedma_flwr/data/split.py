"""Seeded split of each benchmark into an evaluation stream and a held-apart dev pool.

Client private datasets ``D_i`` are cut from the dev pool only (``partition.py``), so no
evaluation query, nor its gold answer, can reach an agent as a few-shot example (DESIGN §5).

**Unseen questions** (``data.question_set: unseen``). GSM8K and MedQA each set apart
:data:`UNSEEN_ROWS` questions that no run of the default question set draws, whatever its seed,
size, offset or dev pool: the rows at positions ``[L − 300, L − 200)`` of the benchmark's
permutation at seed :data:`UNSEEN_SEED` (``L`` rows; the last 200 are the default dev pool, the
head the default questions). They are removed from every default split (evaluation stream and
dev pool) before it is cut, which leaves seed 0's stream head and its dev pool of up to 200
unchanged. :func:`unseen_overlap` is the check (``tests/unit/test_question_sets.py``).
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


#: Question sets: the evaluation stream, or the questions set apart from it (module docstring).
QUESTION_SETS = ("default", "unseen")
#: Unseen questions per benchmark, and the permutation seed and end gap that place them.
UNSEEN_ROWS = {"gsm8k": 100, "medqa": 100}
UNSEEN_SEED = 0
UNSEEN_GAP = 200


def _order(tasks: Sequence[Task], seed: int, benchmark: str) -> list[Task]:
    rng = np.random.default_rng([seed, zlib.crc32(benchmark.encode())])
    return [tasks[i] for i in rng.permutation(len(tasks))]


def unseen_ids(tasks: Sequence[Task], benchmark: str) -> frozenset[str]:
    """Task ids of ``benchmark``'s unseen questions (empty for other or too small files)."""
    n = UNSEEN_ROWS.get(benchmark, 0)
    if not n or len(tasks) < n + UNSEEN_GAP + n:  # keep a default stream of at least n
        return frozenset()
    order = _order(tasks, UNSEEN_SEED, benchmark)
    end = len(order) - UNSEEN_GAP
    return frozenset(t.task_id for t in order[end - n: end])


def split_tasks(
    tasks: Sequence[Task], *, dev_pool_size: int, seed: int, benchmark: str = "",
    question_set: str = "default",
) -> BenchmarkSplit:
    """Split ``tasks`` by one seeded permutation: dev pool = its last ``dev_pool_size`` items.

    Taking the dev pool from the end keeps the head of the evaluation stream unchanged when
    only ``dev_pool_size`` changes (as long as both fit). The permutation is seeded by
    ``(seed, crc32(benchmark))`` so benchmarks of one run are shuffled independently. The
    unseen questions (:func:`unseen_ids`) are taken out first; with ``question_set="unseen"``
    they are the evaluation stream (in the seed's order) and the dev pool is the default one.

    Raises
    ------
    ValueError
        If ``dev_pool_size`` is negative or exceeds the tasks left, or the question set is
        unknown or empty for this benchmark.
    """
    if question_set not in QUESTION_SETS:
        raise ValueError(f"question_set must be one of {QUESTION_SETS}, got {question_set!r}")
    held = unseen_ids(tasks, benchmark)
    order = _order(tasks, seed, benchmark)
    rest = [t for t in order if t.task_id not in held]
    if not 0 <= dev_pool_size <= len(rest):
        raise ValueError(
            f"dev_pool_size must be in [0, {len(rest)}] for {benchmark or 'these tasks'}, "
            f"got {dev_pool_size}"
        )
    cut = len(rest) - dev_pool_size
    stream = rest[:cut]
    if question_set == "unseen":
        if not held:
            raise ValueError(f"benchmark {benchmark!r} has no unseen questions; only "
                             f"{sorted(UNSEEN_ROWS)} do (with their full files)")
        stream = [t for t in order if t.task_id in held]
    return BenchmarkSplit(benchmark, tuple(stream), tuple(rest[cut:]))


def unseen_overlap(benchmark: str, tasks: Sequence[Task], *, seeds: Sequence[int],
                   dev_pool_sizes: Sequence[int]) -> set[str]:
    """Unseen question ids that a default split of ``tasks`` uses anyway (the check: empty)."""
    held = unseen_ids(tasks, benchmark)
    used: set[str] = set()
    for seed in seeds:
        for d in dev_pool_sizes:
            sp = split_tasks(tasks, dev_pool_size=d, seed=seed, benchmark=benchmark)
            used |= {t.task_id for t in (*sp.eval_stream, *sp.dev_pool)}
    return used & held


def split_benchmark(
    name: str, *, dev_pool_size: int, seed: int, data_dir: str | os.PathLike[str] | None = None,
    question_set: str = "default",
) -> BenchmarkSplit:
    """Load benchmark ``name`` and split it with :func:`split_tasks`."""
    return split_tasks(load_benchmark(name, data_dir), dev_pool_size=dev_pool_size, seed=seed,
                       benchmark=name, question_set=question_set)


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
    offset: int = 0,
    question_set: str = "default",
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
    offset : int
        Questions skipped at the head of each stream (``data.eval_offset``).
    question_set : {"default", "unseen"}
        The evaluation stream, or the unseen questions (module docstring).

    Raises
    ------
    ValueError
        If no or duplicate benchmarks are given, ``n_per_benchmark < 1``, or a benchmark's
        evaluation stream is shorter than ``n_per_benchmark``.
    """
    _check_names(benchmarks)
    if n_per_benchmark < 1 or offset < 0:
        raise ValueError(f"n_per_benchmark must be >= 1 and offset >= 0, got "
                         f"{n_per_benchmark}, {offset}")
    streams = []
    for name in benchmarks:
        split = split_benchmark(name, dev_pool_size=dev_pool_per_benchmark, seed=seed,
                                data_dir=data_dir, question_set=question_set)
        if len(split.eval_stream) < offset + n_per_benchmark:
            raise ValueError(
                f"benchmark {name!r} has {len(split.eval_stream)} {question_set} evaluation "
                f"tasks after holding {dev_pool_per_benchmark} apart for the dev pool; offset "
                f"{offset} + n_per_benchmark {n_per_benchmark} is too many (lower them or "
                f"data.dev_pool_per_benchmark)"
            )
        streams.append(split.eval_stream[offset: offset + n_per_benchmark])
    tasks = round_robin(streams)
    logger.info("sampled %d %s evaluation tasks from %s (seed %d, offset %d)", len(tasks),
                question_set, list(benchmarks), seed, offset)
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
