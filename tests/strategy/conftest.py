"""Strategy-tier fixtures: the real ServerApp/ClientApp code over an in-process FakeGrid."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from client_apps.agent_app import app as client_app
from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client import components as client_components
from pfedma_flwr.config import load_config
from pfedma_flwr.server_app import run_server
from pfedma_flwr.testing import FakeGrid


def answer_json(answer: str, claim: str = "", evidence: str = "") -> str:
    claim = claim or f"The answer is {answer}."
    # Evidence that contains the claim and adds to it: close to the claim, and the same text
    # from every scripted client corroborates it (a_evi near 0). Evidence that only restates
    # the claim earns no support (issue 30, anomaly/evidence.py).
    return json.dumps({
        "claims": [{"claim": claim, "evidence": [evidence or f"Worked out from the task: {claim}"]}],
        "final_answer": answer, "domain_fit": 0.9, "self_confidence": 0.9,
    })


@pytest.fixture
def federation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``federation(num_nodes, responder=None, behaviour=None, overrides="")`` → (summary, grid)."""
    client_components.build_agent.cache_clear()

    def run(num_nodes: int = 4, responder: Callable[..., str] | None = None,
            behaviour: dict[int, Any] | None = None, overrides: str = "") -> tuple[dict, FakeGrid]:
        backend = MockBackend(responder)
        monkeypatch.setattr(client_components, "make_configured_backend", lambda cfg: backend)
        client_components.build_agent.cache_clear()
        rc = {"config-name": "tiny", "output-dir": str(tmp_path / "out"),
              "overrides": f"output.progress=false {overrides}"}
        grid = FakeGrid(client_app, num_nodes, rc)
        if behaviour:
            grid.behaviour = {grid.node_ids[i]: fn for i, fn in behaviour.items()}
        summary = run_server(grid, load_config(rc))
        return summary, grid

    yield run
    client_components.build_agent.cache_clear()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def tiny_preset(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[dict, Path]]:
    """``tiny_preset(name)`` → (result, output dir): a preset's tiny run, once per session.

    Several modules check the same tiny run (every preset's table and plots; the six rule
    modes' differences); the run is deterministic, so they share one (each read-only) instead
    of paying it twice.
    """
    from pfedma_flwr.agents.backends import make_backend
    from pfedma_flwr.experiments import run_experiment
    from tests.strategy.test_experiments import fakegrid_executor

    done: dict[str, tuple[dict, Path]] = {}

    def run(name: str) -> tuple[dict, Path]:
        if name not in done:
            out = tmp_path_factory.mktemp(f"tiny-{name}")
            client_components.build_agent.cache_clear()
            make_backend.cache_clear()
            try:
                result = run_experiment(name, size="tiny", output_dir=out,
                                        executor=fakegrid_executor)
            finally:
                client_components.build_agent.cache_clear()
                make_backend.cache_clear()
            done[name] = (result, out)
        return done[name]

    return run
