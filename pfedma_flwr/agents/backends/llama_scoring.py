"""Next-token log-probabilities from the embedded llama.cpp model (for frozen judges).

A small judge that must answer "Yes"/"No" (or "m"/"M") is read most robustly at the answer
position: the log-probability of each label's first token, not a free generation that may
ramble or skip the label (docs/judges.md). Prompts are scored one after the other in one
sequence of the backend's batched context; the tokens a prompt shares with the previous one
(the judge's instructions and few-shot examples) stay in the KV cache, so only the new tail is
prefilled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

_CTX_ROUND = 256


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


def label_token_ids(backend: Any, labels: Mapping[str, Sequence[str]]) -> dict[str, list[int]]:
    """Label -> the distinct first token ids of its surface forms (``" Yes"``, ``"Yes"``)."""
    out: dict[str, list[int]] = {}
    for label, forms in labels.items():
        ids: list[int] = []
        for form in forms:
            toks = backend.llm.tokenize(form.encode("utf-8"), add_bos=False, special=False)
            if toks and toks[0] not in ids:
                ids.append(int(toks[0]))
        if not ids:
            raise ValueError(f"label {label!r}: no surface form tokenizes to anything")
        out[label] = ids
    return out


def score_labels(
    backend: Any, prompts: Sequence[list[int]], labels: Mapping[str, Sequence[str]]
) -> list[dict[str, float]]:
    """Per prompt (token ids), each label's log-probability as the next token.

    A label's value is the log of the summed probability of its surface forms' first tokens,
    under the full softmax over the vocabulary (so the values need not sum to 1 over labels).
    A prompt longer than the backend's ``n_ctx`` gets ``-inf`` for every label.
    """
    ids = label_token_ids(backend, labels)
    out: list[dict[str, float]] = []
    fitting = [p for p in prompts if len(p) < backend.n_ctx]
    if not fitting:
        return [{k: -math.inf for k in labels} for _ in prompts]
    longest = max(len(p) for p in fitting)
    ll = backend._ll
    with backend._gen_lock:
        backend._ensure_context(-(-(longest + 1) // _CTX_ROUND) * _CTX_ROUND, 1)
        prev: list[int] = []
        for toks in prompts:
            if len(toks) >= backend.n_ctx or not toks:
                out.append({k: -math.inf for k in labels})
                continue
            keep = min(_shared(prev, toks), len(toks) - 1)
            ll.llama_memory_seq_rm(backend._ctx.memory, 0, keep, -1)
            row = backend._prefill(0, toks, keep, len(toks), want_last=True)
            ptr = ll.llama_get_logits_ith(backend._ctx.ctx, row)
            logits = np.ctypeslib.as_array(ptr, shape=(backend._n_vocab,)).astype(np.float64)
            top = float(logits.max())
            log_z = top + math.log(float(np.exp(logits - top).sum()))
            out.append({k: float(np.logaddexp.reduce(logits[v])) - log_z
                        for k, v in ids.items()})
            prev = list(toks)
    return out
