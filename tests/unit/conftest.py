"""Fixtures and helpers shared by the unit tests' modules."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pfedma_flwr.data import benchmarks as bm
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.partition import clear_partition_cache
from pfedma_flwr.data.retrieval import clear_retrieval_cache
from pfedma_flwr.experiments import launch
from tests.unit.launch_fakes import FakeLauncher


@pytest.fixture
def fake(monkeypatch, tmp_path) -> FakeLauncher:
    """The launcher with its SuperLink, ``flwr`` and ``flwr log`` stubbed (``launch_fakes``)."""
    f = FakeLauncher(tmp_path / "out")
    monkeypatch.setattr(launch, "start_superlink", f.superlink)
    monkeypatch.setattr(launch, "_flwr", f.flwr)
    monkeypatch.setattr(launch, "_follow", f.follow)
    monkeypatch.setenv("PATH", os.environ["PATH"])
    return f


def synth_task(i: int, domain: str = "math", question: str | None = None) -> Task:
    """A synthetic task: a number question in math, a yes/no option question otherwise."""
    if domain == "math":
        return Task(
            task_id=f"t{i:04d}",
            benchmark="synth",
            domain="math",
            question=question or f"question {i}",
            gold=str(i),
            answer_kind="number",
        )
    return Task(
        task_id=f"t{i:04d}",
        benchmark="synth",
        domain="medicine",
        question=question or f"question {i}",
        gold="A",
        answer_kind="option",
        options={"A": "yes", "B": "no"},
    )


@pytest.fixture
def fresh_data_caches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No data-dir variable, and empty benchmark, partition and retrieval caches around a test."""
    monkeypatch.delenv(bm.DATA_DIR_ENV, raising=False)
    bm.clear_benchmark_cache()
    yield
    bm.clear_benchmark_cache()
    clear_partition_cache()
    clear_retrieval_cache()
