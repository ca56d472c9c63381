"""Loading the typed configuration (:mod:`pfedma_flwr.config_schema`) for a run.

``load_config`` merges, in order: the structured defaults (:mod:`pfedma_flwr.config_schema`,
the one place each default is written; ``conf/pfedma.yaml`` is generated from it),
``conf/<config-name>.yaml``, the dotted overrides string of Flower's run config
(``overrides = "strategy.t_max=3"``), the app's dotted kebab-case run-config keys
(``strategy.t-max = 3``; :mod:`pfedma_flwr.run_config`), and the flat keys ``output-dir`` /
``data-dir``. Unknown keys anywhere are an error that names them.
Each component receives only its own section.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pfedma_flwr.config_checks import ABLATIONS as ABLATIONS
from pfedma_flwr.config_checks import ADVERSARY_KINDS as ADVERSARY_KINDS
from pfedma_flwr.config_checks import ATTACK_POOLS as ATTACK_POOLS
from pfedma_flwr.config_checks import PARTITIONS as PARTITIONS
from pfedma_flwr.config_checks import REFINE_STYLES as REFINE_STYLES
from pfedma_flwr.config_checks import config_problems
from pfedma_flwr.config_schema import (
    AdversaryConfig,
    AgentConfig,
    AnomalyConfig,
    BackendConfig,
    DataConfig,
    EmbeddingConfig,
    EvaluationConfig,
    OutputConfig,
    PFedMAConfig,
    ProtocolConfig,
    RoutingConfig,
    RulesConfig,
    StrategyConfig,
)
from pfedma_flwr.resources import conf_dir

# the checks' vocabulary stays importable from here (adversary, experiments and tests use it)
from pfedma_flwr.rules.modes import RULE_MODES as RULE_MODES

# the repository's conf/, or the copy a wheel ships inside the package (resources.py)
CONF_DIR = conf_dir()

__all__ = [
    "ABLATIONS", "ADVERSARY_KINDS", "ATTACK_POOLS", "CONF_DIR", "PARTITIONS", "REFINE_STYLES",
    "RULE_MODES", "AdversaryConfig", "AgentConfig", "AnomalyConfig", "BackendConfig",
    "ConfigError", "DataConfig", "EmbeddingConfig", "EvaluationConfig", "OutputConfig",
    "PFedMAConfig", "ProtocolConfig", "RoutingConfig", "RulesConfig", "StrategyConfig",
    "config_path", "load_config", "parse_bool", "parse_overrides", "reject_interpolation", "schema",
    "to_yaml",
]


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message names it and where it came from."""


_TRUE = frozenset({"true", "1", "yes", "y", "on"})
_FALSE = frozenset({"false", "0", "no", "n", "off"})


def parse_bool(value: Any, key: str) -> bool:
    """A typed boolean from a run/node-config value: ``"false"``, ``"0"``, ``"no"`` are False.

    Raises
    ------
    ConfigError
        Naming ``key`` when ``value`` is not a bool, 0/1 or one of the words above.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(f"{key} must be a boolean (true/false, 1/0, yes/no, on/off), got "
                      f"{value!r}")


def reject_interpolation(value: Any, where: str) -> None:
    """Refuse OmegaConf interpolation (``${...}``) in a value that came from the run config.

    Any resolver (``oc.env``, ``oc.decode``, a custom one) or key reference would be resolved
    on whichever machine loads the config, e.g. returning a node's environment variable; only
    the app's own ``conf/*.yaml`` may interpolate.
    """
    if isinstance(value, str) and "${" in value:
        raise ConfigError(f"{where}: interpolation ('${{...}}') is not allowed in run-config "
                          f"values, got {value[:200]!r}")


def _bool_keys(cls: type, prefix: str = "") -> set[str]:
    """Dotted paths of the ``bool`` fields of config dataclass ``cls`` (nested sections)."""
    import typing

    out: set[str] = set()
    for f, tp in typing.get_type_hints(cls).items():
        if tp is bool:
            out.add(prefix + f)
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out |= _bool_keys(tp, f"{prefix}{f}.")
    return out


def _validate(cfg: PFedMAConfig) -> None:
    problems = config_problems(cfg)
    if problems:
        raise ConfigError(problems[0])


def schema() -> DictConfig:
    """Every key at its default, as a node that overrides can be merged into.

    OmegaConf marks a frozen dataclass's node read-only; a frozen section (``protocol``, the
    wire's :class:`~pfedma_flwr.protocol.validation.Limits`) is still configurable, and the
    frozen value is built when the merged node becomes objects.
    """
    base = OmegaConf.structured(PFedMAConfig)
    defaults = PFedMAConfig()
    for f in dataclasses.fields(defaults):
        params = getattr(getattr(defaults, f.name), "__dataclass_params__", None)
        if params is not None and params.frozen:
            OmegaConf.set_readonly(base[f.name], False)
    return base


def _merge(*parts: Any) -> PFedMAConfig:
    try:
        merged = OmegaConf.merge(schema(), *parts)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(f"invalid configuration: {e}") from e
    except ValueError as e:  # a frozen section's own check (e.g. protocol.max_depth=0)
        raise ConfigError(f"invalid configuration: {e}") from e
    assert isinstance(cfg, PFedMAConfig)
    _validate(cfg)
    return cfg


def parse_overrides(text: str) -> DictConfig:
    """Parse ``"a.b=1 c.d='x y'"`` (shell-quoted, space separated) into a DictConfig."""
    items = shlex.split(text) if text.strip() else []
    bool_keys = _bool_keys(PFedMAConfig)
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        reject_interpolation(item, f"override {item.partition('=')[0]!r}")
        key, _, value = item.partition("=")
        if key.strip() in bool_keys:
            # OmegaConf alone would take "2" or "maybe"-like ints as True
            parse_bool(value.strip().strip("'\""), f"override {key.strip()}")
    try:
        return OmegaConf.from_dotlist(items)
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot parse overrides {text!r}: {e}") from e


def config_path(name: str) -> Path:
    """Path of a named preset in ``conf/`` (a path to a .yaml file is accepted too)."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml"):
        path = p if p.is_absolute() else CONF_DIR / p
    else:
        path = CONF_DIR / f"{name}.yaml"
    if not path.is_file():
        avail = sorted(x.stem for x in CONF_DIR.glob("*.yaml"))
        raise ConfigError(f"config {name!r} not found at {path}; available in conf/: {avail}")
    return path


def load_config(run_config: dict[str, Any] | None = None) -> PFedMAConfig:
    """Build the run configuration from Flower's ``context.run_config``.

    Recognized run-config keys: ``config-name``, ``overrides``, ``output-dir``, ``data-dir``,
    ``resume`` and the dotted config keys (:mod:`pfedma_flwr.run_config`). Any other key is
    rejected, naming it, so that typos surface.
    """
    from pfedma_flwr.run_config import dotted, tree_overrides

    rc = dict(run_config or {})
    for k, v in rc.items():
        if k != "overrides":  # parse_overrides names the offending override itself
            reject_interpolation(v, f"run-config key {k!r}")
    tree = tree_overrides(rc, PFedMAConfig)  # names an unknown key
    name = str(rc.get("config-name", "pfedma") or "pfedma")
    path = config_path(name)
    try:
        yaml_cfg = OmegaConf.load(path)
    except (OmegaConfBaseException, OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from e
    overrides = parse_overrides(str(rc.get("overrides", "")))
    twice = sorted(dotted(tree) & dotted(OmegaConf.to_container(overrides)))  # type: ignore[arg-type]
    if twice:
        raise ConfigError(f"{twice} set both by a run-config key and in overrides; set each once")
    parts: list[Any] = [yaml_cfg, overrides, OmegaConf.create(tree)]
    flat: dict[str, Any] = {}
    if rc.get("output-dir"):
        flat.setdefault("output", {})["dir"] = str(rc["output-dir"])
    if "resume" in rc:
        flat.setdefault("output", {})["resume"] = parse_bool(rc["resume"], "run-config key "
                                                             "'resume'")
    if rc.get("data-dir"):
        flat.setdefault("data", {})["data_dir"] = str(rc["data-dir"])
    parts.append(OmegaConf.create(flat))
    try:
        return _merge(*parts)
    except ConfigError as e:
        raise ConfigError(f"{e} (config {path}, overrides {rc.get('overrides', '')!r})") from e


def to_yaml(cfg: PFedMAConfig) -> str:
    """The resolved configuration as YAML, for the run's output directory."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
