"""Instruction following: AlpacaEval 2.0's 805 prompts with the GPT-4-1106-preview reference.

File: ``alpacaeval/gpt4_1106_preview_model_outputs.json.gz`` under the data dir, a JSON **array**
(not JSON Lines) of ``{dataset, instruction, output, generator}``. ``instruction`` is the prompt;
``output`` is the baseline that AlpacaEval 2.0 compares a model against, kept as the task's gold
(kind ``response``: the agent's whole reply is its answer, never matched against the gold).
AlpacaEval scores the win rate of a judge preferring the answer over the reference, and its
length-controlled version (:mod:`pfedma_flwr.judging.alpacaeval`). Provenance and license (data
CC BY-NC 4.0): ``data/SOURCES.md``.
"""

from __future__ import annotations

import os

from pfedma_flwr.data.benchmarks import (
    DataFormatError,
    Task,
    _field,
    _meta,
    _read_json_array,
    find_data_file,
)

ALPACAEVAL_FILE = "alpacaeval/gpt4_1106_preview_model_outputs.json"


def load_alpacaeval(data_dir: str | os.PathLike[str]) -> list[Task]:
    """Load AlpacaEval 2.0: question = ``instruction``, gold = the reference ``output``.

    Domain ``general``, kind ``response``. ``meta`` holds the source ``dataset`` (``selfinstruct``,
    ``oasst``, ``koala``, ``helpful_base``, ``vicuna``) and the reference ``generator``.
    """
    path = find_data_file(data_dir, ALPACAEVAL_FILE)
    tasks: list[Task] = []
    for k, (lineno, row) in enumerate(_read_json_array(path)):
        where = f"{path}:{lineno}"
        instruction = _field(row, "instruction", str, where).strip()
        reference = _field(row, "output", str, where).strip()
        meta = _meta(row, ("dataset", "generator"))
        try:
            tasks.append(Task(
                task_id=f"alpacaeval-eval-{k:04d}", benchmark="alpacaeval", domain="general",
                question=instruction, gold=reference, answer_kind="response", meta=meta,
            ))
        except ValueError as e:
            raise DataFormatError(f"{where}: {e}") from None
    return tasks
