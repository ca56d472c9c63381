"""Privacy rules (DESIGN §3–4), arranged by side.

- ``pfedma_flwr.rules`` (this package's modules): what both sides use — the rule model
  (:mod:`.model`), detection (PII recognizers, private facts, spans, normalisation, the
  pattern safety budget), enforcement and generalisation, the initial policies and the modes.
- :mod:`pfedma_flwr.rules.client`: the client's private rule store ``Ω_i`` and what works on
  it (adaptation, relevance to ``X_i``, the outgoing check). Never loaded by server code.
- :mod:`pfedma_flwr.rules.server`: the server's global repository ``Ω_global``, the
  candidate pool and promotion, feedback, H-scores and Resolve. Never loaded by client code.

The import contracts (``tests/unit/test_import_contracts.py``) check the two boundaries on
the folder layout. This package re-exports only the shared names, so importing it loads
neither side.
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
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.pii import (
    PiiRecognizer,
    PresidioPiiRecognizer,
    RegexPiiRecognizer,
    get_recognizer,
)
from pfedma_flwr.rules.safety import MatchBudget, UnsafePatternError, check_pattern
from pfedma_flwr.rules.spans import find_spans

__all__ = [
    "EnforcementResult",
    "MatchBudget",
    "PiiRecognizer",
    "PresidioPiiRecognizer",
    "PrivacyRule",
    "RegexPiiRecognizer",
    "RuleOutcome",
    "Uncovered",
    "UnsafePatternError",
    "apply_query_rules",
    "canonical_text",
    "check_pattern",
    "enforce_response",
    "find_spans",
    "find_uncovered",
    "generalize",
    "get_recognizer",
    "rule_from_uncovered",
]
