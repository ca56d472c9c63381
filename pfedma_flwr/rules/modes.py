"""Client-side rule policy pieces: the mode switch, the local utility ``Φ`` and adaptation logs.

DESIGN §3.6 and the rule-evolution ablations of seed §4.3; used by
:class:`~pfedma_flwr.rules.client.local_repo.LocalRuleRepository` (which re-exports them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


def local_utility(rel: float, n_trigger: int, n_valid: int, n_conflict: int) -> float:
    """``Φ_i(ω) = Rel(ω, X_i) + (n_valid − n_conflict) / max(1, n_trigger)`` (DESIGN §3.6)."""
    return float(rel) + (n_valid - n_conflict) / max(1, n_trigger)


def relevance(rule_emb: np.ndarray, experience_embs: np.ndarray) -> float:
    """The seed's ``Rel = max(0, max_x cos(e(ω), e(x)))``, 0 for an empty buffer (DESIGN §3.6).

    Kept for reference: adaptation uses :func:`.client.relevance.detector_relevance`
    (this one stayed below ``phi_default`` on every benchmark, docs/rules.md).
    """
    exp = np.asarray(experience_embs, dtype=np.float32)
    if exp.size == 0:
        return 0.0
    return max(0.0, float(np.max(exp.reshape(-1, exp.shape[-1]) @ np.asarray(rule_emb).ravel())))


class RuleMode(enum.Enum):
    """Rule-evolution ablations of the seed (§4.3): which directions of the loop run.

    The one definition of the rule modes: config validation (``rules.mode``), the presets'
    levels, the node's minimum mode and the engine's promote/redistribute switches all derive
    from it. ``FULL`` everything; ``NR`` no rules; ``SR`` static rules (no new, no adoption);
    ``LE`` local evolution only; ``G2L`` global-to-local adoption (+ local evolution), no
    uploads; ``L2G`` uploads (+ local evolution), no adoption. The values are the persisted
    form (client state files); :attr:`config_name` is the ``rules.mode`` spelling.
    """

    FULL = "full"
    NR = "nr"
    SR = "sr"
    LE = "le"
    G2L = "g2l"
    L2G = "l2g"

    @property
    def config_name(self) -> str:
        """The ``rules.mode`` spelling: ``full``, ``NR``, ``SR``, ``LE``, ``G2L``, ``L2G``."""
        return "full" if self is RuleMode.FULL else self.name

    @classmethod
    def parse(cls, name: str) -> RuleMode:
        """The mode of a ``rules.mode`` name (exact spelling).

        Raises
        ------
        ValueError
            If ``name`` is none of :data:`RULE_MODES`; the message lists them.
        """
        for mode in cls:
            if mode.config_name == name:
                return mode
        raise ValueError(f"unknown rules.mode {name!r}; available: {list(RULE_MODES)}")

    @property
    def rank(self) -> int:
        """Enforcement order (higher = more of the rule loop runs): NR < SR < LE = G2L = L2G < full.

        LE, G2L and L2G each add one direction of evolution to SR and are not ordered among
        themselves; a node's ``min-rule-mode`` compares ranks.
        """
        return {RuleMode.NR: 0, RuleMode.SR: 1, RuleMode.FULL: 3}.get(self, 2)

    @property
    def enforce(self) -> bool:
        """Whether rules are applied at all."""
        return self is not RuleMode.NR

    @property
    def create_local(self) -> bool:
        """Whether uncovered constraints create local rules."""
        return self in (RuleMode.LE, RuleMode.G2L, RuleMode.L2G, RuleMode.FULL)

    @property
    def upload(self) -> bool:
        """Whether generalized candidates are uploaded (local-to-global)."""
        return self in (RuleMode.L2G, RuleMode.FULL)

    @property
    def adopt(self) -> bool:
        """Whether redistributed global rules are adapted (global-to-local) and fed back on."""
        return self in (RuleMode.G2L, RuleMode.FULL)


#: The ``rules.mode`` names, ``full`` first (what configs and presets may name).
RULE_MODES: tuple[str, ...] = tuple(m.config_name for m in RuleMode)


@dataclass(frozen=True)
class AdaptDecision:
    """How one redistributed global rule was handled (client-local log)."""

    global_id: str
    counterpart: str | None
    phi_global: float
    phi_counterpart: float | None
    active: bool
    new: bool


@dataclass(frozen=True)
class AdaptReport:
    """Result of :meth:`LocalRuleRepository.adapt`; ``skipped`` counts inactive global rules."""

    decisions: tuple[AdaptDecision, ...] = ()
    skipped: int = 0
    disabled: bool = False

    @property
    def adopted(self) -> list[str]:
        """Global ids active locally after this call."""
        return [d.global_id for d in self.decisions if d.active]
