"""What a node decides for itself, whatever the run config asks (no Flower imports).

The run config is written by whoever submits a run; the node config (``flower-supernode
--node-config``) by whoever operates the node. Settings that spend a node's secrets, run code on
it or weaken its privacy enforcement are therefore the node's:

- ``backend`` (default: the run's choice): backend name; the run may pick only registered
  names;
- ``backend-model`` (the run's choice): model id / path of that backend;
- ``backend-url`` (none): endpoint of an ``openai`` backend;
- ``api-key-env`` (``OPENAI_API_KEY``): name of the variable holding the endpoint's key;
- ``data-dir`` (package default): benchmark data of this node;
- ``min-rule-mode`` (``full``): weakest ``rules.mode`` the node runs (:data:`RULE_MODE_RANK`);
- ``pii`` (the run's choice): PII recognizer of the node's rules, presidio | regex;
- ``private-facts`` (true): run the ``PRIVATE_FACT`` sentence detector in the node's rules
  whatever ``rules.private_facts`` and ``embedding`` the run sets (it then loads the packaged
  MiniLM the shipped detector is fitted on); false switches it off on this node;
- ``allow-run-endpoint`` (false): take ``base_url`` / ``api_key_env`` / data dir from the run
  config when the node sets none;
- ``allow-plugins`` (false): let the run config name ``module:attr`` code;
- ``allow-adversary`` (false): let ``adversary.ratio`` make this node act malicious;
- ``allow-programs`` (false): let agents of program-aided profiles run the Python programs
  their model writes, in the client's limited child interpreter (:mod:`pfedma_flwr.agents.
  program`); without it they reason in chain of thought.
- ``generation-cache`` (true): keep reusable answers in ``<state-dir>/generations``
  (:mod:`pfedma_flwr.agents.backends.cache`); false switches the cache off whatever the run
  asks. A deployed node without ``state-dir`` keeps none.

A node whose config holds only Flower's simulation keys (``partition-id``, ``num-partitions``)
is a *simulated* node: Flower's simulation engine builds that config itself, so no operator
could have set anything else, and the run submitter owns the machine and ships the ClientApp
code anyway. Simulated nodes keep the run's endpoint, data dir, rule mode, private-fact
detector, programs and adversary (the ablation and robustness presets need them); they still
refuse ``module:attr`` plug-ins from the run config unless the environment of the simulating
process (the machine owner's) sets ``PFEDMA_ALLOW_PLUGINS=1``.
Every SuperNode of a deployment sets at least ``state-dir`` or ``data-dir`` and is a deployed
node with the strict defaults above.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pfedma_flwr.config import (
    CONF_DIR,
    BackendConfig,
    ConfigError,
    config_path,
    parse_bool,
    reject_interpolation,
)
from pfedma_flwr.rules.modes import RuleMode

logger = logging.getLogger(__name__)

#: Enforcement order of ``rules.mode`` (higher = more of the rule loop runs on the node):
#: NR applies no rules; SR applies static rules only; LE, G2L and L2G each add one direction of
#: rule evolution (local, global-to-local, local-to-global) and are not ordered among
#: themselves; full runs all of them. A requested mode ranked below the node's minimum is
#: raised to the minimum; modes of equal rank are all allowed.
#: Derived from :class:`~pfedma_flwr.rules.modes.RuleMode` (its ``rank``), the one definition.
RULE_MODE_RANK: dict[str, int] = {m.config_name: m.rank for m in RuleMode}

SIMULATION_KEYS = frozenset({"partition-id", "num-partitions"})
#: node-config keys of this module (the others: partition-id, num-partitions, profile,
#: client-id, state-dir are read by the ClientApp)
POLICY_KEYS = ("backend", "backend-model", "backend-url", "api-key-env", "data-dir",
               "min-rule-mode", "pii", "private-facts", "allow-run-endpoint", "allow-plugins",
               "allow-adversary", "allow-programs", "generation-cache")
PII_RECOGNIZERS = ("presidio", "regex")
NODE_KEYS = frozenset({*POLICY_KEYS, *SIMULATION_KEYS, "profile", "client-id", "state-dir"})
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
#: simulated nodes have no node config of their own; this variable of the process is theirs
ALLOW_PLUGINS_ENV = "PFEDMA_ALLOW_PLUGINS"
#: backend ``options`` keys that would bypass the node-owned fields
_ENDPOINT_OPTIONS = frozenset({"base_url", "api_key_env", "api_key", "data_dir"})


class NodePolicyError(ConfigError):
    """The run config asks for something this node's config does not allow."""


@dataclass(frozen=True, kw_only=True)
class NodePolicy:
    """A node's own security settings (module docstring); build with :meth:`from_node_config`.

    Parameters
    ----------
    backend : str
        Backend the node runs; empty lets the run choose among registered names.
    model : str
        Model of that backend; empty lets the run choose.
    base_url, api_key_env : str
        The node's endpoint and the name of the variable that holds its key.
    data_dir : str
        The node's benchmark data dir (empty = package default).
    min_rule_mode : str
        Weakest ``rules.mode`` this node enforces (see :data:`RULE_MODE_RANK`).
    pii : str
        PII recognizer the node's rules use; empty lets the run choose.
    private_facts : bool or None
        Whether the node's rules detect private facts (``PRIVATE_FACT``); ``None`` lets the run
        choose (simulated nodes).
    allow_run_endpoint : bool
        Whether endpoint, key variable and data dir may come from the run config.
    allow_plugins : bool
        Whether the run config may name ``module:attr`` code to import on this node.
    allow_adversary : bool
        Whether the run's ``adversary`` section may make this node's agent act malicious.
    allow_programs : bool
        Whether this node's agent may run the programs its model writes (``reasoning:
        program``).
    generation_cache : bool
        Whether this node may keep a generation cache (false wins over the run's ``cache``).
    simulated : bool
        Built from Flower's simulation node config (for logs and docs only).
    """

    backend: str = ""
    model: str = ""
    base_url: str = ""
    api_key_env: str = ""
    data_dir: str = ""
    min_rule_mode: str = "full"
    pii: str = ""
    private_facts: bool | None = True
    allow_run_endpoint: bool = False
    allow_plugins: bool = False
    allow_adversary: bool = False
    allow_programs: bool = False
    generation_cache: bool = True
    simulated: bool = False

    def __post_init__(self) -> None:
        if self.min_rule_mode not in RULE_MODE_RANK:
            raise NodePolicyError(f"node config min-rule-mode must be one of "
                                  f"{sorted(RULE_MODE_RANK)}, got {self.min_rule_mode!r}")
        if self.pii and self.pii not in PII_RECOGNIZERS:
            raise NodePolicyError(f"node config pii must be one of {PII_RECOGNIZERS}, got "
                                  f"{self.pii!r}")
        if ":" in self.backend and not self.allow_plugins:
            raise NodePolicyError(f"node config backend {self.backend!r} is a module:attr "
                                  "plug-in; set allow-plugins=true to load it")

    @classmethod
    def from_node_config(cls, node_config: Mapping[str, Any],
                         environ: Mapping[str, str] | None = None) -> NodePolicy:
        """The policy of a node from its ``context.node_config`` (module docstring).

        ``environ`` (default ``os.environ``) is read only for a simulated node.
        """
        node = dict(node_config)
        if set(node) <= SIMULATION_KEYS:
            env = os.environ if environ is None else environ
            return cls(min_rule_mode="NR", private_facts=None, allow_run_endpoint=True,
                       allow_adversary=True, allow_programs=True,
                       allow_plugins=parse_bool(env.get(ALLOW_PLUGINS_ENV, "0"),
                                                f"environment variable {ALLOW_PLUGINS_ENV}"),
                       simulated=True)
        for k in POLICY_KEYS:
            reject_interpolation(node.get(k), f"node config {k!r}")
        unknown = sorted(set(node) - NODE_KEYS)
        if unknown:  # a misspelt key falls back to its (strict) default: say so
            logger.warning("node config keys %s are not used by PFedMA (known: %s)", unknown,
                           sorted(NODE_KEYS))
        return cls(
            backend=_text(node, "backend"), model=_text(node, "backend-model"),
            base_url=_text(node, "backend-url"),
            api_key_env=_text(node, "api-key-env"), data_dir=_text(node, "data-dir"),
            min_rule_mode=_text(node, "min-rule-mode") or "full", pii=_text(node, "pii"),
            private_facts=parse_bool(node.get("private-facts", True),
                                     "node config 'private-facts'"),
            allow_run_endpoint=parse_bool(node.get("allow-run-endpoint", False),
                                          "node config 'allow-run-endpoint'"),
            allow_plugins=parse_bool(node.get("allow-plugins", False),
                                     "node config 'allow-plugins'"),
            allow_adversary=parse_bool(node.get("allow-adversary", False),
                                       "node config 'allow-adversary'"),
            allow_programs=parse_bool(node.get("allow-programs", False),
                                      "node config 'allow-programs'"),
            generation_cache=parse_bool(node.get("generation-cache", True),
                                        "node config 'generation-cache'"),
        )

    def rule_mode(self, requested: str) -> str:
        """The mode this node enforces for a requested ``rules.mode`` (never below the minimum)."""
        if requested not in RULE_MODE_RANK:
            raise NodePolicyError(f"rules.mode must be one of {sorted(RULE_MODE_RANK)}, got "
                                  f"{requested!r}")
        if RULE_MODE_RANK[requested] >= RULE_MODE_RANK[self.min_rule_mode]:
            return requested
        logger.warning("run config asks rules.mode=%s, below this node's min-rule-mode=%s; "
                       "enforcing %s", requested, self.min_rule_mode, self.min_rule_mode)
        return self.min_rule_mode

    def pii_recognizer(self, requested: str) -> str:
        """The node's PII recognizer if it pins one (a run cannot swap it), else the run's."""
        if self.pii and requested != self.pii:
            logger.warning("rules.pii=%s from the run config replaced by this node's pii=%s",
                           requested, self.pii)
        return self.pii or requested

    def private_fact_detection(self, requested: bool) -> bool:
        """Whether the node's rules run the private-fact detector: the node's, else the run's."""
        if self.private_facts is None:
            return requested
        if requested != self.private_facts:
            logger.warning("rules.private_facts=%s from the run config replaced by this node's "
                           "private-facts=%s", requested, self.private_facts)
        return self.private_facts

    def adversary_ratio(self, requested: float) -> float:
        """The run's ``adversary.ratio`` if this node allows it, else 0 (logged)."""
        if requested > 0 and not self.allow_adversary:
            logger.warning("ignoring adversary.ratio=%s from the run config: this node does "
                           "not act malicious (allow-adversary=false)", requested)
            return 0.0
        return requested

    def reasoning(self, requested: str) -> str:
        """``requested`` (cot | program), or cot where this node does not run programs."""
        if requested == "program" and not self.allow_programs:
            logger.info("this node runs no model-written programs (allow-programs=false): "
                        "chain of thought instead")
            return "cot"
        return requested

    def cache_setting(self, requested: bool | None) -> bool | None:
        """The run's ``cache`` setting, or ``False`` where this node keeps no cache."""
        return requested if self.generation_cache else False

    def data_dir_for(self, run_data_dir: str) -> str:
        """The benchmark data dir: the node's, else the run's if allowed, else the default."""
        if self.data_dir:
            return self.data_dir
        if self.allow_run_endpoint:
            return run_data_dir
        if run_data_dir:
            logger.warning("ignoring the run config's data dir %r: this node takes its data "
                           "dir from its node config (data-dir)", run_data_dir)
        return ""

    def backend_section(self, b: BackendConfig, *, where: str = "agent.backend"
                        ) -> BackendConfig:
        """Backend section ``b`` (from the run config) with the node's settings imposed.

        Raises
        ------
        NodePolicyError
            If the run names a ``module:attr`` backend without ``allow-plugins``, or selects
            an ``openai`` backend while the node has no endpoint and does not allow the run's.
        """
        name = self.backend or b.name
        if self.backend and b.name != self.backend:
            logger.info("%s.name=%s from the run config replaced by this node's backend %s",
                        where, b.name, self.backend)
        if ":" in name and not self.allow_plugins:
            raise NodePolicyError(
                f"{where}.name={name!r} names plug-in code (module:attr); this node runs only "
                "registered backends (set allow-plugins=true in its node config to allow it)")
        options = dict(b.options)
        if self.allow_run_endpoint:
            base_url = self.base_url or b.base_url
            key_env = self.api_key_env or b.api_key_env
        else:
            base_url, key_env = self.base_url, self.api_key_env or DEFAULT_API_KEY_ENV
            ignored = [f for f, v, node_v in (("base_url", b.base_url, base_url),
                                              ("api_key_env", b.api_key_env, key_env))
                       if v and v != node_v]
            ignored += sorted(k for k in options if k in _ENDPOINT_OPTIONS)
            options = {k: v for k, v in options.items() if k not in _ENDPOINT_OPTIONS}
            if ignored:
                logger.warning("ignoring %s from the run config's %s: this node takes its "
                               "endpoint and key variable from its node config "
                               "(backend-url, api-key-env; allow-run-endpoint=false)",
                               ", ".join(ignored), where)
        if name == "openai" and not base_url:
            raise NodePolicyError(
                f"{where} selects the openai backend but this node's config sets no "
                "backend-url (and allow-run-endpoint is false); set backend-url in the node "
                "config")
        return dataclasses.replace(b, name=name, model=self.model or b.model, base_url=base_url,
                                   api_key_env=key_env, options=options)


def check_config_name(run_config: Mapping[str, Any], policy: NodePolicy) -> None:
    """On a deployed node the run may name only a preset of the app's ``conf/``, not a path.

    A path would make the node load (and resolve interpolations of) any YAML file on its disk.
    """
    if policy.simulated:
        return
    name = str(run_config.get("config-name", "pfedma") or "pfedma")
    path = config_path(name).resolve()
    if not path.is_relative_to(CONF_DIR.resolve()):
        raise NodePolicyError(f"run-config config-name {name!r} is not a preset of the app's "
                              f"conf/ ({CONF_DIR}); a node loads only the app's own YAML")


def _text(node: Mapping[str, Any], key: str) -> str:
    value = node.get(key, "")
    if not isinstance(value, str):
        raise NodePolicyError(f"node config {key!r} must be a string, got {value!r}")
    return value.strip()
