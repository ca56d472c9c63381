r"""Competition-math benchmarks: MATH (5000-problem test), MATH-500 and AIME 2024.

Files under the data dir (gzip-compressed JSON Lines; an uncompressed copy also works):
``math/test.jsonl.gz`` (MATH, keys ``problem, level, type, solution, idx``),
``math/math500_test.jsonl.gz`` (keys ``problem, solution, answer, subject, level, unique_id``) and
``aime24/test.jsonl.gz`` (keys ``id, problem, question, solution, answer, url``). Provenance and
traps: ``data/SOURCES.md``.

Gold answers:

- MATH: the content of the **last** ``\boxed{...}`` of ``solution`` (balanced braces, so
  ``\boxed{\frac{1}{2}}`` gives ``\frac{1}{2}``). 90 of 5000 solutions box more than once (the
  last box is the final answer, e.g. row 91 boxes an intermediate fraction, then ``161``). Row 333
  ends "Note: $\boxed{3}$ is also accepted" after ``\boxed{-3}``; the standard last-box rule
  (math-evaluation-harness) gives ``3``, kept as is for comparability.
- MATH-500: the ``answer`` field (equal to the last box of ``solution``).
- AIME24: ``answer`` is a zero-padded string (``"025"``); the gold is its integer value as a
  string (``"25"``), compared as a number.
"""

from __future__ import annotations

import logging
import os
import re

from pfedma_flwr.answers import last_boxed
from pfedma_flwr.data.benchmarks import (
    DataFormatError,
    Task,
    _field,
    _meta,
    _read_jsonl,
    find_data_file,
)

logger = logging.getLogger(__name__)

MATH_FILE = "math/test.jsonl"
MATH500_FILE = "math/math500_test.jsonl"
AIME24_FILE = "aime24/test.jsonl"

_AIME_ANSWER = re.compile(r"\d{1,3}")

def parse_aime_answer(answer: str) -> str:
    """Canonical AIME gold: ``"025"`` → ``"25"``, ``"0"`` → ``"0"``.

    Raises
    ------
    ValueError
        If ``answer`` is not an integer 0–999 written with at most three digits.
    """
    text = answer.strip()
    if not _AIME_ANSWER.fullmatch(text):
        raise ValueError(f"AIME answer must be an integer 000-999, got {answer!r}")
    return str(int(text))


def load_math(data_dir: str | os.PathLike[str]) -> list[Task]:
    r"""Load the MATH test set (5000 problems): gold = last ``\boxed{}`` of ``solution``.

    ``meta`` holds ``level`` (``"Level 1"`` … ``"Level 5"``), ``type`` (subject) and ``idx``.
    """
    path = find_data_file(data_dir, MATH_FILE)
    tasks: list[Task] = []
    for k, (lineno, row) in enumerate(_read_jsonl(path)):
        where = f"{path}:{lineno}"
        problem = _field(row, "problem", str, where).strip()
        solution = _field(row, "solution", str, where)
        gold = last_boxed(solution)
        if not gold:
            raise DataFormatError(f"{where}: no complete \\boxed{{...}} answer in 'solution'")
        meta = _meta(row, ("level", "type", "idx"))
        try:
            tasks.append(Task(
                task_id=f"math-test-{k:04d}", benchmark="math", domain="math",
                question=problem, gold=gold, answer_kind="math", rationale=solution.strip(),
                meta=meta,
            ))
        except ValueError as e:
            raise DataFormatError(f"{where}: {e}") from None
    return tasks


def load_math500(data_dir: str | os.PathLike[str]) -> list[Task]:
    """Load MATH-500 (the PRM800K test subset of MATH): gold = the ``answer`` field.

    ``meta`` holds ``subject``, ``level`` (``"1"`` … ``"5"``) and ``unique_id``
    (``"test/<subject>/<n>.json"``, the problem's MATH file).
    """
    path = find_data_file(data_dir, MATH500_FILE)
    tasks: list[Task] = []
    disagree = 0
    for k, (lineno, row) in enumerate(_read_jsonl(path)):
        where = f"{path}:{lineno}"
        problem = _field(row, "problem", str, where).strip()
        answer = _field(row, "answer", str, where).strip()
        solution = _field(row, "solution", str, where)
        disagree += last_boxed(solution) != answer
        meta = _meta(row, ("subject", "level", "unique_id"))
        try:
            tasks.append(Task(
                task_id=f"math500-test-{k:04d}", benchmark="math500", domain="math",
                question=problem, gold=answer, answer_kind="math",
                rationale=solution.strip(), meta=meta,
            ))
        except ValueError as e:
            raise DataFormatError(f"{where}: {e}") from None
    if disagree:
        logger.debug("MATH-500: %d answers differ textually from the last box", disagree)
    return tasks


def load_aime24(data_dir: str | os.PathLike[str]) -> list[Task]:
    """Load AIME 2024 (I and II, 30 problems): gold = ``int(answer)`` as a string, kind number.

    ``meta`` holds the source ``id`` (60–89) and the AoPS ``url``.
    """
    path = find_data_file(data_dir, AIME24_FILE)
    tasks: list[Task] = []
    for k, (lineno, row) in enumerate(_read_jsonl(path)):
        where = f"{path}:{lineno}"
        problem = _field(row, "problem", str, where).strip()
        raw = row.get("answer")
        # Some AIME copies store the answer as a JSON number; both spellings are accepted.
        if isinstance(raw, int) and not isinstance(raw, bool):
            raw = str(raw)
        if not isinstance(raw, str):
            raise DataFormatError(f"{where}: key 'answer' must be a string like '025', got {raw!r}")
        solution = row.get("solution")
        meta = _meta(row, ("id", "url"))
        try:
            tasks.append(Task(
                task_id=f"aime24-test-{k:04d}", benchmark="aime24", domain="math",
                question=problem, gold=parse_aime_answer(raw), answer_kind="number",
                rationale=solution.strip() if isinstance(solution, str) else "", meta=meta,
            ))
        except ValueError as e:
            raise DataFormatError(f"{where}: {e}") from None
    return tasks
