"""Build a client's agent from the run config and its node config (cached per process).

The node config's security settings win over the run config's
(:class:`~pfedma_flwr.client.node_security.NodePolicy`): backend, endpoint, key variable, data dir,
minimum rule mode, and whether run-config plug-ins (``module:attr``) may be imported at all.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from pathlib import Path
from typing import Any

from pfedma_flwr.agents.backends.cache import default_cache_root, with_generation_cache
from pfedma_flwr.agents.backends.configured import make_configured_backend
from pfedma_flwr.agents.hooks import Adversary, AgentHook
from pfedma_flwr.client.agent import ClientAgent
from pfedma_flwr.client.node_security import NodePolicy, check_config_name
from pfedma_flwr.config import AgentConfig, BackendConfig, PFedMAConfig, load_config
from pfedma_flwr.data.partition import PROFILE_SCHEME, partition_by_expertise, partition_tasks
from pfedma_flwr.data.profiles import AgentProfile, knowledge_domain, profile_for_client
from pfedma_flwr.data.split import dev_pool
from pfedma_flwr.embeddings import get_embedder
from pfedma_flwr.registry import plugin_imports
from pfedma_flwr.rules.pii import get_recognizer
from pfedma_flwr.rules.private_facts import with_private_facts

logger = logging.getLogger(__name__)


def node_identity(node_config: dict[str, Any]) -> tuple[int, int]:
    """``(partition-id, num-partitions)`` from the node config, validated."""
    try:
        pid = int(node_config["partition-id"])
        n = int(node_config["num-partitions"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(
            "node config needs integer 'partition-id' and 'num-partitions' "
            f"(got {dict(node_config)!r}); set them with --node-config in deployment"
        ) from e
    if not 0 <= pid < n:
        raise ValueError(f"partition-id {pid} outside [0, {n})")
    return pid, n


def profile_backend(agent: AgentConfig, profile: AgentProfile
                    ) -> tuple[AgentProfile, BackendConfig]:
    """The profile with its configured backbone, and that backbone's backend section.

    The backbone is ``agent.profile_backbones[profile.name]`` if set, else the profile's own;
    its backend is ``agent.backbones[backbone]`` when configured, else ``agent.backend``.
    """
    backbone = agent.profile_backbones.get(profile.name, profile.backbone)
    if backbone != profile.backbone:
        profile = dataclasses.replace(profile, backbone=backbone)
    section = agent.backbones.get(backbone)
    if section is None:
        if backbone != "default":
            logger.warning("backbone %r of profile %s has no agent.backbones section; using "
                           "agent.backend", backbone, profile.name)
        return profile, agent.backend
    return profile, section


def node_policy(node_config: dict[str, Any]) -> NodePolicy:
    """The security policy of a node, from its node config (see ``node_security``)."""
    return NodePolicy.from_node_config(node_config)


def build_agent(run_config: dict[str, Any], node_config: dict[str, Any]) -> ClientAgent:
    """The agent of this node; one per (run config, node config) per process.

    Raises
    ------
    pfedma_flwr.config.ConfigError
        (or its subclass ``NodePolicyError``) when the run config is invalid or asks for what
        the node does not allow: plug-in code, interpolation, a config file outside ``conf/``.
    """
    key = (json.dumps(run_config, sort_keys=True, default=str),
           json.dumps(node_config, sort_keys=True, default=str))
    return _build_agent(*key)


@functools.cache
def _build_agent(run_config_json: str, node_config_json: str) -> ClientAgent:
    run_config, node = json.loads(run_config_json), json.loads(node_config_json)
    policy = node_policy(node)
    check_config_name(run_config, policy)
    with plugin_imports(policy.allow_plugins):
        return _assemble(load_config(run_config), node, policy)


def _assemble(cfg: PFedMAConfig, node: dict[str, Any], policy: NodePolicy) -> ClientAgent:
    pid, n = node_identity(node)
    a, d = cfg.agent, cfg.data
    data_dir = policy.data_dir_for(d.data_dir) or None
    split_seed = d.seed_for_split(cfg.seed)
    pool = dev_pool(d.benchmarks, dev_pool_per_benchmark=d.dev_pool_per_benchmark,
                    seed=split_seed, data_dir=data_dir)
    names = [str(node["profile"])] if node.get("profile") else a.profiles or None
    if d.partition == PROFILE_SCHEME:  # the profiles of all clients of the rotation
        private = partition_by_expertise(
            pool, [profile_for_client(i, a.profiles or None).domains for i in range(n)], pid,
            seed=split_seed, domain_of=knowledge_domain)
    else:
        private = partition_tasks(pool, n, pid, scheme=d.partition, alpha=d.alpha,
                                  seed=split_seed)
    profile, section = profile_backend(
        a, profile_for_client(0 if node.get("profile") else pid, names))
    where = "agent.backend" if section is a.backend else f"agent.backbones.{profile.backbone}"
    backend = policy.backend_section(section, where=where)
    if backend.name == "simulated" and data_dir and "data_dir" not in backend.options:
        # the scripted agents look questions up in this node's benchmark files (inside a
        # Flower app bundle the default data dir does not exist)
        backend = dataclasses.replace(backend, options={**backend.options, "data_dir": data_dir})
    embedder = get_embedder(cfg.embedding.name, cfg.embedding.model_path)
    recognizer = get_recognizer(policy.pii_recognizer(cfg.rules.pii))
    if policy.private_fact_detection(cfg.rules.private_facts):
        # the shipped detector is fitted on the packaged MiniLM; a custom model path is another
        run_name = "custom" if cfg.embedding.model_path else cfg.embedding.name
        if policy.private_facts is not None and run_name != "minilm":
            # the node wants the detector: the run's embedder choice must not switch it off
            embedder_for_facts, run_name = get_embedder("minilm"), "minilm"
        else:
            embedder_for_facts = embedder
        recognizer = with_private_facts(recognizer, embedder_for_facts, run_name)
    cached = with_generation_cache(make_configured_backend(backend),
                                   enabled=policy.cache_setting(backend.cache),
                                   directory=generation_cache_dir(cfg, node, policy))
    return ClientAgent(
        profile=profile, backend=cached,
        private_data=private, embedder=embedder, recognizer=recognizer,
        rule_mode=policy.rule_mode(cfg.rules.mode),
        few_shot=a.few_shot, few_shot_scope=a.few_shot_scope, experience_size=a.experience_size,
        max_tokens=backend.max_tokens, open_max_tokens=a.open_max_tokens,
        temperature=backend.temperature,
        sim_threshold=cfg.rules.sim_threshold, phi_default=cfg.rules.phi_default,
        limits=cfg.protocol,
        client_key=str(node.get("client-id", "")) or f"partition-{pid}",
        hooks=_hooks(cfg, policy, pid, n, data_dir),
        response_format=a.response_format, seed=cfg.seed * 1000 + pid, lessons=a.lessons,
        lesson_min_sim=a.lesson_min_sim,
        reasoning=policy.reasoning(profile.reasoning if a.reasoning == "profile" else a.reasoning),
        few_shot_style=a.few_shot_style, permute_options=a.permute_options,
        guard_decision=a.guard_decision, guard_shots=a.guard_shots,
        option_reasoning=None if a.option_reasoning == "profile" else a.option_reasoning,
    )


def generation_cache_dir(cfg: PFedMAConfig, node: dict[str, Any], policy: NodePolicy
                         ) -> Path | None:
    """Where this node keeps its generation cache, or ``None`` (no cache on this node).

    A node with a ``state-dir`` keeps it there (``generations/``); a simulated node under the
    run's ``output.generation_cache_dir`` (default :func:`default_cache_root`), one directory
    per client; a deployed node without ``state-dir`` keeps none (nothing of it on a disk its
    operator did not choose).
    """
    state_dir = str(node.get("state-dir", "") or "").strip()
    if state_dir:
        return Path(state_dir).expanduser() / "generations"
    if not policy.simulated:
        return None
    pid, _ = node_identity(node)
    root = cfg.output.generation_cache_dir or default_cache_root()
    return Path(root).expanduser() / f"p{pid}"


def _hooks(cfg: PFedMAConfig, policy: NodePolicy, pid: int, n: int,
           data_dir: str | None) -> tuple[AgentHook, ...]:
    """The hooks around this client's agent (none for an honest one).

    The adversary when the run asks for one and the node allows it (``allow-adversary``; a
    simulated node does).
    """
    adv = Adversary.from_config(
        dataclasses.replace(cfg.adversary, ratio=policy.adversary_ratio(cfg.adversary.ratio)),
        partition_id=pid, num_clients=n, data_dir=data_dir or "")
    return () if adv is None else (adv,)


build_agent.cache_clear = _build_agent.cache_clear  # type: ignore[attr-defined]
