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
