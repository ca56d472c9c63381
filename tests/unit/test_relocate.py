"""A finished run whose recorded data dir is gone is read again from checked data."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pfedma_flwr.data.benchmarks import DATA_DIR_ENV, load_benchmark, resolve_data_dir
from pfedma_flwr.experiments.analysis import load_run


def _write_run(d: Path, data_dir: str, golds: dict[str, str]) -> Path:
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"data:\n  data_dir: {data_dir}\n", encoding="utf-8")
    (d / "summary.json").write_text(json.dumps({"status": "completed"}), encoding="utf-8")
    (d / "queries.jsonl").write_text("".join(json.dumps(
        {"query_id": q, "benchmark": q.split("-")[0], "gold": g, "answer": g, "correct": True})
        + "\n" for q, g in golds.items()), encoding="utf-8")
    return d


def test_a_gone_data_dir_is_replaced_by_data_with_the_same_golds(tmp_path, caplog, monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    golds = {t.task_id: t.gold for t in [*load_benchmark("gsm8k")[:2], *load_benchmark("medqa")[:2]]}
    gone = str(tmp_path / "removed-worktree" / "data")
    run = _write_run(tmp_path / "run", gone, golds)
    with caplog.at_level(logging.WARNING, logger="pfedma_flwr.experiments.relocate"):
        data = load_run(run)
    assert data.cfg.data.data_dir == str(resolve_data_dir(None))
    assert gone in caplog.text and "no longer exists" in caplog.text
    # a data dir that still exists is kept as recorded, with no warning
    caplog.clear()
    here = str(resolve_data_dir(None))
    kept = load_run(_write_run(tmp_path / "run2", here, golds))
    assert kept.cfg.data.data_dir == here and "no longer exists" not in caplog.text


def test_other_benchmark_data_is_refused_naming_the_run_and_a_question(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    first = load_benchmark("gsm8k")[0]
    wrong_gold = str(int(first.gold) + 1)
    run = _write_run(tmp_path / "run", str(tmp_path / "gone"), {first.task_id: wrong_gold})
    with pytest.raises(FileNotFoundError, match=rf"run.*gsm8k.*1 of 1.*{first.task_id}"):
        load_run(run)
    unknown = _write_run(tmp_path / "run2", str(tmp_path / "gone"), {"gsm8k-test-999999": "1"})
    with pytest.raises(FileNotFoundError, match="gsm8k-test-999999"):
        load_run(unknown)


def test_a_data_dir_without_the_benchmark_is_refused(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(DATA_DIR_ENV, str(empty))
    run = _write_run(tmp_path / "run", str(tmp_path / "gone"), {"gsm8k-test-0000": "1"})
    with pytest.raises(FileNotFoundError, match="cannot give its gsm8k questions"):
        load_run(run)
