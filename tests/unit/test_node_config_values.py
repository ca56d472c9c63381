"""Run-config values a node refuses or types: interpolation, config files, booleans.

Split from ``test_node_security.py`` (issue 13, items 5 and 7): OmegaConf interpolation in any
run-config value, a config file outside ``conf/``, typed booleans.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from flwr.app import Message, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st

from client_apps.agent_app import app as client_app
from pfedma_flwr.client.node_security import (
    NodePolicy,
    check_config_name,
)
from pfedma_flwr.config import (
    ConfigError,
    load_config,
    parse_bool,
)
from pfedma_flwr.protocol.codec import QUERY_DESCRIBE
from pfedma_flwr.testing import FakeGrid

pytestmark = pytest.mark.usefixtures("fresh_agent_caches")


def deployed(tmp_path: Path, pid: int = 0, **policy: object) -> dict[str, object]:
    """A SuperNode's node config (state-dir makes it a deployed node) plus policy keys."""
    return {"partition-id": pid, "num-partitions": 2,
            "state-dir": str(tmp_path / f"state{pid}"), **policy}


def tiny(overrides: str = "", **extra: object) -> dict[str, object]:
    return {"config-name": "tiny", "overrides": overrides, **extra}


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
