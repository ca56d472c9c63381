"""Suite-wide: generation caches go to a temp dir, never the user's ~/.cache/pfedma."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pfedma_flwr.agents.backends.cache import GENERATION_CACHE_ENV


@pytest.fixture(scope="session", autouse=True)
def _private_generation_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # set in os.environ (not monkeypatch) so `flwr run` subprocesses inherit it
    old = os.environ.get(GENERATION_CACHE_ENV)
    os.environ[GENERATION_CACHE_ENV] = str(tmp_path_factory.mktemp("generations"))
    yield
    if old is None:
        os.environ.pop(GENERATION_CACHE_ENV, None)
    else:
        os.environ[GENERATION_CACHE_ENV] = old


@pytest.fixture
def fresh_agent_caches() -> Iterator[None]:
    """Empty the ClientApp's agent and backend caches before and after a test.

    Modules that build agents from run configs take it with
    ``pytestmark = pytest.mark.usefixtures("fresh_agent_caches")``.
    """
    from pfedma_flwr.agents.backends import make_backend
    from pfedma_flwr.client import components

    components.build_agent.cache_clear()
    make_backend.cache_clear()
    yield
    components.build_agent.cache_clear()
    make_backend.cache_clear()
