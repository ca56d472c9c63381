"""A rerun of the same configuration into a new output dir: every answer from the cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from client_apps.agent_app import app as client_app
from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client import components as client_components
from pfedma_flwr.config import load_config
from pfedma_flwr.server_app import run_server
from pfedma_flwr.testing import FakeGrid
from tests.strategy.conftest import answer_json, read_jsonl


class IdentifiedMock(MockBackend):
    """Scripted answers behind a declared model identity, so the generation cache serves it."""

    cache_default = True

    def cache_identity(self) -> dict[str, Any]:
        return {"model_sha256": "scripted"}


def test_a_rerun_generates_nothing_and_reports_the_same_queries(tmp_path: Path, monkeypatch):
    def responder(msgs: list[dict[str, str]]) -> str:
        # agents of different profiles disagree, so queries take a second round
        return answer_json(str(len(msgs[0]["content"]) % 3))

    backend = IdentifiedMock(responder)
    monkeypatch.setattr(client_components, "make_configured_backend", lambda cfg: backend)

    def run(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        client_components.build_agent.cache_clear()
        rc = {"config-name": "tiny", "output-dir": str(tmp_path / name),
              "overrides": f"output.progress=false output.generation_cache_dir={tmp_path}/gen"}
        summary = run_server(FakeGrid(client_app, 4, rc), load_config(rc))
        return summary, read_jsonl(tmp_path / name / "queries.jsonl")

    first, q1 = run("one")
    generated = len(backend.prompts)
    again, q2 = run("two")
    client_components.build_agent.cache_clear()
    assert generated > 0 and len(backend.prompts) == generated  # the rerun generated nothing
    assert first["cached_share"] == 0.0 and again["cached_share"] == 1.0
    assert max(q["rounds"] for q in q1) == 2
    keep = ("query_id", "answer", "correct", "rounds", "selections", "tokens")
    assert [{k: q[k] for k in keep} for q in q2] == [{k: q[k] for k in keep} for q in q1]
    assert all(q["cached_tokens"] == q["tokens"] > 0 for q in q2)
    assert again["accuracy"] == first["accuracy"]
    assert again["tokens_per_query"] == first["tokens_per_query"]
    rounds = read_jsonl(tmp_path / "two" / "rounds.jsonl")
    assert all(c["cached_tokens"] == c["tokens"] for r in rounds for c in r["clients"].values())
    assert all(set(r["timing"]) == {"plan_s", "wait_s", "absorb_s"} for r in rounds)
    assert set(again["timing"]) == {"nodes_s", "handshake_s", "plan_s", "wait_s", "absorb_s"}
