"""The client agent ``A_i`` (no Flower): adapt global rules, answer in one batch, enforce, share.

What leaves this module (a :class:`~pfedma_flwr.schema.ClientReply`) is only privacy-processed
responses ``r̃``, generalized candidates ``ω̄ = P_gen(ω)`` and Δ-count feedback. Raw responses,
``D_i``, ``X_i`` and the local rules (with their literals) stay in :class:`AgentState`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pfedma_flwr.agents.backends import Backend
from pfedma_flwr.agents.parsing import parse_structured_response
from pfedma_flwr.agents.prompting import RESPONSE_JSON_SCHEMA, build_agent_messages
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.profiles import AgentProfile
from pfedma_flwr.data.retrieval import get_retriever, retrieve_examples
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol import ClientDescription
from pfedma_flwr.rules.local_repo import LocalRuleRepository, RuleMode
from pfedma_flwr.rules.pii import PiiRecognizer
from pfedma_flwr.schema import (
    DEFAULT_LIMITS,
    ClientReply,
    Limits,
    ProcessedResponse,
    RespondInstruction,
    RoutedQuery,
    RuleCandidate,
)

if TYPE_CHECKING:
    from pfedma_flwr.adversary import Adversary

logger = logging.getLogger(__name__)
STATE_VERSION = 1
FEW_SHOT_SCOPES: tuple[str, ...] = ("batch", "query")
_MODES = {"full": RuleMode.FULL, "NR": RuleMode.NR, "SR": RuleMode.SR, "LE": RuleMode.LE,
          "G2L": RuleMode.G2L, "L2G": RuleMode.L2G}


def parse_rule_mode(name: str) -> RuleMode:
    """Map a config ``rules.mode`` name to :class:`RuleMode`."""
    try:
        return _MODES[name]
    except KeyError:
        raise ValueError(f"unknown rules.mode {name!r}; available: {sorted(_MODES)}") from None


@dataclass
class AgentState:
    """Client-private state persisted in ``context.state``: ``Ω_local`` and ``X_i``."""

    rules: LocalRuleRepository
    experience: list[str] = field(default_factory=list)
    rounds: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON form with a version key (for ``context.state`` / a node-local state file)."""
        return {"version": STATE_VERSION, "rules": self.rules.to_dict(),
                "experience": list(self.experience), "rounds": self.rounds}

    @classmethod
    def from_dict(cls, d: Any) -> AgentState:
        """Inverse of :meth:`to_dict`; a bad payload raises ``ValueError`` naming the field."""
        if not isinstance(d, dict) or d.get("version") != STATE_VERSION:
            raise ValueError(f"agent state: expected an object with version {STATE_VERSION}")
        exp = d.get("experience", [])
        if not isinstance(exp, list) or not all(isinstance(x, str) for x in exp):
            raise ValueError("agent state: 'experience' must be a list of strings")
        rounds = d.get("rounds", 0)
        if not isinstance(rounds, int) or rounds < 0:
            raise ValueError("agent state: 'rounds' must be an int >= 0")
        return cls(rules=LocalRuleRepository.from_dict(d.get("rules")), experience=exp,
                   rounds=rounds)


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
        See ``conf/pfedma.yaml`` (``agent`` section).
    sim_threshold, phi_default
        See ``conf/pfedma.yaml`` (``rules`` section).
    sensitive_items : Sequence[str]
        Extra private strings of this client (e.g. from the node config) besides those of
        ``D_i``'s tasks.
    adversary : Adversary, optional
        Robustness evaluation only (App. J): makes this client malicious on the instances
        its partition id is drawn for (prompt injection or wrong-but-confident answers).
    """

    def __init__(
        self, *, profile: AgentProfile, backend: Backend, private_data: Sequence[Task],
        embedder: Embedder, recognizer: PiiRecognizer | None, rule_mode: str = "full",
        few_shot: int = 2, few_shot_scope: str = "batch", experience_size: int = 32,
        max_tokens: int = 320,
        temperature: float = 0.0, sim_threshold: float = 0.9, phi_default: float = 0.3,
        sensitive_items: Sequence[str] = (), limits: Limits = DEFAULT_LIMITS,
        client_key: str = "", adversary: Adversary | None = None,
    ) -> None:
        if few_shot < 0 or experience_size < 0 or max_tokens < 1:
            raise ValueError("few_shot and experience_size must be >= 0, max_tokens >= 1")
        if few_shot_scope not in FEW_SHOT_SCOPES:
            raise ValueError(f"few_shot_scope must be one of {FEW_SHOT_SCOPES}, "
                             f"got {few_shot_scope!r}")
        self.few_shot_scope = few_shot_scope
        self.profile, self.backend, self.embedder = profile, backend, embedder
        self.private_data = list(private_data)
        self.recognizer = recognizer
        self.mode = parse_rule_mode(rule_mode)
        self.few_shot, self.experience_size = few_shot, experience_size
        self.max_tokens, self.temperature = max_tokens, temperature
        self.sim_threshold, self.phi_default = sim_threshold, phi_default
        self.limits = limits
        self.client_key = client_key
        self.adversary = adversary
        items = {s for t in self.private_data for s in t.sensitive_items}
        self.sensitive_items = sorted(items | {s for s in sensitive_items if s.strip()})

    def describe(self) -> ClientDescription:
        """Public profile metadata for routing (no private data)."""
        return ClientDescription(profile_name=self.profile.name, domains=self.profile.domains,
                                 description=self.profile.prompt, backbone=self.profile.backbone,
                                 client_key=self.client_key)

    def new_state(self) -> AgentState:
        """State of a client on first participation."""
        return AgentState(rules=LocalRuleRepository(mode=self.mode))

    def respond(self, ins: RespondInstruction, state: AgentState) -> ClientReply:
        """Answer every routed query of ``ins`` in one batched generation (DESIGN §1 step 3)."""
        adapt = state.rules.adapt(list(ins.global_rules), state.experience, self.embedder,
                                  sim_threshold=self.sim_threshold, phi_default=self.phi_default)
        prompts = []
        shots_of = self._demonstrations(ins.queries)
        for q in ins.queries:
            shots = shots_of[q.query_id]
            prompts.append(build_agent_messages(
                profile_prompt=self.profile.prompt,
                query_text=self.adversary.task_text(q.query_id, q.text) if self.adversary
                else q.text, refinement=q.refinement,
                answer_kind=q.answer_kind,
                few_shot=[(t.question, demo_answer(t)) for t in shots],
                experience=[],
            ))
        t0 = time.perf_counter()
        gens = self.backend.generate(prompts, max_tokens=self.max_tokens,
                                     temperature=self.temperature, json_schema=RESPONSE_JSON_SCHEMA)
        gen_seconds = time.perf_counter() - t0
        responses: list[ProcessedResponse] = []
        candidates: dict[tuple[str, str], RuleCandidate] = {}
        for q, gen in zip(ins.queries, gens, strict=True):
            if gen.error:
                responses.append(ProcessedResponse(q.query_id, None, format_ok=False,
                                                   error=f"backend: {gen.error}"[:500],
                                                   tokens=gen.tokens))
                continue
            parsed = parse_structured_response(gen.text, self.limits)
            if parsed.response is None:
                responses.append(ProcessedResponse(q.query_id, None, format_ok=False,
                                                   error=parsed.error[:500], tokens=gen.tokens))
                continue
            raw = parsed.response
            if self.adversary is not None:
                raw = self.adversary.response(q.query_id, raw, q.answer_kind, q.text)
            # Uncovered items create local rules first, so this very response is protected.
            result, cands = state.rules.process(raw, self.sensitive_items, self.recognizer)
            for c in cands:
                candidates.setdefault((c.text, c.action), c)
            processed, refused = result.response, result.refused
            responses.append(ProcessedResponse(q.query_id, processed, refused=refused,
                                               tokens=gen.tokens))
            self._remember(state, f"{q.text[:300]} => {raw.final_answer[:100]}")
        state.rounds += 1
        logger.debug("adapted %d global rules", len(adapt.adopted) if adapt else 0)
        return ClientReply(
            responses=tuple(responses), candidates=tuple(candidates.values()),
            feedback=tuple(state.rules.round_feedback()), backend_calls=1,
            tokens=sum(g.tokens for g in gens), gen_seconds=gen_seconds,
        )

    def _demonstrations(self, queries: Sequence[RoutedQuery]) -> dict[str, list[Task]]:
        """Few-shot examples from ``D_i`` per query, of the query's answer format.

        ``few_shot_scope="batch"`` gives all queries of one answer format the same examples
        (nearest to the group's mean embedding), so their prompts share a prefix that the
        batched backend prefills once; ``"query"`` retrieves per query.
        """
        out: dict[str, list[Task]] = {q.query_id: [] for q in queries}
        if not self.few_shot:
            return out
        for kind in dict.fromkeys(q.answer_kind for q in queries):
            pool = [t for t in self.private_data if t.answer_kind == kind]
            group = [q for q in queries if q.answer_kind == kind]
            if not pool:
                continue
            if self.few_shot_scope == "batch":
                shots = get_retriever(pool, self.embedder).retrieve_for_batch(
                    [q.text for q in group], self.few_shot)
                out.update({q.query_id: shots for q in group})
            else:
                out.update({q.query_id: retrieve_examples(q.text, pool, self.few_shot,
                                                          self.embedder) for q in group})
        return out

    def _remember(self, state: AgentState, item: str) -> None:
        if self.experience_size == 0:
            return
        state.experience.append(item)
        del state.experience[: max(0, len(state.experience) - self.experience_size)]


def demo_answer(task: Task) -> str:
    """A few-shot demonstration's answer: worked steps then ``#### gold`` where available."""
    return f"{task.rationale}\n#### {task.gold}" if task.rationale else task.gold
