"""``Resolve`` (DESIGN §3.5): cluster rules by similarity, merge equivalents, pick the active one.

Pure function over arrays; :class:`.global_repo.GlobalRuleRepository` calls it
after every promotion.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from pfedma_flwr.rules.constants import SIM_THRESHOLD
from pfedma_flwr.rules.server.promotion import SIM_EPS


@dataclass(frozen=True)
class ResolveResult:
    """Output of :func:`resolve`, indexed like its input rows.

    ``rep[i]`` is the row that row ``i`` merged into (itself for a representative); ``h``/``n``
    hold the merged scores at representative rows; ``active`` is True for exactly one
    representative per cluster; ``cluster[i]`` is the leader row of ``i``'s cluster.
    """

    rep: np.ndarray
    h: np.ndarray
    n: np.ndarray
    active: np.ndarray
    cluster: np.ndarray

    @property
    def representatives(self) -> list[int]:
        """Rows that survive, in input (age) order."""
        return [int(i) for i in np.flatnonzero(self.rep == np.arange(len(self.rep)))]


def resolve(
    embeddings: np.ndarray,
    spec_keys: Sequence[Hashable],
    h: Sequence[float],
    n: Sequence[int],
    *,
    threshold: float = SIM_THRESHOLD,
    groups: Sequence[Hashable] | None = None,
    credible: Sequence[bool] | None = None,
) -> ResolveResult:
    """``Resolve`` (DESIGN §3.5): cluster, merge equivalents, pick one active rule per cluster.

    Rows must be in age order (oldest first). One similarity matrix is computed. Clusters are
    formed leader-first in age order: each unassigned row claims every unassigned row with
    cos ≥ ``threshold``. Within a cluster, rows with the same ``spec_keys`` (action + detector
    spec) merge into the oldest: ``N`` summed, ``H`` the ``N``-weighted mean (the
    representative's ``H`` when all ``N`` are 0). The active representative is ``argmax H``,
    ties going to the older rule; the others stay, inactive. With ``groups`` (e.g. the rule
    scopes), rows of different groups never share a cluster: a query rule and a response rule
    of one constraint act in different places and must not switch each other off. With
    ``credible`` (issue 30), a representative none of whose merged rows has a credible H
    (:func:`~pfedma_flwr.rules.server.feedback.credible`) ranks at H = 0: a minority's ratings
    cannot switch the active rule.
    """
    e = np.asarray(embeddings, dtype=np.float32)
    m = e.shape[0] if e.ndim == 2 else -1
    if m < 0 or len(spec_keys) != m or len(h) != m or len(n) != m:
        raise ValueError("resolve: embeddings (m, d), spec_keys, h and n must all have m rows")
    hh = np.asarray(h, dtype=np.float64)
    nn = np.asarray(n, dtype=np.int64)
    if m == 0:
        empty = np.zeros(0, dtype=np.int64)
        return ResolveResult(empty, hh, nn, np.zeros(0, dtype=bool), empty)
    similar = (e @ e.T) >= threshold - SIM_EPS
    if groups is not None:
        if len(groups) != m:
            raise ValueError("resolve: groups must have one entry per row")
        g = np.array([hash(x) for x in groups])
        similar &= g[:, None] == g[None, :]
    cluster = np.full(m, -1, dtype=np.int64)
    for i in range(m):
        if cluster[i] < 0:
            members = similar[i] & (cluster < 0)
            members[i] = True
            cluster[members] = i
    # Merge equivalents: the oldest row of each (cluster, spec) group represents it.
    first: dict[tuple[int, Hashable], int] = {}
    rep = np.array([first.setdefault((int(cluster[i]), spec_keys[i]), i) for i in range(m)])
    n_sum = np.bincount(rep, weights=nn, minlength=m)
    hn_sum = np.bincount(rep, weights=hh * nn, minlength=m)
    is_rep = rep == np.arange(m)
    new_h = np.where(is_rep & (n_sum > 0), hn_sum / np.maximum(n_sum, 1), hh)
    new_n = np.where(is_rep, n_sum, nn).astype(np.int64)
    rank_h = new_h
    if credible is not None:
        if len(credible) != m:
            raise ValueError("resolve: credible must have one entry per row")
        trusted = np.bincount(rep, weights=np.asarray(credible, dtype=np.float64),
                              minlength=m) > 0
        rank_h = np.where(trusted, new_h, 0.0)
    # argmax H per cluster, ties -> older: sort reps by (cluster, -H, age) and take the first.
    reps = np.flatnonzero(is_rep)
    order = reps[np.lexsort((reps, -rank_h[reps], cluster[reps]))]
    head = np.ones(len(order), dtype=bool)
    head[1:] = cluster[order][1:] != cluster[order][:-1]
    active = np.zeros(m, dtype=bool)
    active[order[head]] = True
    return ResolveResult(rep=rep, h=new_h, n=new_n, active=active, cluster=cluster)
