"""The dataclass defaults are the main job's configuration (``conf/pfedma.yaml``).

A strategy or unit test that builds ``PFedMAConfig()`` or ``EngineSettings()`` must run what
the main job runs; a key that disagrees is named with both values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml
from omegaconf import OmegaConf

from pfedma_flwr.config import CONF_DIR, PFedMAConfig, load_config
from pfedma_flwr.server.query_state import ENGINE_KEYS, EngineSettings


def _yaml() -> dict[str, Any]:
    data = yaml.safe_load((CONF_DIR / "pfedma.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict) and data
    return data


def _leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key → value of every scalar or list of a nested mapping."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _default(dotted: str) -> Any:
    obj: Any = PFedMAConfig()
    for part in dotted.split("."):
        assert dataclasses.is_dataclass(obj), f"{dotted}: {part!r} is below a non-section"
        assert part in {f.name for f in dataclasses.fields(obj)}, f"{dotted}: no such key"
        obj = getattr(obj, part)
    return obj


def test_every_pfedma_yaml_key_equals_its_dataclass_default():
    leaves = _leaves(_yaml())
    # the sections the main job relies on are all there (a yaml emptied by mistake fails)
    assert {"strategy.k_max", "strategy.batch_size", "routing.adaptive_k", "agent.few_shot",
            "agent.backend.n_threads", "agent.backend.max_batch"} <= set(leaves)
    differ = {k: (v, _default(k)) for k, v in leaves.items() if v != _default(k)}
    assert differ == {}, "conf/pfedma.yaml value vs dataclass default"


def test_the_measured_disagreements_are_gone():
    # issue 14 measured these six apart (dataclass vs yaml); now both say the yaml's value
    cfg = PFedMAConfig()
    assert (cfg.strategy.k_max, cfg.strategy.batch_size, cfg.routing.adaptive_k) == (2, 20, True)
    assert (cfg.agent.few_shot, cfg.agent.backend.n_threads, cfg.agent.backend.max_batch) \
        == (0, 2, 16)


def test_loading_pfedma_yaml_changes_nothing_but_the_output_dir(tmp_path):
    loaded = load_config({"config-name": "pfedma", "output-dir": str(tmp_path)})
    base = OmegaConf.to_object(OmegaConf.structured(PFedMAConfig))
    loaded.output.dir = base.output.dir  # set from the run config, not the yaml
    assert loaded == base


def test_generic_backend_sections_keep_their_own_defaults():
    # only the agent's backend is the main job's model; the judge and the llm orchestrator
    # sections are generic ones with a short answer budget
    cfg = PFedMAConfig()
    assert cfg.anomaly.judge_backend.temperature == 0.0
    assert cfg.anomaly.judge_backend.max_tokens == 64
    assert cfg.routing.llm_backend.max_tokens == 256


def test_engine_settings_defaults_equal_the_config_defaults():
    fields = {f.name for f in dataclasses.fields(EngineSettings)}
    assert fields == set(ENGINE_KEYS), "a new EngineSettings field needs its config key here"
    defaults = EngineSettings()
    differ = {name: (getattr(defaults, name), _default(key))
              for name, key in ENGINE_KEYS.items() if getattr(defaults, name) != _default(key)}
    assert differ == {}


def test_engine_settings_are_a_view_of_the_run_config():
    # every mapped key, set away from its default, reaches the settings build_engine uses
    from pfedma_flwr.data.benchmarks import Task
    from pfedma_flwr.server.components import build_engine

    cfg = load_config({"config-name": "tiny", "overrides": (
        "strategy.t_max=3 strategy.k_max=4 strategy.batch_size=7 strategy.min_replies=2 "
        "strategy.max_failed_share=0.25 anomaly.lambda_pool=0.4 anomaly.alpha_con=0.2 "
        "anomaly.tolerance=0.6 anomaly.intent_tolerance=0.7 anomaly.consensus=mean "
        "anomaly.ablation=-intent "
        "routing.use_capability=false routing.use_reliability=false routing.refine_query=false "
        "routing.refine_style=verify routing.prices.default=2.0 routing.lone_answers=skip "
        "rules.mode=LE rules.sim_threshold=0.8 seed=5 protocol.max_items=9 "
        "protocol.max_answer_tokens=999")})
    task = Task(task_id="t1", benchmark="gsm8k", domain="math", question="1+1?", gold="2",
                answer_kind="number")
    got = build_engine(cfg, [task]).settings
    for name, key in ENGINE_KEYS.items():
        want = _default_of(cfg, key)
        assert getattr(got, name) == (dict(want) if name == "prices" else want), name
        assert getattr(got, name) != getattr(EngineSettings(), name), f"{name} not set away"


def _default_of(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def test_a_client_agent_built_without_arguments_runs_the_run_s_defaults():
    """The drift issue 31 measured (few_shot 2, scope batch, 320 tokens, greedy) is gone."""
    import inspect

    from pfedma_flwr.client.agent import ClientAgent

    params = inspect.signature(ClientAgent.__init__).parameters
    cfg = PFedMAConfig()
    a = cfg.agent
    expected = {
        "few_shot": a.few_shot, "few_shot_scope": a.few_shot_scope,
        "experience_size": a.experience_size, "max_tokens": a.backend.max_tokens,
        "open_max_tokens": a.open_max_tokens, "temperature": a.backend.temperature,
        "response_format": a.response_format, "lessons": a.lessons,
        "lesson_min_sim": a.lesson_min_sim, "few_shot_style": a.few_shot_style,
        "permute_options": a.permute_options, "option_reasoning": a.option_reasoning,
        "rule_mode": cfg.rules.mode, "sim_threshold": cfg.rules.sim_threshold,
        "phi_default": cfg.rules.phi_default,
    }
    got = {k: params[k].default for k in expected}
    assert got == expected
    # the values the measurement found drifted, by hand from conf/pfedma.yaml
    assert (got["few_shot"], got["few_shot_scope"], got["max_tokens"], got["temperature"]) == \
        (0, "query", 384, 0.3)
