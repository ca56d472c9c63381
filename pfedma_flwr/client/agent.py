"""The client agent ``A_i`` (no Flower): adapt global rules, answer in one batch, enforce, share.

What leaves this module (a :class:`~pfedma_flwr.protocol.schema.ClientReply`) is only
privacy-processed responses ``r̃``, generalized candidates ``ω̄ = P_gen(ω)`` and Δ-count
feedback. Raw responses, ``D_i``, ``X_i`` and the local rules (with their literals) stay in
:class:`AgentState`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pfedma_flwr.agents import options as mc
from pfedma_flwr.agents.backends import Backend, GenerationResult
from pfedma_flwr.agents.guard import GUARD_DECISIONS
from pfedma_flwr.agents.parsing import parse_structured_response
from pfedma_flwr.agents.program import REASONING_METHODS
from pfedma_flwr.agents.reasoning import derive_response
from pfedma_flwr.client import followups, memory
from pfedma_flwr.client.generation import (
    answer_seed,
    error_code,
    generate_batch_except,
    timing_delta,
)
from pfedma_flwr.client.memory import FEW_SHOT_SCOPES
from pfedma_flwr.client.posing import (
    BENCHMARK_FORMATS,
    decided_without_model,
    evolve_guard_rules,
    guard_memory,
    read_reply,
)
from pfedma_flwr.client.prompts import query_messages
from pfedma_flwr.client.state import AgentState, parse_rule_mode
from pfedma_flwr.config import AgentConfig, RulesConfig
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.privacylens_prompt import case_part
from pfedma_flwr.data.profiles import AgentProfile
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.schema import (
    DEFAULT_LIMITS,
    ClientReply,
    Limits,
    ProcessedResponse,
    RespondInstruction,
    RoutedQuery,
    RuleCandidate,
)
from pfedma_flwr.protocol.wire import ClientDescription
from pfedma_flwr.rules.client.local_repo import LocalRuleRepository
from pfedma_flwr.rules.client.outgoing import check_outgoing, client_secrets
from pfedma_flwr.rules.constants import PHI_DEFAULT, SIM_THRESHOLD
from pfedma_flwr.rules.enforcement import UNCOVERED_ENTITIES
from pfedma_flwr.rules.guard_rules import initial_guard_rules
from pfedma_flwr.rules.pii import PiiRecognizer
from pfedma_flwr.rules.policy import initial_local_rules, profile_entities
from pfedma_flwr.rules.private_facts import PRIVATE_FACT

if TYPE_CHECKING:
    from pfedma_flwr.agents.hooks import AgentHook

logger = logging.getLogger(__name__)
RESPONSE_FORMATS: tuple[str, ...] = ("reasoning", "json")
# A constructor default is the run's default, read from the config (issue 31 item 1: they had
# drifted to few_shot 2, scope batch, 320 tokens, greedy against the run's 0, query, 384, 0.3)
_AGENT, _RULES = AgentConfig(), RulesConfig()


def _profile_or(way: str) -> str | None:
    """The config's ``profile`` (each profile's own way) is ``None`` here."""
    return None if way == "profile" else way


class ClientAgent:
    """One federated agent: profile + backend + private data ``D_i``.

    Parameters
    ----------
    profile : AgentProfile
        Domain prompt; its public description is the only profile data the server sees.
    backend : Backend
        Batched text generation.
    private_data : Sequence[Task]
        ``D_i``: this client's partition of the dev pool (few-shot retrieval, sensitive items).
    embedder, recognizer
        Embedding model and PII recognizer.
    rule_mode : str
        ``rules.mode`` (full / NR / SR / LE / G2L / L2G).
    few_shot, few_shot_scope, experience_size, max_tokens, temperature
        See ``conf/pfedma.yaml`` (``agent`` section). Every default of this constructor is
        the run's default, read from :class:`~pfedma_flwr.config.AgentConfig` and
        :class:`~pfedma_flwr.config.RulesConfig`.
    open_max_tokens : int
        Budget of a message that holds a whole-answer query (an action, a response):
        ``max(max_tokens, open_max_tokens)``.
    sim_threshold, phi_default
        See ``conf/pfedma.yaml`` (``rules`` section).
    sensitive_items : Sequence[str]
        Extra private strings of this client (e.g. from the node config) besides those of
        ``D_i``'s tasks.
    hooks : Sequence[AgentHook]
        Applied around the answer, in order (:class:`~pfedma_flwr.agents.hooks.AgentHook`): each
        may change the task text the LLM sees and the response before the rules process it.
        The robustness evaluation (App. J) makes a client malicious with one
        (:class:`~pfedma_flwr.agents.hooks.Adversary`); an honest agent has none.
    response_format : {"reasoning", "json"}
        ``reasoning`` (default): free-text chain of thought, the structured response derived
        from it (:mod:`pfedma_flwr.agents.reasoning`); ``json``: the answer generated directly
        as JSON under the response schema (scripted/mock agents, grammar-only backends).
    seed : int
        This agent's own sampling seed (independent votes at ``temperature > 0``); the seed of
        each answer also depends on the query and its collaboration round (:meth:`_seed`), so
        reruns are reproducible and other methods asking the same prompt reuse the answer.
    lessons, lesson_min_sim : int, float
        How many lessons of ``X_i`` enter a prompt, and the cosine between the new query and a
        lesson's question needed to recall it.
    reasoning : {"cot", "program"}, optional
        How numeric tasks are solved (reasoning format only): chain of thought, or a Python
        program run on this client (:mod:`pfedma_flwr.agents.program`); a program that fails
        falls back to chain of thought. Default: the profile's own.
    few_shot_style : {"turns", "cases"}
        Retrieved examples of ``D_i`` as demonstration turns, or as solved cases with their
        answers in the system prompt (:func:`~pfedma_flwr.agents.prompting.solved_cases`).
    option_reasoning : {"cot", "eliminate", "verify"}, optional
        How multiple choice is answered (:mod:`pfedma_flwr.agents.options`); default: the
        profile's own.
    permute_options : bool
        Show the options in this agent's own seeded order; its letter is mapped back.
    guard_decision : {"check", "model"}
        How a Mind2Web-SC guard decision is made (:mod:`pfedma_flwr.agents.guard`).
    guard_shots : int
        GuardAgent's memory demonstrations per guard task: the nearest solved tasks of
        ``D_i`` with the held rule each violated (:func:`~.posing.guard_memory`).
    """

    def __init__(
        self, *, profile: AgentProfile, backend: Backend, private_data: Sequence[Task],
        embedder: Embedder, recognizer: PiiRecognizer | None,
        rule_mode: str = _RULES.mode, few_shot: int = _AGENT.few_shot,
        few_shot_scope: str = _AGENT.few_shot_scope,
        experience_size: int = _AGENT.experience_size,
        max_tokens: int = _AGENT.backend.max_tokens,
        open_max_tokens: int = _AGENT.open_max_tokens,
        temperature: float = _AGENT.backend.temperature,
        sim_threshold: float = SIM_THRESHOLD, phi_default: float = PHI_DEFAULT,
        sensitive_items: Sequence[str] = (), limits: Limits = DEFAULT_LIMITS,
        client_key: str = "", hooks: Sequence[AgentHook] = (),
        response_format: str = _AGENT.response_format, seed: int = 0,
        lessons: int = _AGENT.lessons, lesson_min_sim: float = _AGENT.lesson_min_sim,
        reasoning: str | None = _profile_or(_AGENT.reasoning),
        few_shot_style: str = _AGENT.few_shot_style,
        option_reasoning: str | None = _profile_or(_AGENT.option_reasoning),
        permute_options: bool = _AGENT.permute_options,
        guard_decision: str = _AGENT.guard_decision,
        guard_shots: int = _AGENT.guard_shots,
    ) -> None:
        if few_shot < 0 or experience_size < 0 or max_tokens < 1:
            raise ValueError("few_shot and experience_size must be >= 0, max_tokens >= 1")
        if response_format not in RESPONSE_FORMATS:
            raise ValueError(f"response_format must be one of {RESPONSE_FORMATS}, "
                             f"got {response_format!r}")
        if lessons < 0 or not -1.0 <= lesson_min_sim <= 1.0:
            raise ValueError("lessons must be >= 0 and lesson_min_sim in [-1, 1]")
        self.response_format, self.seed = response_format, seed
        self.reasoning = profile.reasoning if reasoning is None else reasoning
        if self.reasoning not in REASONING_METHODS:
            raise ValueError(f"reasoning must be one of {REASONING_METHODS}, got {reasoning!r}")
        self.n_lessons, self.lesson_min_sim = lessons, lesson_min_sim
        self.option_way = profile.option_reasoning if option_reasoning is None else option_reasoning
        if self.option_way not in mc.OPTION_WAYS or few_shot_style not in ("turns", "cases"):
            raise ValueError(f"option_reasoning must be one of {mc.OPTION_WAYS} and "
                             f"few_shot_style turns|cases, got {option_reasoning!r}, "
                             f"{few_shot_style!r}")
        self.few_shot_style, self.permute_options = few_shot_style, permute_options
        if few_shot_scope not in FEW_SHOT_SCOPES:
            raise ValueError(f"few_shot_scope must be one of {FEW_SHOT_SCOPES}, "
                             f"got {few_shot_scope!r}")
        self.few_shot_scope = few_shot_scope
        if guard_decision not in GUARD_DECISIONS:
            raise ValueError(f"guard_decision must be one of {GUARD_DECISIONS}, "
                             f"got {guard_decision!r}")
        self.guard_decision = guard_decision
        if guard_shots < 0:
            raise ValueError(f"guard_shots must be >= 0, got {guard_shots}")
        self.guard_shots = guard_shots
        self.profile, self.backend, self.embedder = profile, backend, embedder
        self.private_data = list(private_data)
        self.recognizer = recognizer
        self.mode = parse_rule_mode(rule_mode)
        self.few_shot, self.experience_size = few_shot, experience_size
        self.max_tokens, self.temperature = max_tokens, temperature
        self.open_max_tokens = open_max_tokens
        self.sim_threshold, self.phi_default = sim_threshold, phi_default
        self.limits = limits
        self.client_key = client_key
        self.hooks = tuple(hooks)
        items = {s for t in self.private_data for s in t.sensitive_items}
        self.sensitive_items = sorted(items | {s for s in sensitive_items if s.strip()})
        # A client whose own data marks facts as sensitive knows that private facts need a
        # rule; one without such data learns it only by adopting a global rule (issue 12).
        facts = (self.sensitive_items and recognizer is not None
                 and PRIVATE_FACT in recognizer.supported_entities)
        self.uncovered_types = UNCOVERED_ENTITIES + ((PRIVATE_FACT,) if facts else ())

    def describe(self) -> ClientDescription:
        """Public profile metadata for routing (no private data)."""
        return ClientDescription(profile_name=self.profile.name, domains=self.profile.domains,
                                 description=self.profile.prompt or "A helpful assistant.",
                                 backbone=self.profile.backbone,
                                 reasoning=self.reasoning if self.response_format == "reasoning"
                                 else "cot", client_key=self.client_key)

    def new_state(self) -> AgentState:
        """State of a client on first participation: its initial local policy (issue 12).

        Rules: its profile domains' entity types and ``D_i``'s sensitive items as literals
        (:func:`~pfedma_flwr.rules.policy.initial_local_rules`); a client whose ``D_i`` holds
        guard tasks (Mind2Web-SC) also the safety rules of its expertise
        (:func:`~pfedma_flwr.rules.guard_rules.initial_guard_rules`). ``X_i`` starts with ``D_i``'s
        questions, so relevance of a global rule is measured on the client's own data from its
        first message on (``X_i`` never leaves the client).
        """
        rules = initial_local_rules(entity_types=profile_entities(self.profile.domains),
                                    sensitive_items=self.sensitive_items)
        if any(t.task_format == "guard" for t in self.private_data):
            # a client that handles web-agent guard tasks starts with its expertise's rules
            rules += initial_guard_rules(self.profile.domains)
        seed = [case_part(t.question)[:300] for t in self.private_data][: self.experience_size]
        return AgentState(rules=LocalRuleRepository(mode=self.mode, rules=rules),
                          experience=seed)

    def respond(self, ins: RespondInstruction, state: AgentState) -> ClientReply:
        """Answer every routed query of ``ins`` in one batched generation (DESIGN §1 step 3)."""
        started = time.perf_counter()
        adapt = state.rules.adapt(list(ins.global_rules), state.experience, self.embedder,
                                  sim_threshold=self.sim_threshold, phi_default=self.phi_default,
                                  recognizer=self.recognizer)
        reasoning = self.response_format == "reasoning"
        shots_of = self._demonstrations(ins.queries)
        lessons_of = memory.recall_lessons(
            ins.queries, state.lessons, self.embedder, n=self.n_lessons,
            min_sim=self.lesson_min_sim) if reasoning else {}
        guard_cands = evolve_guard_rules(state.rules, self.private_data) if any(
            q.task_format == "guard" for q in ins.queries) else []
        views = [self._view(q) for q in ins.queries]  # options in this agent's order
        seen: list[str] = []  # each task as this client's model saw it (after the hooks)
        for q, (text, _, _) in zip(ins.queries, views, strict=True):
            for hook in self.hooks:
                text = hook.task_text(q.query_id, text)
            seen.append(text)
        posed = [self._prompt(q, seen[k], views[k][1], shots_of[q.query_id],
                              lessons_of.get(q.query_id, ()), state)
                 for k, q in enumerate(ins.queries)]
        prompts = [m for m, _ in posed]
        programs = {k for k, (_, program) in enumerate(posed) if program}
        t0, timed = time.perf_counter(), self.backend.timings()
        decided = {k: r for k, q in enumerate(ins.queries)
                   if (r := decided_without_model(q, state.rules, self.guard_decision))}
        gens = generate_batch_except(
            self.backend, ins.queries, prompts, decided, reasoning=reasoning,
            max_tokens=self.max_tokens, open_max_tokens=self.open_max_tokens,
            temperature=self.temperature, seeds=[self._seed(q) for q in ins.queries])
        texts = [g.text for g in gens]
        fallback = followups.run_programs(
            self.backend, ins.queries, programs, prompts, gens, texts,
            profile_prompt=self.profile.prompt, max_tokens=self.max_tokens,
            temperature=self.temperature, seed_of=lambda q: self._seed(q, "fallback"))
        repaired = followups.repair(self.backend, ins.queries, prompts, gens,
                                    texts) if reasoning else {}
        verified = self._verify(ins.queries, prompts, gens, texts) if reasoning else {}
        gen_seconds = time.perf_counter() - t0
        # the matching budget of P_resp starts here, after generation (issue 30: a 1.2 s
        # generation spent the 1 s budget started before it, and no pattern rule ever fired)
        state.rules.begin_message()
        responses: list[ProcessedResponse] = []
        candidates: dict[tuple[str, str], RuleCandidate] = {
            (c.text, c.action): c for c in guard_cands}
        for k, (q, gen) in enumerate(zip(ins.queries, gens, strict=True)):
            tokens, cached = self._spent(k, gen, repaired, fallback, verified)
            responses.append(self._answer(q, gen, texts[k], views[k], seen[k], state,
                                          candidates, tokens=tokens, cached=cached))
        state.rounds += 1
        logger.debug("adapted %d global rules", len(adapt.adopted) if adapt else 0)
        return self._outgoing(state, ClientReply(
            responses=tuple(responses), candidates=tuple(candidates.values()),
            feedback=tuple(state.rules.round_feedback()),
            backend_calls=sum(map(bool, (len(decided) < len(prompts), fallback, repaired,
                                         verified))),
            tokens=sum(r.tokens for r in responses), gen_seconds=gen_seconds,
            extra={**timing_delta(timed, self.backend.timings()),
                   "respond_s": round(time.perf_counter() - started, 4)},
        ))

    def _prompt(self, q: RoutedQuery, text: str, refinement: str, shots: Sequence[Task],
                lessons: Sequence[str], state: AgentState) -> tuple[list[Any], bool]:
        """The messages that pose ``q`` to this agent (:func:`~.prompts.query_messages`)."""
        shown = guard_memory(text, state.rules, self.private_data, self.embedder,
                             self.guard_shots) if q.task_format == "guard" else []
        return query_messages(q, text, refinement, shots, lessons, state.rules,
                              profile_prompt=self.profile.prompt,
                              response_format=self.response_format, reasoning=self.reasoning,
                              few_shot_style=self.few_shot_style, option_way=self.option_way,
                              guard_memory=shown, guard_decision=self.guard_decision)

    def _answer(self, q: RoutedQuery, gen: GenerationResult, text: str,
                view: tuple[str, str, dict[str, str]], seen: str, state: AgentState,
                candidates: dict[tuple[str, str], RuleCandidate], *, tokens: int,
                cached: int) -> ProcessedResponse:
        """Read ``q``'s reply, enforce the rules on it and remember it in ``X_i``.

        Rule candidates it creates are added to ``candidates``.
        """
        reasoning = self.response_format == "reasoning"
        if gen.error:
            return ProcessedResponse(q.query_id, None, format_ok=False,
                                     error=error_code("backend", gen.code or gen.error),
                                     tokens=tokens, cached_tokens=cached, round=q.round)
        if q.task_format in BENCHMARK_FORMATS:
            raw, why = read_reply(q, seen, text, state.rules,
                                  guard_decision=self.guard_decision)
        elif reasoning and not followups.is_json(text):
            der = derive_response(text, question=view[0], answer_kind=q.answer_kind,
                                  domain_fit=self._domain_fit(q))
            raw, why = mc.unpermuted(der.response, view[2]), der.error
        else:
            parsed = parse_structured_response(gen.text, self.limits)
            raw, why = mc.unpermuted(parsed.response, view[2]), parsed.error
        if raw is None:
            cut = "_truncated" if gen.finish_reason == "length" else ""
            return ProcessedResponse(q.query_id, None, format_ok=False,
                                     error=error_code("parse" + cut, why),
                                     tokens=tokens, cached_tokens=cached, round=q.round)
        for hook in self.hooks:
            raw = hook.response(q.query_id, raw, q.answer_kind, q.text)
        # Uncovered items create local rules first, so this very response is protected.
        result, cands = state.rules.process(raw, self.sensitive_items, self.recognizer,
                                            uncovered_types=self.uncovered_types)
        for c in cands:
            candidates.setdefault((c.text, c.action), c)
        # what the agent itself wrote stays in X_i too (local only): Rel of a rule about
        # content (private facts) is measured on it, not only on the question's head
        said = " ".join(c.claim for c in raw.claims)[:300]
        memory.remember(state.experience, f"{case_part(q.text)[:300]} => "
                        f"{raw.final_answer[:100]} {said}".rstrip(),
                        capacity=self.experience_size)
        if reasoning and q.task_format == "qa" and self.n_lessons:
            memory.learn_lesson(state.lessons, q, raw.final_answer,
                                capacity=self.experience_size)
        return ProcessedResponse(q.query_id, result.response, refused=result.refused,
                                 tokens=tokens, cached_tokens=cached, round=q.round)

    def _spent(self, k: int, gen: GenerationResult, repaired: dict[int, GenerationResult],
               fallback: dict[int, GenerationResult],
               verified: dict[int, int]) -> tuple[int, int]:
        """Tokens answer ``k`` spent over every generation of it, and how many were cached.

        Cached generations still count (``cached`` says so), under the protocol's cap on a
        self-reported count (the server rejects more).
        """
        spent = [gen, *(d[k] for d in (repaired, fallback) if k in d)]
        tokens = min(sum(g.tokens for g in spent) + verified.get(k, 0),
                     self.limits.max_answer_tokens)
        return tokens, min(sum(g.tokens for g in spent if g.cached), tokens)

    def _outgoing(self, state: AgentState, reply: ClientReply) -> ClientReply:
        """The last check before sending: no ``D_i`` item, no local literal (issue 12 item 6)."""
        literals = [lit for r in state.rules.all_rules() for lit in r.literals]
        return check_outgoing(reply, client_secrets(self.sensitive_items, literals))[0]

    def _seed(self, q: RoutedQuery, salt: str = "") -> int:
        """The sampling seed of this agent's answer to ``q`` (:func:`~.generation.answer_seed`)."""
        return answer_seed(self.seed, self.client_key, q, salt)

    def _domain_fit(self, q: RoutedQuery) -> float:
        """Logged only (DESIGN §3.7): 1 for a primary domain, 0.7 secondary, else 0.3."""
        domains = self.profile.domains
        if q.domain == domains[0]:
            return 1.0
        return 0.7 if q.domain in domains else 0.3

    def _view(self, q: RoutedQuery) -> tuple[str, str, dict[str, str]]:
        """Task, refinement and shown → original letters as this agent sees them (options.py)."""
        return mc.agent_view(q.text, q.refinement, permute=self.permute_options
                             and q.answer_kind == "option",
                             key=f"{self.seed}|{self.client_key}|{q.query_id}")

    def _verify(self, queries: Sequence[RoutedQuery], prompts: list[Any], gens: Sequence[Any],
                texts: list[str]) -> dict[int, int]:
        """The ``verify`` way of multiple choice (:func:`~.options.verify_answers`)."""
        if self.option_way != "verify":
            return {}
        return mc.verify_answers(self.backend, [q.text for q in queries],
                                 [q.answer_kind for q in queries], prompts, gens, texts)

    def _demonstrations(self, queries: Sequence[RoutedQuery]) -> dict[str, list[Task]]:
        """Few-shot examples from this client's ``D_i`` per query (memory.demonstrations)."""
        return memory.demonstrations(queries, self.private_data, self.embedder, k=self.few_shot,
                                     scope=self.few_shot_scope)
