"""A client's private state: its local rules ``Ω_local``, experience ``X_i`` and lessons.

Persisted in ``context.state`` (or a node-local state file) between the messages of a run;
nothing of it leaves the client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pfedma_flwr.rules.client.local_repo import LocalRuleRepository, RuleMode

STATE_VERSION = 1


def parse_rule_mode(name: str) -> RuleMode:
    """Map a config ``rules.mode`` name to :class:`RuleMode` (:meth:`RuleMode.parse`)."""
    return RuleMode.parse(name)


@dataclass
class AgentState:
    """Client-private state persisted in ``context.state``: ``Ω_local`` and ``X_i``."""

    rules: LocalRuleRepository
    experience: list[str] = field(default_factory=list)
    rounds: int = 0
    # verified lessons of X_i (never leave the client): "question gist -> verified answer"
    lessons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form with a version key (for ``context.state`` / a node-local state file)."""
        return {"version": STATE_VERSION, "rules": self.rules.to_dict(),
                "experience": list(self.experience), "rounds": self.rounds,
                "lessons": list(self.lessons)}

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
        lessons = d.get("lessons", [])
        if not isinstance(lessons, list) or not all(isinstance(x, str) for x in lessons):
            raise ValueError("agent state: 'lessons' must be a list of strings")
        return cls(rules=LocalRuleRepository.from_dict(d.get("rules")), experience=exp,
                   rounds=rounds, lessons=lessons)
