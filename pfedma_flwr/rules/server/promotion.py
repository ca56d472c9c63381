"""Server-side rule formulas: candidate pool, support, promotion, feedback score, H-score.

Pure functions over arrays and dataclasses (DESIGN §3.1–3.4, seed App. F). The lead re-exports
``support_proportions``, ``promote``, ``feedback_score`` and ``update_h_score`` from
``pfedma_flwr.equations``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.schema import RuleCandidate
from pfedma_flwr.rules.constants import SIM_THRESHOLD
from pfedma_flwr.rules.guard_catalogue import GUARD_SCOPE, catalogue_problem
from pfedma_flwr.rules.model import check_detectors
from pfedma_flwr.rules.normalize import normalize_text, text_key
from pfedma_flwr.rules.probe import entity_problem

if TYPE_CHECKING:
    from pfedma_flwr.rules.pii import PiiRecognizer

#: Absorbs float32 rounding, so a pair whose cosine is exactly the threshold counts as similar.
SIM_EPS = 1e-6
#: Distinct candidates one client may add to one round's pool (measured attack: 256 each).
MAX_CANDIDATES_PER_CLIENT = 8


@dataclass(frozen=True)
class SimilarityStats:
    """Off-diagonal cosine distribution of a pool (round log, DESIGN §3.1); ``None`` if n < 2."""

    n: int
    min: float | None = None
    mean: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, sims: np.ndarray) -> SimilarityStats:
        """Stats of the off-diagonal entries of a square similarity matrix."""
        n = int(sims.shape[0])
        if n < 2:
            return cls(n=n)
        off = sims[~np.eye(n, dtype=bool)]
        return cls(n=n, min=float(off.min()), mean=float(off.mean()), max=float(off.max()))


@dataclass(frozen=True)
class CandidatePool:
    """The unordered candidate pool ``B^t`` (no client ids) with its embedding matrix.

    ``embeddings[k]`` is ``e(candidates[k].text)``, kept so the server never re-encodes it.
    ``n_dropped`` counts candidates removed by the distinct-client check, ``n_capped`` those
    beyond a client's per-round cap. ``owners[k]`` is an anonymous contributor index (the same
    for candidates of one client; no client id) for the per-client promotion cap, and
    ``problems[k]`` is ``""`` for a usable candidate or why its detectors cannot run anywhere
    or would alter task text or answers (:func:`candidate_problem`): such a candidate still
    counts in ``|B^t|`` (support is over texts) but is never promoted. ``unsafe_by_client``
    counts those per source client for the round log (promotion never reads it).
    """

    candidates: tuple[RuleCandidate, ...]
    embeddings: np.ndarray
    n_contributors: int = 0
    n_dropped: int = 0
    owners: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()
    n_capped: int = 0
    unsafe_by_client: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.embeddings.ndim != 2 or self.embeddings.shape[0] != len(self.candidates):
            raise ValueError(
                f"pool embeddings {self.embeddings.shape} do not match "
                f"{len(self.candidates)} candidates"
            )
        n = len(self.candidates)
        # Pools built by hand (tests, plug-ins): each candidate its own contributor, all checked.
        if not self.owners:
            object.__setattr__(self, "owners", tuple(range(n)))
        if not self.problems:
            object.__setattr__(self, "problems", tuple(candidate_problem(c)
                                                       for c in self.candidates))
        if len(self.owners) != n or len(self.problems) != n:
            raise ValueError("pool owners/problems must have one entry per candidate")

    def __len__(self) -> int:
        return len(self.candidates)

    @classmethod
    def empty(cls, dim: int) -> CandidatePool:
        """A pool with no candidates."""
        return cls((), np.zeros((0, dim), dtype=np.float32))


def build_candidate_pool(
    candidates_by_client: Mapping[str, Sequence[RuleCandidate]],
    retained: Collection[str],
    embedder: Embedder,
    *,
    sim_threshold: float = SIM_THRESHOLD,
    rng: np.random.Generator,
    max_per_client: int = MAX_CANDIDATES_PER_CLIENT,
    recognizer: PiiRecognizer | None = None,
) -> CandidatePool:
    """``B^t``: retained clients' candidates, ≤ 1 per client per semantic cluster, ids stripped.

    Implements DESIGN §3.1 / seed App. F. Candidate texts are put in normal form first
    (:func:`clean_text`: a zero-width space does not make a new text). Clients are visited in
    sorted order and each keeps, in upload order, a candidate only if it is below
    ``sim_threshold`` to every candidate it already kept, and at most ``max_per_client`` of
    them (one client cannot flood the pool). All candidates are encoded in one call; the pool
    is then permuted with ``rng``. ``recognizer`` (the server's) probes entity types
    (:func:`candidate_problem`).
    """
    if not -1.0 <= sim_threshold <= 1.0:
        raise ValueError(f"sim_threshold must be in [-1, 1], got {sim_threshold}")
    if max_per_client < 1:
        raise ValueError(f"max_per_client must be >= 1, got {max_per_client}")
    clients = sorted(c for c in candidates_by_client if c in retained)
    flat: list[RuleCandidate] = []
    owner: list[int] = []
    for k, c in enumerate(clients):
        for cand in candidates_by_client[c]:
            if not isinstance(cand, RuleCandidate):
                raise ValueError(f"client {c!r} uploaded a {type(cand).__name__}, not a candidate")
            flat.append(dataclasses.replace(cand, text=clean_text(cand.text)))
            owner.append(k)
    if not flat:
        return CandidatePool.empty(embedder.dim)
    emb = np.asarray(embedder.encode([c.text for c in flat]), dtype=np.float32)
    sims = emb @ emb.T
    owners = np.asarray(owner)
    keep: list[int] = []
    n_capped = 0
    for k in range(len(clients)):
        kept: list[int] = []
        for i in (int(j) for j in np.flatnonzero(owners == k)):
            if not kept or sims[i, kept].max() < sim_threshold - SIM_EPS:
                if len(kept) >= max_per_client:
                    n_capped += 1
                    continue
                kept.append(int(i))
        keep.extend(kept)
    order = np.asarray(keep)[rng.permutation(len(keep))]
    problems = {i: candidate_problem(flat[i], recognizer) for i in keep}
    unsafe: dict[str, int] = {}
    for i, why in problems.items():
        if why:
            unsafe[clients[owner[i]]] = unsafe.get(clients[owner[i]], 0) + 1
    return CandidatePool(
        candidates=tuple(flat[i] for i in order),
        embeddings=emb[order],
        n_contributors=len({owner[i] for i in keep}),
        n_dropped=len(flat) - len(keep) - n_capped,
        owners=tuple(owner[i] for i in order),
        problems=tuple(problems[int(i)] for i in order),
        n_capped=n_capped,
        unsafe_by_client=dict(sorted(unsafe.items())),
    )


def clean_text(text: str) -> str:
    """A rule text in normal form with single spaces (what is embedded and stored)."""
    return " ".join(normalize_text(text).split())


def candidate_problem(candidate: RuleCandidate, recognizer: PiiRecognizer | None = None) -> str:
    """``""`` if a candidate is usable, else the reason (short).

    Its detectors must run on every node (:func:`~pfedma_flwr.rules.model.check_detectors`:
    each pattern is probed on real task text, numbers and bare answers), and its entity types
    must not alter a bare answer (response scope) or task text (query scope) under
    ``recognizer`` (:func:`~pfedma_flwr.rules.probe.entity_problem`).
    """
    if candidate.scope == GUARD_SCOPE:
        # a safety rule never redacts (its patterns measure relevance) and reaches other
        # clients' prompts: the fixed catalogue only, checked whole
        return catalogue_problem(candidate.text, candidate.category, candidate.action,
                                 candidate.entity_types, candidate.patterns)
    try:
        check_detectors(candidate.entity_types, candidate.patterns)
    except ValueError as e:
        return str(e)[:200]
    return entity_problem(candidate.entity_types, candidate.scope, recognizer)[:200]


def _support_from_sims(sims: np.ndarray, threshold: float) -> np.ndarray:
    n = sims.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    similar = sims >= threshold - SIM_EPS
    np.fill_diagonal(similar, False)  # j ≠ i: no self-support
    return similar.sum(axis=1) / max(1, n - 1)


def support_proportions(embeddings: np.ndarray, threshold: float = SIM_THRESHOLD) -> np.ndarray:
    """``ζ_i = Supp(ω̄_i) / max(1, |B| − 1)``, ``Supp`` = #{j ≠ i : cos ≥ threshold} (DESIGN §3.2).

    Parameters
    ----------
    embeddings : ndarray of shape (n, d)
        Unit-norm candidate embeddings (cos = dot product); one matrix product in total.
    threshold : float
        Similarity threshold (seed: 0.9).

    Returns
    -------
    ndarray of shape (n,)
        Support proportions in ``[0, 1]``.
    """
    e = np.asarray(embeddings, dtype=np.float32)
    if e.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (n, d), got shape {e.shape}")
    return _support_from_sims(e @ e.T, threshold)


def promote(zeta: np.ndarray) -> list[int]:
    """Indices of the promoted set ``G^t`` (DESIGN §3.2).

    ``[0]`` for a singleton pool; else every index tied at ``max ζ`` if ``max ζ > 0``; else
    ``[]`` (also for an empty pool).
    """
    z = np.asarray(zeta, dtype=np.float64).ravel()
    if z.size == 0:
        return []
    if z.size == 1:
        return [0]
    top = float(z.max())
    if top <= 0.0:
        return []
    return [int(i) for i in np.flatnonzero(z == top)]


def owner_support(sims: np.ndarray, owners: Sequence[int], threshold: float = SIM_THRESHOLD
                  ) -> np.ndarray:
    """Per candidate, the number of *other contributors* with a candidate at cos ≥ threshold.

    A client's candidates count once however they are worded (issue 30): two paraphrases of
    one client support another client's candidate as one supporter, and never each other.
    """
    n = sims.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    own = np.asarray(owners)
    similar = (sims >= threshold - SIM_EPS) & (own[:, None] != own[None, :])
    return np.array([len(set(own[similar[i]].tolist())) for i in range(n)], dtype=np.int64)


def promote_supported(
    zeta: np.ndarray, supporters: np.ndarray, n_contributors: int, *,
    min_clients: int = 2, min_share: float = 0.5,
) -> list[int]:
    """``G^t`` (:func:`promote`) restricted to candidates backed by enough distinct clients.

    A candidate and its ``supporters[i]`` other contributors must be at least ``min_clients``
    clients and at least ``min_share`` of the ``n_contributors`` clients that uploaded (issue
    30: one client's singleton pool promoted an answer-redacting rule to every client).
    ``min_clients = 1, min_share = 0`` is the seed's rule (a singleton pool promotes).
    """
    if min_clients < 1 or not 0.0 <= min_share <= 1.0:
        raise ValueError(f"need min_clients >= 1 and min_share in [0, 1], got {min_clients}, "
                         f"{min_share}")
    need = max(min_clients, math.ceil(min_share * n_contributors - 1e-9))
    return [i for i in promote(zeta) if int(supporters[i]) + 1 >= need]


def admit(
    promoted: Sequence[int],
    pool: CandidatePool,
    known: Collection[tuple[str, tuple]],
    *,
    room: int,
    per_round: int,
    per_client: int,
) -> tuple[list[int], dict[str, int]]:
    """The promoted pool indices admitted as rules, in pool order, and refusals per reason.

    A candidate whose ``(text_key, spec)`` is ``known`` (already a rule, or admitted just
    before; :func:`~pfedma_flwr.rules.normalize.text_key`) is admitted without counting: it
    merges into that rule. Each new one needs detectors that
    run anywhere (``invalid``), its contributor below ``per_client`` new rules this round,
    fewer than ``room`` new rules in total (``full``) and fewer than ``per_round``.
    """
    seen = set(known)
    refused: dict[str, int] = {}
    per_owner: dict[int, int] = {}
    admitted: list[int] = []
    n_new = 0
    for i in promoted:
        c = pool.candidates[i]
        key = (text_key(c.text), (c.scope, c.action, tuple(sorted(set(c.entity_types))),
                                  tuple(sorted(set(c.patterns)))))
        if key in seen:
            admitted.append(i)
            continue
        owner = pool.owners[i]
        reason = ("invalid" if pool.problems[i] else
                  "per_client" if per_owner.get(owner, 0) >= per_client else
                  "full" if n_new >= room else
                  "per_round" if n_new >= per_round else "")
        if reason:
            refused[reason] = refused.get(reason, 0) + 1
            continue
        per_owner[owner] = per_owner.get(owner, 0) + 1
        n_new += 1
        seen.add(key)
        admitted.append(i)
    return admitted, refused


def feedback_score(d_trigger: int, d_valid: int, d_conflict: int) -> float:
    """``s_i(ω) = (Δn_valid − Δn_conflict) / Δn_trigger`` ∈ [−1, 1] (DESIGN §3.3).

    Raises ``ValueError`` unless ``d_trigger > 0`` (such rows are not evaluable).
    """
    if d_trigger <= 0:
        raise ValueError(f"feedback_score needs d_trigger > 0, got {d_trigger}")
    return (d_valid - d_conflict) / d_trigger


def update_h_score(h: float, n: int, scores: Sequence[float]) -> tuple[float, int]:
    """Running mean ``H ← (N·H + Σ s_i) / (N + |I|)``, ``N ← N + |I|`` (DESIGN §3.4).

    No scores this round (``I = ∅``) keeps ``(h, n)`` unchanged.
    """
    if n < 0:
        raise ValueError(f"evaluation count must be >= 0, got {n}")
    k = len(scores)
    if k == 0:
        return float(h), int(n)
    return (n * h + float(sum(scores))) / (n + k), n + k
