"""Wire dataclasses: everything that crosses between server and clients, with strict validation.

No Flower import here: :mod:`pfedma_flwr.protocol.codec` turns these into Flower records. Every
``from_dict`` validates types, ranges, finiteness and size caps, and raises
:class:`SchemaError` naming the offending field, so a hostile or malformed client reply is
rejected with a reason instead of crashing the server loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pfedma_flwr.answers import ANSWER_KINDS, TASK_FORMATS

# the rule wire types (rule_wire.py), also importable from here
from pfedma_flwr.protocol.rule_wire import GlobalRule as GlobalRule
from pfedma_flwr.protocol.rule_wire import RuleCandidate as RuleCandidate
from pfedma_flwr.protocol.rule_wire import RuleFeedback as RuleFeedback
from pfedma_flwr.protocol.rule_wire import RuleSpec as RuleSpec
from pfedma_flwr.protocol.validation import (
    DEFAULT_LIMITS,
    Limits,
    SchemaError,
    choice_,
    excerpt,
    float_,
    id_,
    int_,
    list_,
    no_extra,
    obj_,
    req,
    str_,
    strs_,
    unit_,
)

SCHEMA_VERSION = 1

#: Characters of ``RoutedQuery.candidate`` kept (a longer one is cut, not refused: it only
#: decides whether a lesson is learned)
CANDIDATE_CHARS = 200


# --------------------------------------------------------------------------- responses


@dataclass(frozen=True)
class Claim:
    """One explicit claim with its own evidence set (seed App. D: ``γ_n`` and ``L_n``)."""

    claim: str
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"claim": self.claim, "evidence": list(self.evidence)}

    @classmethod
    def from_dict(cls, d: Any, path: str = "claim", lim: Limits = DEFAULT_LIMITS) -> Claim:
        d = obj_(d, path)
        no_extra(d, path, {"claim", "evidence"})
        return cls(
            claim=str_(req(d, "claim", path), f"{path}.claim", lim),
            evidence=strs_(d.get("evidence", []), f"{path}.evidence", lim, lim.max_evidence),
        )


@dataclass(frozen=True)
class StructuredResponse:
    """The agent's structured answer (seed App. D): final answer, claims with evidence, metadata.

    ``domain_fit`` and ``self_confidence`` are self-reported and only logged (DESIGN §3.7).
    """

    final_answer: str
    claims: tuple[Claim, ...] = ()
    domain_fit: float = 0.0
    self_confidence: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "final_answer": self.final_answer,
            "claims": [c.to_dict() for c in self.claims],
            "domain_fit": self.domain_fit,
            "self_confidence": self.self_confidence,
        }

    def sentences(self) -> list[str]:
        """All free-text pieces of the response, for the intent judge and privacy checks."""
        out = [self.final_answer]
        for c in self.claims:
            out.append(c.claim)
            out.extend(c.evidence)
        return [s for s in out if s.strip()]

    @classmethod
    def from_dict(
        cls, d: Any, path: str = "response", lim: Limits = DEFAULT_LIMITS
    ) -> StructuredResponse:
        d = obj_(d, path)
        no_extra(d, path, {"final_answer", "claims", "domain_fit", "self_confidence"})
        fa = req(d, "final_answer", path)
        # Models often emit numbers as JSON numbers; the wire form is text.
        if isinstance(fa, int | float) and not isinstance(fa, bool):
            float_(fa, f"{path}.final_answer")
            fa = str(fa)
        claims = list_(d.get("claims", []), f"{path}.claims", lim.max_claims)
        return cls(
            final_answer=str_(fa, f"{path}.final_answer", lim),
            claims=tuple(
                Claim.from_dict(c, f"{path}.claims[{k}]", lim) for k, c in enumerate(claims)
            ),
            domain_fit=unit_(d.get("domain_fit", 0.0), f"{path}.domain_fit"),
            self_confidence=unit_(d.get("self_confidence", 0.0), f"{path}.self_confidence"),
        )


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class RoutedQuery:
    """One privacy-processed query ``q̃`` routed to a client for collaboration round ``round``."""

    query_id: str
    text: str
    domain: str
    round: int
    refinement: str = ""
    answer_kind: str = "text"
    # how the client poses the task (answers.TASK_FORMATS); "qa" when absent (older servers)
    task_format: str = "qa"
    # the leading earlier answer (canonical, P_in applied) that the refinement shows: what a
    # client's answer confirms for a verified lesson of X_i; "" in round 1 and under -RQ.
    # Structured, so no client reads it out of a refiner's wording (issue 31 item 7)
    candidate: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = {
            "query_id": self.query_id,
            "text": self.text,
            "domain": self.domain,
            "round": self.round,
            "refinement": self.refinement,
            "answer_kind": self.answer_kind,
            "task_format": self.task_format,
        }
        # only when set: a node of the previous version still takes round-1 queries
        if self.candidate:
            d["candidate"] = self.candidate
        return d

    @classmethod
    def from_dict(cls, d: Any, path: str = "query", lim: Limits = DEFAULT_LIMITS) -> RoutedQuery:
        d = obj_(d, path)
        no_extra(d, path, {"query_id", "text", "domain", "round", "refinement", "answer_kind",
                           "task_format", "candidate"})
        return cls(
            query_id=id_(req(d, "query_id", path), f"{path}.query_id", lim),
            text=str_(req(d, "text", path), f"{path}.text", lim, allow_empty=False),
            domain=str_(req(d, "domain", path), f"{path}.domain", lim),
            round=int_(req(d, "round", path), f"{path}.round", lo=1, hi=10**6),
            refinement=str_(d.get("refinement", ""), f"{path}.refinement", lim),
            answer_kind=choice_(d.get("answer_kind", "text"), f"{path}.answer_kind", ANSWER_KINDS),
            task_format=choice_(d.get("task_format", "qa"), f"{path}.task_format", TASK_FORMATS),
            candidate=str_(d.get("candidate", ""), f"{path}.candidate", lim)[:CANDIDATE_CHARS],
        )


@dataclass(frozen=True)
class RespondInstruction:
    """Server → client: the queries routed to this node plus the global rule snapshot."""

    server_round: int
    queries: tuple[RoutedQuery, ...]
    global_rules: tuple[GlobalRule, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "server_round": self.server_round,
            "queries": [q.to_dict() for q in self.queries],
            "global_rules": [r.to_dict() for r in self.global_rules],
        }

    @classmethod
    def from_dict(
        cls, d: Any, path: str = "instruction", lim: Limits = DEFAULT_LIMITS
    ) -> RespondInstruction:
        d = obj_(d, path)
        _check_version(d, path)
        no_extra(d, path, {"schema_version", "server_round", "queries", "global_rules"})
        qs = list_(req(d, "queries", path), f"{path}.queries", lim.max_items)
        rs = list_(d.get("global_rules", []), f"{path}.global_rules", lim.max_rules)
        return cls(
            server_round=int_(req(d, "server_round", path), f"{path}.server_round", lo=1),
            queries=tuple(
                RoutedQuery.from_dict(q, f"{path}.queries[{k}]", lim) for k, q in enumerate(qs)
            ),
            global_rules=tuple(
                GlobalRule.from_dict(r, f"{path}.global_rules[{k}]", lim) for k, r in enumerate(rs)
            ),
        )


@dataclass(frozen=True)
class ProcessedResponse:
    """A privacy-processed response ``r̃`` to one routed query, or the reason there is none.

    ``response`` is ``None`` when the agent's output could not be parsed (``format_ok`` False)
    or the client refused under a privacy rule (``refused`` True).
    """

    query_id: str
    response: StructuredResponse | None
    format_ok: bool = True
    refused: bool = False
    error: str = ""
    tokens: int = 0
    #: the collaboration round of the routed query this answers (0: not bound); the server
    #: rejects a response bound to another round (a stale reply)
    round: int = 0
    # of ``tokens``, those of answers the client's generation cache served (reused, not spent)
    cached_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id,
            "response": None if self.response is None else self.response.to_dict(),
            "format_ok": self.format_ok,
            "refused": self.refused,
            "error": self.error,
            "tokens": self.tokens,
            "round": self.round,
            "cached_tokens": self.cached_tokens,
        }

    @classmethod
    def from_dict(
        cls, d: Any, path: str = "processed", lim: Limits = DEFAULT_LIMITS
    ) -> ProcessedResponse:
        d = obj_(d, path)
        no_extra(d, path, {"query_id", "response", "format_ok", "refused", "error", "tokens",
                           "round", "cached_tokens"})
        raw = d.get("response")
        for key in ("format_ok", "refused"):
            if not isinstance(d.get(key, False), bool):
                raise SchemaError(f"{path}.{key}", "expected a boolean")
        return cls(
            query_id=id_(req(d, "query_id", path), f"{path}.query_id", lim),
            response=None
            if raw is None
            else StructuredResponse.from_dict(raw, f"{path}.response", lim),
            format_ok=bool(d.get("format_ok", True)),
            refused=bool(d.get("refused", False)),
            error=str_(d.get("error", ""), f"{path}.error", lim),
            tokens=int_(d.get("tokens", 0), f"{path}.tokens", hi=lim.max_answer_tokens),
            round=int_(d.get("round", 0), f"{path}.round", hi=10**6),
            cached_tokens=int_(d.get("cached_tokens", 0), f"{path}.cached_tokens",
                               hi=lim.max_answer_tokens),
        )


@dataclass(frozen=True)
class ClientReply:
    """Client → server: processed responses, generalized rule candidates, Δ-count feedback."""

    responses: tuple[ProcessedResponse, ...]
    candidates: tuple[RuleCandidate, ...] = ()
    feedback: tuple[RuleFeedback, ...] = ()
    backend_calls: int = 0
    tokens: int = 0
    gen_seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "responses": [r.to_dict() for r in self.responses],
            "candidates": [c.to_dict() for c in self.candidates],
            "feedback": [f.to_dict() for f in self.feedback],
            "backend_calls": self.backend_calls,
            "tokens": self.tokens,
            "gen_seconds": self.gen_seconds,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, d: Any, path: str = "reply", lim: Limits = DEFAULT_LIMITS) -> ClientReply:
        d = obj_(d, path)
        _check_version(d, path)
        allowed = {"schema_version", "responses", "candidates", "feedback", "backend_calls"}
        no_extra(d, path, allowed | {"tokens", "gen_seconds", "extra"})
        rs = list_(req(d, "responses", path), f"{path}.responses", lim.max_items)
        cs = list_(d.get("candidates", []), f"{path}.candidates", lim.max_items)
        fs = list_(d.get("feedback", []), f"{path}.feedback", lim.max_rules)
        extra = obj_(d.get("extra", {}), f"{path}.extra")
        if len(extra) > lim.max_items:
            raise SchemaError(f"{path}.extra", f"{len(extra)} entries exceed cap {lim.max_items}")
        return cls(
            responses=tuple(
                ProcessedResponse.from_dict(r, f"{path}.responses[{k}]", lim)
                for k, r in enumerate(rs)
            ),
            candidates=tuple(
                RuleCandidate.from_dict(c, f"{path}.candidates[{k}]", lim) for k, c in enumerate(cs)
            ),
            feedback=tuple(
                RuleFeedback.from_dict(f, f"{path}.feedback[{k}]", lim) for k, f in enumerate(fs)
            ),
            backend_calls=int_(d.get("backend_calls", 0), f"{path}.backend_calls", hi=10**9),
            tokens=int_(d.get("tokens", 0), f"{path}.tokens",
                        hi=lim.max_items * lim.max_answer_tokens),
            gen_seconds=float_(d.get("gen_seconds", 0.0), f"{path}.gen_seconds", lo=0.0),
            # the key is untrusted text: paths name the entry by position, not by key
            extra={
                id_(k, f"{path}.extra[{n}]", lim): float_(v, f"{path}.extra[{n}]")
                for n, (k, v) in enumerate(extra.items())
            },
        )


def _check_version(d: dict[str, Any], path: str) -> None:
    v = d.get("schema_version")
    if v != SCHEMA_VERSION:
        raise SchemaError(f"{path}.schema_version",
                          f"expected {SCHEMA_VERSION}, got {excerpt(v)}")
