"""Benchmarks, data-dir lookup, eval/dev split, client partitions, retrieval, profiles."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
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
from pfedma_flwr.data.partition import clear_partition_cache, partition_sizes, partition_tasks
from pfedma_flwr.data.profiles import (
    BUILTIN_PROFILES,
    KNOWLEDGE_DOMAINS,
    AgentProfile,
    knowledge_domain,
    profile_for_client,
)
from pfedma_flwr.data.retrieval import clear_retrieval_cache, retrieve_examples
from pfedma_flwr.data.split import (
    dev_pool,
    round_robin,
    sample_eval_tasks,
    split_tasks,
)
from pfedma_flwr.embeddings import HashingEmbedder

REPO_DATA = Path(__file__).resolve().parents[2] / "data"


def _task(i: int, domain: str = "math", question: str | None = None) -> Task:
    if domain == "math":
        return Task(task_id=f"t{i:04d}", benchmark="synth", domain="math",
                    question=question or f"question {i}", gold=str(i), answer_kind="number")
    return Task(task_id=f"t{i:04d}", benchmark="synth", domain="medicine",
                question=question or f"question {i}", gold="A", answer_kind="option",
                options={"A": "yes", "B": "no"})


def _write_jsonl(path: Path, lines: Sequence[str], *, compress: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(line + "\n" for line in lines)
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _fresh_caches(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(bm.DATA_DIR_ENV, raising=False)
    bm.clear_benchmark_cache()
    yield
    bm.clear_benchmark_cache()
    clear_partition_cache()
    clear_retrieval_cache()


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
    tasks = [_task(i) for i in range(10)]
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
    a, b = [_task(i) for i in range(3)], [_task(9)]
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


# ---------------------------------------------------------------- partitions


def _pool(n_math: int = 20, n_med: int = 10) -> list[Task]:
    return [_task(i) for i in range(n_math)] + [
        _task(1000 + i, "medicine") for i in range(n_med)
    ]


def _parts(pool: list[Task], n: int, **kw) -> list[list[Task]]:
    return [partition_tasks(pool, n, i, **kw) for i in range(n)]


def _assert_disjoint_cover(pool: list[Task], parts: list[list[Task]]) -> None:
    ids = [t.task_id for p in parts for t in p]
    assert len(ids) == len(set(ids)) == len(pool)
    assert set(ids) == {t.task_id for t in pool}


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
@pytest.mark.parametrize("n", [1, 4, 30, 100])
def test_partitions_disjoint_cover_deterministic(scheme: str, n: int) -> None:
    pool = _pool()
    parts = _parts(pool, n, scheme=scheme, alpha=0.5, seed=3)
    _assert_disjoint_cover(pool, parts)
    clear_partition_cache()  # recomputed from scratch, not served from the cache
    assert _parts(pool, n, scheme=scheme, alpha=0.5, seed=3) == parts
    if n == 100:
        # 30 tasks over 100 clients: only ids < 30 can be non-empty.
        assert all(p == [] for p in parts[30:])


def test_iid_sizes_and_mixing() -> None:
    pool = _pool()
    # Contiguous shards of 30 over 4: div 7, mod 2 -> [8, 8, 7, 7].
    assert partition_sizes(pool, 4, scheme="iid", seed=0) == [8, 8, 7, 7]
    # 30 over 100: effective 30 partitions of one task each, 70 empty.
    assert partition_sizes(pool, 100, scheme="iid", seed=0) == [1] * 30 + [0] * 70
    # Shuffled before sharding, so partition 0 is not just the first 8 (math) tasks.
    domains = {t.domain for p in _parts(pool, 2, scheme="iid", seed=0) for t in p[:15]}
    assert domains == {"math", "medicine"}
    assert _parts(pool, 4, scheme="iid", seed=1) != _parts(pool, 4, scheme="iid", seed=0)


def test_dirichlet_is_skewed_at_small_alpha() -> None:
    pool = _pool(200, 200)

    def top_client_share(parts: list[list[Task]], domain: str) -> float:
        counts = [sum(t.domain == domain for t in p) for p in parts]
        return max(counts) / sum(counts)

    # Dir(0.01 * 1_10) puts nearly all mass on one component, so one client holds (almost) a
    # whole domain; 10 IID shards of a shuffled pool give each client about 1/10 of it.
    skewed = _parts(pool, 10, scheme="dirichlet", alpha=0.01, seed=0)
    iid = _parts(pool, 10, scheme="iid", seed=0)
    _assert_disjoint_cover(pool, skewed)
    for domain in ("math", "medicine"):
        assert top_client_share(skewed, domain) > 0.9
        assert top_client_share(iid, domain) < 0.25


def test_partition_on_real_dev_pool_n100() -> None:
    pool = dev_pool(["gsm8k", "medqa"], dev_pool_per_benchmark=200, seed=0, data_dir=REPO_DATA)
    for scheme in ("iid", "dirichlet"):
        parts = _parts(pool, 100, scheme=scheme, alpha=0.5, seed=0)
        _assert_disjoint_cover(pool, parts)
    assert partition_sizes(pool, 100, scheme="iid") == [4] * 100  # 400 / 100


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((4, 0), {"scheme": "noniid"}, "scheme must be one of"),
        ((0, 0), {}, "num_partitions must be >= 1"),
        ((4, 4), {}, r"partition_id must be in \[0, 4\)"),
        ((4, -1), {}, r"partition_id must be in \[0, 4\)"),
        ((4, 0), {"scheme": "dirichlet", "alpha": 0.0}, "alpha must be > 0"),
    ],
)
def test_partition_errors(args: tuple[int, int], kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        partition_tasks(_pool(), *args, **kwargs)


def test_partition_edge_inputs() -> None:
    assert partition_tasks([], 5, 0) == []
    with pytest.raises(ValueError, match="unique task_id"):
        partition_tasks([_task(1), _task(1)], 2, 0)


# ---------------------------------------------------------------- retrieval


class TableEmbedder:
    """Explicit unit vectors per text, counting how many texts it encodes."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.encoded = 0

    @property
    def dim(self) -> int:
        return 2

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.encoded += len(texts)
        return np.asarray([self.table[t] for t in texts], dtype=np.float32)


def test_retrieval_exact_order_ties_and_cache() -> None:
    emb = TableEmbedder({"p1": [1, 0], "p2": [0.6, 0.8], "p3": [0.6, 0.8], "q": [0.8, 0.6]})
    pool = [_task(1, question="p1"), _task(2, question="p2"), _task(3, question="p3")]
    # cos(q, p1) = 0.8; cos(q, p2) = cos(q, p3) = 0.48 + 0.48 = 0.96 (tie: pool order).
    assert [t.question for t in retrieve_examples("q", pool, 2, emb)] == ["p2", "p3"]
    assert [t.question for t in retrieve_examples("q", pool, 10, emb)] == ["p2", "p3", "p1"]
    # The pool (3 texts) was embedded once; each call embedded the query once.
    assert emb.encoded == 3 + 1 + 1
    assert retrieve_examples("q", pool, 0, emb) == [] and retrieve_examples("q", [], 3, emb) == []
    # A pool task with the query's own question is never shown as its own example.
    assert [t.question for t in retrieve_examples("p2", pool, 1, emb)] == ["p3"]
    assert [t.question for t in retrieve_examples("p2", pool, 1, emb,
                                                  exclude_same_question=False)] == ["p2"]
    with pytest.raises(ValueError, match="k must be >= 0"):
        retrieve_examples("q", pool, -1, emb)


def test_retrieval_hashing_embedder_nearest() -> None:
    pool = [
        _task(1, question="The cardiologist treats atrial fibrillation with anticoagulants"),
        _task(2, question="Tom buys 3 apples and 5 oranges at the market for 2 dollars each"),
        _task(3, question="A contract requires consideration to be legally binding"),
    ]
    got = retrieve_examples("How many apples and oranges did Tom buy at the market",
                            pool, 1, HashingEmbedder())
    assert [t.task_id for t in got] == ["t0002"]


# ---------------------------------------------------------------- profiles


def test_builtin_profiles_cover_12_domains() -> None:
    assert len(BUILTIN_PROFILES) == 20
    assert len({p.name for p in BUILTIN_PROFILES}) == 20
    assert len(KNOWLEDGE_DOMAINS) == 12
    assert {d for p in BUILTIN_PROFILES for d in p.domains} == set(KNOWLEDGE_DOMAINS)
    assert all(len(p.prompt) > 80 and p.backbone == "default" for p in BUILTIN_PROFILES)
    # Both task domains have several specialists among the first few clients.
    first5 = BUILTIN_PROFILES[:5]
    for task_domain in ("math", "medicine"):
        assert sum(p.covers(knowledge_domain(task_domain)) for p in first5) >= 2


@pytest.mark.parametrize(
    ("index", "names", "expected"),
    [
        (0, None, "mathematician"),
        (1, None, "physician"),
        (20, None, "mathematician"),  # 20 % 20 = 0
        (21, [], "physician"),  # empty list = built-in rotation
        (3, ["lawyer", "chemist"], "chemist"),  # 3 % 2 = 1
        (0, ["pfedma_flwr.data.profiles:BUILTIN_PROFILES"], None),  # not a profile -> error
    ],
)
def test_profile_for_client(index: int, names, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="not an AgentProfile"):
            profile_for_client(index, names)
    else:
        assert profile_for_client(index, names).name == expected


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: profile_for_client(0, ["astronaut"]), r"unknown agent profile 'astronaut'"),
        (lambda: profile_for_client(-1), "client_index must be >= 0"),
        (lambda: profile_for_client(0, "lawyer"), "list of profile names"),
        (lambda: knowledge_domain("law"), "no knowledge domain"),
        (lambda: AgentProfile(name="x", domains=("cooking",), prompt="p"), "unknown domains"),
        (lambda: AgentProfile(name="x", domains=(), prompt="p"), "at least one domain"),
        (lambda: AgentProfile(name="a:b", domains=("math",), prompt="p"), "without ':'"),
        (lambda: AgentProfile(name="x", domains=("math",), prompt=" "), "non-empty prompt"),
    ],
)
def test_profile_errors(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_knowledge_domain_of_real_tasks() -> None:
    assert knowledge_domain("math") == "math" and knowledge_domain("medicine") == "medicine"
