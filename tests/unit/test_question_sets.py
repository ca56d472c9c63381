"""Question sets (data/split.py): unseen questions no default run draws; offsets; split seeds."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from pfedma_flwr.config import load_config
from pfedma_flwr.data.benchmarks import load_benchmark
from pfedma_flwr.data.split import (
    UNSEEN_ROWS,
    sample_eval_tasks,
    split_tasks,
    unseen_ids,
    unseen_overlap,
)
from pfedma_flwr.experiments.presets import load_preset, preset_names
from pfedma_flwr.resources import data_dir

REPO_DATA = data_dir()


@pytest.mark.parametrize("bench", sorted(UNSEEN_ROWS))
def test_unseen_questions_are_the_block_before_the_default_dev_pool(bench: str):
    tasks = load_benchmark(bench, REPO_DATA)
    held = unseen_ids(tasks, bench)
    assert len(held) == 100
    # by hand: seed 0's permutation (the old split), positions L-300 .. L-201
    rng = np.random.default_rng([0, zlib.crc32(bench.encode())])
    order = [tasks[i].task_id for i in rng.permutation(len(tasks))]
    n = len(order)
    assert held == set(order[n - 300: n - 200])
    # the default questions and the dev pool of seed 0 are those of the old split
    for d in (0, 40, 200):
        sp = split_tasks(tasks, dev_pool_size=d, seed=0, benchmark=bench)
        assert [t.task_id for t in sp.dev_pool] == order[n - d:]
        assert [t.task_id for t in sp.eval_stream[: n - 300]] == order[: n - 300]


@pytest.mark.parametrize("bench", sorted(UNSEEN_ROWS))
def test_no_default_split_draws_an_unseen_question(bench: str):
    tasks = load_benchmark(bench, REPO_DATA)
    # any seed, any dev pool size, the whole stream (any offset and count is a part of it)
    assert unseen_overlap(bench, tasks, seeds=range(6), dev_pool_sizes=(0, 40, 200, 400)) \
        == set()


def test_unseen_set_is_one_set_in_every_seed_and_disjoint_from_the_dev_pool():
    ids = {s: [t.task_id for t in sample_eval_tasks(
        ["gsm8k", "medqa"], 100, s, REPO_DATA, question_set="unseen")] for s in (0, 3)}
    assert set(ids[0]) == set(ids[3]) and ids[0] != ids[3]  # same questions, own order
    pool = split_tasks(load_benchmark("gsm8k", REPO_DATA), dev_pool_size=200, seed=0,
                       benchmark="gsm8k").dev_pool
    assert not set(ids[0]) & {t.task_id for t in pool}
    with pytest.raises(ValueError, match="has 100 unseen evaluation tasks"):
        sample_eval_tasks(["gsm8k"], 101, 0, REPO_DATA, question_set="unseen")
    with pytest.raises(ValueError, match="no unseen questions"):
        sample_eval_tasks(["math500"], 1, 0, REPO_DATA, question_set="unseen")


def test_offset_skips_the_head_of_each_stream():
    head = sample_eval_tasks(["gsm8k", "medqa"], 4, 0, REPO_DATA)
    later = sample_eval_tasks(["gsm8k", "medqa"], 2, 0, REPO_DATA, offset=2)
    assert later == head[4:]  # round-robin: questions 2, 3 of each benchmark


def test_no_preset_level_or_size_draws_unseen_questions():
    """The unseen set is asked for only on the command line (--set data.question_set=unseen)."""
    for name in preset_names():
        p = load_preset(name)
        for v in p.variants():
            for size in p.sizes:
                spec = p.size(size)
                over = {**spec.shared, **p.base, **spec.overrides, **v.overrides}
                assert over.get("data.question_set", "default") == "default", (name, size, v)
    for conf in ("pfedma", "tiny", "demo", "one_gpu"):
        assert load_config({"config-name": conf}).data.question_set == "default"


def test_split_seed_pins_questions_and_partitions_while_the_run_seed_moves():
    a = load_config({"overrides": "seed=3 data.split_seed=0"})
    b = load_config({"overrides": "seed=3"})
    assert a.data.seed_for_split(a.seed) == 0 and b.data.seed_for_split(b.seed) == 3
