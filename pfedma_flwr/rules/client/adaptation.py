"""The adoption decision of redistributed global rules on one client (DESIGN §3.6, issue 12).

:meth:`.local_repo.LocalRuleRepository.adapt` picks the snapshot's rules it may adopt
(:func:`admissible`), stores them as inactive global copies, then calls :func:`decide_flags`,
which sets every copy's flag and that of its local counterpart from ``Φ``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.schema import GlobalRule
from pfedma_flwr.rules.client.local_entries import Entry
from pfedma_flwr.rules.client.relevance import MAX_ITEMS, detector_relevance, fire_matrix
from pfedma_flwr.rules.model import PrivacyRule, from_global
from pfedma_flwr.rules.modes import AdaptDecision, local_utility
from pfedma_flwr.rules.pii import PiiRecognizer
from pfedma_flwr.rules.safety import MatchBudget


def admissible(
    global_rules: Sequence[GlobalRule], quarantined: Collection[str], *, limit: int
) -> tuple[list[tuple[GlobalRule, PrivacyRule]], list[tuple[GlobalRule, ValueError]]]:
    """The active, runnable rules to adapt, each with its local form, in order; and the rejected.

    At most ``limit`` rules; one whose copy ``g:<id>`` is in ``quarantined`` is skipped. One
    whose local form fails (:func:`~pfedma_flwr.rules.model.from_global` checks its detectors)
    is rejected with its error: the repository quarantines it, never adopts it, and a later
    rule of the same id is skipped as quarantined.
    """
    todo: list[tuple[GlobalRule, PrivacyRule]] = []
    rejected: list[tuple[GlobalRule, ValueError]] = []
    bad: set[str] = set()
    for g in global_rules:
        gid = f"g:{g.rule_id}"
        if not g.active or gid in quarantined or gid in bad:
            continue
        if len(todo) >= limit:
            break
        try:
            local = from_global(g)  # checks its detectors, once per message
        except ValueError as e:
            rejected.append((g, e))
            bad.add(gid)
            continue
        todo.append((g, local))
    return todo, rejected


def decide_flags(
    entries: Mapping[str, Entry],
    quarantined: Mapping[str, str],
    kept: Sequence[GlobalRule],
    new_ids: set[str],
    experience: Sequence[str],
    embedder: Embedder,
    *,
    sim_threshold: float,
    phi_default: float,
    recognizer: PiiRecognizer | None,
    budget: MatchBudget | None,
) -> list[AdaptDecision]:
    """Turn each global copy of ``kept`` (stored as ``g:<id>``) on or off, in ``kept``'s order.

    ``Rel`` is :func:`~pfedma_flwr.rules.client.relevance.detector_relevance` over the last
    :data:`~pfedma_flwr.rules.client.relevance.MAX_ITEMS` experience items, for every stored rule in
    one encode call. A copy's counterpart is the most similar *local-origin* rule of its scope
    with cos ≥ ``sim_threshold`` that is active or that this same copy displaced; with one, the
    copy is active iff ``Φ(ω_g) > Φ(ω_l)`` and a counterpart without literals takes the
    opposite flag (ties keep the local rule); a literal-bearing counterpart always stays active
    (protection only grows). Without one, the copy is active iff ``Φ(ω_g) > phi_default``.
    ``new_ids`` names copies stored by this call (for the log).
    """
    ids = list(entries)
    rules = [entries[i].rule for i in ids]
    items = [x for x in experience if x][-MAX_ITEMS:]
    embs = embedder.encode([r.text for r in rules] + items)
    emb, exp = embs[: len(ids)], embs[len(ids):]
    fires = fire_matrix(rules, items, recognizer, budget=budget)
    rel = detector_relevance(fires, emb, exp)
    sims = emb @ emb.T
    row = {rid: k for k, rid in enumerate(ids)}
    scopes = np.array([r.scope for r in rules])
    usable = np.array([i not in quarantined for i in ids], dtype=bool)
    is_local = np.array([r.origin == "local" for r in rules], dtype=bool)

    def phi(rid: str) -> float:
        e = entries[rid]
        return local_utility(float(rel[row[rid]]), e.n_trigger, e.n_valid, e.n_conflict)

    decisions: list[AdaptDecision] = []
    for g in kept:
        gid = f"g:{g.rule_id}"
        k = row[gid]
        # The counterpart is a local rule in service (or one this very copy displaced):
        # never another global copy, never a rule some other copy displaced.
        free = np.array([entries[i].active or entries[i].displaced_by == gid for i in ids],
                        dtype=bool)
        # 1e-6 absorbs float32 rounding of a cosine that is exactly the threshold.
        cand = (scopes == g.scope) & (sims[k] >= sim_threshold - 1e-6) & usable & is_local
        cand &= free
        cand[k] = False
        phi_g = phi(gid)
        if cand.any():
            j = int(np.argmax(np.where(cand, sims[k], -np.inf)))
            lid = ids[j]
            phi_l = phi(lid)
            win = phi_g > phi_l
            entries[gid].active = win
            le = entries[lid]
            # Protection only grows: a literal-bearing local rule is never switched off.
            keep_local = not win or bool(le.rule.literals)
            le.active, le.displaced_by = keep_local, None if keep_local else gid
            decisions.append(AdaptDecision(g.rule_id, lid, phi_g, phi_l, win, gid in new_ids))
        else:
            win = phi_g > phi_default
            entries[gid].active = win
            decisions.append(AdaptDecision(g.rule_id, None, phi_g, None, win, gid in new_ids))
    return decisions


__all__ = ["admissible", "decide_flags"]
