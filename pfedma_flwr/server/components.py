"""Build the server-side components of a run from its config (registries, no Flower)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.agents.backends import Backend
from pfedma_flwr.agents.backends.cache import default_cache_root, with_generation_cache
from pfedma_flwr.agents.backends.configured import make_configured_backend
from pfedma_flwr.aggregation.consensus import CollabState, aggregate
from pfedma_flwr.anomaly.judges import JUDGES, Judge
from pfedma_flwr.baselines.voting import vote_all, vote_latest
from pfedma_flwr.config import BackendConfig, ConfigError, PFedMAConfig, StrategyConfig
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.embeddings import Embedder, get_embedder
from pfedma_flwr.registry import Registry
from pfedma_flwr.routing.orchestrator import ORCHESTRATORS, BaseOrchestrator, Orchestrator
from pfedma_flwr.routing.state import RoutingTable
from pfedma_flwr.rules.pii import get_recognizer
from pfedma_flwr.rules.policy import initial_global_rules, new_id_prefix
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.server.engine import CollaborationEngine, EngineSettings


def server_backend(cfg: PFedMAConfig, section: BackendConfig) -> Backend:
    """The server's backend of a config section, behind its generation cache where on.

    The server's cache lives in ``<output.generation_cache_dir>/server`` (default
    ``$PFEDMA_CACHE/generations/server``).
    """
    root = Path(cfg.output.generation_cache_dir or default_cache_root()).expanduser()
    return with_generation_cache(make_configured_backend(section), enabled=section.cache,
                                 directory=root / "server")


#: How a query's retained answers become ``z`` (``strategy.aggregator``): functions called as
#: ``f(history, *, kind, domain, routing, round, use_capability, use_reliability, options)``.
AGGREGATORS: Registry[Callable[..., CollabState]] = Registry("aggregator")
AGGREGATORS.add("consensus", aggregate)
AGGREGATORS.add("vote_all", vote_all)
AGGREGATORS.add("vote_latest", vote_latest)
#: The keywords the engine passes to every aggregator call: an option may not shadow them.
AGGREGATOR_CALL_KEYS = frozenset({"kind", "domain", "routing", "round", "use_capability",
                                  "use_reliability", "options"})


def unaccepted_options(factory: object, options: Mapping[str, Any]) -> list[str]:
    """Option keys ``factory`` has no parameter for (none when it takes ``**kwargs``)."""
    try:
        params = inspect.signature(factory).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):  # no signature to read: the factory itself will tell
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return sorted(k for k in options if k not in params)


def option_problem(key: str, factory: object, options: Mapping[str, Any]) -> str:
    """Why ``<key>_options`` do not fit ``factory``'s keywords, or ``""`` (launcher and build)."""
    if bad := unaccepted_options(factory, options):
        return (f"{key}_options {bad}: {key} {getattr(factory, '__name__', factory)!s} takes "
                "no such keyword")
    return ""


def aggregator_problems(s: StrategyConfig) -> list[str]:
    """What is wrong with ``strategy.aggregator_options`` beside the factory's keywords."""
    if not s.aggregator:
        return (["strategy.aggregator_options is set but strategy.aggregator is empty (the "
                 "strategy's own aggregator takes no options)"] if s.aggregator_options else [])
    if clash := sorted(set(s.aggregator_options) & AGGREGATOR_CALL_KEYS):
        return [f"strategy.aggregator_options {clash} would be overwritten by the engine's own "
                f"call keywords {sorted(AGGREGATOR_CALL_KEYS)}"]
    return []


def construct(factory: Callable[..., Any], key: str, kwargs: Mapping[str, Any],
              options: Mapping[str, Any]) -> Any:
    """``factory(**kwargs, **options)``; options win, an unknown keyword names ``key``.

    Raises
    ------
    ConfigError
        When an option is not a keyword of ``factory`` (``<key>_options`` is named).
    """
    bad = [k for k in options if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise ConfigError(f"{key}_options: keys must be identifiers, got {bad}")
    if why := option_problem(key, factory, options):
        raise ConfigError(why)
    try:  # a factory whose signature cannot be read, or that passes **kwargs on
        return factory(**{**kwargs, **options})
    except TypeError as e:
        if options and "keyword argument" in str(e):
            raise ConfigError(f"{key}_options {sorted(options)} do not fit {key}: {e}") from e
        raise


def build_judge(cfg: PFedMAConfig, embedder: Embedder) -> Judge:
    """The frozen judge of the anomaly evaluator (``anomaly.judge`` + ``judge_options``)."""
    a = cfg.anomaly
    factory = JUDGES.get(a.judge)
    if a.judge == "llm":
        # the same frozen-judge subsystem as the benchmarks' judges (cached per judge, prompt)
        from pfedma_flwr.judging.factory import make_judge_model

        jb = a.judge_backend
        kwargs: dict[str, Any] = {
            "model": make_judge_model(jb, cache_dir=cfg.evaluation.cache_dir),
            "max_tokens": jb.max_tokens}
    else:
        kwargs = {"embedder": embedder}
    return construct(factory, "anomaly.judge", kwargs, a.judge_options)  # type: ignore[no-any-return]


def build_orchestrator(cfg: PFedMAConfig, embedder: Embedder) -> BaseOrchestrator | Orchestrator:
    """The routing policy (``routing.orchestrator`` + ``routing.orchestrator_options``).

    Every orchestrator gets ``k_max``, ``stop_support`` and ``embedder``; ``random`` also
    ``seed``, the others the routing switches (``exploration_c``, ``use_capability``,
    ``use_reliability``; ``adaptive_k``, ``mix_reasoning`` and ``cost_weight`` only when on;
    ``llm`` gets ``adaptive_k`` and ``mix_reasoning`` always, its backend, no ``cost_weight``).
    ``orchestrator_options`` are passed beside them and win over them.
    """
    r = cfg.routing
    factory = ORCHESTRATORS.get(r.orchestrator)
    kwargs: dict[str, Any] = {"k_max": cfg.strategy.k_max, "stop_support": r.stop_support,
                              "embedder": embedder}
    if r.orchestrator == "random":
        kwargs["seed"] = cfg.seed
    else:
        kwargs.update(exploration_c=r.exploration_c, use_capability=r.use_capability,
                      use_reliability=r.use_reliability)
        if r.orchestrator == "llm":
            lb = r.llm_backend
            kwargs.update(backend=server_backend(cfg, lb), max_tokens=lb.max_tokens,
                          temperature=lb.temperature, adaptive_k=r.adaptive_k,
                          mix_reasoning=r.mix_reasoning)
        else:
            # Only passed when on, so plug-in orchestrators without the options keep working.
            kwargs.update({k: True for k in ("adaptive_k", "mix_reasoning") if getattr(r, k)})
            if r.cost_weight:
                kwargs["cost_weight"] = r.cost_weight
    return construct(factory, "routing.orchestrator", kwargs,  # type: ignore[no-any-return]
                     r.orchestrator_options)


def build_aggregator(cfg: PFedMAConfig) -> Callable[..., CollabState] | None:
    """``strategy.aggregator`` with its options bound; ``None`` keeps the strategy's own."""
    s = cfg.strategy
    if problems := aggregator_problems(s):
        raise ConfigError(problems[0])
    if not s.aggregator:
        return None
    fn = AGGREGATORS.get(s.aggregator)
    if not callable(fn):
        raise ConfigError(f"strategy.aggregator {s.aggregator!r} is not callable")
    return functools.partial(fn, **s.aggregator_options) if s.aggregator_options else fn


def build_global_rules(cfg: PFedMAConfig, embedder: Embedder,
                       mode: str | None = None) -> GlobalRuleRepository:
    """``Ω_global`` with a run-unique id prefix and the initial policy (none under ``NR``).

    ``mode`` is the server's rule mode when a strategy sets its own (default ``rules.mode``).
    """
    ru = cfg.rules
    repo = GlobalRuleRepository(embedder=embedder, sim_threshold=ru.sim_threshold,
                                id_prefix=new_id_prefix(), twins=ru.query_twins,
                                min_support_clients=ru.min_support_clients,
                                min_support_share=ru.min_support_share)
    if (mode or ru.mode) != "NR":
        repo.seed(initial_global_rules(ru.global_policy))
    return repo


#: ``customize(cfg, parts) -> replacements``: a strategy's own engine components. ``parts``
#: holds ``embedder``, ``recognizer`` and ``settings``; the mapping returned may replace
#: ``settings`` and add ``orchestrator`` / ``aggregator`` / ``refiner`` (strategies/registry.py).
EngineCustomizer = Callable[[PFedMAConfig, dict[str, Any]], Mapping[str, Any]]
_CUSTOMIZABLE = frozenset({"settings", "orchestrator", "aggregator", "refiner"})


def build_engine(
    cfg: PFedMAConfig, tasks: Sequence[Task],
    on_query_end: Callable[[dict[str, Any]], None] | None = None,
    *, customize: EngineCustomizer | None = None,
) -> CollaborationEngine:
    """Everything the server needs for a run, from the config (and a strategy's ``customize``)."""
    embedder = get_embedder(cfg.embedding.name, cfg.embedding.model_path)
    r, ru = cfg.routing, cfg.rules
    settings = EngineSettings.from_config(cfg)
    parts: dict[str, Any] = {"embedder": embedder, "recognizer": get_recognizer(ru.pii),
                             "settings": settings}
    if customize is not None:
        extra = dict(customize(cfg, dict(parts)))
        if unknown := sorted(set(extra) - _CUSTOMIZABLE):
            raise ValueError(f"strategy {cfg.strategy.name!r} customizes unknown engine parts "
                             f"{unknown}; allowed: {sorted(_CUSTOMIZABLE)}")
        parts.update(extra)
    if "orchestrator" not in parts:  # built only when used (the llm one loads a model)
        parts["orchestrator"] = build_orchestrator(cfg, embedder)
    # the config's aggregator, when named, wins over the strategy's own (a user's explicit key)
    if (agg := build_aggregator(cfg)) is not None:
        parts["aggregator"] = agg
    return CollaborationEngine(
        tasks=tasks, judge=build_judge(cfg, embedder),
        rules=build_global_rules(cfg, embedder, parts["settings"].rule_mode),
        routing=RoutingTable(eta=r.eta), on_query_end=on_query_end, **parts,
    )
