"""The node's generation cache: answers content-addressed by model, prompt and decoding.

Ablations of server-side mechanisms and reruns of one configuration ask the same agents the
same prompts with the same seeds; without a cache every answer is generated again.
:class:`CachedBackend` wraps any :class:`~pfedma_flwr.agents.backends.base.Backend` (agents,
the LLM judge, the LLM orchestrator) and answers a prompt from the cache when an earlier call
generated it under the same **key**: the sha256 of a canonical JSON of

- the backend's :meth:`~pfedma_flwr.agents.backends.base.Backend.cache_identity` (the GGUF
  file's sha256 and llama.cpp's version, a transformers weights directory's content hash, or
  an endpoint and model id), and :data:`CACHE_VERSION`;
- the full chat messages, ``max_tokens``, ``temperature``, the JSON schema (grammar);
- the item's sampling seed (``seed + k`` of item ``k``, or ``seeds[k]``). Greedy decoding
  (``temperature == 0``) ignores the seed, so its key holds none and an answer is reused
  whatever seed the caller passed.

A batch with some cached prompts generates only the others, in one call, each with the seed
it has in the whole batch (``Backend.generate(seeds=...)``). A cached answer comes back as
``GenerationResult(cached=True)`` with the token counts of the generation that produced it,
so cost columns still count what the method spends; ``cached_tokens`` says how much of that
was reused (logged per call).

Entries are files ``<dir>/<key[:2]>/<key>.json`` (0600 in 0700 directories, written
atomically), each holding its key, the request it answers and a checksum. An entry is used only
if it is a regular file (no symlink) under :data:`MAX_ENTRY_BYTES`, its key matches its file
name, its request hashes to that key and its checksum matches: a corrupt file, or a planted
one naming another key, is ignored with a warning and the prompt is generated anew. The cache
never leaves the node: a deployed node keeps it in its ``state-dir``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.agents.backends.base import (
    Backend,
    GenerationResult,
    Messages,
    validate_messages,
)
from pfedma_flwr.agents.backends.embedded import CACHE_ENV
from pfedma_flwr.persistence import private_dir, write_text_atomic

logger = logging.getLogger(__name__)

CACHE_FORMAT = "pfedma-generation"
#: bump when the key's contents or an entry's layout change: older entries then miss
CACHE_VERSION = 1
MAX_ENTRY_BYTES = 8 << 20
GENERATION_CACHE_ENV = "PFEDMA_GENERATION_CACHE"
_MAX_TOKENS_FIELD = 10**9
_FINISH = frozenset({"stop", "length"})


def default_cache_root() -> Path:
    """The default root of generation caches (simulated clients, the server's judges).

    ``$PFEDMA_GENERATION_CACHE``, else ``$PFEDMA_CACHE/generations``, else
    ``~/.cache/pfedma/generations`` (the test suite points the first at a temp dir).
    """
    if os.environ.get(GENERATION_CACHE_ENV):
        return Path(os.environ[GENERATION_CACHE_ENV])
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "pfedma")
    return Path(root) / "generations"


def canonical_json(obj: Any) -> str:
    """One text per value: sorted keys, no spaces, no NaN (what keys and checksums hash)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)


def _sha(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def generation_request(
    identity: Mapping[str, Any], messages: Messages, *, max_tokens: int, temperature: float,
    seed: int | None, json_schema: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """What a generation depends on, as the canonical object its key hashes.

    ``seed`` is the item's own seed; it is dropped for greedy decoding (``temperature == 0``),
    which does not sample.
    """
    return {"cache_version": CACHE_VERSION, "model": dict(identity),
            "messages": [dict(m) for m in messages], "max_tokens": int(max_tokens),
            "temperature": float(temperature),
            "seed": None if temperature == 0 or seed is None else int(seed),
            "json_schema": None if json_schema is None else dict(json_schema)}


def request_key(request: Mapping[str, Any]) -> str:
    """The cache key of a request: hex sha256 of its canonical JSON."""
    return _sha(dict(request))


def _result_fields(r: GenerationResult) -> dict[str, Any]:
    return {"text": r.text, "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens, "finish_reason": r.finish_reason}


class EntryRejected(ValueError):
    """A cache file that must not be trusted (the message says why)."""


class GenerationCache:
    """Content-addressed answers in one private directory (module docstring).

    Parameters
    ----------
    directory : str | Path
        Where the entries live (created 0700 on the first store).

    Attributes
    ----------
    hits, misses, stored, rejected : int
        Lookups answered, lookups not answered, entries written, files refused.
    """

    def __init__(self, directory: str | Path) -> None:
        if not str(directory).strip():
            raise ValueError("generation cache directory must be a non-empty path")
        self.directory = Path(directory).expanduser()
        self._lock = threading.Lock()
        self.hits = self.misses = self.stored = self.rejected = 0

    def path(self, key: str) -> Path:
        """The file of ``key`` (a hex sha256)."""
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"cache key must be a hex sha256, got {key[:80]!r}")
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> GenerationResult | None:
        """The cached answer of ``key`` (``cached=True``), or ``None``; never trusts a bad file."""
        path = self.path(key)
        try:
            result = _decode_entry(_read_entry(path), key)
        except FileNotFoundError:
            self._count("misses")
            return None
        except (EntryRejected, OSError) as e:
            self._count("misses")
            self._count("rejected")
            logger.warning("generation cache: ignoring %s (%s); generating it anew", path, e)
            return None
        self._count("hits")
        return result

    def put(self, key: str, request: Mapping[str, Any], result: GenerationResult) -> None:
        """Store a successful answer under ``key``; a write error is logged, never raised."""
        if not result.ok or key != request_key(request):
            return
        body = {"key": key, "request": dict(request), "result": _result_fields(result)}
        doc = {"format": CACHE_FORMAT, "version": CACHE_VERSION, **body,
               "checksum": _sha(body)}
        path = self.path(key)
        try:
            private_dir(self.directory)
            private_dir(path.parent)
            write_text_atomic(path, canonical_json(doc))
        except (OSError, ValueError) as e:  # a full disk must not fail the generation
            logger.warning("generation cache: could not store %s: %s", path, e)
            return
        self._count("stored")

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)


def _read_entry(path: Path) -> bytes:
    """The bytes of an entry file: a regular file, not a link, within the size cap."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise EntryRejected("not a regular file")
        if st.st_size > MAX_ENTRY_BYTES:
            raise EntryRejected(f"{st.st_size} bytes exceed {MAX_ENTRY_BYTES}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_ENTRY_BYTES + 1)
    finally:
        os.close(fd)


def _decode_entry(raw: bytes, key: str) -> GenerationResult:
    """The answer an entry holds for ``key``; :class:`EntryRejected` for anything untrusted."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise EntryRejected(f"not JSON: {str(e)[:120]}") from None
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT \
            or doc.get("version") != CACHE_VERSION:
        raise EntryRejected(f"not a {CACHE_FORMAT} v{CACHE_VERSION} entry")
    if doc.get("key") != key:
        raise EntryRejected(f"its content names key {str(doc.get('key'))[:64]!r}, not its "
                            "file name's")
    request, result = doc.get("request"), doc.get("result")
    if not isinstance(request, dict) or request_key(request) != key:
        raise EntryRejected("its request does not hash to its key")
    if doc.get("checksum") != _sha({"key": key, "request": request, "result": result}):
        raise EntryRejected("checksum mismatch")
    if not isinstance(result, dict) or not isinstance(result.get("text"), str) \
            or result.get("finish_reason") not in _FINISH:
        raise EntryRejected("malformed result")
    counts = [result.get("prompt_tokens"), result.get("completion_tokens")]
    ints = [n for n in counts if type(n) is int and 0 <= n <= _MAX_TOKENS_FIELD]
    if len(ints) != 2:
        raise EntryRejected("token counts must be integers in [0, 1e9]")
    return GenerationResult(text=result["text"], prompt_tokens=ints[0],
                            completion_tokens=ints[1],
                            finish_reason=result["finish_reason"], cached=True)


class CachedBackend(Backend):
    """A backend whose answers come from a :class:`GenerationCache` where they exist.

    Parameters
    ----------
    inner : Backend
        The backend that generates what the cache misses.
    cache : GenerationCache
        The node's cache.
    identity : Mapping[str, Any]
        ``inner.cache_identity()`` (computed once: it may hash a model file).

    Attributes
    ----------
    cached_items, cached_tokens : int
        Answers served from the cache, and the tokens their generation had cost.
    """

    def __init__(self, inner: Backend, cache: GenerationCache,
                 identity: Mapping[str, Any]) -> None:
        super().__init__()
        self.inner, self.cache, self.identity = inner, cache, dict(identity)
        self.name = inner.name
        self.cached_items = 0
        self.cached_tokens = 0

    def __getattr__(self, attr: str) -> Any:
        # backend-specific attributes (model_path, grammar_fallbacks, prompts) of the inner one
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def usage(self) -> dict[str, int]:
        """The base counters (cached answers included) plus ``cached_items``/``cached_tokens``."""
        return {**super().usage(), "cached_items": self.cached_items,
                "cached_tokens": self.cached_tokens}

    def generate(
        self, prompts: Sequence[Messages], *, max_tokens: int, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None, seed: int | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[GenerationResult]:
        """:meth:`Backend.generate`, answering cached prompts and generating the rest at once."""
        if max_tokens < 1 or not temperature >= 0.0:
            raise ValueError(f"need max_tokens >= 1 and temperature >= 0, got {max_tokens}, "
                             f"{temperature}")
        n = len(prompts)
        if seeds is not None and len(seeds) != n:
            raise ValueError(f"seeds has {len(seeds)} entries for {n} prompts")
        if temperature > 0 and seed is None and seeds is None:
            # unseeded sampling is not reproducible: nothing to reuse, nothing to store
            out = self.inner.generate(prompts, max_tokens=max_tokens, temperature=temperature,
                                      json_schema=json_schema)
            return self._account(out, 0)
        item_seed = list(seeds) if seeds is not None else [
            None if seed is None else seed + k for k in range(n)]
        requests: list[dict[str, Any] | None] = [
            None if validate_messages(p) else generation_request(
                self.identity, p, max_tokens=max_tokens, temperature=temperature,
                seed=item_seed[k], json_schema=json_schema)
            for k, p in enumerate(prompts)]
        keys = [None if r is None else request_key(r) for r in requests]
        out_: list[GenerationResult | None] = [
            None if key is None else self.cache.get(key) for key in keys]
        missing = [k for k in range(n) if out_[k] is None]
        hits = n - len(missing)
        if missing:
            sampled = temperature > 0
            got = self.inner.generate(
                [prompts[k] for k in missing], max_tokens=max_tokens, temperature=temperature,
                json_schema=json_schema, seed=None if sampled else seed,
                seeds=[int(item_seed[k]) for k in missing] if sampled else None)  # type: ignore[arg-type]
            for k, r in zip(missing, got, strict=True):
                out_[k] = r
                req, key = requests[k], keys[k]
                if req is not None and key is not None:
                    self.cache.put(key, req, r)
        out = [r if r is not None else GenerationResult.failure("missing", code="missing")
               for r in out_]
        reused = sum(r.tokens for r in out if r.cached)
        if hits:
            logger.info("%s: %d of %d answers from the generation cache %s (%d tokens not "
                        "generated again)", self.name, hits, n, self.cache.directory, reused)
        return self._account(out, hits)

    def _account(self, out: list[GenerationResult], hits: int) -> list[GenerationResult]:
        with self._lock:
            self.calls += 1
            self.items += len(out)
            self.prompt_tokens += sum(r.prompt_tokens for r in out)
            self.completion_tokens += sum(r.completion_tokens for r in out)
            self.errors += sum(1 for r in out if r.error)
            self.cached_items += hits
            self.cached_tokens += sum(r.tokens for r in out if r.cached)
        return out

    def _generate_batch(self, prompts: list[Messages], *, max_tokens: int, temperature: float,
                        json_schema: dict[str, Any] | None, seed: int | None,
                        ) -> list[GenerationResult]:
        return self.generate(prompts, max_tokens=max_tokens, temperature=temperature,
                             json_schema=json_schema, seed=seed)

    def cache_identity(self) -> dict[str, Any]:
        """The inner backend's identity."""
        return dict(self.identity)

    def timings(self) -> dict[str, float]:
        """The inner backend's cumulative timing counters."""
        return self.inner.timings()

    def endpoint(self) -> str:
        """The inner backend's endpoint."""
        return self.inner.endpoint()

    def health_check(self, *, timeout: float = 10.0) -> None:
        """The inner backend's check."""
        self.inner.health_check(timeout=timeout)

    def close(self) -> None:
        """Close the inner backend."""
        self.inner.close()


def with_generation_cache(backend: Backend, *, enabled: bool | None,
                          directory: str | Path | None) -> Backend:
    """``backend`` behind a :class:`CachedBackend` in ``directory`` where the cache is on.

    Parameters
    ----------
    backend : Backend
        The configured backend.
    enabled : bool or None
        The config's ``cache``; ``None`` takes the backend's ``cache_default`` (on for the
        embedded llama.cpp and transformers backends, off for remote and scripted ones).
    directory : str | Path or None
        This node's cache directory; ``None`` means the node keeps none (no cache).
    """
    on = backend.cache_default if enabled is None else enabled
    if not on or isinstance(backend, CachedBackend):
        return backend
    identity = backend.cache_identity()
    if identity is None or directory is None:
        if enabled:
            logger.info("generation cache requested but %s", "this node has no cache "
                        "directory" if identity is not None else f"backend {backend.name} "
                        "has no model identity to key it by (scripted/mock)")
        return backend
    logger.info("generation cache of %s: %s", backend.name, directory)
    return CachedBackend(backend, GenerationCache(directory), identity)
