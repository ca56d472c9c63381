"""The frozen judge model: one backend, one identity, results cached on disk per (judge, prompt).

Every benchmark judge (PrivacyLens leakage and helpfulness, AlpacaEval's pairwise annotator)
and the anomaly evaluator's ``llm`` judge reach their model through :class:`JudgeModel`. It
sends each prompt as **one user message** (as PrivacyLens and AlpacaEval do), decodes greedily,
and offers two ways of reading an answer: :meth:`JudgeModel.generate` (free text) and
:meth:`JudgeModel.label_logprobs` (each label's log-probability at the answer position, on
backends that expose logits: the embedded llama.cpp model).

The cache key is the sha256 of the judge's identity (backend, model, weights' sha256 where
known), the operation and its whole input; a value is a small JSON file written atomically and
0600 (judged texts are private outputs) under ``<cache_dir>/<key[:2]>/<key>.json``. A changed
prompt, model or label set is a new key, so a stale verdict is never reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.agents.backends import Backend
from pfedma_flwr.persistence import write_text_atomic

logger = logging.getLogger(__name__)

Labels = Mapping[str, Sequence[str]]
#: A judge prompt: one user message (PrivacyLens) or a whole chat (AlpacaEval: system + user).
Prompt = str | list[dict[str, str]]


class JudgeCache:
    """Judge results on disk, one atomic 0600 JSON file per key (module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored value of ``key``, or ``None`` (a torn or foreign file counts as absent)."""
        try:
            value = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.misses += 1
            return None
        if not isinstance(value, dict):
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        """Store ``value`` under ``key`` (atomic; the directory is created 0700)."""
        write_text_atomic(self._path(key), json.dumps(dict(value), sort_keys=True))


def cache_key(identity: str, op: str, payload: Mapping[str, Any]) -> str:
    """sha256 of the judge identity, the operation and its input."""
    blob = json.dumps({"judge": identity, "op": op, **payload}, sort_keys=True,
                      ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class JudgeModel:
    """A frozen judge: greedy, one user message per prompt, cached (module docstring).

    Parameters
    ----------
    backend : Backend
        Where the judge's model runs (embedded llama.cpp by default; any OpenAI-compatible
        endpoint by config).
    identity : str
        What makes two judges the same judge (part of every cache key), e.g.
        ``"embedded:qwen2.5-coder-1.5b:<sha256>"``.
    cache : JudgeCache, optional
        Disk cache of results; none = always ask the model.
    chunk : int
        Prompts sent to the backend at once (and cached together).
    """

    def __init__(self, *, backend: Backend | Any, identity: str,
                 cache: JudgeCache | None = None, chunk: int = 4) -> None:
        if not identity.strip():
            raise ValueError("JudgeModel needs a non-empty identity (it keys the cache)")
        if chunk < 1:
            raise ValueError(f"JudgeModel chunk must be >= 1, got {chunk}")
        self.backend, self.identity, self.cache = backend, identity, cache
        self.chunk = chunk
        self.failures = 0

    @property
    def has_logprobs(self) -> bool:
        """Whether the backend reads next-token log-probabilities."""
        probe = getattr(type(self.backend), "next_token_logprobs", None)
        return probe is not None and probe is not Backend.next_token_logprobs

    def _cached(self, op: str, payloads: list[dict[str, Any]], compute: Any) -> list[Any]:
        keys = [cache_key(self.identity, op, p) for p in payloads]
        out: list[Any] = [None] * len(keys)
        todo = []
        for k, key in enumerate(keys):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None and "value" in hit:
                out[k] = hit["value"]
            else:
                todo.append(k)
        # in chunks, each stored as soon as it is judged: a long validation or analysis that is
        # stopped keeps what it has done (nothing computed is lost)
        for start in range(0, len(todo), self.chunk):
            part = todo[start:start + self.chunk]
            for k, (value, ok) in zip(part, compute(part), strict=True):
                out[k] = value
                if ok and self.cache is not None:
                    self.cache.put(keys[k], {"value": value, "op": op})
        return out

    def generate(self, prompts: Sequence[Prompt], *, max_tokens: int = 256,
                 json_schema: dict[str, Any] | None = None) -> list[str]:
        """Greedy reply to each prompt ("" where the backend failed; not cached then)."""
        def compute(todo: list[int]) -> list[tuple[str, bool]]:
            msgs = [_chat(prompts[k]) for k in todo]
            res = self.backend.generate(msgs, max_tokens=max_tokens, temperature=0.0,
                                        json_schema=json_schema)
            if len(res) != len(msgs):
                raise RuntimeError(f"backend returned {len(res)} results for {len(msgs)} prompts")
            # any batch backend works (its results need .text; .error when it can fail)
            errors = [bool(getattr(r, "error", "")) for r in res]
            self.failures += sum(errors)
            return [(r.text, not e) for r, e in zip(res, errors, strict=True)]

        payloads = [{"prompt": p, "max_tokens": max_tokens, "schema": json_schema}
                    for p in prompts]
        return [str(v) for v in self._cached("generate", payloads, compute)]

    def label_logprobs(self, prompts: Sequence[Prompt], *, prefix: str | Sequence[str],
                       labels: Labels) -> list[dict[str, float]]:
        """Each label's log-probability as the first token after ``prefix`` of the reply.

        ``prefix`` starts the judge's reply (one for all prompts, or one per prompt).
        """
        frozen = {k: list(v) for k, v in labels.items()}
        prefixes = [prefix] * len(prompts) if isinstance(prefix, str) else list(prefix)
        if len(prefixes) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(prefixes)} prefixes")

        def compute(todo: list[int]) -> list[tuple[dict[str, float], bool]]:
            msgs = [_chat(prompts[k]) for k in todo]
            res = self.backend.next_token_logprobs(msgs, [prefixes[k] for k in todo], frozen)
            return [(r, all(math.isfinite(v) for v in r.values())) for r in res]

        payloads = [{"prompt": p, "prefix": x, "labels": frozen}
                    for p, x in zip(prompts, prefixes, strict=True)]
        return [{k: float(v) for k, v in d.items()}
                for d in self._cached("logprobs", payloads, compute)]


def _chat(prompt: Prompt) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def label_probabilities(logprobs: Mapping[str, float]) -> dict[str, float]:
    """The labels' log-probabilities renormalised over the labels (softmax)."""
    finite = {k: v for k, v in logprobs.items() if math.isfinite(v)}
    if not finite:
        return {k: 1.0 / len(logprobs) for k in logprobs} if logprobs else {}
    top = max(finite.values())
    z = sum(math.exp(v - top) for v in finite.values())
    return {k: (math.exp(logprobs[k] - top) / z if k in finite else 0.0) for k in logprobs}
