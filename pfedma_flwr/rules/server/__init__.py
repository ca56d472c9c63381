"""The server's side of rule co-evolution: ``Ω_global``, promotion, feedback, Resolve (§3.3–3.5).

Never imported by client code (``tests/unit/test_import_contracts.py``).
"""

from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.rules.server.promotion import (
    CandidatePool,
    build_candidate_pool,
    feedback_score,
    promote,
    support_proportions,
    update_h_score,
)
from pfedma_flwr.rules.server.resolve import resolve

__all__ = [
    "CandidatePool",
    "GlobalRuleRepository",
    "build_candidate_pool",
    "feedback_score",
    "promote",
    "resolve",
    "support_proportions",
    "update_h_score",
]
