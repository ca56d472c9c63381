"""Benchmarks, data-dir lookup, eval/dev split (partitions, retrieval, profiles: test_data_partitions.py)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from pfedma_flwr.data import benchmarks as bm
from pfedma_flwr.data.benchmarks import (
    BENCHMARKS,
    DataFormatError,
    Task,
    load_benchmark,
    load_gsm8k,
    load_medqa,
    resolve_data_dir,
)
from pfedma_flwr.data.split import (
    dev_pool,
    round_robin,
    sample_eval_tasks,
    split_tasks,
)
from tests.unit.conftest import synth_task

REPO_DATA = Path(__file__).resolve().parents[2] / "data"


def _write_jsonl(path: Path, lines: Sequence[str], *, compress: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(line + "\n" for line in lines)
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


pytestmark = pytest.mark.usefixtures("fresh_data_caches")


# ---------------------------------------------------------------- loaders on the real data


def test_real_loader_row_counts_and_traps() -> None:
    gsm = load_benchmark("gsm8k", REPO_DATA)
    med = load_benchmark("medqa", REPO_DATA)
    # data/SOURCES.md: 1187 GSM8K rows, 1146 MedQA rows.
    assert (len(gsm), len(med)) == (1187, 1146)
    assert len({t.task_id for t in gsm + med}) == 1187 + 1146
    # Row 0: "... #### 18"; row 134 ends in "#### 2,125" (comma stripped).
    assert gsm[0].gold == "18" and gsm[0].task_id == "gsm8k-test-0000"
    assert gsm[134].gold == "2125"
    assert "<<" not in gsm[0].rationale and gsm[0].rationale.endswith("farmer’s market.")
    assert all("," not in t.gold for t in gsm)
    assert {t.domain for t in gsm} == {"math"} and {t.domain for t in med} == {"medicine"}
    # MedQA row 0: answer_idx "B" (the letter, not the option text).
    assert med[0].gold == "B" and med[0].answer_kind == "option"
    assert med[0].options["B"] == "Tell the attending that he cannot fail to disclose this mistake"
    assert med[0].question.endswith("\nD. Refuse to dictate the operative report")
    assert "\nA. Disclose the error" in med[0].question
    assert {t.gold for t in med} == {"A", "B", "C", "D"}


def test_registry_and_cache() -> None:
    # More benchmarks register from bench_*.py (tests/unit/test_benchmarks_extra.py).
    assert {"gsm8k", "medqa"} <= set(BENCHMARKS.names())
    with pytest.raises(ValueError, match=r"unknown benchmark 'nope'.*gsm8k"):
        load_benchmark("nope", REPO_DATA)
    # An out-of-tree loader by module:attr path.
    assert len(load_benchmark("pfedma_flwr.data.benchmarks:load_gsm8k", REPO_DATA)) == 1187
    a, b = load_benchmark("gsm8k", REPO_DATA), load_benchmark("gsm8k", REPO_DATA)
    assert a == b and a is not b  # cached content, fresh list per call


@pytest.mark.parametrize(
    ("answer", "gold", "rationale"),
    [
        ("So 1,000 total.\n#### 1,000", "1000", "So 1,000 total."),  # thousands separator
        ("#### 114,200", "114200", ""),  # two separators
        ("She loses 3.\n#### -3", "-3", "She loses 3."),  # negative
        ("2*3=<<2*3=6>>6 eggs\n#### 6 ", "6", "2*3=6 eggs"),  # annotation, trailing blank
        ("a #### 1\n#### 2", "2", "a #### 1"),  # the last marker wins
        ("#### 2.5", "2.5", ""),
    ],
)
def test_parse_gsm8k_answer(answer: str, gold: str, rationale: str) -> None:
    assert bm.parse_gsm8k_answer(answer) == (gold, rationale)


@pytest.mark.parametrize("answer", ["no marker 5", "#### 12 dollars", "####", "#### $5"])
def test_parse_gsm8k_answer_rejects(answer: str) -> None:
    with pytest.raises(ValueError):
        bm.parse_gsm8k_answer(answer)


def test_gsm8k_loader_on_files(tmp_path: Path) -> None:
    good = json.dumps({"question": " Q1 ", "answer": "x\n#### 1,234"})
    # Blank line 2 is skipped; the uncompressed fallback file is read too.
    _write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [good, "", good], compress=False)
    tasks = load_gsm8k(tmp_path)
    assert [(t.task_id, t.question, t.gold) for t in tasks] == [
        ("gsm8k-test-0000", "Q1", "1234"), ("gsm8k-test-0001", "Q1", "1234")
    ]


MEDQA_ROW = {"question": "Q?", "answer": "two", "options": {"B": "two", "A": "one"},
             "answer_idx": "B"}


@pytest.mark.parametrize(
    ("bench", "lines", "match"),
    [
        ("gsm8k", ['{"question": "q", "answer": "#### 1"}', "{not json"],
         r"test.jsonl.gz:2: invalid JSON"),
        ("gsm8k", ['{"question": "q"}'], r":1: missing key 'answer'"),
        ("gsm8k", ['{"question": 3, "answer": "#### 1"}'], r":1: key 'question' must be str"),
        ("gsm8k", ['{"question": "q", "answer": "#### one"}'], r":1: final answer 'one'"),
        ("gsm8k", ["[1, 2]"], r":1: expected a JSON object"),
        ("medqa", [json.dumps({**MEDQA_ROW, "answer_idx": "E"})], r":1: answer_idx 'E' not among"),
        ("medqa", [json.dumps({**MEDQA_ROW, "answer": "one"})], r":1: answer 'one' differs"),
        ("medqa", [json.dumps({**MEDQA_ROW, "options": {"a": "x"}})], r":1: options must map"),
        ("medqa", [json.dumps({**MEDQA_ROW, "options": {}})], r":1: options must map"),
    ],
)
def test_malformed_rows_name_file_and_line(
    tmp_path: Path, bench: str, lines: list[str], match: str
) -> None:
    _write_jsonl(tmp_path / bench / "test.jsonl.gz", lines)
    with pytest.raises(DataFormatError, match=match):
        BENCHMARKS.get(bench)(tmp_path)


def test_medqa_loader_orders_options(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "medqa" / "test.jsonl.gz", [json.dumps(MEDQA_ROW)])
    (task,) = load_medqa(tmp_path)
    assert task.question == "Q?\nA. one\nB. two"
    assert (task.gold, list(task.options)) == ("B", ["A", "B"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"domain": "law"}, "Task.domain"),
        ({"answer_kind": "essay"}, "Task.answer_kind"),
        ({"gold": " "}, "Task.gold"),
        ({"gold": "1,000"}, "numeric gold"),
        ({"answer_kind": "option", "gold": "C", "options": {"A": "x"}}, "gold option 'C'"),
    ],
)
def test_task_validation(kwargs: dict, match: str) -> None:
    base = {"task_id": "x", "benchmark": "b", "domain": "math", "question": "q", "gold": "1",
            "answer_kind": "number"}
    with pytest.raises(ValueError, match=match):
        Task(**{**base, **kwargs})


def test_task_is_hashable_and_copies_options() -> None:
    opts = {"A": "x", "B": "y"}
    t = Task(task_id="x", benchmark="b", domain="medicine", question="q", gold="A",
             answer_kind="option", options=opts, sensitive_items=["Jane Doe"])  # type: ignore[arg-type]
    opts["C"] = "z"
    assert list(t.options) == ["A", "B"] and t.sensitive_items == ("Jane Doe",)
    assert len({t, t}) == 1


# ---------------------------------------------------------------- resolve_data_dir


def test_resolve_data_dir_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    # Nothing given: the repository's data/.
    assert resolve_data_dir(None) == REPO_DATA
    monkeypatch.setenv(bm.DATA_DIR_ENV, str(env_dir))
    # Empty explicit counts as unset, so the environment wins; an explicit path wins over both.
    assert resolve_data_dir("") == env_dir
    assert resolve_data_dir(str(tmp_path)) == tmp_path


def test_resolve_data_dir_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=r"nowhere.*from data-dir.*PFEDMA_DATA_DIR"):
        resolve_data_dir(str(missing))
    monkeypatch.setenv(bm.DATA_DIR_ENV, str(missing))
    with pytest.raises(FileNotFoundError, match=r"nowhere.*from PFEDMA_DATA_DIR"):
        resolve_data_dir(None)
    monkeypatch.delenv(bm.DATA_DIR_ENV)
    monkeypatch.setattr(bm, "_REPO_DATA_DIR", missing)
    with pytest.raises(FileNotFoundError, match=r"shipped default .*nowhere"):
        resolve_data_dir(None)
    # A dir without the benchmark file (e.g. an app bundle's data/ holding only SOURCES.md).
    with pytest.raises(FileNotFoundError, match=r"gsm8k/test.jsonl.gz' not found.*data-dir"):
        load_gsm8k(tmp_path)


# ---------------------------------------------------------------- split


def test_split_tasks_disjoint_deterministic() -> None:
    tasks = [synth_task(i) for i in range(10)]
    s = split_tasks(tasks, dev_pool_size=3, seed=7, benchmark="synth")
    assert (len(s.eval_stream), len(s.dev_pool)) == (7, 3)
    ids_eval, ids_dev = {t.task_id for t in s.eval_stream}, {t.task_id for t in s.dev_pool}
    assert not ids_eval & ids_dev and ids_eval | ids_dev == {t.task_id for t in tasks}
    assert split_tasks(tasks, dev_pool_size=3, seed=7, benchmark="synth") == s
    assert split_tasks(tasks, dev_pool_size=3, seed=8, benchmark="synth") != s
    # The dev pool is cut from the end: the eval head does not move when the pool grows.
    s5 = split_tasks(tasks, dev_pool_size=5, seed=7, benchmark="synth")
    assert s5.eval_stream == s.eval_stream[:5]
    assert split_tasks(tasks, dev_pool_size=0, seed=7).dev_pool == ()
    assert split_tasks(tasks, dev_pool_size=10, seed=7).eval_stream == ()
    for bad in (-1, 11):
        with pytest.raises(ValueError, match=r"dev_pool_size must be in \[0, 10\]"):
            split_tasks(tasks, dev_pool_size=bad, seed=7)


def test_round_robin() -> None:
    a, b = [synth_task(i) for i in range(3)], [synth_task(9)]
    # [a0, b0, a1, a2]: the shorter stream runs out.
    assert [t.task_id for t in round_robin([a, b])] == ["t0000", "t0009", "t0001", "t0002"]
    assert round_robin([]) == []


def test_sample_eval_tasks_and_dev_pool_are_disjoint() -> None:
    ev = sample_eval_tasks(["gsm8k", "medqa"], 5, 0, REPO_DATA, dev_pool_per_benchmark=200)
    assert len(ev) == 10
    assert [t.benchmark for t in ev] == ["gsm8k", "medqa"] * 5
    pool = dev_pool(["gsm8k", "medqa"], dev_pool_per_benchmark=200, seed=0, data_dir=REPO_DATA)
    assert len(pool) == 400 and [t.benchmark for t in pool[199:201]] == ["gsm8k", "medqa"]
    assert not {t.task_id for t in ev} & {t.task_id for t in pool}
    # Same seed, same queries; the eval stream of the whole benchmark never meets the pool, and
    # with the 100 unseen questions set apart (split.py) the three cover the benchmark.
    assert sample_eval_tasks(["gsm8k", "medqa"], 5, 0, REPO_DATA) == ev
    all_eval = sample_eval_tasks(["gsm8k"], 1187 - 200 - 100, 0, REPO_DATA)
    unseen = sample_eval_tasks(["gsm8k"], 100, 0, REPO_DATA, question_set="unseen")
    assert len({t.task_id for t in all_eval} | {t.task_id for t in pool[:200]}
               | {t.task_id for t in unseen}) == 1187
    assert sample_eval_tasks(["gsm8k", "medqa"], 5, 1, REPO_DATA) != ev


@pytest.mark.parametrize(
    ("benchmarks", "n", "match"),
    [
        # 1187 - 200 held apart for the dev pool - 100 unseen questions
        (["gsm8k"], 888, "has 887 default evaluation tasks"),
        (["gsm8k", "gsm8k"], 1, "must not repeat"),
        ([], 1, "at least one"),
        ("gsm8k", 1, "list of names"),
        (["gsm8k"], 0, "n_per_benchmark must be >= 1"),
    ],
)
def test_sample_eval_tasks_errors(benchmarks, n: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sample_eval_tasks(benchmarks, n, 0, REPO_DATA)
