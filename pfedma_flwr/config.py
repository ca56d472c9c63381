"""Typed configuration: ``conf/*.yaml`` (OmegaConf) is the source of truth.

``load_config`` merges, in order: the structured defaults below, ``conf/<config-name>.yaml``, the
dotted overrides string of Flower's run config (``overrides = "strategy.t_max=3"``), the app's
dotted kebab-case run-config keys (``strategy.t-max = 3``; :mod:`pfedma_flwr.run_config`), and
the flat keys ``output-dir`` / ``data-dir``. Unknown keys anywhere are an error that names them.
Each component receives only its own section.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, fields
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
from pfedma_flwr.protocol.validation import Limits
from pfedma_flwr.resources import conf_dir

# the checks' vocabulary stays importable from here (adversary, experiments and tests use it)
from pfedma_flwr.rules.constants import PHI_DEFAULT, SIM_THRESHOLD
from pfedma_flwr.rules.modes import RULE_MODES as RULE_MODES

# the repository's conf/, or the copy a wheel ships inside the package (resources.py)
CONF_DIR = conf_dir()



@dataclass
class BackendConfig:
    """How an agent (or the LLM judge) reaches its model."""

    # registered backend: embedded | openai | transformers | mock (or module:Class)
    name: str = "embedded"
    # embedded: qwen2.5-coder-0.5b | smollm2-135m; openai: model id; transformers: dir or .gguf path
    model: str = "qwen2.5-coder-0.5b"
    # OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp server, hosted API)
    base_url: str = ""
    # name of the environment variable that holds the API key (never the key itself)
    api_key_env: str = "OPENAI_API_KEY"
    max_tokens: int = 320
    temperature: float = 0.0
    # 0 = all cores of the process; llama.cpp threads
    n_threads: int = 0
    n_ctx: int = 4096
    # structured output: auto | json_schema | json_object_schema | none
    json_mode: str = "auto"
    timeout: float = 120.0
    max_retries: int = 3
    concurrency: int = 8
    # embedded: batched (one llama.cpp context, several sequences) | sequential
    mode: str = "batched"
    # largest batch per generation call (embedded, transformers)
    max_batch: int = 8
    # transformers: auto | cpu | cuda ; dtype auto | float32 | bfloat16 | float16
    device: str = "auto"
    dtype: str = "auto"
    # extra keyword arguments for a plug-in backend given as module:Class
    options: dict[str, Any] = field(default_factory=dict)
    # generation cache (answers reused for the same model, prompt, seed and budget): null =
    # on for embedded and transformers, off for openai; false = off (also node-config
    # generation-cache=false)
    cache: bool | None = None


@dataclass
class StrategyConfig:
    """Collaboration loop of the PFedMA strategy."""

    # the method: pfedma | single-agent | fedicl | epeagents | router-r1 | kabb | optagent | moa
    # (strategies/registry.py) or module:Class of a strategy from outside the repo
    name: str = "pfedma"
    # maximum collaboration rounds per query (T_max)
    t_max: int = 2
    # maximum clients selected per query round (K_max)
    k_max: int = 2
    # queries active at once; a Flower round carries one collaboration round of each
    batch_size: int = 20
    # seconds to wait for the replies of one Flower round
    round_timeout: float = 2400.0
    # nodes that must be connected before the run starts, and how long to wait for them
    min_nodes: int = 2
    node_wait_timeout: float = 120.0
    # a query round with fewer valid replies than this ends the query (keeps its z so far)
    min_replies: int = 1
    # status failed:generation (launcher exit 2) when more than this share of answers failed
    max_failed_share: float = 0.5
    # client identity: auto (the node's public key in deployment, partition in simulation) |
    # node (public key only) | declared (the handshake's key; trusted simulations only)
    identity: str = "auto"
    # how a query's retained answers become z: "" (the strategy's own: pfedma's weighted
    # consensus, each baseline's vote) | consensus | vote_all | vote_latest | module:attr
    # (server/components.py AGGREGATORS); aggregator_options: keywords bound to it
    aggregator: str = ""
    aggregator_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnomalyConfig:
    """Reliability evaluation of uploaded responses (DESIGN §3.7)."""

    # embedding | llm (or module:Class)
    judge: str = "embedding"
    # keywords passed to the judge's factory beside the built-in ones (plug-in options)
    judge_options: dict[str, Any] = field(default_factory=dict)
    lambda_pool: float = 0.3
    alpha_con: float = 0.3
    tolerance: float = 0.5
    # coherent (disagreeing with a split is no anomaly) | mean (the seed's 1 - mean sim)
    consensus: str = "coherent"
    # none | -intent | -evidence | -consensus | -all
    ablation: str = "none"
    # backend of the LLM judge (used only when judge = llm)
    judge_backend: BackendConfig = field(default_factory=lambda: BackendConfig(max_tokens=64))


@dataclass
class RoutingConfig:
    """Routing state, orchestrator and query refinement (DESIGN §3.8, §3.10, §3.12)."""

    # heuristic | random | llm (or module:Class)
    orchestrator: str = "heuristic"
    # keywords passed to the orchestrator's factory beside (and over) the built-in ones
    orchestrator_options: dict[str, Any] = field(default_factory=dict)
    eta: float = 0.2
    stop_support: float = 0.7
    exploration_c: float = 0.1
    # -IA ablation sets this false (no capability state C)
    use_capability: bool = True
    # -RT ablation sets this false (no reliability state S)
    use_reliability: bool = True
    # -RQ ablation sets this false (resend the task unchanged)
    refine_query: bool = True
    # after round 1 ask only as many clients as the stopping rule still needs (heuristic)
    adaptive_k: bool = True
    # round 1 asks program-aided agents first on tasks they compute, later rounds a way of
    # reasoning the query has not had yet (heuristic and llm fallback; docs/accuracy.md)
    mix_reasoning: bool = True
    # refinement wording: independent (re-solve from scratch, earlier answers only listed) |
    # verify (the candidate answer and its claims, asking to verify it) | module:attr (a Refiner)
    refine_style: str = "independent"
    # USD per million tokens by profile backbone ("default": the agent backend; "orchestrator":
    # the llm orchestrator's own tokens, else the default); the cost of each query in
    # queries.jsonl and the candidates' cost in the llm orchestrator's prompt
    prices: dict[str, float] = field(default_factory=dict)
    # backend of the llm orchestrator (used only when orchestrator = llm; docs/training.md)
    llm_backend: BackendConfig = field(default_factory=lambda: BackendConfig(max_tokens=256))
    # C of an answer nothing could be compared with in its round: skip (C kept) | defer
    # (compared with the others' answers when the query ends) | prior (defer; still alone:
    # g = (1 - A_i) * 0.5, the filter's verdict at the agreement prior; docs/accuracy.md)
    lone_answers: str = "prior"
    # heuristic orchestrator: score minus cost_weight * price / the dearest candidate's price
    cost_weight: float = 0.0


@dataclass
class RulesConfig:
    """Privacy-rule co-evolution (DESIGN §3.1–3.6, §4)."""

    # full | NR (no rules) | SR (static) | LE (local only) | G2L | L2G
    mode: str = "full"
    sim_threshold: float = SIM_THRESHOLD
    phi_default: float = PHI_DEFAULT
    # presidio | regex
    pii: str = "presidio"
    # server's initial global policy: built-in names of pfedma_flwr.rules.policy.GLOBAL_POLICIES
    # (docs/rules.md); empty = the server starts without rules (the privacy presets set one)
    global_policy: list[str] = field(default_factory=list)
    # a promoted response rule also adds its query-scope twin for P_in (docs/rules.md)
    query_twins: bool = False
    # the PRIVATE_FACT sentence detector in the clients' recognizer (needs embedding.name
    # minilm; rules/private_facts.py); clients holding sensitive items detect uncovered facts
    private_facts: bool = True
    # issue 30 (docs/threat_model.md): distinct clients (and share of the round's uploaders) a
    # candidate needs to be promoted, and raters (and share of the clients that held a rule)
    # before its H-score may switch the active rule; 1 and 0.0 = the seed's singleton rule
    min_support_clients: int = 2
    min_support_share: float = 0.5


@dataclass
class AgentConfig:
    """A client agent: backend, few-shot retrieval from D_i, experience buffer X_i."""

    # the main job's agent model and sampling (conf/pfedma.yaml); BackendConfig's own defaults
    # stay those of a generic backend section (the LLM judge, the llm orchestrator)
    backend: BackendConfig = field(default_factory=lambda: BackendConfig(
        model="qwen2.5-coder-1.5b", max_tokens=384, temperature=0.3, n_threads=2, max_batch=16))
    few_shot: int = 0
    # batch: one set of examples per answer format and message (shared, prefilled once) | query
    few_shot_scope: str = "query"
    experience_size: int = 32
    # profile names per client (client i gets profiles[i % len]); empty = built-in rotation
    profiles: list[str] = field(default_factory=list)
    # backbone name -> backend section (e.g. GPT-4o: {name: openai, base_url: ..., model: ...})
    backbones: dict[str, BackendConfig] = field(default_factory=dict)
    # profile name -> backbone name; a profile's backbone missing from `backbones` uses `backend`
    profile_backbones: dict[str, str] = field(default_factory=dict)
    # reasoning: free-text chain of thought, structured response derived from it | json
    response_format: str = "reasoning"
    # how numeric tasks are solved: profile (each profile's own) | cot | program
    reasoning: str = "profile"
    # lessons of X_i recalled into a prompt, and the cosine a query needs to recall one
    lessons: int = 1
    lesson_min_sim: float = 0.6
    # retrieved D_i examples as: turns (worked demonstrations as chat turns; tasks without a
    # rationale get none) | cases (solved cases with their answers in the system prompt)
    few_shot_style: str = "turns"
    # multiple choice: profile (each profile's own) | cot | eliminate | verify
    option_reasoning: str = "cot"
    # each agent shows the options in its own seeded order (its answer is mapped back)
    permute_options: bool = False
    # token budget of a whole answer (a tool action of PrivacyLens, an AlpacaEval response):
    # a message holding such queries generates with max(backend.max_tokens, this)
    open_max_tokens: int = 512


@dataclass
class DataConfig:
    """Benchmarks, the evaluation stream and client partitions."""

    benchmarks: list[str] = field(default_factory=lambda: ["gsm8k", "medqa"])
    # evaluation queries per benchmark
    queries_per_benchmark: int = 10
    # size of the held-apart dev pool per benchmark (client private data is cut from it)
    dev_pool_per_benchmark: int = 200
    # iid | dirichlet | profile (each domain dealt to the clients whose profile covers it)
    partition: str = "iid"
    alpha: float = 0.5
    # absolute path of the data dir; empty = PFEDMA_DATA_DIR or the repo's data/
    data_dir: str = ""
    # seed of the question split and the partitions; -1 = the run's seed
    split_seed: int = -1
    # questions of each benchmark's stream skipped first (development questions)
    eval_offset: int = 0
    # default (the evaluation stream) | unseen (questions no default run draws; split.py)
    question_set: str = "default"

    def seed_for_split(self, run_seed: int) -> int:
        """The seed of the questions and partitions: ``split_seed``, else the run's."""
        return self.split_seed if self.split_seed >= 0 else run_seed


@dataclass
class EmbeddingConfig:
    """Embedding model e(·) used by server and clients."""

    # minilm | hashing
    name: str = "minilm"
    model_path: str = ""


@dataclass
class ProtocolConfig:
    """Caps on untrusted payloads: the fields of :class:`~pfedma_flwr.protocol.validation.Limits`.

    Limits is frozen (a value the decoders share) and OmegaConf needs a mutable node, so the
    fields are listed again here; ``tests/unit/test_protocol_config.py`` fails when the two
    lists or their defaults differ, and :meth:`limits` copies every field by name.
    """

    max_text_chars: int = 8000
    max_claims: int = 16
    max_evidence: int = 8
    max_items: int = 256
    max_rules: int = 512
    # whole reply cap in characters, checked before parsing
    max_payload_chars: int = 16_000_000
    # ids (query, rule, client keys, domains) are echoed in round logs and prompts
    max_id_chars: int = 128
    # JSON nesting of a message (a valid one nests 7 deep)
    max_depth: int = 16
    # self-reported tokens per answer (cost columns are client-reported; issue 30)
    max_answer_tokens: int = 65_536

    def limits(self) -> Limits:
        """The validation caps of the wire (:mod:`pfedma_flwr.protocol`)."""
        return Limits(**{f.name: getattr(self, f.name) for f in fields(Limits)})


@dataclass
class AdversaryConfig:
    """Adversarial clients of the robustness evaluation (App. J, ``pfedma_flwr.agents.hooks``)."""

    # rho_adv: per query, round(rho * N) of the N clients are malicious (0 = no adversary)
    ratio: float = 0.0
    # injection (context-ignoring prompt injection, ASB) | unreliable (confident wrong answer) |
    # collusion (the malicious clients' shared wrong answer, each claim its own evidence)
    kind: str = "injection"
    # ASB attacker instructions used for injection: all | aggressive | non_aggressive
    attacks: str = "all"
    # seed of the malicious-set and attack choice (with the query id)
    seed: int = 0
    # judge of RR on the attacked agents' own replies (pfedma_flwr.experiments.attacks
    # REFUSAL_JUDGES): keyword (built in: no attacker-tool call and no call or "I cannot ...")
    refusal_judge: str = "keyword"


@dataclass
class EvaluationConfig:
    """Judges of the benchmarks scored by a judge (docs/judges.md): a frozen model, cached."""

    # PrivacyLens leak judge: llm (the judge model below, PrivacyLens's prompt) | string (token
    # overlap, no model: a lower bound that misses paraphrases)
    leak_judge: str = "llm"
    # how the judge model's answer is read: auto (logprob where the backend has logits, else
    # generate) | logprob (labels' next-token log-probabilities) | generate (reason, then parse)
    method: str = "auto"
    # P(Yes) above which an (action, secret) pair counts as leaked
    leak_threshold: float = 0.5
    # the leak judge's prompt: privacylens (its authors', two "Yes" few-shots) | direct (ours,
    # a short question); and contextual calibration against a content-free action (logprob)
    leak_prompt: str = "privacylens"
    leak_calibrate: bool = False
    # the frozen judge model: the embedded 1.5B model here; any OpenAI-compatible endpoint
    judge_backend: BackendConfig = field(default_factory=lambda: BackendConfig(
        model="qwen2.5-coder-1.5b", max_tokens=256, n_ctx=8192, n_threads=2, max_batch=1))
    # judgements cached per (judge, prompt); empty = $PFEDMA_CACHE/judgements or
    # ~/.cache/pfedma/judgements
    cache_dir: str = ""


@dataclass
class OutputConfig:
    """Where results go (absolute; the ServerApp's cwd is the SuperLink's)."""

    dir: str = ""
    progress: bool = True
    # continue from checkpoint.json in the output dir (last completed round)
    resume: bool = False
    # generation caches of simulated clients (<dir>/p<partition>) and the server's LLM judge
    # and orchestrator (<dir>/server); empty: $PFEDMA_CACHE/generations or
    # ~/.cache/pfedma/generations. A deployed node keeps its own in <state-dir>/generations.
    generation_cache_dir: str = ""


@dataclass
class PFedMAConfig:
    """The whole run configuration."""

    seed: int = 0
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    anomaly: AnomalyConfig = field(default_factory=AnomalyConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    rules: RulesConfig = field(default_factory=RulesConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    data: DataConfig = field(default_factory=DataConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    adversary: AdversaryConfig = field(default_factory=AdversaryConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)


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
    import dataclasses
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


def _merge(*parts: Any) -> PFedMAConfig:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(PFedMAConfig), *parts)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
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
