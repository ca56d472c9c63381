"""Flower-native run config: the app's dotted kebab-case keys map onto the config tree.

`flwr run . --run-config "config-name='tiny' strategy.t-max=3"` reaches ``load_config`` as
Flower's fused run config: every key the app declares (its default for the dotted ones is "",
"keep the preset's value") plus the user's. Checked here without Flower: the mapping, the
declared keys of both app pyproject files, and that a wrong key names itself.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from flwr.common.config import flatten_dict, fuse_dicts, parse_config_args

from pfedma_flwr.config import ConfigError, PFedMAConfig, load_config
from pfedma_flwr.run_config import FLAT_KEYS, known_keys, resolve, tree_overrides

ROOT = Path(__file__).resolve().parents[2]


def _declared(path: Path) -> dict:
    return flatten_dict(tomllib.loads(path.read_text())["tool"]["flwr"]["app"]["config"])


def _flower(run_config: str) -> dict:
    """What Flower hands the ServerApp for `flwr run . --run-config RUN_CONFIG`."""
    return fuse_dicts(_declared(ROOT / "pyproject.toml"), parse_config_args([run_config]))


def test_the_issues_command_runs_the_tiny_preset_with_t_max_3():
    cfg = load_config(_flower("strategy.t-max=3 config-name='tiny' data.benchmarks='gsm8k'"))
    assert cfg.strategy.t_max == 3 and cfg.data.benchmarks == ["gsm8k"]
    assert cfg.agent.backend.name == "mock"  # tiny.yaml's, untouched by the "" defaults
    assert cfg.strategy.k_max == 2 and cfg.data.queries_per_benchmark == 3


def test_every_declared_key_maps_onto_the_tree_and_both_app_files_agree():
    root, packaged = (
        _declared(ROOT / "pyproject.toml"),
        _declared(ROOT / "pfedma_flwr" / "_app" / "pyproject.toml"),
    )
    assert root == packaged
    dotted = [k for k in root if k not in FLAT_KEYS]
    assert len(dotted) >= 20 and all(root[k] == "" for k in dotted)
    assert all(resolve(k, PFedMAConfig) is not None for k in dotted)
    assert load_config(root) == load_config({})  # the defaults change nothing


@pytest.mark.parametrize(
    "key, value, path, expected",
    [
        ("strategy.t-max", 4, ["strategy", "t_max"], 4),
        ("strategy.t_max", 4, ["strategy", "t_max"], 4),  # load_config takes either spelling
        ("routing.refine-query", "false", ["routing", "refine_query"], False),
        ("data.benchmarks", "gsm8k, medqa", ["data", "benchmarks"], ["gsm8k", "medqa"]),
        ("routing.prices.gpt-4o", 2.5, ["routing", "prices", "gpt-4o"], 2.5),  # a dict key as is
        ("seed", 7, ["seed"], 7),
    ],
)
def test_keys_map_by_hand(key, value, path, expected):
    tree = tree_overrides({key: value}, PFedMAConfig)
    for part in path[:-1]:
        tree = tree[part]
    assert tree[path[-1]] == expected


@pytest.mark.parametrize(
    "key, hint",
    [
        ("strategy.tmax", "did you mean 'strategy.t-max'?"),
        ("agent.backend.base-ur", "did you mean 'agent.backend.base-url'?"),
        ("strategy", "unknown run-config key 'strategy'"),  # a whole section is not one value
        ("num-clients", "unknown run-config key 'num-clients'"),
    ],
)
def test_a_wrong_key_names_itself(key, hint):
    with pytest.raises(ConfigError, match=hint.replace("?", r"\?")):
        load_config({key: 3})


def test_a_key_set_twice_is_refused_and_bad_values_name_the_key():
    with pytest.raises(ConfigError, match=r"\['strategy.t_max'\] set both"):
        load_config({"strategy.t-max": 3, "overrides": "strategy.t_max=2"})
    with pytest.raises(ConfigError, match="routing.use-capability"):
        load_config({"routing.use-capability": "maybe"})
    with pytest.raises(ConfigError, match="interpolation"):
        load_config({"agent.backend.base-url": "${oc.env:HOME}"})


def test_known_keys_lists_the_leaves_in_kebab_case():
    keys = known_keys(PFedMAConfig)
    assert "strategy.t-max" in keys and "agent.backend.base-url" in keys
    assert "routing.prices" not in keys and "strategy" not in keys
