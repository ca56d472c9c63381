"""What the launcher checks before it starts or removes anything (``pfedma run``, experiments).

A wrong name, too few clients or a model the agents cannot reach used to surface 30-60 s into a
run, as "only 0 nodes answered the handshake" with the reason buried in per-client tracebacks.
Here every such problem is found in the launcher's own process before anything starts (about
2 s of CPU, mostly imports; a remote endpoint gets a 5 s health check), and reported as one line:

- :func:`name_problems`: every plug-in name the run uses (strategy, orchestrator, judge,
  refiner, backends, benchmarks, profiles, global policies, embedder) resolves in its registry,
  and ``module:attr`` plug-ins the simulated clients would refuse are named now;
- :func:`client_problems`: ``--num-clients`` covers ``strategy.min_nodes``;
- :func:`backend_problems`: each model backend the run uses can answer (the embedded model is
  installed, a transformers model dir exists or is cached, an OpenAI-compatible endpoint
  answers and serves the model). These are the run's ``failed:generation`` causes (exit 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pfedma_flwr.config import BackendConfig, PFedMAConfig
from pfedma_flwr.experiments import processes
from pfedma_flwr.logs import LOG_LEVELS

#: exit status of a run refused before anything started (config, names, port, output dir)
EXIT_REFUSED = 3
#: exit status when the agents' model cannot answer (status ``failed:generation``)
EXIT_GENERATION = 2
#: files that make a dir hold a run (a run that failed before writing any is not one)
RESULT_FILES = ("summary.json", "rounds.jsonl", "queries.jsonl", "checkpoint.json")
# keys the launcher owns: set by its flags, refused in --set so a value is never replaced
_OWNED = {"output.dir": "--output-dir", "output.resume": "--resume"}


@dataclass(frozen=True)
class Problem:
    """One reason not to start: ``kind`` is ``config`` (exit 3) or ``generation`` (exit 2)."""

    kind: str
    message: str

    @property
    def exit_code(self) -> int:
        return EXIT_GENERATION if self.kind == "generation" else EXIT_REFUSED


def backend_sections(cfg: PFedMAConfig) -> dict[str, BackendConfig]:
    """The backend sections the run uses, by dotted key."""
    out = {"agent.backend": cfg.agent.backend}
    out.update({f"agent.backbones.{k}": v for k, v in cfg.agent.backbones.items()})
    if cfg.anomaly.judge == "llm":
        out["anomaly.judge_backend"] = cfg.anomaly.judge_backend
    if cfg.routing.orchestrator == "llm":
        out["routing.llm_backend"] = cfg.routing.llm_backend
    return out


def _lookup(registry: object, key: str, name: str, client_side: bool,
            plugins_ok: bool) -> str | None:
    if ":" in name and client_side and not plugins_ok:
        return (f"{key}={name!r} is plug-in code (module:attr) that the simulated clients "
                "refuse to import; set PFEDMA_ALLOW_PLUGINS=1 to allow it")
    try:
        registry.get(name)  # type: ignore[attr-defined]
    except ValueError as e:  # unknown name (the message lists the known ones), bad import
        return f"{key}: {e}"
    return None


def name_problems(cfg: PFedMAConfig, *, plugins_ok: bool = False) -> list[Problem]:
    """Every plug-in name of ``cfg`` that does not resolve (``plugins_ok``: clients import)."""
    from pfedma_flwr.agents.backends import BACKENDS
    from pfedma_flwr.aggregation.refinement import REFINERS
    from pfedma_flwr.anomaly.judges import JUDGES
    from pfedma_flwr.data.benchmarks import BENCHMARKS
    from pfedma_flwr.data.profiles import PROFILES
    from pfedma_flwr.routing import ORCHESTRATORS
    from pfedma_flwr.rules.policy import policy_names
    from pfedma_flwr.server.components import AGGREGATORS
    from strategies.registry import STRATEGIES

    checks = [(STRATEGIES, "strategy.name", cfg.strategy.name, False),
              (ORCHESTRATORS, "routing.orchestrator", cfg.routing.orchestrator, False),
              (JUDGES, "anomaly.judge", cfg.anomaly.judge, False),
              (REFINERS, "routing.refine_style", cfg.routing.refine_style, False)]
    if cfg.strategy.aggregator:
        checks.append((AGGREGATORS, "strategy.aggregator", cfg.strategy.aggregator, False))
    checks += [(BACKENDS, f"{k}.name", b.name, k.startswith("agent."))
               for k, b in backend_sections(cfg).items()]
    checks += [(BENCHMARKS, "data.benchmarks", b, True) for b in cfg.data.benchmarks]
    checks += [(PROFILES, "agent.profiles", p, True) for p in cfg.agent.profiles]
    out = [Problem("config", msg) for reg, key, name, client in checks
           if (msg := _lookup(reg, key, name, client, plugins_ok))]
    if not out:
        out += option_problems(cfg)
    unknown = [p for p in cfg.rules.global_policy if p not in policy_names()]
    if unknown:
        out.append(Problem("config", f"rules.global_policy: unknown {unknown}; known: "
                                     f"{policy_names()}"))
    if cfg.embedding.name not in ("minilm", "hashing"):
        out.append(Problem("config", f"embedding.name must be minilm|hashing, got "
                                     f"{cfg.embedding.name!r}"))
    return out


def option_problems(cfg: PFedMAConfig) -> list[Problem]:
    """Plug-in options that no keyword of their factory takes (``*_options`` keys)."""
    from pfedma_flwr.anomaly.judges import JUDGES
    from pfedma_flwr.routing import ORCHESTRATORS
    from pfedma_flwr.server.components import AGGREGATORS, aggregator_problems, option_problem

    s, r, a = cfg.strategy, cfg.routing, cfg.anomaly
    found = aggregator_problems(s)
    found += [option_problem("routing.orchestrator", ORCHESTRATORS.get(r.orchestrator),
                             r.orchestrator_options),
              option_problem("anomaly.judge", JUDGES.get(a.judge), a.judge_options)]
    if s.aggregator:
        found.append(option_problem("strategy.aggregator", AGGREGATORS.get(s.aggregator),
                                    s.aggregator_options))
    return [Problem("config", why) for why in found if why]


def client_problems(cfg: PFedMAConfig, num_clients: int) -> list[Problem]:
    """``--num-clients`` against what the run needs (``strategy.min_nodes``)."""
    if num_clients < 1:
        return [Problem("config", f"--num-clients must be >= 1, got {num_clients}")]
    if num_clients < cfg.strategy.min_nodes:
        return [Problem("config", f"--num-clients {num_clients} is below strategy.min_nodes="
                                  f"{cfg.strategy.min_nodes}: the run would wait "
                                  f"{cfg.strategy.node_wait_timeout:g} s for nodes that never "
                                  f"come; pass --num-clients {cfg.strategy.min_nodes} or more, "
                                  f"or --set strategy.min_nodes={num_clients}")]
    return []


def question_problems(cfg: PFedMAConfig, data_dir: str | None = None) -> list[Problem]:
    """Whether the run's questions exist: benchmarks, offset, count and question set.

    Draws the evaluation stream exactly as the ServerApp will, so e.g. the unseen question
    set (100 a benchmark) with ``data.eval_offset: 100`` is refused here, naming the keys,
    instead of after the SuperLink started.
    """
    from pfedma_flwr.data.split import sample_eval_tasks

    d = cfg.data
    try:
        sample_eval_tasks(d.benchmarks, d.queries_per_benchmark, d.seed_for_split(cfg.seed),
                          data_dir or d.data_dir or None,
                          dev_pool_per_benchmark=d.dev_pool_per_benchmark, offset=d.eval_offset,
                          question_set=d.question_set)
    except (ValueError, KeyError, FileNotFoundError) as e:
        return [Problem("config", f"data.*: {e} (data.question_set={d.question_set}, "
                                  f"data.eval_offset={d.eval_offset}, "
                                  f"data.queries_per_benchmark={d.queries_per_benchmark})")]
    return []


def backend_problem(section: BackendConfig, *, timeout: float = 5.0) -> str | None:
    """Why the backend of ``section`` cannot answer now, or ``None`` (no model is loaded)."""
    try:
        if section.name == "embedded":
            from pfedma_flwr.agents.backends.embedded import embedded_model_path

            embedded_model_path(section.model)
        elif section.name == "transformers":
            from pfedma_flwr.agents.backends.transformers_backend import resolve_model_dir

            resolve_model_dir(section.model)
        elif section.name == "openai":
            from pfedma_flwr.agents.backends.configured import backend_kwargs
            from pfedma_flwr.agents.backends.openai_backend import OpenAIBackend

            backend = OpenAIBackend(**backend_kwargs(section))
            try:
                backend.health_check(timeout=timeout)
            finally:
                backend.close()
    except (OSError, ValueError, RuntimeError, ImportError) as e:  # each names the model
        return " ".join(str(e).split())
    return None


def backend_problems(cfg: PFedMAConfig) -> list[Problem]:
    """One ``generation`` problem per backend section that cannot answer."""
    seen: dict[str, str | None] = {}
    out = []
    for key, section in backend_sections(cfg).items():
        ident = repr((section.name, section.model, section.base_url))
        if ident not in seen:
            seen[ident] = backend_problem(section)
        if seen[ident]:
            out.append(Problem("generation", f"{key}: {seen[ident]}"))
    return out


class Refused(Exception):
    """The run cannot start; ``code`` is its exit status (3, or 2 for an unusable model)."""

    def __init__(self, message: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


def existing_results(out: Path) -> list[str]:
    """The result files (:data:`RESULT_FILES`) already in ``out``."""
    return [n for n in RESULT_FILES if (out / n).exists()] if out.is_dir() else []


def _load(config: str, overrides: str) -> Any:
    from pfedma_flwr.config import load_config

    return load_config({"config-name": config, "overrides": overrides})


def cpus_per_client_for(config: str, overrides: str = "", cpu_count: int | None = None) -> float:
    """Ray CPUs reserved per ClientApp: the embedded model's llama.cpp threads, else 1.

    Keeps threads x concurrent clients at the core count (oversubscribed ggml thread pools slow
    down sharply), capped at the machine's cores so that a client can always be scheduled.
    """
    backend = _load(config, overrides).agent.backend
    if backend.name != "embedded":
        return 1.0
    cores = cpu_count or os.cpu_count() or 1
    return float(max(1, min(backend.n_threads or cores, cores)))


def expected_queries(config: str, overrides: str = "") -> int:
    """Queries the run is set to answer (benchmarks x queries per benchmark), for progress."""
    cfg = _load(config, overrides)
    return int(cfg.data.queries_per_benchmark) * len(cfg.data.benchmarks)


@dataclass
class Plan:
    """What :func:`prepare` checked and resolved: everything a run needs before it starts."""

    cfg: Any
    overrides: str
    data_dir: str
    total: int
    cpus: float
    tracker: Any
    port: int
    port_note: str


def _data_dir(given: str, cfg: Any) -> str:
    """The absolute data dir from ``--data-dir`` or ``data.data_dir``; refused if both differ."""
    from pfedma_flwr.data.benchmarks import resolve_data_dir

    from_set = str(cfg.data.data_dir or "")
    a = str(Path(given).expanduser().resolve()) if given else ""
    b = str(Path(from_set).expanduser().resolve()) if from_set else ""
    if a and b and a != b:
        raise Refused(f"--data-dir {a} and --set data.data_dir={b} disagree; give one")
    try:
        return str(resolve_data_dir(a or b or None).resolve())
    except FileNotFoundError as e:
        raise Refused(str(e)) from e


def prepare(*, config: str, num_clients: int, output_dir: Path, overrides: str, data_dir: str,
            port: int | None, cpus_per_client: float | None, resume: bool, log_level: str | None,
            tracking: str, tracking_dir: str, overwrite: bool, backend_check: bool) -> Plan:
    """Every check that can refuse the run, in the launcher's process; raises :class:`Refused`."""
    from pfedma_flwr.config import ConfigError, parse_overrides
    from pfedma_flwr.experiments import tracking as trk

    if log_level is not None and log_level.upper() not in LOG_LEVELS:
        raise Refused(f"--log-level {log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    try:
        owned = [k for k in _OWNED if _set_in(parse_overrides(overrides), k)]
        if owned:
            raise Refused(f"--set {owned[0]} is set by {_OWNED[owned[0]]}; use that flag")
        cfg = _load(config, overrides)
        cpus = cpus_per_client if cpus_per_client is not None else cpus_per_client_for(
            config, overrides)
    except ConfigError as e:
        raise Refused(str(e)) from e
    data = _data_dir(data_dir, cfg)
    plugins_ok = os.environ.get("PFEDMA_ALLOW_PLUGINS", "0").strip().lower() in ("1", "true")
    problems = name_problems(cfg, plugins_ok=plugins_ok)
    problems += client_problems(cfg, num_clients)
    problems += question_problems(cfg, data)
    if not problems and backend_check:
        problems += backend_problems(cfg)
    if problems:
        raise Refused("; ".join(p.message for p in problems),
                      min(p.exit_code for p in problems))
    try:
        tracker = trk.make_tracker(tracking, Path(tracking_dir or output_dir / "tracking"))
    except trk.TrackingError as e:
        raise Refused(str(e)) from e
    found = existing_results(output_dir)
    if found and not (overwrite or resume):
        raise Refused(f"{output_dir} already holds a run ({', '.join(found)}); pass --overwrite "
                      "to replace it, --resume to continue it, or choose another --output-dir")
    try:
        processes.flower_scripts()  # Flower's commands will run on this interpreter
        chosen, note = processes.choose_port(port, processes.DEFAULT_PORT)
    except RuntimeError as e:
        raise Refused(str(e)) from e
    total = int(cfg.data.queries_per_benchmark) * len(cfg.data.benchmarks)
    return Plan(cfg, overrides, data, total, cpus, tracker, chosen, note)


def _set_in(conf: Any, key: str) -> bool:
    """Whether the dotted ``key`` is set in an OmegaConf tree."""
    from omegaconf import OmegaConf

    return OmegaConf.select(conf, key, default=None) is not None
