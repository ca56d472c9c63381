"""Experiment presets (``conf/experiments/<name>.yaml``) and their expansion into variant runs.

A preset names a base run configuration per size (merged over the shared defaults of
``conf/experiments/_sizes.yaml``: a preset's ``set`` extends the shared one key by key), the
axes whose Cartesian product gives the variants (each level of an axis is a set of dotted
config overrides), the table columns and the plots. Format (every key but ``axes`` optional)::

    description: what the experiment measures
    sizes:
      tiny:  {config: tiny,   num_clients: 5, set: {data.queries_per_benchmark: 3}}
      small: {config: pfedma, num_clients: 4, set: {...}}
      paper: {config: pfedma, num_clients: 20, set: {...}}
    base: {data.benchmarks: [gsm8k, medqa]}        # every size and variant
    axes:
      method: {PFedMA: {}, "-all": {anomaly.ablation: "-all"},
               single-agent: {num_clients: 1, strategy.t_max: 1}}
      rho: {"0": {adversary.ratio: 0.0}, "0.2": {adversary.ratio: 0.2}}
    exclude: [{method: [single-agent], rho: ["0.2"]}]   # combinations not to run
    columns: [ACC, ASR]
    plots: [{kind: line, x: rho, y: ASR, hue: method}]
    reference: {method: PFedMA}   # rows are compared with this level (compare.py)

A level may name a **choice file** (``choice: best_single``): the overrides another command
wrote into ``conf/experiments/choices/<name>-<size>.yaml`` (e.g. the single-agent configuration
selected on dev questions, :mod:`pfedma_flwr.experiments.select`), applied below the level's own
keys. Override precedence: the shared size's ``set`` < ``base`` < the preset's own size ``set``
< a level's choice file < axis levels (in axis order) < ``--set`` of the command line.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pfedma_flwr.config import CONF_DIR

EXPERIMENTS_DIR = CONF_DIR / "experiments"
SIZES = ("tiny", "small", "paper")
PLOT_KINDS = ("bar", "line", "grid", "benchmarks", "selection", "capability", "diff")
# Reserved key of an axis level: the number of simulated clients of that variant (not a
# config key; it wins over the size's and the command line's client count).
NUM_CLIENTS_KEY = "num_clients"
# Reserved key of an axis level: the stem of a choice file in CHOICES_DIR (module docstring).
CHOICE_KEY = "choice"
CHOICES_DIR = EXPERIMENTS_DIR / "choices"
_RESERVED = (NUM_CLIENTS_KEY, CHOICE_KEY)


@dataclass(frozen=True)
class SizeSpec:
    """Base run of one size: a ``conf/`` preset, the number of clients and overrides.

    ``shared`` comes from ``_sizes.yaml`` (below the preset's ``base``), ``overrides`` from the
    preset's own ``sizes`` entry (above ``base``).
    """

    config: str
    num_clients: int
    overrides: dict[str, Any] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Variant:
    """One run of an experiment: its labels (axis → level) and its dotted overrides."""

    name: str
    labels: dict[str, str]
    overrides: dict[str, Any]
    # a level's reserved ``num_clients`` key (the single-agent baseline runs one client)
    num_clients: int | None = None
    # a level's reserved ``choice`` key: the choice file whose overrides it starts from
    choice: str | None = None


@dataclass(frozen=True)
class ExperimentPreset:
    """A parsed ``conf/experiments/<name>.yaml`` (module docstring)."""

    name: str
    description: str
    sizes: dict[str, SizeSpec]
    base: dict[str, Any]
    axes: dict[str, dict[str, dict[str, Any]]]
    columns: tuple[str, ...]
    plots: tuple[dict[str, Any], ...]
    # each rule drops the variants whose label of every axis it names is one of its levels
    exclude: tuple[dict[str, tuple[str, ...]], ...] = ()
    # axis -> {level: the level that is the same method with its defences off}: App. H's PNA
    # (no attack, no defence) comes from that level's clean run, BP (defences on) from the
    # level's own; a level not listed has no defence to switch off (PNA = BP)
    undefended: dict[str, dict[str, str]] = field(default_factory=dict)
    # axis -> level every row is compared with (intervals and McNemar, compare.py)
    reference: dict[str, str] = field(default_factory=dict)

    def variants(self) -> list[Variant]:
        """The Cartesian product of the axes minus ``exclude``, in axis and level order."""
        if not self.axes:
            return [Variant(name="pfedma", labels={}, overrides={})]
        out = []
        names = list(self.axes)
        for levels in itertools.product(*(list(self.axes[a].items()) for a in names)):
            labels = {a: lvl for a, (lvl, _) in zip(names, levels, strict=True)}
            if any(all(labels[a] in lv for a, lv in rule.items()) for rule in self.exclude):
                continue
            over: dict[str, Any] = {}
            n_clients = choice = None
            for _, o in levels:
                over.update({k: v for k, v in o.items() if k not in _RESERVED})
                n_clients = o.get(NUM_CLIENTS_KEY, n_clients)
                choice = o.get(CHOICE_KEY, choice)
            out.append(Variant(name=variant_name(labels), labels=labels, overrides=over,
                               num_clients=n_clients, choice=choice))
        return out

    def size(self, size: str) -> SizeSpec:
        """The base run of ``size``; a ``ValueError`` names the sizes the preset defines."""
        if size not in self.sizes:
            raise ValueError(f"experiment {self.name!r} has no size {size!r}; "
                             f"defined: {sorted(self.sizes)}")
        return self.sizes[size]


def variant_name(labels: Mapping[str, str]) -> str:
    """File-system safe ``axis=level`` name of a variant (``method=-all_rho=0.2``)."""
    def safe(text: str) -> str:
        return "".join(c if c.isalnum() or c in "-.+" else "-" for c in text)

    return "_".join(f"{safe(a)}={safe(v)}" for a, v in labels.items())


def format_override(key: str, value: Any) -> str:
    """``key=value`` in the syntax of ``--set`` / ``parse_overrides`` (lists as ``[a,b]``)."""
    return f"{key}={_value(value)}"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def overrides_text(overrides: Mapping[str, Any], extra: Sequence[str] = ()) -> str:
    """The shell-quoted override string that ``launch.run`` / ``load_config`` take."""
    items = [format_override(k, v) for k, v in overrides.items()] + list(extra)
    return " ".join(shlex.quote(i) for i in items)


def _mapping(obj: Any, where: str) -> dict[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"{where} must be a mapping, got {type(obj).__name__}")
    return {str(k): v for k, v in obj.items()}


def parse_preset(name: str, data: Any, shared_sizes: Mapping[str, Any] | None = None
                 ) -> ExperimentPreset:
    """Validate a loaded preset (sizes merged over ``shared_sizes``); errors name the key."""
    d = _mapping(data, f"experiment {name}")
    unknown = sorted(set(d) - {"description", "sizes", "base", "axes", "columns", "plots",
                               "exclude", "undefended", "reference"})
    if unknown:
        raise ValueError(f"experiment {name}: unknown keys {unknown}")
    sizes = {}
    own = _mapping(d.get("sizes"), f"{name}.sizes")
    shared = _mapping(shared_sizes, "_sizes")
    for s in [*shared, *(k for k in own if k not in shared)]:
        if s not in SIZES:
            raise ValueError(f"experiment {name}: size {s!r} not in {SIZES}")
        base_spec = _mapping(shared.get(s), f"_sizes.{s}")
        mine = _mapping(own.get(s), f"{name}.sizes.{s}")
        sp = {**base_spec, **mine}
        n = sp.get("num_clients", 4)
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"experiment {name}: sizes.{s}.num_clients must be an int >= 1")
        sizes[s] = SizeSpec(config=str(sp.get("config", "pfedma")), num_clients=n,
                            overrides=_mapping(mine.get("set"), f"{name}.sizes.{s}.set"),
                            shared=_mapping(base_spec.get("set"), f"_sizes.{s}.set"))
    axes = {str(a): {str(lvl): _mapping(o, f"{name}.axes.{a}.{lvl}")
                     for lvl, o in _mapping(levels, f"{name}.axes.{a}").items()}
            for a, levels in _mapping(d.get("axes"), f"{name}.axes").items()}
    for a, levels in axes.items():
        if not levels:
            raise ValueError(f"experiment {name}: axis {a!r} has no levels")
        for lvl, o in levels.items():
            n = o.get(NUM_CLIENTS_KEY)
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                raise ValueError(f"experiment {name}: axes.{a}.{lvl}.num_clients must be an "
                                 f"int >= 1, got {n!r}")
            ch = o.get(CHOICE_KEY)
            if ch is not None and (not isinstance(ch, str) or not ch.isidentifier()):
                raise ValueError(f"experiment {name}: axes.{a}.{lvl}.choice must name a choice "
                                 f"file stem (letters, digits, _), got {ch!r}")
    cols = tuple(str(c) for c in d.get("columns") or ("ACC",))
    clash = sorted(set(cols) & set(axes))
    if clash:
        raise ValueError(f"experiment {name}: axes and columns share the names {clash}")
    plots = tuple(_mapping(p, f"{name}.plots[]") for p in d.get("plots") or [])
    for p in plots:
        if p.get("kind") not in PLOT_KINDS:
            raise ValueError(f"experiment {name}: plot kind {p.get('kind')!r} not in {PLOT_KINDS}")
    return ExperimentPreset(
        name=name, description=str(d.get("description", "")), sizes=sizes,
        base=_mapping(d.get("base"), f"{name}.base"), axes=axes,
        columns=cols, plots=plots, exclude=_exclude(name, d.get("exclude"), axes),
        undefended=_undefended(name, d.get("undefended"), axes),
        reference=_reference(name, d.get("reference"), axes),
    )


def _reference(name: str, spec: Any, axes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """``reference`` validated: one axis of the preset and one of its levels."""
    ref = {str(k): str(v) for k, v in _mapping(spec, f"{name}.reference").items()}
    if len(ref) > 1:
        raise ValueError(f"experiment {name}: reference names one axis, got {sorted(ref)}")
    for a, lvl in ref.items():
        if a not in axes or lvl not in axes[a]:
            raise ValueError(f"experiment {name}: reference {a}={lvl} is not a level of the "
                             f"preset; axes: { {k: list(v) for k, v in axes.items()} }")
    return ref


def choice_overrides(stem: str, size: str, choices_dir: Path | None = None) -> dict[str, Any]:
    """The ``overrides`` mapping of choice file ``<stem>-<size>.yaml`` (module docstring).

    Raises ``ValueError`` naming the file and the command that writes it when it is missing
    or malformed.
    """
    path = (choices_dir or CHOICES_DIR) / f"{stem}-{size}.yaml"
    if not path.is_file():
        raise ValueError(f"choice file {path} not found: it is written by "
                         f"`python3 -m pfedma_flwr.experiments.select {stem} --size {size}` "
                         f"(a selection on dev questions)")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    over = data.get("overrides") if isinstance(data, dict) else None
    if not isinstance(over, dict) or not over:
        raise ValueError(f"choice file {path}: expected a non-empty mapping 'overrides'")
    if bad := sorted(str(k) for k in over if str(k).startswith("data.") or k == "seed"):
        raise ValueError(f"choice file {path} sets {bad}: a choice must not change the questions")
    return {str(k): v for k, v in over.items()}


def _undefended(name: str, spec: Any, axes: Mapping[str, Mapping[str, Any]]
                ) -> dict[str, dict[str, str]]:
    """``undefended`` validated: axes of the preset mapping its levels to its levels."""
    out: dict[str, dict[str, str]] = {}
    for a, pairs in _mapping(spec, f"{name}.undefended").items():
        if a not in axes:
            raise ValueError(f"experiment {name}: undefended names axis {a!r}, not in "
                             f"{sorted(axes)}")
        m = {str(k): str(v) for k, v in _mapping(pairs, f"{name}.undefended.{a}").items()}
        bad = sorted({x for kv in m.items() for x in kv} - set(axes[a]))
        if bad:
            raise ValueError(f"experiment {name}: undefended.{a} names levels {bad} that axis "
                             f"{a!r} does not have")
        out[str(a)] = m
    return out


def _exclude(name: str, rules: Any, axes: Mapping[str, Mapping[str, Any]]
             ) -> tuple[dict[str, tuple[str, ...]], ...]:
    """``exclude`` rules validated: each names axes of the preset and levels of those axes."""
    if rules is None:
        return ()
    if not isinstance(rules, list):
        raise ValueError(f"experiment {name}: exclude must be a list of mappings")
    out = []
    for k, rule in enumerate(rules):
        r = {a: tuple(str(x) for x in (lv if isinstance(lv, list) else [lv]))
             for a, lv in _mapping(rule, f"{name}.exclude[{k}]").items()}
        for a, lv in r.items():
            if a not in axes:
                raise ValueError(f"experiment {name}: exclude[{k}] names no axis {a!r}; "
                                 f"axes: {sorted(axes)}")
            if bad := [x for x in lv if x not in axes[a]]:
                raise ValueError(f"experiment {name}: exclude[{k}]: axis {a!r} has no level "
                                 f"{bad}; levels: {list(axes[a])}")
        if r:
            out.append(r)
    return tuple(out)


def preset_names() -> list[str]:
    """Names of the presets in ``conf/experiments/``."""
    return sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml") if not p.stem.startswith("_"))


def load_preset(name: str) -> ExperimentPreset:
    """Load ``conf/experiments/<name>.yaml`` (or a path to a ``.yaml`` file)."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else EXPERIMENTS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"experiment {name!r} not found at {path}; available: {preset_names()}")
    shared_path = EXPERIMENTS_DIR / "_sizes.yaml"
    shared = yaml.safe_load(shared_path.read_text(encoding="utf-8")) \
        if shared_path.is_file() else {}
    with open(path, encoding="utf-8") as f:
        return parse_preset(path.stem, yaml.safe_load(f), shared)
