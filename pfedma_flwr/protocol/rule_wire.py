"""Wire dataclasses of the privacy rules: candidates, redistributed global rules, feedback.

Every rule form (a candidate ``ω̄`` a client uploads, a rule of ``Ω_global`` the server
redistributes, a client's local rule) shares one detector spec and one serialization of it
(:data:`RULE_SPEC_FIELDS`, issue 31 item 6). Validated as everything in
:mod:`pfedma_flwr.protocol.schema`, which re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from pfedma_flwr.protocol.validation import (
    DEFAULT_LIMITS,
    Limits,
    SchemaError,
    choice_,
    float_,
    id_,
    int_,
    no_extra,
    obj_,
    req,
    str_,
    strs_,
)

RuleScope = Literal["query", "response", "guard"]
RuleAction = Literal["redact", "generalize", "refuse"]
# "guard": a safety rule a guard holds (Mind2Web-SC, rules/guard_catalogue.py); it detects
# nothing in queries or responses, it is shown to the client's model on guard tasks
RULE_SCOPES: tuple[str, ...] = ("query", "response", "guard")
RULE_ACTIONS: tuple[str, ...] = ("redact", "generalize", "refuse")


@dataclass(frozen=True)
class RuleSpec:
    """The detector spec every rule form shares: the fields are declared here once.

    A candidate, a global rule and a client's local rule
    (:class:`~pfedma_flwr.rules.model.PrivacyRule`) extend it with their own fields, which
    are keyword-only (``rule_id`` has no default) so the shared fields keep their order.
    """

    text: str
    category: str
    scope: str = "response"
    action: str = "redact"
    entity_types: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()


#: The shared fields' names, in their wire order (issue 31 item 6).
RULE_SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RuleSpec))


def rule_spec_dict(rule: RuleSpec) -> dict[str, Any]:
    """The shared fields of any rule form as JSON (tuples as lists)."""
    return {"text": rule.text, "category": rule.category, "scope": rule.scope,
            "action": rule.action, "entity_types": list(rule.entity_types),
            "patterns": list(rule.patterns)}


def rule_spec_from(d: dict[str, Any], path: str, lim: Limits) -> dict[str, Any]:
    """The shared fields of a rule read from the wire, validated (``path`` names the item)."""
    return {
        "text": str_(req(d, "text", path), f"{path}.text", lim, allow_empty=False),
        "category": str_(req(d, "category", path), f"{path}.category", lim, allow_empty=False),
        "scope": choice_(d.get("scope", "response"), f"{path}.scope", RULE_SCOPES),
        "action": choice_(d.get("action", "redact"), f"{path}.action", RULE_ACTIONS),
        "entity_types": strs_(d.get("entity_types", []), f"{path}.entity_types", lim, 32),
        "patterns": strs_(d.get("patterns", []), f"{path}.patterns", lim, 32),
    }


@dataclass(frozen=True)
class RuleCandidate(RuleSpec):
    """A generalized rule ``ω̄ = P_gen(ω)`` as uploaded: no literals, no client id (seed App. F)."""

    def to_dict(self) -> dict[str, Any]:
        return rule_spec_dict(self)

    @classmethod
    def from_dict(
        cls, d: Any, path: str = "candidate", lim: Limits = DEFAULT_LIMITS
    ) -> RuleCandidate:
        d = obj_(d, path)
        no_extra(d, path, set(RULE_SPEC_FIELDS))
        return cls(**rule_spec_from(d, path, lim))


@dataclass(frozen=True)
class GlobalRule(RuleSpec):
    """A rule of ``Ω_global`` as redistributed to clients (DESIGN §4; never holds literals)."""

    rule_id: str = field(kw_only=True)
    h_score: float = 0.0
    n_evals: int = 0
    active: bool = True
    created_round: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule_id": self.rule_id,
            **rule_spec_dict(self),
            "h_score": self.h_score,
            "n_evals": self.n_evals,
            "active": self.active,
            "created_round": self.created_round,
        }

    @classmethod
    def from_dict(cls, d: Any, path: str = "rule", lim: Limits = DEFAULT_LIMITS) -> GlobalRule:
        d = obj_(d, path)
        no_extra(d, path, set(cls.__dataclass_fields__))
        active = d.get("active", True)
        if not isinstance(active, bool):
            raise SchemaError(f"{path}.active", f"expected a boolean, got {type(active).__name__}")
        return cls(
            rule_id=id_(req(d, "rule_id", path), f"{path}.rule_id", lim),
            **rule_spec_from(d, path, lim),
            h_score=float_(d.get("h_score", 0.0), f"{path}.h_score", lo=-1.0, hi=1.0),
            n_evals=int_(d.get("n_evals", 0), f"{path}.n_evals"),
            active=active,
            created_round=int_(d.get("created_round", 0), f"{path}.created_round"),
        )


@dataclass(frozen=True)
class RuleFeedback:
    """Compact per-round feedback on one redistributed global rule: Δ counts only (seed App. F)."""

    rule_id: str
    d_trigger: int
    d_valid: int
    d_conflict: int

    def __post_init__(self) -> None:
        if min(self.d_trigger, self.d_valid, self.d_conflict) < 0:
            raise SchemaError("feedback", "counts must be >= 0")
        if self.d_valid > self.d_trigger or self.d_conflict > self.d_trigger:
            raise SchemaError("feedback", "valid/conflict counts cannot exceed the trigger count")

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule_id": self.rule_id,
            "d_trigger": self.d_trigger,
            "d_valid": self.d_valid,
            "d_conflict": self.d_conflict,
        }

    @classmethod
    def from_dict(
        cls, d: Any, path: str = "feedback", lim: Limits = DEFAULT_LIMITS
    ) -> RuleFeedback:
        d = obj_(d, path)
        no_extra(d, path, {"rule_id", "d_trigger", "d_valid", "d_conflict"})
        try:
            return cls(
                rule_id=id_(req(d, "rule_id", path), f"{path}.rule_id", lim),
                d_trigger=int_(req(d, "d_trigger", path), f"{path}.d_trigger", hi=10**9),
                d_valid=int_(req(d, "d_valid", path), f"{path}.d_valid", hi=10**9),
                d_conflict=int_(req(d, "d_conflict", path), f"{path}.d_conflict", hi=10**9),
            )
        except SchemaError as e:
            if e.path == "feedback":
                raise SchemaError(path, e.reason) from None
            raise
