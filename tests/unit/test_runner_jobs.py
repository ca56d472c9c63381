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
        self.held: dict[int, str] = {}  # slot -> the variant running in it
        self.most = 0

    def __call__(self, v: VariantRun) -> None:
        with self.lock:
            self.beside[v.variant] = set(self.running)
            for other in self.running:
                self.beside[other].add(v.variant)
            self.running.add(v.variant)
            self.most = max(self.most, len(self.running))
            self.slots[v.variant] = v.slot
            assert v.slot not in self.held, f"{v.variant} took {self.held.get(v.slot)}'s slot"
            self.held[v.slot] = v.variant
        # unequal lengths: variants end out of their start order
        time.sleep(0.1 if v.variant.endswith("1") else 0.3)
        with self.lock:
            self.running.discard(v.variant)
            del self.held[v.slot]


def test_scripted_variants_run_side_by_side_and_llm_variants_alone():
    rec = Recorder()
    runs = [vr("s1"), vr("llm1", "agent.backend.name=embedded"), vr("s2"), vr("s3"),
            vr("llm2", "agent.backend.name=embedded")]
    walls: dict[str, float] = {}
    saved: list[int] = []
    _execute_all(rec, runs, 2, walls, lambda w: saved.append(len(w)))
    assert set(walls) == {"s1", "s2", "s3", "llm1", "llm2"}  # each run dir's wall seconds
    assert sorted(saved) == [1, 2, 3, 4, 5]  # saved after each run (nothing lost on a stop)
    assert rec.beside["llm1"] == set() and rec.beside["llm2"] == set()
    assert "s2" in rec.beside["s1"]  # two scripted variants overlapped
    assert rec.most == 2  # never more than jobs at once
    assert sorted(rec.slots[s] for s in ("s1", "s2")) == [0, 1]  # their own ports


def test_one_job_runs_everything_in_order():
    order: list[str] = []
    _execute_all(lambda v: order.append(v.variant), [vr("a"), vr("b", "agent.backend."
                                                                    "name=embedded"), vr("c")],
                 1, {}, lambda w: None)
    assert order == ["a", "b", "c"]


def test_a_failing_variant_fails_the_experiment():
    def boom(v: VariantRun) -> None:
        if v.variant == "b":
            raise RuntimeError("variant b failed")
    with pytest.raises(RuntimeError, match="variant b failed"):
        _execute_all(boom, [vr("a"), vr("b")], 2, {}, lambda w: None)


def test_a_slot_is_never_shared_whatever_order_variants_end_in():
    # four scripted variants of unequal length on two slots: a late starter takes the slot
    # that was given back, never the one of a variant still running (Recorder asserts it)
    rec = Recorder()
    _execute_all(rec, [vr("a1"), vr("b3"), vr("c1"), vr("d3"), vr("e1")], 2, {},
                 lambda w: None)
    assert rec.most == 2 and set(rec.slots.values()) == {0, 1}


def test_a_resumed_run_adds_its_earlier_sittings_time():
    walls = {"a": 100.0, "b": 50.0}
    _execute_all(lambda v: None, [VariantRun(**{**vr("a").__dict__, "resume": True}),
                                  vr("b")], 1, walls, lambda w: None)
    assert walls["a"] >= 100.0 and walls["b"] < 50.0
