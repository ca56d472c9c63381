"""One message's batched generation on the client: budgets, schemas, seeds, bounded errors.

Pure helpers of :class:`~pfedma_flwr.client.agent.ClientAgent`: which token budget and output
schema a batch gets, the per-answer sampling seed (reproducible, independent of the message),
what the backend's timing counters grew by, and the error code an uploaded reply may carry.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pfedma_flwr.agents.backends import Backend
from pfedma_flwr.agents.backends.base import GenerationResult
from pfedma_flwr.agents.prompting import RESPONSE_JSON_SCHEMA
from pfedma_flwr.answers import OPEN_KINDS
from pfedma_flwr.client.posing import BENCHMARK_FORMATS
from pfedma_flwr.protocol.schema import RoutedQuery


def answer_seed(seed: int, client_key: str, q: RoutedQuery, salt: str = "") -> int:
    """The sampling seed of a client's answer to ``q`` in its collaboration round.

    Independent of other agents' seeds and reproducible; it depends on nothing else in the
    message (not the Flower round, not the query's place in the batch), so another method
    or ablation that asks this agent the same prompt samples the same answer and the
    generation cache serves it.
    """
    key = f"{seed}|{client_key}|{q.round}|{q.query_id}|{salt}"
    digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x3FFFFFFF


def generate_batch(
    backend: Backend, queries: Sequence[RoutedQuery], prompts: list[Any], *, reasoning: bool,
    max_tokens: int, open_max_tokens: int, temperature: float, seeds: Sequence[int],
) -> list[Any]:
    """One batched generation; under ``json`` answers the benchmark formats go schema-free.

    A batch holding a query that needs a whole answer (a tool action, an open response,
    :data:`~pfedma_flwr.answers.OPEN_KINDS`) generates with ``max(max_tokens,
    open_max_tokens)``; ``seeds`` holds one seed per query.
    """
    special = [k for k, q in enumerate(queries) if q.task_format in BENCHMARK_FORMATS]
    budget = max(max_tokens, open_max_tokens) if any(
        q.answer_kind in OPEN_KINDS for q in queries) else max_tokens
    if reasoning or not special:
        return backend.generate(prompts, max_tokens=budget, temperature=temperature,
                                json_schema=None if reasoning else RESPONSE_JSON_SCHEMA,
                                seeds=list(seeds))
    rest = [k for k in range(len(prompts)) if k not in special]
    out: list[Any] = [None] * len(prompts)
    for group, schema in ((special, None), (rest, RESPONSE_JSON_SCHEMA)):
        if group:
            got = backend.generate([prompts[k] for k in group], max_tokens=budget,
                                   temperature=temperature, json_schema=schema,
                                   seeds=[seeds[k] for k in group])
            for k, g in zip(group, got, strict=True):
                out[k] = g
    return out


def generate_batch_except(
    backend: Backend, queries: Sequence[RoutedQuery], prompts: list[Any],
    decided: Mapping[int, str], *, seeds: Sequence[int], **kw: Any,
) -> list[Any]:
    """:func:`generate_batch` for the queries not in ``decided`` (index → its fixed reply).

    A decided query costs no generation: its result is the fixed text with no tokens.
    """
    ask = [k for k in range(len(queries)) if k not in decided]
    got = generate_batch(backend, [queries[k] for k in ask], [prompts[k] for k in ask],
                         seeds=[seeds[k] for k in ask], **kw) if ask else []
    out: list[Any] = [GenerationResult(text=decided[k]) if k in decided else None
                      for k in range(len(queries))]
    for k, g in zip(ask, got, strict=True):
        out[k] = g
    return out


def timing_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the backend's timing counters grew by during this message (the run's profile)."""
    return {k: round(after[k] - before.get(k, 0.0), 4) for k in sorted(after)}


def error_code(kind: str, detail: str) -> str:
    """A bounded error for the uploaded reply: a fixed code and at most one short reason word.

    Model output never reaches the server through this field (a parse error once echoed a
    patient's name into it); ``detail`` contributes only its leading code token.
    """
    token = re.match(r"[a-z_]+", detail.strip().lower())
    return f"{kind}:{token.group(0)[:40] if token else 'error'}"
