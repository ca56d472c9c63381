"""Generations after the batch: programs run (or redone in text) and a short re-ask.

:func:`run_programs` runs the Python programs that program-aided answers wrote and answers a
failed one in chain of thought instead; :func:`repair` asks once, briefly, for the answer
statement a reasoning reply ended without. Both update the batch's texts in place and return
the generations they spent (their tokens count toward the answer's cost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from pfedma_flwr.agents.backends import Backend, GenerationResult
from pfedma_flwr.agents.program import extract_code, program_reasoning, run_program
from pfedma_flwr.agents.prompting import REPAIR_PROMPT, build_reasoning_messages
from pfedma_flwr.agents.reasoning import derive_response
from pfedma_flwr.answers import OPEN_KINDS
from pfedma_flwr.protocol.schema import RoutedQuery

logger = logging.getLogger(__name__)
#: tokens of the one short re-ask for an answer statement
REPAIR_TOKENS = 24


def is_json(text: str) -> bool:
    """Whether a reply is the structured response itself, to be parsed rather than derived.

    Scripted agents and served models with their own structured output return JSON directly.
    """
    return text.lstrip().startswith("{")


def run_programs(
    backend: Backend, queries: Sequence[RoutedQuery], programs: set[int], prompts: list[Any],
    gens: list[Any], texts: list[str], *, profile_prompt: str, max_tokens: int,
    temperature: float, seed_of: Callable[[RoutedQuery], int],
) -> dict[int, GenerationResult]:
    """Run the programs of ``programs``; answer the failed ones in chain of thought.

    A program that ran becomes its reasoning text (:func:`program_reasoning`). Updates
    ``prompts``, ``gens`` and ``texts`` in place (``gens[k]`` becomes the fallback's
    generation); returns, per failed item, its program's generation (its tokens count).
    """
    failed: list[int] = []
    for k in sorted(programs):
        if gens[k].error:
            continue
        code = extract_code(texts[k])
        run = run_program(code)
        if run.ok:
            texts[k] = program_reasoning(code, run)
        else:
            logger.debug("program of %s failed (%s): chain of thought instead",
                         queries[k].query_id, run.error)
            failed.append(k)
    if not failed:
        return {}
    for k in failed:
        q = queries[k]
        prompts[k] = build_reasoning_messages(
            profile_prompt=profile_prompt, query_text=prompts[k][-1]["content"],
            answer_kind=q.answer_kind)
    again = backend.generate([prompts[k] for k in failed], max_tokens=max_tokens,
                             temperature=temperature, seeds=[seed_of(queries[k]) for k in failed])
    out: dict[int, GenerationResult] = {}
    for k, g in zip(failed, again, strict=True):
        out[k] = gens[k]
        gens[k], texts[k] = g, g.text
    return out


def repair(
    backend: Backend, queries: Sequence[RoutedQuery], prompts: list[Any], gens: Sequence[Any],
    texts: list[str],
) -> dict[int, GenerationResult]:
    """Re-ask once, briefly, for answers whose reasoning ended before an answer statement.

    Updates ``texts`` in place with the short continuation; returns the repair generations.
    """
    # a whole-answer reply has no answer line to ask for: no action is no answer
    todo = [k for k, (q, g) in enumerate(zip(queries, gens, strict=True))
            if q.task_format == "qa" and not g.error and not is_json(texts[k])
            and q.answer_kind not in OPEN_KINDS
            and derive_response(
                texts[k], question=q.text, answer_kind=q.answer_kind).response is None]
    if not todo:
        return {}
    follow = [[*prompts[k], {"role": "assistant", "content": texts[k].strip() or "..."},
               {"role": "user", "content": REPAIR_PROMPT}] for k in todo]
    extra = backend.generate(follow, max_tokens=REPAIR_TOKENS, temperature=0.0)
    out: dict[int, GenerationResult] = {}
    for k, g in zip(todo, extra, strict=True):
        out[k] = g
        if not g.error and g.text.strip():
            texts[k] = f"{texts[k].rstrip()}\n{g.text.strip()}"
    return out
