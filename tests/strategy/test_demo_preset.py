"""``conf/demo.yaml``: the README's 30-second run shows the orchestrator's effect.

Scripted experts (``agent.backend.name=simulated``) are right with probability 0.85 in their
profile's domain and 0.35 outside it, so routing by profile and capability must beat random
routing on the same 20 questions; the numbers are those of the seed-0 run (8 clients).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client_apps.agent_app import app as client_app
from pfedma_flwr.client import components as client_components
from pfedma_flwr.config import load_config
from pfedma_flwr.server_app import run_server
from pfedma_flwr.testing import FakeGrid


def _run(tmp_path: Path, overrides: str = "") -> dict[str, Any]:
    client_components.build_agent.cache_clear()
    rc = {"config-name": "demo", "output-dir": str(tmp_path / "out"),
          "overrides": f"output.progress=false {overrides}"}
    try:
        return run_server(FakeGrid(client_app, 8, rc), load_config(rc))
    finally:
        client_components.build_agent.cache_clear()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {
        name: _run(tmp_path_factory.mktemp(name), ov)
        for name, ov in [("pfedma", ""), ("random", "routing.orchestrator=random"),
                         ("single", "strategy.name=single-agent")]
    }


def test_demo_runs_twenty_questions_on_scripted_agents(runs):
    s = runs["pfedma"]
    assert s["status"] == "completed" and s["num_queries"] == 20
    assert 1.0 < s["rounds_per_query"] <= 2.0  # T_max 2: some queries stop after round 2


def test_profile_routing_beats_random_routing_and_one_agent(runs):
    acc = {k: v["accuracy"] for k, v in runs.items()}
    # in-domain pairs (0.85 each) vs random picks that are mostly off-domain (0.35)
    assert acc["pfedma"] >= acc["random"] + 0.2, acc
    assert acc["pfedma"] > acc["single"], acc
