"""The node owns its security: the run config cannot run code, read secrets or weaken rules.

Each case is one way a run submitter could reach into a node (issue 13, item 5): a
``module:attr`` plug-in in any registry-backed field, OmegaConf interpolation in any run-config
value (``test_node_config_values.py``), the backend endpoint / key variable, the rule mode; a
config file outside ``conf/`` and typed booleans (item 7) are in ``test_node_config_values.py``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from flwr.app import Message, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st

from client_apps.agent_app import app as client_app
from pfedma_flwr.client import components as client_components
from pfedma_flwr.client.node_security import (
    RULE_MODE_RANK,
    NodePolicy,
    NodePolicyError,
)
from pfedma_flwr.config import (
    RULE_MODES,
    BackendConfig,
    ConfigError,
    load_config,
)
from pfedma_flwr.protocol.codec import QUERY_DESCRIBE
from pfedma_flwr.registry import PluginImportRefused, Registry, plugin_imports
from pfedma_flwr.rules.client.local_repo import RuleMode
from pfedma_flwr.testing import FakeGrid

PROBE = "pfedma_probe_plugin"


pytestmark = pytest.mark.usefixtures("fresh_agent_caches")


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable module that leaves a marker file when (and only when) it is imported."""
    marker = tmp_path / "imported.marker"
    (tmp_path / f"{PROBE}.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('ran')\n"
        "def loader(data_dir):\n    return []\n"
        "class Backend:\n    def __init__(self, **kw):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(PROBE, None)
    yield marker
    sys.modules.pop(PROBE, None)


def deployed(tmp_path: Path, pid: int = 0, **policy: object) -> dict[str, object]:
    """A SuperNode's node config (state-dir makes it a deployed node) plus policy keys."""
    return {"partition-id": pid, "num-partitions": 2,
            "state-dir": str(tmp_path / f"state{pid}"), **policy}


def tiny(overrides: str = "", **extra: object) -> dict[str, object]:
    return {"config-name": "tiny", "overrides": overrides, **extra}


# ---------------------------------------------------------------- module:attr plug-ins

def test_registry_refuses_every_import_when_plugins_are_off(probe: Path):
    reg: Registry[object] = Registry("thing")
    reg.add("builtin", object)
    with plugin_imports(False):
        # registered names still resolve
        assert reg.get("builtin") is object
        for name in (f"{PROBE}:loader", "subprocess:run", "os:system", f" {PROBE}:loader",
                     "os.path:join", f"{PROBE}:"):
            with pytest.raises(PluginImportRefused, match="allow-plugins"):
                reg.get(name)
        # a nested block cannot re-enable what the node forbade once it exits
        with plugin_imports(True):
            assert reg.get("os.path:join") is not None
        with pytest.raises(PluginImportRefused):
            reg.get("os.path:join")
    assert not probe.exists()
    assert reg.get("os.path:join") is not None  # default (server, tests): imports allowed


@settings(max_examples=200, deadline=None)
@given(name=st.builds(lambda a, b: f"{a}:{b}", st.text(max_size=20), st.text(max_size=20)))
def test_any_colon_name_refused_without_import(name: str):
    reg: Registry[object] = Registry("thing")
    before = set(sys.modules)
    with plugin_imports(False), pytest.raises(PluginImportRefused):
        reg.get(name)
    assert set(sys.modules) == before


@pytest.mark.parametrize("override", [
    f"agent.backend.name={PROBE}:Backend",                  # the LLM backend
    "agent.backend.name=subprocess:run",                   # the measured case
    f"agent.profiles=['{PROBE}:PROFILE']",                  # the profile registry
    f"data.benchmarks=['{PROBE}:loader']",                  # the benchmark loader registry
    f"agent.backbones.x.name={PROBE}:Backend agent.profile_backbones.mathematician=x "
    "agent.profiles=[mathematician]",                       # a backbone section
])
def test_run_config_plugin_refused_on_deployed_node(override: str, probe: Path,
                                                    tmp_path: Path):
    # NodePolicyError for a backend section, PluginImportRefused from any other registry
    with pytest.raises(ValueError, match="allow-plugins"):
        client_components.build_agent(tiny(override), deployed(tmp_path))
    assert not probe.exists()  # refused before any import: no module code ran


def test_run_config_plugin_refused_on_simulated_node(probe: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("PFEDMA_ALLOW_PLUGINS", raising=False)
    with pytest.raises(ConfigError, match="allow-plugins"):
        client_components.build_agent(tiny(f"agent.backend.name={PROBE}:Backend"),
                                      {"partition-id": 0, "num-partitions": 2})
    assert not probe.exists()


def test_simulated_node_plugins_only_with_the_owners_environment():
    sim = {"partition-id": 0, "num-partitions": 2}
    assert not NodePolicy.from_node_config(sim, environ={}).allow_plugins
    assert NodePolicy.from_node_config(sim, environ={"PFEDMA_ALLOW_PLUGINS": "1"}).allow_plugins
    # a deployed node ignores the variable: its node config decides
    assert not NodePolicy.from_node_config({**sim, "state-dir": "/s"},
                                           environ={"PFEDMA_ALLOW_PLUGINS": "1"}).allow_plugins
    with pytest.raises(ConfigError, match="PFEDMA_ALLOW_PLUGINS"):
        NodePolicy.from_node_config(sim, environ={"PFEDMA_ALLOW_PLUGINS": "perhaps"})


def test_plugin_imported_only_with_node_permission(probe: Path, tmp_path: Path):
    # the positive control of the tests above: the probe does leave its marker when allowed
    try:
        client_components.build_agent(tiny(f"data.benchmarks=['{PROBE}:loader']"),
                                      deployed(tmp_path, **{"allow-plugins": True}))
    except ValueError:
        pass  # an empty benchmark may not make a usable agent; the import is what counts
    assert probe.read_text() == "ran"


def test_node_backend_plugin_needs_allow_plugins(tmp_path: Path):
    with pytest.raises(NodePolicyError, match="allow-plugins"):
        NodePolicy.from_node_config(deployed(tmp_path, backend="os:system"))


def test_clientapp_error_reply_names_the_refusal(probe: Path, tmp_path: Path):
    grid = FakeGrid(client_app, 1, tiny("agent.backend.name=subprocess:run"))
    node = grid.node_ids[0]
    grid.contexts[node].node_config.update({"state-dir": str(tmp_path / "s")})
    msg = Message(RecordDict(), dst_node_id=node, message_type=QUERY_DESCRIBE)
    [reply] = grid.send_and_receive([msg])
    assert reply.has_error() and "allow-plugins" in reply.error.reason


# ---------------------------------------------------------------- endpoint and key variable

def test_run_endpoint_and_key_env_ignored_without_permission(tmp_path: Path, caplog):
    policy = NodePolicy.from_node_config(deployed(tmp_path, **{
        "backend-url": "http://node-llm:8000/v1"}))
    run = BackendConfig(name="openai", model="m", base_url="http://attacker:1/v1",
                        api_key_env="AWS_SECRET_ACCESS_KEY",
                        options={"base_url": "http://attacker:2/v1", "backoff": 0.1})
    with caplog.at_level(logging.WARNING, logger="pfedma_flwr.client.node_security"):
        b = policy.backend_section(run)
    assert (b.base_url, b.api_key_env) == ("http://node-llm:8000/v1", "OPENAI_API_KEY")
    assert b.options == {"backoff": 0.1}  # the endpoint option dropped, the rest kept
    assert "base_url, api_key_env, base_url" in caplog.text


def test_run_endpoint_without_node_endpoint_is_an_error(tmp_path: Path):
    policy = NodePolicy.from_node_config(deployed(tmp_path))
    with pytest.raises(NodePolicyError, match="backend-url"):
        policy.backend_section(BackendConfig(name="openai", model="m",
                                             base_url="http://attacker:1/v1"))


def test_run_endpoint_used_only_where_the_node_allows_it(tmp_path: Path):
    run = BackendConfig(name="openai", model="m", base_url="http://run:1/v1",
                        api_key_env="RUN_KEY")
    allow = NodePolicy.from_node_config(deployed(tmp_path, **{"allow-run-endpoint": "yes"}))
    assert (allow.backend_section(run).base_url, allow.backend_section(run).api_key_env) == (
        "http://run:1/v1", "RUN_KEY")
    # the node's own settings still win over the run's when both are set
    own = NodePolicy(base_url="http://node:1/v1", api_key_env="NODE_KEY",
                     allow_run_endpoint=True)
    assert (own.backend_section(run).base_url, own.backend_section(run).api_key_env) == (
        "http://node:1/v1", "NODE_KEY")


def test_node_backend_replaces_the_runs(tmp_path: Path):
    policy = NodePolicy.from_node_config(deployed(tmp_path, backend="mock"))
    assert policy.backend_section(BackendConfig(name="embedded")).name == "mock"


def test_node_model_replaces_the_runs(tmp_path: Path):
    policy = NodePolicy.from_node_config(deployed(tmp_path, **{"backend-model": "node-m"}))
    assert policy.backend_section(BackendConfig(name="mock", model="run-m")).model == "node-m"


def test_node_pii_recognizer_pinned(tmp_path: Path):
    assert NodePolicy(pii="presidio").pii_recognizer("regex") == "presidio"
    assert NodePolicy().pii_recognizer("regex") == "regex"
    with pytest.raises(NodePolicyError, match="pii"):
        NodePolicy.from_node_config(deployed(tmp_path, pii="none"))


def test_private_fact_detector_is_the_nodes(tmp_path: Path):
    assert NodePolicy().private_fact_detection(False) is True  # deployed default: on
    assert NodePolicy(private_facts=False).private_fact_detection(True) is False
    sim = NodePolicy.from_node_config({"partition-id": 0, "num-partitions": 2})
    assert sim.private_facts is None
    assert (sim.private_fact_detection(False), sim.private_fact_detection(True)) == (False, True)
    off = NodePolicy.from_node_config(deployed(tmp_path, **{"private-facts": "false"}))
    assert off.private_facts is False
    with pytest.raises(ConfigError, match="private-facts"):
        NodePolicy.from_node_config(deployed(tmp_path, **{"private-facts": "maybe"}))


def test_run_cannot_switch_a_nodes_private_fact_detector_off(tmp_path: Path):
    pytest.importorskip("sentence_transformers")
    from pfedma_flwr.rules.private_facts import PrivateFactRecognizer

    # the tiny preset runs the hashing embedder, which alone would leave the detector off
    rc = tiny("rules.private_facts=false")
    node = client_components.build_agent(rc, deployed(tmp_path))
    assert isinstance(node.recognizer, PrivateFactRecognizer)
    assert node.recognizer.model.embedder == "minilm"
    opted_out = deployed(tmp_path, **{"private-facts": False})
    assert not isinstance(client_components.build_agent(tiny(), opted_out).recognizer,
                          PrivateFactRecognizer)
    sim = {"partition-id": 0, "num-partitions": 2}
    assert not isinstance(client_components.build_agent(rc, sim).recognizer,
                          PrivateFactRecognizer)


def test_adversary_only_where_the_node_allows_it(tmp_path: Path):
    rc = tiny("adversary.ratio=1.0 adversary.kind=unreliable")
    assert client_components.build_agent(rc, deployed(tmp_path)).hooks == ()
    allowed = deployed(tmp_path, **{"allow-adversary": True})
    assert client_components.build_agent(rc, allowed).hooks != ()
    sim = {"partition-id": 0, "num-partitions": 2}
    assert client_components.build_agent(rc, sim).hooks != ()


def test_openai_endpoint_through_build_agent(tmp_path: Path):
    node = deployed(tmp_path, **{"backend-url": "http://127.0.0.1:9/v1"})
    agent = client_components.build_agent(
        tiny("agent.backend.name=openai agent.backend.model=m "
             "agent.backend.base_url=http://attacker:1/v1 agent.backend.api_key_env=HOME"),
        node)
    assert (agent.backend.base_url, agent.backend.api_key_env) == (
        "http://127.0.0.1:9/v1", "OPENAI_API_KEY")


def test_data_dir_is_the_nodes(tmp_path: Path):
    assert NodePolicy(data_dir="/node/data").data_dir_for("/run/data") == "/node/data"
    assert NodePolicy().data_dir_for("/run/data") == ""  # deployed: package default
    sim = NodePolicy.from_node_config({"partition-id": 0, "num-partitions": 1})
    assert sim.data_dir_for("/run/data") == "/run/data"


# ---------------------------------------------------------------- minimum rule mode

@pytest.mark.parametrize(("minimum", "requested", "enforced"), [
    ("full", "NR", "full"),   # the measured case: NR cannot switch enforcement off
    ("full", "L2G", "full"),
    ("SR", "NR", "SR"),
    ("SR", "SR", "SR"),
    ("SR", "LE", "LE"),       # stronger than the minimum: kept
    ("LE", "G2L", "G2L"),     # same rank: kept
    ("LE", "SR", "LE"),
    ("NR", "NR", "NR"),
    ("NR", "full", "full"),
])
def test_rule_mode_never_below_the_minimum(minimum: str, requested: str, enforced: str):
    assert NodePolicy(min_rule_mode=minimum).rule_mode(requested) == enforced


def test_rule_mode_order():
    assert set(RULE_MODE_RANK) == set(RULE_MODES)  # every mode of the config is ranked
    assert RULE_MODE_RANK["NR"] < RULE_MODE_RANK["SR"] < RULE_MODE_RANK["LE"]
    assert RULE_MODE_RANK["LE"] == RULE_MODE_RANK["G2L"] == RULE_MODE_RANK["L2G"]
    assert RULE_MODE_RANK["L2G"] < RULE_MODE_RANK["full"]
    with pytest.raises(NodePolicyError, match="min-rule-mode"):
        NodePolicy(min_rule_mode="off")


def test_nr_requested_full_enforced_through_the_federation(tmp_path: Path, caplog):
    rc = tiny("rules.mode=NR", **{"output-dir": str(tmp_path / "out")})
    grid = FakeGrid(client_app, 2, rc)
    for i, node in enumerate(grid.node_ids):
        grid.contexts[node].node_config.update(deployed(tmp_path, i))
    from pfedma_flwr.server_app import run_server

    with caplog.at_level(logging.WARNING, logger="pfedma_flwr.client.node_security"):
        summary = run_server(grid, load_config(rc))
    assert summary["status"] == "completed"
    for node in grid.node_ids:
        agent = client_components.build_agent(rc, dict(grid.contexts[node].node_config))
        assert agent.mode is RuleMode.FULL
    assert "below this node's min-rule-mode=full" in caplog.text


def test_simulated_node_keeps_the_runs_mode():
    agent = client_components.build_agent(tiny("rules.mode=NR"),
                                           {"partition-id": 0, "num-partitions": 2})
    assert agent.mode is RuleMode.NR
