"""The value checks of a merged configuration (``config.load_config`` raises on the first).

Each check names the dotted key, the allowed values and the value it got, so a wrong config key
or value fails before any node starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pfedma_flwr.agents.guard import GUARD_DECISIONS
from pfedma_flwr.agents.options import OPTION_WAYS
from pfedma_flwr.aggregation.refinement import REFINE_STYLES
from pfedma_flwr.data.split import QUESTION_SETS
from pfedma_flwr.routing.lone import LONE_ANSWERS
from pfedma_flwr.rules.modes import RULE_MODES

if TYPE_CHECKING:
    from pfedma_flwr.config_schema import (
        AdversaryConfig,
        AgentConfig,
        AnomalyConfig,
        DataConfig,
        EvaluationConfig,
        PFedMAConfig,
        RoutingConfig,
        RulesConfig,
        StrategyConfig,
    )

ABLATIONS = ("none", "-intent", "-evidence", "-consensus", "-all")
PARTITIONS = ("iid", "dirichlet", "profile")
ADVERSARY_KINDS = ("injection", "unreliable", "collusion")
ATTACK_POOLS = ("all", "aggressive", "non_aggressive")
__all__ = ["ABLATIONS", "ADVERSARY_KINDS", "ATTACK_POOLS", "LONE_ANSWERS", "OPTION_WAYS",
           "PARTITIONS", "QUESTION_SETS", "REFINE_STYLES", "config_problems"]


def config_problems(cfg: PFedMAConfig) -> list[str]:
    """Every violated check of ``cfg``, as messages naming the key (empty: valid)."""
    ag, r = cfg.agent, cfg.routing
    # load_config reports the first problem: the checks keep this order
    checks: list[tuple[bool, str]] = [
        *_strategy_checks(cfg.strategy), *_anomaly_checks(cfg.anomaly),
        *_routing_checks(r), *_rules_checks(cfg.rules), *_data_checks(cfg.data),
        *_agent_checks(ag), *_evaluation_checks(cfg.evaluation),
        (-1.0 <= ag.lesson_min_sim <= 1.0, "agent.lesson_min_sim must be in [-1, 1]"),
        (all(v >= 0 for v in r.prices.values()),
         f"routing.prices must be USD per million tokens >= 0, got {dict(r.prices)}"),
        (r.refine_style in REFINE_STYLES or ":" in r.refine_style,
         f"routing.refine_style must be one of {REFINE_STYLES} or a module:attr refiner, "
         f"got {r.refine_style!r}"),
        *_adversary_checks(cfg.adversary),
    ]
    return [msg for ok, msg in checks + _source_checks(cfg) if not ok]


def _strategy_checks(s: StrategyConfig) -> list[tuple[bool, str]]:
    return [
        (bool(s.name.strip()),
         f"strategy.name must name a strategy (or module:Class), got {s.name!r}"),
        (s.t_max >= 1, f"strategy.t_max must be >= 1, got {s.t_max}"),
        (s.k_max >= 1, f"strategy.k_max must be >= 1, got {s.k_max}"),
        (s.batch_size >= 1, f"strategy.batch_size must be >= 1, got {s.batch_size}"),
        (s.round_timeout > 0, f"strategy.round_timeout must be > 0, got {s.round_timeout}"),
        (s.min_nodes >= 1, f"strategy.min_nodes must be >= 1, got {s.min_nodes}"),
        (s.identity in ("auto", "node", "declared"),
         f"strategy.identity must be auto|node|declared, got {s.identity!r}"),
        (s.min_replies >= 1, f"strategy.min_replies must be >= 1, got {s.min_replies}"),
    ]


def _anomaly_checks(a: AnomalyConfig) -> list[tuple[bool, str]]:
    return [
        (0.0 <= a.lambda_pool <= 1.0, f"anomaly.lambda_pool must be in [0,1], got {a.lambda_pool}"),
        (0.0 <= a.alpha_con <= 1.0, f"anomaly.alpha_con must be in [0,1], got {a.alpha_con}"),
        (0.0 <= a.tolerance <= 1.0, f"anomaly.tolerance must be in [0,1], got {a.tolerance}"),
        (0.0 <= a.intent_tolerance <= 1.0,
         f"anomaly.intent_tolerance must be in [0,1], got {a.intent_tolerance}"),
        (a.consensus in ("coherent", "mean"),
         f"anomaly.consensus must be coherent|mean, got {a.consensus!r}"),
        (a.ablation in ABLATIONS,
         f"anomaly.ablation must be one of {ABLATIONS}, got {a.ablation!r}"),
    ]


def _routing_checks(r: RoutingConfig) -> list[tuple[bool, str]]:
    """The router's search (its prices and refiner are checked after ``evaluation``)."""
    return [
        (0.0 < r.eta <= 1.0, f"routing.eta must be in (0,1], got {r.eta}"),
        (0.0 <= r.stop_support <= 1.0,
         f"routing.stop_support must be in [0,1], got {r.stop_support}"),
        (r.exploration_c >= 0.0, f"routing.exploration_c must be >= 0, got {r.exploration_c}"),
    ]


def _rules_checks(ru: RulesConfig) -> list[tuple[bool, str]]:
    return [
        (ru.mode in RULE_MODES, f"rules.mode must be one of {RULE_MODES}, got {ru.mode!r}"),
        (0.0 < ru.sim_threshold <= 1.0,
         f"rules.sim_threshold must be in (0,1], got {ru.sim_threshold}"),
        (ru.pii in ("presidio", "regex"), f"rules.pii must be presidio|regex, got {ru.pii!r}"),
        (ru.min_support_clients >= 1,
         f"rules.min_support_clients must be >= 1, got {ru.min_support_clients}"),
        (0.0 <= ru.min_support_share <= 1.0,
         f"rules.min_support_share must be in [0,1], got {ru.min_support_share}"),
    ]


def _data_checks(d: DataConfig) -> list[tuple[bool, str]]:
    return [
        (len(d.benchmarks) >= 1, "data.benchmarks must name at least one benchmark"),
        (d.queries_per_benchmark >= 1, "data.queries_per_benchmark must be >= 1"),
        (d.dev_pool_per_benchmark >= 0, "data.dev_pool_per_benchmark must be >= 0"),
        (d.partition in PARTITIONS,
         f"data.partition must be one of {PARTITIONS}, got {d.partition!r}"),
        (d.alpha > 0, f"data.alpha must be > 0, got {d.alpha}"),
    ]


def _agent_checks(ag: AgentConfig) -> list[tuple[bool, str]]:
    """Demonstrations, answers, lessons (``lesson_min_sim`` is checked after ``evaluation``)."""
    return [
        (ag.few_shot >= 0, "agent.few_shot must be >= 0"),
        (ag.few_shot_scope in ("batch", "query"),
         f"agent.few_shot_scope must be batch|query, got {ag.few_shot_scope!r}"),
        (ag.backend.max_tokens >= 1, "agent.backend.max_tokens must be >= 1"),
        (ag.response_format in ("reasoning", "json"),
         f"agent.response_format must be reasoning|json, got {ag.response_format!r}"),
        (ag.reasoning in ("profile", "cot", "program"),
         f"agent.reasoning must be profile|cot|program, got {ag.reasoning!r}"),
        (ag.lessons >= 0, "agent.lessons must be >= 0"),
        (ag.open_max_tokens >= 1, "agent.open_max_tokens must be >= 1"),
    ]


def _evaluation_checks(ev: EvaluationConfig) -> list[tuple[bool, str]]:
    return [
        (ev.leak_judge.strip() != "", "evaluation.leak_judge must name a judge"),
        (ev.method in ("auto", "logprob", "generate"),
         f"evaluation.method must be auto|logprob|generate, got {ev.method!r}"),
        (ev.leak_prompt in ("privacylens", "direct"),
         f"evaluation.leak_prompt must be privacylens|direct, got {ev.leak_prompt!r}"),
        (ev.leak_threshold is None or 0.0 < ev.leak_threshold < 1.0,
         f"evaluation.leak_threshold must be in (0,1), got {ev.leak_threshold}"),
    ]


def _adversary_checks(adv: AdversaryConfig) -> list[tuple[bool, str]]:
    return [
        (0.0 <= adv.ratio <= 1.0, f"adversary.ratio must be in [0,1], got {adv.ratio}"),
        (adv.kind in ADVERSARY_KINDS,
         f"adversary.kind must be one of {ADVERSARY_KINDS}, got {adv.kind!r}"),
        (adv.attacks in ATTACK_POOLS,
         f"adversary.attacks must be one of {ATTACK_POOLS}, got {adv.attacks!r}"),
    ]


def _source_checks(cfg: PFedMAConfig) -> list[tuple[bool, str]]:
    """Knowledge and ways of working of the agents, question sets, lone answers (issue 33)."""
    a, d, r = cfg.agent, cfg.data, cfg.routing
    return [
        (a.few_shot_style in ("turns", "cases"),
         f"agent.few_shot_style must be turns|cases, got {a.few_shot_style!r}"),
        (a.option_reasoning in ("profile", *OPTION_WAYS),
         f"agent.option_reasoning must be profile|{'|'.join(OPTION_WAYS)}, got "
         f"{a.option_reasoning!r}"),
        (a.guard_shots >= 0, f"agent.guard_shots must be >= 0, got {a.guard_shots}"),
        (a.guard_decision in GUARD_DECISIONS,
         f"agent.guard_decision must be one of {GUARD_DECISIONS}, got {a.guard_decision!r}"),
        (d.split_seed >= -1, f"data.split_seed must be >= 0 (or -1: the run's), got "
                             f"{d.split_seed}"),
        (d.eval_offset >= 0, f"data.eval_offset must be >= 0, got {d.eval_offset}"),
        (d.question_set in QUESTION_SETS,
         f"data.question_set must be one of {QUESTION_SETS}, got {d.question_set!r}"),
        (r.lone_answers in LONE_ANSWERS,
         f"routing.lone_answers must be one of {LONE_ANSWERS}, got {r.lone_answers!r}"),
        (r.cost_weight >= 0.0, f"routing.cost_weight must be >= 0, got {r.cost_weight}"),
    ]
