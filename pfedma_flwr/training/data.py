"""veRL parquet rows for training the orchestrator, from the benchmark items the project ships.

The repository ships **no train splits**: MATH and MedQA are test files (``data/SOURCES.md``).
Rows therefore come from each benchmark's held-apart *dev pool* (:func:`pfedma_flwr.data.split.
dev_pool`, the seeded part disjoint from the evaluation stream of the same seed), and MATH
problems that are also in MATH-500 are dropped so a MATH-500 evaluation never sees a trained-on
item. A row (veRL ``RLHFDataset`` format)::

    data_source  "pfedma/<benchmark>"
    prompt       [{"role": "user", "content": <question>}]  (the agent loop builds the
                  orchestrator's own prompt around it)
    ability      task domain
    reward_model {"style": "rule", "ground_truth": <gold>}
    agent_name   "pfedma_orchestrator"
    extra_info   {split, index, task_id, benchmark, domain, answer_kind, options_json}
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.data.benchmarks import Task, load_benchmark
from pfedma_flwr.data.split import dev_pool

AGENT_NAME = "pfedma_orchestrator"
DEFAULT_BENCHMARKS = ("math", "medqa")


def task_row(task: Task, *, split: str, index: int) -> dict[str, Any]:
    """One veRL row for ``task``."""
    return {
        "data_source": f"pfedma/{task.benchmark}",
        "prompt": [{"role": "user", "content": task.question}],
        "ability": task.domain,
        "reward_model": {"style": "rule", "ground_truth": task.gold},
        "agent_name": AGENT_NAME,
        "extra_info": {
            "split": split, "index": index, "task_id": task.task_id,
            "benchmark": task.benchmark, "domain": task.domain,
            "answer_kind": task.answer_kind,
            # a JSON string: option letters differ per row, parquet wants one struct schema
            "options_json": json.dumps(task.options, sort_keys=True),
        },
    }


def training_tasks(
    benchmarks: Sequence[str] = DEFAULT_BENCHMARKS,
    *,
    per_benchmark: int = 200,
    seed: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
) -> list[Task]:
    """The dev-pool tasks of ``benchmarks`` (``per_benchmark`` each), MATH-500 items removed."""
    tasks = dev_pool(list(benchmarks), dev_pool_per_benchmark=per_benchmark, seed=seed,
                     data_dir=data_dir)
    if "math" in benchmarks:
        held = {t.question for t in load_benchmark("math500", data_dir)}
        tasks = [t for t in tasks if not (t.benchmark == "math" and t.question in held)]
    return tasks


def build_rows(
    tasks: Sequence[Task], *, val_per_benchmark: int = 16
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split ``tasks`` into train and val rows: the last ``val_per_benchmark`` of each go to val."""
    if val_per_benchmark < 0:
        raise ValueError(f"val_per_benchmark must be >= 0, got {val_per_benchmark}")
    by_bench: dict[str, list[Task]] = {}
    for t in tasks:
        by_bench.setdefault(t.benchmark, []).append(t)
    train: list[Task] = []
    val: list[Task] = []
    for name, items in by_bench.items():
        if len(items) <= val_per_benchmark:
            raise ValueError(f"{name}: {len(items)} tasks leave none for training after "
                             f"{val_per_benchmark} validation tasks")
        cut = len(items) - val_per_benchmark
        train += items[:cut]
        val += items[cut:]
    return ([task_row(t, split="train", index=k) for k, t in enumerate(train)],
            [task_row(t, split="val", index=k) for k, t in enumerate(val)])


def write_parquet(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Write rows with pyarrow (nested ``prompt``/``reward_model``/``extra_info`` as structs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(list(rows)), path)


def build_data(
    out: str | os.PathLike[str],
    *,
    benchmarks: Sequence[str] = DEFAULT_BENCHMARKS,
    per_benchmark: int = 200,
    val_per_benchmark: int = 16,
    seed: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write ``train.parquet`` and ``val.parquet`` under ``out``; return the counts."""
    out_dir = Path(out)
    targets = [out_dir / "train.parquet", out_dir / "val.parquet"]
    existing = [str(p) for p in targets if p.exists()]
    if existing and not overwrite:
        raise FileExistsError(f"{existing} exist; pass --overwrite to replace them")
    train, val = build_rows(training_tasks(benchmarks, per_benchmark=per_benchmark, seed=seed,
                                           data_dir=data_dir),
                            val_per_benchmark=val_per_benchmark)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_parquet(train, targets[0])
    write_parquet(val, targets[1])
    count: dict[str, int] = {}
    for r in train:
        count[r["data_source"]] = count.get(r["data_source"], 0) + 1
    return {"train": len(train), "val": len(val), "train_by_source": count,
            "files": [str(p) for p in targets], "source": "dev pools (no train split shipped)"}
