"""LLM backends behind one batched interface, a registry, and a per-process cached factory.

Built-ins register explicitly here as lazy factories, so importing this package never imports
llama_cpp, torch or openai; the heavy module loads when a backend is first built.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from typing import Any

from pfedma_flwr.agents.backends.base import (
    Backend,
    BackendUnavailableError,
    GenerationResult,
    Messages,
)
from pfedma_flwr.agents.backends.mock import MockBackend
from pfedma_flwr.registry import Registry

BackendFactory = Callable[..., Backend]
BACKENDS: Registry[BackendFactory] = Registry("backend")


def _lazy(module: str, cls: str) -> BackendFactory:
    def factory(**kwargs: Any) -> Backend:
        mod = importlib.import_module(f"pfedma_flwr.agents.backends.{module}")
        return getattr(mod, cls)(**kwargs)  # type: ignore[no-any-return]

    factory.__name__ = f"make_{cls}"
    return factory


BACKENDS.add("openai", _lazy("openai_backend", "OpenAIBackend"))
BACKENDS.add("transformers", _lazy("transformers_backend", "TransformersBackend"))
BACKENDS.add("embedded", _lazy("llama_cpp_backend", "LlamaCppBackend"))
BACKENDS.add("mock", MockBackend)


def _simulated(**kwargs: Any) -> Backend:
    # The experiments' scripted expert agents, by registry name: clients refuse module:attr
    # plug-ins from the run config, so the tiny experiment size must not need one.
    mod = importlib.import_module("pfedma_flwr.agents.backends.simulated")
    return mod.SimulatedAgentBackend(**kwargs)  # type: ignore[no-any-return]


BACKENDS.add("simulated", _simulated)


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    return v


_LOCK = threading.Lock()
_PENDING: dict[tuple[str, Any], dict[str, Any]] = {}


@functools.cache
def _cached(name: str, frozen: tuple[tuple[str, Any], ...]) -> Backend:
    return BACKENDS.get(name)(**_PENDING.pop((name, frozen)))


def make_backend(name: str, **kwargs: Any) -> Backend:
    """Build backend ``name`` once per process per distinct kwargs, then return the same one.

    A ClientApp may see many messages per process; the model must load once, not per message
    (DESIGN §2, STYLE item 15). ``make_backend.cache_clear()`` resets it (tests).
    """
    frozen = tuple(sorted((k, _freeze(v)) for k, v in kwargs.items()))
    try:
        hash(frozen)
    except TypeError as e:
        raise ValueError(f"backend kwargs must be hashable values: {e}") from e
    with _LOCK:  # one construction per key even when threads race on the first call
        _PENDING[(name, frozen)] = kwargs
        try:
            return _cached(name, frozen)
        finally:
            _PENDING.pop((name, frozen), None)


make_backend.cache_clear = _cached.cache_clear  # type: ignore[attr-defined]
make_backend.cache_info = _cached.cache_info  # type: ignore[attr-defined]

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnavailableError",
    "GenerationResult",
    "Messages",
    "MockBackend",
    "make_backend",
]
