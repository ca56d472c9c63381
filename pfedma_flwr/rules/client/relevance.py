"""``Rel(ω, X_i)``: how relevant a rule is to what this client actually handles (DESIGN §3.6).

The seed's ``Rel`` (cosine between the rule text and experience texts, MiniLM) measured 0.03–0.09
on GSM8K/MedQA and at most 0.29 on privacy text: below ``phi_default = 0.3`` everywhere, so no
global rule was ever adopted (issue 12). A rule's text says little; its *detectors* say what it
protects. So relevance is measured by firing them on the client's recent experience:

``Rel = min(1, F / F_REF) · (1/2 + 1/2 · S)``

- ``F`` = share of the experience items on which the rule's detectors fire;
- ``F_REF`` = :data:`FIRE_REF` (1 item in 8 is enough for full detector relevance);
- ``S`` = max cosine between the rule text and the items it fired on (0 if none): among rules
  that fire, the one whose statement matches the sensitive contexts ranks higher.

A rule that fires on no item has ``Rel = 0`` whatever its text (no matching data, no adoption);
one that fires on at least ``F_REF`` of the items has ``Rel ≥ 0.5 > phi_default``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.pii import PiiRecognizer, PiiSpan, RegexPiiRecognizer
from pfedma_flwr.rules.safety import BudgetExhaustedError, MatchBudget, PatternTimeoutError
from pfedma_flwr.rules.spans import find_spans

#: Share of experience items on which a rule must fire for full detector relevance.
FIRE_REF = 0.125
#: Experience items examined (the most recent ones).
MAX_ITEMS = 64
_FALLBACK = RegexPiiRecognizer()


def fire_matrix(
    rules: Sequence[PrivacyRule],
    items: Sequence[str],
    recognizer: PiiRecognizer | None,
    *,
    budget: MatchBudget | None = None,
) -> np.ndarray:
    """``M[r, x]`` = whether rule ``r``'s detectors fire on item ``x`` (bool matrix).

    The recognizer runs once per item for the union of the rules' entity types. Without one,
    the dependency-free regex recognizer stands in (it finds structured identifiers only). A
    pattern that times out, or a spent budget, counts as not firing (relevance is an estimate;
    enforcement fails closed elsewhere).
    """
    rec = recognizer if recognizer is not None else _FALLBACK
    out = np.zeros((len(rules), len(items)), dtype=bool)
    types = list(dict.fromkeys(t for r in rules for t in r.entity_types))
    for j, x in enumerate(items):
        pii: list[PiiSpan] = list(rec.analyze(x, types)) if types and x else []
        for i, rule in enumerate(rules):
            try:
                out[i, j] = bool(find_spans(rule, x, rec, pii_spans=pii, budget=budget))
            except (PatternTimeoutError, BudgetExhaustedError):
                out[i, j] = False
    return out


def detector_relevance(
    fires: np.ndarray, rule_embs: np.ndarray, item_embs: np.ndarray
) -> np.ndarray:
    """``Rel`` per rule from its fire row and the cosine to the items it fired on (module doc).

    Parameters
    ----------
    fires : ndarray of bool, shape (n_rules, n_items)
    rule_embs : ndarray, shape (n_rules, dim)
        Unit-norm embeddings of the rule texts.
    item_embs : ndarray, shape (n_items, dim)
        Unit-norm embeddings of the items.

    Returns
    -------
    ndarray of float, shape (n_rules,), values in ``[0, 1]``.
    """
    n_rules, n_items = fires.shape
    if n_items == 0 or n_rules == 0:
        return np.zeros(n_rules)
    share = fires.sum(axis=1) / n_items
    cos = np.asarray(rule_embs, dtype=np.float32) @ np.asarray(item_embs, dtype=np.float32).T
    s = np.where(fires, np.maximum(cos, 0.0), 0.0).max(axis=1)
    return np.minimum(1.0, share / FIRE_REF) * (0.5 + 0.5 * np.minimum(s, 1.0))


__all__ = ["FIRE_REF", "MAX_ITEMS", "detector_relevance", "fire_matrix"]
