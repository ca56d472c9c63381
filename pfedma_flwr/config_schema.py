"""The typed configuration: every key, its default and its comment, written once.

``conf/pfedma.yaml`` is generated from these dataclasses (:mod:`pfedma_flwr.config_yaml`):
the comment lines directly above a field become the comment above its YAML key, a class
docstring's first line heads its section. Change a default or a comment here, then run
``python3 -m pfedma_flwr.config_yaml --write``; ``tests/unit/test_config_yaml.py`` fails until
the YAML follows. :class:`~pfedma_flwr.server.query_state.EngineSettings` and ``ClientAgent``
read their defaults from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pfedma_flwr.protocol.validation import Limits
from pfedma_flwr.rules.constants import PHI_DEFAULT, SIM_THRESHOLD


@dataclass
class BackendConfig:
    """How an agent (or the LLM judge) reaches its model."""

    # registered backend: embedded | openai | transformers | mock (or module:Class)
    name: str = "embedded"
    # embedded: a model shipped on PyPI (qwen2.5-coder-1.5b | qwen2.5-coder-0.5b | smollm2-135m,
    # README's model table); openai: the model id; transformers: a dir or .gguf path
    model: str = "qwen2.5-coder-0.5b"
    # OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp server, hosted API)
    base_url: str = ""
    # name of the environment variable that holds the API key (never the key itself)
    api_key_env: str = "OPENAI_API_KEY"
    # generation budget per answer (the chain of thought and its answer line)
    max_tokens: int = 320
    # sampling temperature (0 = greedy)
    temperature: float = 0.0
    # llama.cpp threads (0 = all cores of the process)
    n_threads: int = 0
    # context window in tokens (embedded, transformers)
    n_ctx: int = 4096
    # structured output: auto | json_schema | json_object_schema | none
    json_mode: str = "auto"
    # seconds per request, retries of a failed request and requests in flight (openai)
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
    # queries active at once; each Flower round carries one collaboration round of each
    # (all 20 default queries at once: T_max Flower rounds, bigger batched generations)
    batch_size: int = 20
    # seconds to wait for the replies of one Flower round (one actor serves every simulated
    # client in turn on 2 cores: a round of 40 chain-of-thought answers of the 1.5B model takes
    # 10+ minutes)
    round_timeout: float = 2400.0
    # connected nodes required before the run starts, and seconds to wait for them
    min_nodes: int = 2
    node_wait_timeout: float = 120.0
    # a query round with fewer valid replies ends the query (its z so far is kept)
    min_replies: int = 1
    # status failed:generation (launcher exit 2) when more than this share of answers failed
    max_failed_share: float = 0.5
    # client identity: auto (the node's public key in deployment, partition in simulation) |
    # node (public key only) | declared (the handshake's key; trusted simulations only)
    identity: str = "auto"
    # how a query's retained answers become z: "" (the strategy's own: pfedma's weighted
    # consensus, each baseline's vote) | consensus | vote_all | vote_latest | module:attr
    # (server/components.py AGGREGATORS); aggregator_options: keywords bound to it
    # (docs/extending.md)
    aggregator: str = ""
    aggregator_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnomalyConfig:
    """Reliability evaluation of uploaded responses (DESIGN §3.7)."""

    # judge of intent/evidence anomaly: embedding | llm | module:Class
    judge: str = "embedding"
    # keywords passed to the judge's factory beside the built-in ones (plug-in options)
    judge_options: dict[str, Any] = field(default_factory=dict)
    # weight of the max term inside the judge part (seed: 0.3)
    lambda_pool: float = 0.3
    # weight of consensus anomaly (seed: 0.3)
    alpha_con: float = 0.3
    # responses with anomaly score above this are filtered
    tolerance: float = 0.5
    # responses whose intent risk a_int alone is above this are filtered too, whatever their
    # evidence and agreement (1.0: off, the seed's formula only; docs/threat_model.md)
    intent_tolerance: float = 0.5
    # consensus anomaly: coherent (an answer is an outlier only against agreeing others; a
    # two-way split scores 0) | mean (the seed's 1 - mean similarity)
    consensus: str = "coherent"
    # none | -intent | -evidence | -consensus | -all
    ablation: str = "none"
    # backend of the LLM judge (used only when judge = llm)
    judge_backend: BackendConfig = field(default_factory=lambda: BackendConfig(max_tokens=64))


@dataclass
class RoutingConfig:
    """Routing state, orchestrator and query refinement (DESIGN §3.8, §3.10, §3.12)."""

    # heuristic | random | llm | module:Class
    orchestrator: str = "heuristic"
    # keywords passed to the orchestrator's factory beside (and over) the built-in ones
    orchestrator_options: dict[str, Any] = field(default_factory=dict)
    # EMA rate of capability C and reliability S
    eta: float = 0.2
    # STOP once z's support reaches this with >= 2 agreeing retained responses
    stop_support: float = 0.7
    # exploration bonus weight
    exploration_c: float = 0.1
    # -IA ablation sets this false (no capability state C)
    use_capability: bool = True
    # -RT ablation sets this false (no reliability state S)
    use_reliability: bool = True
    # -RQ ablation sets this false (resend the task unchanged)
    refine_query: bool = True
    # rounds > 1 ask only the clients still needed for 2 agreeing answers (1 after a split vote)
    adaptive_k: bool = True
    # round 1 asks agents that compute the answer with a program first (numeric tasks; cheaper
    # and more accurate here), later rounds first a way of reasoning the query has not had yet
    # (heuristic and llm fallback; docs/accuracy.md)
    mix_reasoning: bool = True
    # refinement wording: independent (re-solve from scratch, earlier answers only listed) |
    # verify (the candidate answer and its claims, asking to verify it) | module:attr (a Refiner)
    refine_style: str = "independent"
    # USD per million tokens by profile backbone ("default": the agent backend; "orchestrator":
    # the llm orchestrator's own tokens, else the default), e.g. {default: 0.0, gpt-4o: 10.0}:
    # each query's cost in queries.jsonl, the candidates' cost in the llm orchestrator's
    # prompt; empty: costs are 0 and the prompt says cost=?
    prices: dict[str, float] = field(default_factory=dict)
    # backend of the llm orchestrator (only read when orchestrator = llm): any agent backend
    # section; a trained checkpoint is transformers + its dir, or openai + a vLLM base_url
    # (docs/training.md)
    llm_backend: BackendConfig = field(default_factory=lambda: BackendConfig(max_tokens=256))
    # C of an answer nothing could be compared with in its round: skip (C kept) | defer
    # (compared with the others' answers when the query ends) | prior (defer; still alone:
    # g = (1 - A_i) * 0.5, the filter's verdict at the agreement prior; docs/accuracy.md)
    lone_answers: str = "prior"
    # heuristic orchestrator: each score minus cost_weight * price / the dearest candidate's
    # price (needs routing.prices; 0 = cost-blind)
    cost_weight: float = 0.0


@dataclass
class RulesConfig:
    """Privacy-rule co-evolution (DESIGN §3.1–3.6, §4)."""

    # full | NR (no rules) | SR (static) | LE (local only) | G2L | L2G
    mode: str = "full"
    # cosine threshold of "same semantic constraint" (seed: 0.9)
    sim_threshold: float = SIM_THRESHOLD
    # a global rule without local counterpart is adopted iff its utility exceeds this
    phi_default: float = PHI_DEFAULT
    # PII recognizer: presidio | regex
    pii: str = "presidio"
    # the server's initial global policy: built-in names of pfedma_flwr.rules.policy
    # GLOBAL_POLICIES (docs/rules.md); empty: the server starts without rules (P_in then changes
    # no query: honest clients upload response-scope rules only; the privacy presets set one)
    global_policy: list[str] = field(default_factory=list)
    # a promoted response rule also adds its query-scope twin for P_in (the privacy presets)
    query_twins: bool = False
    # PRIVATE_FACT: a sentence detector of private facts about people, one more entity type of
    # the clients' recognizer (needs embedding.name minilm; rules/private_facts.py); clients
    # holding sensitive items detect uncovered facts
    private_facts: bool = True
    # distinct clients a candidate needs to be promoted, and raters before an H-score may switch
    # the active rule (issue 30, docs/threat_model.md); 1 = the seed's rule (a singleton pool
    # promotes)
    min_support_clients: int = 2
    # ... and at least this share of the round's uploaders (promotion) or of the clients that
    # held the rule (Resolve); 0.0 with min_support_clients 1 = the seed
    min_support_share: float = 0.5


@dataclass
class AgentConfig:
    """A client agent: backend, few-shot retrieval from D_i, experience buffer X_i."""

    # the main job's agent model and sampling. Each agent samples with its own seed at the
    # temperature, so votes are independent attempts (0 = greedy: every agent of one model fails
    # together). n_threads: llama.cpp threads per client; the launcher reserves as many Ray CPUs
    # per ClientApp, so a 2-core machine runs one client at a time on both cores. max_batch:
    # prompts per batched llama.cpp generation (a client may get 10+ queries per round)
    backend: BackendConfig = field(default_factory=lambda: BackendConfig(
        model="qwen2.5-coder-1.5b", max_tokens=384, temperature=0.3, n_threads=2, max_batch=16))
    # few-shot worked solutions retrieved per query from the client's private partition (tasks
    # without a rationale, e.g. MedQA, get none). 0 by default: GSM8K's terse rationales made the
    # 1.5B model's reasoning terse (3/10 vs 7/10 for plain chain of thought, docs/accuracy.md)
    few_shot: int = 0
    # query: the examples nearest to each query | batch: nearest to all of a message's queries
    # (one shared prompt prefix; a shared demonstration's template was copied into unrelated
    # problems)
    few_shot_scope: str = "query"
    # experience buffer size
    experience_size: int = 32
    # profile names per client (client i gets profiles[i % len]); empty = built-in rotation
    profiles: list[str] = field(default_factory=list)
    # backbone name -> backend section (e.g. GPT-4o: {name: openai, base_url: ..., model: ...})
    backbones: dict[str, BackendConfig] = field(default_factory=dict)
    # profile name -> backbone name; a profile's backbone missing from `backbones` uses `backend`
    profile_backbones: dict[str, str] = field(default_factory=dict)
    # reasoning: free-text chain of thought, the structured response derived from it | json
    response_format: str = "reasoning"
    # how numeric tasks are solved: profile (each profile's own: the statistician, financial
    # analyst, computer scientist and engineer write a Python program the client runs, the
    # others reason in text) | cot | program. A deployed node runs programs only with
    # allow-programs=true (node config).
    reasoning: str = "profile"
    # verified lessons of X_i recalled into a prompt, and the cosine a query needs to recall one
    lessons: int = 1
    lesson_min_sim: float = 0.6
    # how retrieved examples of D_i enter the prompt: turns (worked demonstrations as earlier chat
    # turns; tasks without a rationale get none) | cases (solved cases of the client's own
    # partition, with their answers, as reference in the system prompt; MedQA too)
    few_shot_style: str = "turns"
    # multiple-choice tasks: profile (each profile's own way) | cot | eliminate (rule the options
    # out one by one) | verify (answer, then check the answer against the question once more)
    option_reasoning: str = "cot"
    # each agent shows the options in its own seeded order and maps its letter back, so agents of
    # one model do not share a position bias
    permute_options: bool = False
    # Mind2Web-SC guard: check (GuardAgent's split: the model names the rule that covers the
    # task, the client checks the user information against it; a rule it does not hold allows)
    # | model (the model's own ACTION DENIED / GRANTED line; the 1.5B denies nearly every action)
    guard_decision: str = "check"
    # Mind2Web-SC guard: GuardAgent's memory, the solved guard tasks of the client's own D_i
    # nearest to the task, each with the held rule it violated, shown before the task
    guard_shots: int = 0
    # token budget of a whole answer (a tool action of PrivacyLens, an AlpacaEval response):
    # a message holding such queries generates with max(backend.max_tokens, this)
    open_max_tokens: int = 512


@dataclass
class DataConfig:
    """Benchmarks, the evaluation stream and client partitions."""

    # benchmarks of the evaluation stream
    benchmarks: list[str] = field(default_factory=lambda: ["gsm8k", "medqa"])
    # evaluation queries per benchmark
    queries_per_benchmark: int = 10
    # held-apart dev pool per benchmark, partitioned over the clients (their private data D_i)
    dev_pool_per_benchmark: int = 200
    # iid | dirichlet | profile (each domain dealt to the clients whose profile covers it)
    partition: str = "iid"
    # Dirichlet concentration (partition = dirichlet)
    alpha: float = 0.5
    # absolute path of the data dir; empty = PFEDMA_DATA_DIR or the repo's data/
    data_dir: str = ""
    # seed of the question split and the partitions; -1 = the run's seed (experiments' --seeds
    # pin it, so repetitions differ only in sampling)
    split_seed: int = -1
    # questions of each benchmark's evaluation stream skipped first (the development questions;
    # main --size small tests on questions 100-129, docs/experiments.md)
    eval_offset: int = 0
    # default (the evaluation stream) | unseen (100 GSM8K + 100 MedQA questions no default run
    # ever draws; data/split.py)
    question_set: str = "default"

    def seed_for_split(self, run_seed: int) -> int:
        """The seed of the questions and partitions: ``split_seed``, else the run's."""
        return self.split_seed if self.split_seed >= 0 else run_seed


@dataclass
class EmbeddingConfig:
    """Embedding model e(·) used by server and clients."""

    # minilm (offline package) | hashing (tests only)
    name: str = "minilm"
    # a sentence-transformers model directory instead of the packaged MiniLM
    model_path: str = ""


# Caps on untrusted payloads. The section is protocol.validation.Limits itself (one definition
# of the fields and their defaults): Limits is frozen because the decoders share one value, and
# config.schema() makes its node writable so overrides can merge into it.
ProtocolConfig = Limits


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
    # overlap, no model: a lower bound that misses paraphrased leaks)
    leak_judge: str = "llm"
    # how the judge model's answer is read: auto (logprob where the backend has logits, else
    # generate) | logprob (labels' next-token log-probabilities) | generate (reason, then parse)
    method: str = "auto"
    # P(Yes) above which an (action, secret) pair counts as leaked; null: the threshold fitted
    # on labelled pairs for this judge (judging/factory.py FITTED_LEAK_THRESHOLDS), else 0.5
    leak_threshold: float | None = None
    # the leak judge's prompt: privacylens (its authors', two "Yes" few-shots) | direct (ours,
    # a short question); and contextual calibration against a content-free action (logprob)
    leak_prompt: str = "privacylens"
    leak_calibrate: bool = False
    # the frozen judge model: the embedded 1.5B model here; name: openai with base_url / model
    # for an endpoint
    judge_backend: BackendConfig = field(default_factory=lambda: BackendConfig(
        model="qwen2.5-coder-1.5b", max_tokens=256, n_ctx=8192, n_threads=2, max_batch=1))
    # judgements cached per (judge, prompt); empty = $PFEDMA_CACHE/judgements or
    # ~/.cache/pfedma/judgements
    cache_dir: str = ""


@dataclass
class OutputConfig:
    """Where results go (absolute; the ServerApp's cwd is the SuperLink's)."""

    # the run's output directory (the launcher's --output-dir sets it)
    dir: str = ""
    # progress lines while rounds run
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

    # seed of every RNG of the run (query sampling, partitions, candidate permutation)
    seed: int = 0
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    anomaly: AnomalyConfig = field(default_factory=AnomalyConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    rules: RulesConfig = field(default_factory=RulesConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    data: DataConfig = field(default_factory=DataConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    protocol: Limits = field(default_factory=Limits)
    output: OutputConfig = field(default_factory=OutputConfig)
    adversary: AdversaryConfig = field(default_factory=AdversaryConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
