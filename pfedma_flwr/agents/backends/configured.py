"""A backend built from its config section (``client.backend``, ``routing.llm_backend``, ...).

Shared by both sides: the client builds its agents' backend and the server its judge's and
LLM orchestrator's, so this lives with the backends rather than in ``server/`` or ``client/``.
"""

from __future__ import annotations

from typing import Any

from pfedma_flwr.agents.backends import Backend, make_backend
from pfedma_flwr.config import BackendConfig

_BACKEND_FIELDS: dict[str, tuple[str, ...]] = {
    "embedded": ("model", "n_threads", "n_ctx", "mode", "max_batch"),
    "openai": ("base_url", "model", "api_key_env", "timeout", "max_retries", "concurrency",
               "json_mode"),
    "transformers": ("model", "device", "dtype", "max_batch"),
    "mock": (),
}


def backend_kwargs(b: BackendConfig) -> dict[str, Any]:
    """The constructor arguments of backend ``b.name`` taken from its config section."""
    kwargs = {f: getattr(b, f) for f in _BACKEND_FIELDS.get(b.name, ())}
    return {**kwargs, **dict(b.options)}


def make_configured_backend(b: BackendConfig) -> Backend:
    """The process-wide backend for a config section (loaded once per process)."""
    return make_backend(b.name, **backend_kwargs(b))
