"""Benchmark tasks: the :class:`Task` record, the data-dir lookup and one loader per benchmark.

Data lives outside the Flower app bundle (the bundle cannot carry ``.gz`` files or 10 MB+), as
gzip-compressed JSON Lines under a data dir: ``<data_dir>/gsm8k/test.jsonl.gz`` and
``<data_dir>/medqa/test.jsonl.gz`` (an uncompressed ``test.jsonl`` next to it also works).
Provenance and format notes: ``data/SOURCES.md`` in the repository. The other benchmarks
(MATH, MATH-500, AIME24, MedMCQA, AlpacaEval, Mind2Web-SC, PrivacyLens, ASB) have their loaders
in ``bench_math``, ``bench_medical``, ``bench_instruct``, ``bench_agentic`` and
``bench_asb_tasks``, registered here by name; ASB's attack data is loaded by ``bench_asb``.
"""

from __future__ import annotations

import functools
import gzip
import importlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pfedma_flwr import resources
from pfedma_flwr.answers import ANSWER_KINDS, TASK_FORMATS
from pfedma_flwr.registry import Registry

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "PFEDMA_DATA_DIR"
TASK_DOMAINS = ("math", "medicine", "general", "web", "privacy")

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_CALC_ANNOTATION = re.compile(r"<<[^>]*>>")
# The clone's data/, or in a wheel the package's _data (pfedma_flwr/resources.py); a
# non-editable install had no default data dir before (it looked for site-packages/data).
_REPO_DATA_DIR = resources.data_dir()
_FIX_HINT = (
    f"set the run-config key 'data-dir' (or data.data_dir in conf/*.yaml) or the environment "
    f"variable {DATA_DIR_ENV} to the absolute path of a directory holding "
    "gsm8k/test.jsonl.gz and medqa/test.jsonl.gz (the repository's data/ has them; the Flower "
    "app bundle does not carry them)"
)


class DataFormatError(ValueError):
    """A benchmark file row that does not match the expected format (message names file:line)."""


@dataclass(frozen=True)
class Task:
    r"""One benchmark question with its canonical gold answer.

    Parameters
    ----------
    task_id : str
        Unique id, ``"<benchmark>-<split>-<row>"`` with the 0-based row of the source file.
    benchmark : str
        Registered benchmark name (``"gsm8k"``, ``"medqa"``, ...; see :data:`BENCHMARKS`).
    domain : str
        Task domain, one of :data:`TASK_DOMAINS`.
    question : str
        Text shown to agents; multiple-choice questions end with ``"A. ...\nB. ..."`` lines.
    gold : str
        Canonical gold answer: a number without thousands separators, an option letter, a
        LaTeX expression (``math``) or free text (``text``: a reference output or a decision).
    answer_kind : str
        One of :data:`ANSWER_KINDS` (``"number"``, ``"option"``, ``"math"``, ``"text"``).
    options : dict[str, str]
        Letter → option text for multiple choice, else empty. Excluded from hashing.
    sensitive_items : tuple[str, ...]
        Private items a privacy benchmark plants in the task (empty for GSM8K / MedQA).
    rationale : str
        Worked solution usable as a few-shot demonstration (GSM8K: the reference solution without
        calculator annotations; empty where the source has none).
    violated_rules : tuple[str, ...]
        Ground-truth violated rules ``V_j`` of a guard benchmark (Mind2Web-SC), else empty.
    task_needed : tuple[str, ...]
        Texts whose identifiers the task itself needs (the user's identity, the instruction
        naming the addressee): ``P_in`` never redacts what occurs in them. Excluded from hashing.
    meta : dict[str, str]
        Source metadata kept for stratified reports (subject, level, source name, ...).
        Excluded from hashing.
    task_format : str
        How a client poses the task, one of :data:`~pfedma_flwr.answers.TASK_FORMATS`:
        ``qa`` (default), ``guard`` (Mind2Web-SC) or ``tool_plan`` (ASB).
    """

    task_id: str
    benchmark: str
    domain: str
    question: str
    gold: str
    answer_kind: str
    options: dict[str, str] = field(default_factory=dict, hash=False)
    sensitive_items: tuple[str, ...] = ()
    rationale: str = ""
    violated_rules: tuple[str, ...] = ()
    meta: dict[str, str] = field(default_factory=dict, hash=False)
    task_format: str = "qa"
    task_needed: tuple[str, ...] = field(default=(), hash=False)

    def __post_init__(self) -> None:
        for name in ("task_id", "benchmark", "question", "gold"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Task.{name} must be a non-empty string, got {value!r}")
        if self.domain not in TASK_DOMAINS:
            raise ValueError(f"Task.domain must be one of {TASK_DOMAINS}, got {self.domain!r}")
        if self.answer_kind not in ANSWER_KINDS:
            raise ValueError(
                f"Task.answer_kind must be one of {ANSWER_KINDS}, got {self.answer_kind!r}"
            )
        if self.task_format not in TASK_FORMATS:
            raise ValueError(
                f"Task.task_format must be one of {TASK_FORMATS}, got {self.task_format!r}"
            )
        # Copies keep a frozen task independent of the caller's containers.
        object.__setattr__(self, "options", dict(self.options))
        object.__setattr__(self, "sensitive_items", tuple(self.sensitive_items))
        object.__setattr__(self, "violated_rules", tuple(self.violated_rules))
        object.__setattr__(self, "task_needed", tuple(self.task_needed))
        object.__setattr__(self, "meta", dict(self.meta))
        if self.answer_kind == "option" and self.gold not in self.options:
            raise ValueError(
                f"Task {self.task_id}: gold option {self.gold!r} not among {sorted(self.options)}"
            )
        if self.answer_kind == "number" and not _NUMBER.fullmatch(self.gold):
            raise ValueError(
                f"Task {self.task_id}: numeric gold must look like '-12' or '3.5', "
                f"got {self.gold!r}"
            )


def resolve_data_dir(explicit: str | None) -> Path:
    """Locate the benchmark data dir.

    Order: ``explicit`` (config / run config), then ``$PFEDMA_DATA_DIR``, then the data
    shipped with the app (the clone's ``data/``, a wheel's ``pfedma_flwr/_data``). Empty strings
    count as unset.

    Raises
    ------
    FileNotFoundError
        If the chosen directory does not exist, naming it and how to fix it.
    """
    for source, value in (("data-dir", explicit), (DATA_DIR_ENV, os.environ.get(DATA_DIR_ENV))):
        if value:
            path = Path(value).expanduser()
            if not path.is_dir():
                raise FileNotFoundError(
                    f"benchmark data dir {str(path)!r} (from {source}) does not exist; {_FIX_HINT}"
                )
            return path
    if _REPO_DATA_DIR.is_dir():
        return _REPO_DATA_DIR
    raise FileNotFoundError(
        f"no benchmark data dir given and the shipped default {str(_REPO_DATA_DIR)!r} does "
        f"not exist; {_FIX_HINT}"
    )


def _benchmark_file(data_dir: str | os.PathLike[str], name: str) -> Path:
    base = Path(data_dir) / name
    for candidate in (base / "test.jsonl.gz", base / "test.jsonl"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"benchmark file {str(base / 'test.jsonl.gz')!r} not found; {_FIX_HINT}"
    )


def find_data_file(data_dir: str | os.PathLike[str], relative: str) -> Path:
    """``<data_dir>/<relative>.gz``, else the uncompressed ``<data_dir>/<relative>``.

    Raises
    ------
    FileNotFoundError
        If neither exists, naming the expected path and how to fix it.
    """
    base = Path(data_dir) / relative
    for candidate in (base.with_name(base.name + ".gz"), base):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"benchmark file {str(base) + '.gz'!r} not found; {_FIX_HINT}")


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, row)`` for each non-blank line (1-based line numbers)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise DataFormatError(f"{path}:{lineno}: expected a JSON object per line")
            yield lineno, row


_WS = re.compile(r"\s*")


def _skip_ws(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match else pos


def _read_json_array(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, item)`` for each object of a top-level JSON array file.

    The line is where the item starts (1-based), so format errors can name ``file:line`` as for
    JSON Lines files.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        text = fh.read()
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    if not text.startswith("[", pos):
        raise DataFormatError(f"{path}:1: expected a JSON array of objects")
    pos = _skip_ws(text, pos + 1)
    line, counted = 1, 0
    while not text.startswith("]", pos):
        try:
            item, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise DataFormatError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
        line += text.count("\n", counted, pos)
        counted = pos
        if not isinstance(item, dict):
            raise DataFormatError(f"{path}:{line}: expected a JSON object per array item")
        yield line, item
        pos = _skip_ws(text, end)
        if text.startswith(",", pos):
            pos = _skip_ws(text, pos + 1)
        elif not text.startswith("]", pos):
            line += text.count("\n", counted, pos)
            raise DataFormatError(f"{path}:{line}: expected ',' or ']' after an array item")
        if pos >= len(text):
            raise DataFormatError(f"{path}: unterminated JSON array")


def _field(row: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in row:
        raise DataFormatError(f"{where}: missing key {key!r} (keys: {sorted(row)})")
    value = row[key]
    if not isinstance(value, kind):
        raise DataFormatError(
            f"{where}: key {key!r} must be {kind.__name__}, got {type(value).__name__}"
        )
    return value


def _meta(row: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, str]:
    """``{key: str(row[key])}`` for the ``keys`` present (and not null) in ``row``."""
    return {key: str(row[key]) for key in keys if row.get(key) is not None}


def parse_gsm8k_answer(answer: str) -> tuple[str, str]:
    """Split a GSM8K ``answer`` into ``(gold, rationale)``.

    The gold is the text after the last ``"#### "`` with thousands separators removed
    (``"1,000"`` → ``"1000"``); the rationale is the solution before it with the
    ``<<calc>>`` annotations removed.

    Raises
    ------
    ValueError
        If there is no ``"#### "`` marker or the gold is not a plain number.
    """
    head, marker, tail = answer.rpartition("#### ")
    if not marker:
        raise ValueError("no '#### ' marker before the final answer")
    gold = tail.strip().replace(",", "")
    if not _NUMBER.fullmatch(gold):
        raise ValueError(f"final answer {tail.strip()!r} is not a number")
    return gold, _CALC_ANNOTATION.sub("", head).strip()


def load_gsm8k(data_dir: str | os.PathLike[str]) -> list[Task]:
    """Load GSM8K test (``<data_dir>/gsm8k/test.jsonl.gz``; keys ``question``, ``answer``)."""
    path = _benchmark_file(data_dir, "gsm8k")
    tasks: list[Task] = []
    for k, (lineno, row) in enumerate(_read_jsonl(path)):
        where = f"{path}:{lineno}"
        question = _field(row, "question", str, where)
        try:
            gold, rationale = parse_gsm8k_answer(_field(row, "answer", str, where))
            tasks.append(Task(
                task_id=f"gsm8k-test-{k:04d}", benchmark="gsm8k", domain="math",
                question=question.strip(), gold=gold, answer_kind="number",
                rationale=rationale,
            ))
        except ValueError as e:
            raise DataFormatError(f"{where}: {e}") from None
    return tasks


def format_options(options: Mapping[str, str]) -> str:
    """Render options as ``"A. text"`` lines in letter order."""
    return "\n".join(f"{letter}. {options[letter]}" for letter in sorted(options))


def load_medqa(data_dir: str | os.PathLike[str]) -> list[Task]:
    """Load MedQA-USMLE 4-option test (``<data_dir>/medqa/test.jsonl.gz``).

    Keys ``question``, ``options`` (letter → text), ``answer_idx`` (the gold letter) and
    ``answer`` (the gold text, checked against ``options[answer_idx]``).
    """
    path = _benchmark_file(data_dir, "medqa")
    tasks: list[Task] = []
    for k, (lineno, row) in enumerate(_read_jsonl(path)):
        where = f"{path}:{lineno}"
        question = _field(row, "question", str, where).strip()
        options = _field(row, "options", dict, where)
        letter = _field(row, "answer_idx", str, where).strip()
        bad = [key for key, v in options.items()
               if not (len(key) == 1 and key.isupper() and isinstance(v, str))]
        if not options or bad:
            raise DataFormatError(f"{where}: options must map letters to text, got {options!r}")
        if letter not in options:
            raise DataFormatError(f"{where}: answer_idx {letter!r} not among {sorted(options)}")
        if "answer" in row and row["answer"] != options[letter]:
            raise DataFormatError(
                f"{where}: answer {row['answer']!r} differs from options[{letter!r}]"
            )
        tasks.append(Task(
            task_id=f"medqa-test-{k:04d}", benchmark="medqa", domain="medicine",
            question=f"{question}\n{format_options(options)}", gold=letter,
            answer_kind="option", options={key: options[key] for key in sorted(options)},
        ))
    return tasks


BenchmarkLoader = Callable[[Path], list[Task]]
BENCHMARKS: Registry[BenchmarkLoader] = Registry("benchmark")
BENCHMARKS.add("gsm8k", load_gsm8k)
BENCHMARKS.add("medqa", load_medqa)

# Loaders living in sibling modules (they import this one, so they are imported on first use).
_EXTRA_LOADERS = {
    "math": "bench_math:load_math",
    "math500": "bench_math:load_math500",
    "aime24": "bench_math:load_aime24",
    "medmcqa": "bench_medical:load_medmcqa",
    "alpacaeval": "bench_instruct:load_alpacaeval",
    "mind2web_sc": "bench_agentic:load_mind2web_sc",
    "privacylens": "bench_agentic:load_privacylens",
    "privacylens_confaide": "bench_agentic:load_privacylens_confaide",
    "privacylens_culturebank": "bench_agentic:load_privacylens_culturebank",
    "asb": "bench_asb_tasks:load_asb",
}


def _lazy_loader(target: str) -> BenchmarkLoader:
    module, attr = target.split(":")

    def load(data_dir: Path) -> list[Task]:
        loader: BenchmarkLoader = getattr(
            importlib.import_module(f"{__package__}.{module}"), attr
        )
        return loader(data_dir)

    load.__name__ = load.__qualname__ = attr
    return load


for _name, _target in _EXTRA_LOADERS.items():
    BENCHMARKS.add(_name, _lazy_loader(_target))


@functools.lru_cache(maxsize=16)
def _load_cached(name: str, data_dir: Path) -> tuple[Task, ...]:
    tasks = tuple(BENCHMARKS.get(name)(data_dir))
    logger.info("loaded benchmark %s: %d tasks from %s", name, len(tasks), data_dir)
    return tasks


def load_benchmark(name: str, data_dir: str | os.PathLike[str] | None = None) -> list[Task]:
    """Load a registered benchmark (or an out-of-tree ``module:attr`` loader), cached per process.

    ``data_dir`` ``None`` or empty resolves through :func:`resolve_data_dir`. Tests reset the
    cache with :func:`clear_benchmark_cache`.
    """
    resolved = resolve_data_dir(os.fspath(data_dir) if data_dir else None).resolve()
    return list(_load_cached(name, resolved))


def clear_benchmark_cache() -> None:
    """Forget every benchmark loaded in this process."""
    _load_cached.cache_clear()
