"""The node owns its security: the run config cannot run code, read secrets or weaken rules.

Each case is one way a run submitter could reach into a node (issue 13, item 5): a
``module:attr`` plug-in in any registry-backed field, OmegaConf interpolation in any run-config
value, the backend endpoint / key variable, the rule mode, a config file outside ``conf/``;
plus typed booleans (item 7).
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
from pfedma_flwr.agents.backends import make_backend
from pfedma_flwr.client import components as client_components
from pfedma_flwr.client.node_security import (
    RULE_MODE_RANK,
    NodePolicy,
    NodePolicyError,
    check_config_name,
)
from pfedma_flwr.config import (
    RULE_MODES,
    BackendConfig,
    ConfigError,
    load_config,
    parse_bool,
)
from pfedma_flwr.protocol.codec import QUERY_DESCRIBE
from pfedma_flwr.registry import PluginImportRefused, Registry, plugin_imports
from pfedma_flwr.rules.client.local_repo import RuleMode
from pfedma_flwr.testing import FakeGrid

PROBE = "pfedma_probe_plugin"


@pytest.fixture(autouse=True)
def _fresh_caches():
    client_components.build_agent.cache_clear()
    make_backend.cache_clear()
    yield
    client_components.build_agent.cache_clear()
    make_backend.cache_clear()


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


# ---------------------------------------------------------------- interpolation

SECRET = "s3cr3t-value-4471"


@pytest.mark.parametrize("value", [
    "${oc.env:PFEDMA_TEST_SECRET}",            # the measured case
    "'${oc.env:PFEDMA_TEST_SECRET,x}'",        # quoted, with a default
    "$'{oc.env:PFEDMA_TEST_SECRET}'",          # shell quoting that collapses to ${...}
    "${oc.decode:'${oc.env:PFEDMA_TEST_SECRET}'}",
    "${oc.create:{a: 1}}",
    "${agent.backend.api_key_env}",            # a plain key reference
    "prefix-${oc.env:PFEDMA_TEST_SECRET}-suffix",
    "\\${oc.env:PFEDMA_TEST_SECRET}",          # OmegaConf's escape: still refused
])
def test_interpolation_in_overrides_refused(value: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PFEDMA_TEST_SECRET", SECRET)
    with pytest.raises(ConfigError, match="interpolation") as e:
        load_config(tiny(f"agent.backend.model={value}"))
    assert SECRET not in str(e.value)


_IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,12}", fullmatch=True)
_TEXT = st.text(st.characters(codec="ascii", exclude_characters="'\"\\ \n\r\t"), max_size=8)


@settings(max_examples=150, deadline=None)
@given(resolver=_IDENT, arg=_TEXT, before=_TEXT, after=_TEXT,
       key=st.sampled_from(["agent.backend.model", "agent.profiles", "output.dir",
                            "strategy.t_max", "agent.backend.options.x"]))
def test_any_interpolation_in_any_override_refused(resolver: str, arg: str, before: str,
                                                   after: str, key: str):
    # any resolver name, argument and surrounding text: the class, not the measured case
    value = f"{before}${{{resolver}:{arg}}}{after}"
    with pytest.raises(ConfigError, match="interpolation"):
        load_config(tiny(f"{key}='{value}'"))


@pytest.mark.parametrize("key", ["output-dir", "data-dir", "config-name", "resume"])
def test_interpolation_in_flat_run_config_keys_refused(key: str,
                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PFEDMA_TEST_SECRET", SECRET)
    with pytest.raises(ConfigError, match=f"{key}.*interpolation"):
        load_config({"config-name": "tiny", key: "/x/${oc.env:PFEDMA_TEST_SECRET}"})


def test_interpolation_never_reaches_the_handshake(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path):
    monkeypatch.setenv("PFEDMA_TEST_SECRET", SECRET)
    grid = FakeGrid(client_app, 1, tiny("agent.profiles=['${oc.env:PFEDMA_TEST_SECRET}']"))
    msg = Message(RecordDict(), dst_node_id=grid.node_ids[0], message_type=QUERY_DESCRIBE)
    [reply] = grid.send_and_receive([msg])
    assert reply.has_error() and "interpolation" in reply.error.reason
    assert SECRET not in reply.error.reason


def test_interpolation_in_node_config_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="backend-url"):
        NodePolicy.from_node_config(deployed(tmp_path, **{"backend-url": "${oc.env:X}"}))


@pytest.mark.parametrize("value", ["cost$5", "$ {x}", "a$b{c}", "$$x", "a{b"])
def test_dollar_or_braces_alone_are_plain_text(value: str):
    assert load_config(tiny(f"agent.backend.model='{value}'")).agent.backend.model == value


def test_project_yaml_may_still_interpolate():
    # conf/ is the app's own code; a preset built with interpolation keeps loading
    assert load_config({"config-name": "tiny"}).agent.backend.name == "mock"


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


# ---------------------------------------------------------------- config file

@pytest.mark.parametrize("name", ["/etc/hostname.yaml", "../pyproject", "../conf/../x.yaml"])
def test_deployed_node_loads_only_the_apps_presets(name: str, tmp_path: Path):
    with pytest.raises(ConfigError):
        check_config_name({"config-name": name}, NodePolicy())


def test_preset_names_pass(tmp_path: Path):
    check_config_name({"config-name": "tiny"}, NodePolicy())
    check_config_name({}, NodePolicy())


# ---------------------------------------------------------------- typed booleans

@pytest.mark.parametrize(("value", "expected"), [
    (True, True), (False, False), (1, True), (0, False),
    ("true", True), ("True", True), (" yes ", True), ("on", True), ("1", True),
    ("false", False), ("FALSE", False), ("0", False), ("no", False), ("off", False),
])
def test_parse_bool(value: object, expected: bool):
    assert parse_bool(value, "k") is expected


@pytest.mark.parametrize("value", ["maybe", "2", 2, -1, 0.0, "truee", None, ""])
def test_parse_bool_rejects_and_names_the_key(value: object):
    with pytest.raises(ConfigError, match="my-key"):
        parse_bool(value, "my-key")


@pytest.mark.parametrize(("value", "expected"), [
    ("false", False), ("0", False), ("no", False), (False, False),
    ("true", True), ("1", True), (True, True),
])
def test_resume_is_typed(value: object, expected: bool):
    assert load_config({"config-name": "tiny", "resume": value}).output.resume is expected


def test_bad_resume_names_the_key():
    with pytest.raises(ConfigError, match="'resume'"):
        load_config({"config-name": "tiny", "resume": "maybe"})


@pytest.mark.parametrize(("override", "expected"), [
    ("routing.refine_query=no", False), ("routing.use_capability=0", False),
    ("output.resume=false", False), ("routing.adaptive_k=yes", True),
    ("routing.refine_query='false'", False),  # quoted: OmegaConf reads the string
])
def test_bool_overrides_are_typed(override: str, expected: bool):
    cfg = load_config(tiny(override))
    key = override.split("=")[0].split(".")
    assert getattr(getattr(cfg, key[0]), key[1]) is expected


@pytest.mark.parametrize("override", ["routing.refine_query=2", "output.resume=maybe"])
def test_bad_bool_override_names_the_key(override: str):
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        load_config(tiny(override))


def test_misspelt_node_key_warns_and_stays_strict(tmp_path: Path, caplog):
    with caplog.at_level(logging.WARNING, logger="pfedma_flwr.client.node_security"):
        policy = NodePolicy.from_node_config(deployed(tmp_path, **{"allow-plugin": True}))
    assert not policy.allow_plugins and "allow-plugin" in caplog.text


def test_node_config_booleans_are_typed(tmp_path: Path):
    assert not NodePolicy.from_node_config(deployed(tmp_path, **{
        "allow-plugins": "false"})).allow_plugins
    with pytest.raises(ConfigError, match="allow-run-endpoint"):
        NodePolicy.from_node_config(deployed(tmp_path, **{"allow-run-endpoint": "sure"}))
