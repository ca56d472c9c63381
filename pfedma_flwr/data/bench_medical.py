"""Clinical multiple-choice benchmark MedMCQA (dev split, 4183 questions).

MedQA lives in ``benchmarks.py``. File: ``medmcqa/dev.jsonl.gz`` under the data dir. The
original release calls it ``dev.json`` although it is **JSON Lines**; the copy here is named
``.jsonl`` for what it is. Keys ``id, question, opa, opb, opc, opd, cop, choice_type, exp,
subject_name, topic_name``. Trap: ``cop`` (correct option) is **1-based**, 1 = ``opa`` …
4 = ``opd``; there is no 0 in the file. Provenance: ``data/SOURCES.md``.
"""

from __future__ import annotations

import os

from pfedma_flwr.data.benchmarks import (
    DataFormatError,
    Task,
    _field,
    _meta,
    _read_jsonl,
    find_data_file,
    format_options,
)

MEDMCQA_FILE = "medmcqa/dev.jsonl"
# Option keys in letter order: opa → A, ..., opd → D.
MEDMCQA_OPTION_KEYS = ("opa", "opb", "opc", "opd")
_LETTERS = "ABCD"


def medmcqa_gold_letter(cop: object) -> str:
    """Gold letter of MedMCQA's 1-based ``cop``: 1 → ``"A"`` … 4 → ``"D"``.

    Raises
    ------
    ValueError
        If ``cop`` is not an integer in 1–4 (0 is rejected: the field is 1-based).
    """
    if isinstance(cop, bool) or not isinstance(cop, int) or not 1 <= cop <= 4:
        raise ValueError(f"cop must be an integer 1-4 (1-based: 1 = opa), got {cop!r}")
    return _LETTERS[cop - 1]


def load_medmcqa(data_dir: str | os.PathLike[str]) -> list[Task]:
    """Load MedMCQA dev: question + ``A.``–``D.`` option lines, gold letter from ``cop``.

    ``rationale`` is the explanation ``exp`` (empty where null); ``meta`` holds the source ``id``,
    ``subject_name``, ``topic_name`` and ``choice_type`` (``single`` / ``multi``) when present.
    """
    path = find_data_file(data_dir, MEDMCQA_FILE)
    tasks: list[Task] = []
    for k, (lineno, row) in enumerate(_read_jsonl(path)):
        where = f"{path}:{lineno}"
        question = _field(row, "question", str, where).strip()
        options = {
            letter: _field(row, key, str, where).strip()
            for letter, key in zip(_LETTERS, MEDMCQA_OPTION_KEYS, strict=True)
        }
        try:
            gold = medmcqa_gold_letter(row.get("cop"))
        except ValueError as e:
            raise DataFormatError(f"{where}: {e}") from None
        explanation = row.get("exp")
        meta = _meta(row, ("id", "subject_name", "topic_name", "choice_type"))
        try:
            tasks.append(Task(
                task_id=f"medmcqa-dev-{k:04d}", benchmark="medmcqa", domain="medicine",
                question=f"{question}\n{format_options(options)}", gold=gold,
                answer_kind="option", options=options,
                rationale=explanation.strip() if isinstance(explanation, str) else "",
                meta=meta,
            ))
        except ValueError as e:
            raise DataFormatError(f"{where}: {e}") from None
    return tasks
