"""Flower's run config (``[tool.flwr.app.config]``, ``flwr run . --run-config``) -> config tree.

FlowerTune's style: the main settings are dotted kebab-case keys of the app's
``pyproject.toml`` (``strategy.t-max``, ``agent.backend.base-url``), so
``flwr run . --run-config "config-name='tiny' strategy.t-max=3"`` works without the
``overrides`` string. Each maps onto the OmegaConf tree of :mod:`pfedma_flwr.config` with
``-`` read as ``_`` (``strategy.t_max``); ``""``, every such key's declared default, keeps the
preset's value. A list setting takes a comma-separated string (``data.benchmarks="gsm8k,math"``).
The flat keys ``config-name``, ``overrides``, ``output-dir``, ``data-dir`` and ``resume`` keep
their meaning. A key that is neither names itself, with the closest known key.

Flower itself refuses a ``--run-config`` key the app does not declare before any of this runs
(``[code: 15] Invalid run configuration``; the SuperLink's log names the key), so the keys
declared in ``pyproject.toml`` are the ones plain ``flwr run`` accepts; ``load_config`` takes
any leaf of the tree this way (deployments, tests).
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any

#: keys with a meaning of their own (not a path in the config tree)
FLAT_KEYS = ("config-name", "overrides", "output-dir", "data-dir", "resume")
#: the declared default of a dotted key: keep the preset's value
UNSET = ""


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def resolve(key: str, root: type) -> tuple[list[str], Any] | None:
    """The tree path (``-`` read as ``_``) and field type of a dotted key, or ``None``.

    Below a ``dict`` field the next part is a data key (a backbone or price name) and stays as
    written: ``routing.prices.gpt-4o`` is ``["routing", "prices", "gpt-4o"]``.
    """
    tp: Any = root
    path: list[str] = []
    parts = key.split(".")
    k = 0
    while k < len(parts):
        if typing.get_origin(tp) is dict:
            path.append(parts[k])
            tp = typing.get_args(tp)[1]
        elif _is_section(tp):
            hints = typing.get_type_hints(tp)
            name = parts[k].replace("-", "_")
            if name not in hints:
                return None
            path.append(name)
            tp = hints[name]
        else:
            return None
        k += 1
    if _is_section(tp) or typing.get_origin(tp) is dict:
        return None  # a whole section is not one value
    return path, tp


def known_keys(root: type, prefix: str = "") -> list[str]:
    """Every scalar or list leaf of the tree as a kebab-case key (``strategy.t-max``)."""
    out = []
    for name, tp in typing.get_type_hints(root).items():
        key = f"{prefix}{name.replace('_', '-')}"
        if _is_section(tp):
            out += known_keys(tp, key + ".")
        elif typing.get_origin(tp) is not dict:
            out.append(key)
    return out


def _value(value: Any, tp: Any, key: str) -> Any:
    from pfedma_flwr.config import ConfigError, parse_bool

    if tp is bool:
        return parse_bool(value, f"run-config key {key!r}")
    if typing.get_origin(tp) is list:
        if isinstance(value, str):
            return [v.strip().strip("'\"") for v in value.strip("[]").split(",") if v.strip()]
        raise ConfigError(f"run-config key {key!r} takes a comma-separated string, got "
                          f"{value!r}")
    return value


def tree_overrides(run_config: dict[str, Any], root: type) -> dict[str, Any]:
    """The dotted keys of ``run_config`` as a nested dict over the tree of ``root``.

    Raises
    ------
    pfedma_flwr.config.ConfigError
        Naming a key that is neither flat nor a leaf of the tree, with the closest known key.
    """
    from pfedma_flwr.config import ConfigError

    nested: dict[str, Any] = {}
    for key, value in run_config.items():
        if key in FLAT_KEYS:
            continue
        found = resolve(key, root)
        if found is None:
            known = [*FLAT_KEYS, *known_keys(root)]
            near = difflib.get_close_matches(key.replace("_", "-"), known, n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigError(f"unknown run-config key {key!r}{hint} (keys: {list(FLAT_KEYS)} "
                              "and the dotted config keys, e.g. 'strategy.t-max'; "
                              "docs/flwr_run.md)")
        if isinstance(value, str) and value == UNSET:
            continue
        path, tp = found
        node = nested
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = _value(value, tp, key)
    return nested


def dotted(nested: dict[str, Any], prefix: str = "") -> set[str]:
    """The dotted paths of a nested dict's leaves."""
    out: set[str] = set()
    for k, v in nested.items():
        out |= dotted(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}"}
    return out
