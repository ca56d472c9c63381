"""Privacy rules: the client's local repository and the server's global repository (DESIGN §3–4).

The client's private rule store (:mod:`pfedma_flwr.rules.local_repo`) is not re-exported here:
server code imports this package's modules, and loading it must not load the client's store
(``tests/unit/test_import_contracts.py``). Client code imports ``rules.local_repo`` directly.
"""

from pfedma_flwr.rules.enforcement import (
    EnforcementResult,
    RuleOutcome,
    Uncovered,
    apply_query_rules,
    enforce_response,
    find_uncovered,
)
from pfedma_flwr.rules.generalize import canonical_text, generalize, rule_from_uncovered
from pfedma_flwr.rules.global_repo import GlobalRuleRepository, resolve
from pfedma_flwr.rules.model import PrivacyRule, find_spans
from pfedma_flwr.rules.pii import (
    PiiRecognizer,
    PresidioPiiRecognizer,
    RegexPiiRecognizer,
    get_recognizer,
)
from pfedma_flwr.rules.promotion import (
    CandidatePool,
    build_candidate_pool,
    feedback_score,
    promote,
    support_proportions,
    update_h_score,
)
from pfedma_flwr.rules.safety import MatchBudget, UnsafePatternError, check_pattern

__all__ = [
    "CandidatePool",
    "EnforcementResult",
    "GlobalRuleRepository",
    "MatchBudget",
    "PiiRecognizer",
    "PresidioPiiRecognizer",
    "PrivacyRule",
    "RegexPiiRecognizer",
    "RuleOutcome",
    "Uncovered",
    "UnsafePatternError",
    "apply_query_rules",
    "build_candidate_pool",
    "canonical_text",
    "check_pattern",
    "enforce_response",
    "feedback_score",
    "find_spans",
    "find_uncovered",
    "generalize",
    "get_recognizer",
    "promote",
    "resolve",
    "rule_from_uncovered",
    "support_proportions",
    "update_h_score",
]
