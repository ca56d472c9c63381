"""Parallel experiment levels: scripted variants side by side, local-LLM variants alone."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pfedma_flwr.experiments.runner import VariantRun, _execute_all, scripted


def vr(name: str, overrides: str = "agent.backend.name=simulated") -> VariantRun:
    return VariantRun(experiment="x", variant=name, config="tiny", num_clients=2,
                      overrides=overrides, output_dir=Path("/nonexistent") / name)


def test_which_variants_are_scripted():
    assert scripted(vr("a"))
    assert scripted(vr("b", "agent.backend.name=mock"))
    assert not scripted(vr("c", "agent.backend.name=embedded"))
    # a scripted federation judged by a local LLM is not light
    assert not scripted(vr("d", "agent.backend.name=mock anomaly.judge=llm "
                                "anomaly.judge_backend.name=embedded"))
    assert scripted(vr("e", "agent.backend.name=mock anomaly.judge=llm "
                            "anomaly.judge_backend.name=mock"))


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.beside: dict[str, set[str]] = {}
        self.slots: dict[str, int] = {}
        self.most = 0

    def __call__(self, v: VariantRun) -> None:
        with self.lock:
            self.beside[v.variant] = set(self.running)
            for other in self.running:
                self.beside[other].add(v.variant)
            self.running.add(v.variant)
            self.most = max(self.most, len(self.running))
            self.slots[v.variant] = v.slot
        time.sleep(0.3)
        with self.lock:
            self.running.discard(v.variant)


def test_scripted_variants_run_side_by_side_and_llm_variants_alone():
    rec = Recorder()
    runs = [vr("s1"), vr("llm1", "agent.backend.name=embedded"), vr("s2"), vr("s3"),
            vr("llm2", "agent.backend.name=embedded")]
    walls = _execute_all(rec, runs, jobs=2)
    assert set(walls) == {"s1", "s2", "s3", "llm1", "llm2"}
    assert rec.beside["llm1"] == set() and rec.beside["llm2"] == set()
    assert "s2" in rec.beside["s1"]  # two scripted variants overlapped
    assert rec.most == 2  # never more than jobs at once
    assert sorted(rec.slots[s] for s in ("s1", "s2")) == [0, 1]  # their own ports


def test_one_job_runs_everything_in_order():
    order: list[str] = []
    _execute_all(lambda v: order.append(v.variant), [vr("a"), vr("b", "agent.backend."
                                                                    "name=embedded"), vr("c")], 1)
    assert order == ["a", "b", "c"]


def test_a_failing_variant_fails_the_experiment():
    def boom(v: VariantRun) -> None:
        if v.variant == "b":
            raise RuntimeError("variant b failed")
    with pytest.raises(RuntimeError, match="variant b failed"):
        _execute_all(boom, [vr("a"), vr("b")], jobs=2)
