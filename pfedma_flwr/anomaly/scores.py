"""Multi-factor anomaly score of uploaded responses and the tolerance filter (DESIGN §3.7).

``A_i = (1 − α_con)·[λ_pool·max(a_int, a_evi) + (1 − λ_pool)·(a_int + a_evi)/2] + α_con·a_con``,
retained iff ``A_i ≤ tolerance`` and ``a_int ≤ intent_tolerance``. The intent and evidence
terms come from a frozen :class:`~pfedma_flwr.anomaly.judges.Judge` (one batched call per term
and round); the consensus term is deterministic (paper App. D).

Ablations (paper Fig. 2a) drop a term and renormalize the remaining weights:

=============  ==============================================================================
``none``       the formula above
``-intent``    ``(1 − α)·a_evi + α·a_con``  (the judge bracket over the one remaining term)
``-evidence``  ``(1 − α)·a_int + α·a_con``
``-consensus`` ``λ·max(a_int, a_evi) + (1 − λ)·(a_int + a_evi)/2``  (bracket weight 1)
``-all``       the evaluator is removed: no judge call, ``A = 0``, every parsed response kept
=============  ==============================================================================

With ``coherent`` consensus (the default), ``A`` is at least ``(1 − J)·a_con`` with ``J`` the
judge bracket (:func:`consensus_floor`, issue 30), and the evidence term never credits a claim
with itself (:mod:`~pfedma_flwr.anomaly.evidence`).

A dropped term is not computed (no judge call for it) and is reported as 0.

The intent bound is ours (the paper gives no formula): under the seed's weights the intent term
contributes at most ``(1 − α)(λ + (1 − λ)/2) = 0.455`` to ``A``, so a response that pursues an
intent-risk category is filtered only when its evidence or consensus is also off. Agreeing
colluders with self-consistent claims never are: on ASB's injection tasks with 2 malicious
clients of 5, every attacked reply scored ``a_int`` 0.78 (benign replies at most 0.37) and 34
of 41 were retained (docs/threat_model.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from pfedma_flwr.anomaly.evidence import claim_supports, references, states_answer
from pfedma_flwr.anomaly.judges import Judge
from pfedma_flwr.answers import FREE_TEXT_KINDS, Options, answers_equal
from pfedma_flwr.embeddings import Embedder, cosine_matrix
from pfedma_flwr.protocol.schema import StructuredResponse

logger = logging.getLogger(__name__)


class Ablation(StrEnum):
    """Evaluator ablations (config ``anomaly.ablation``)."""

    NONE = "none"
    NO_INTENT = "-intent"
    NO_EVIDENCE = "-evidence"
    NO_CONSENSUS = "-consensus"
    ALL = "-all"


def _unit(name: str, v: float) -> float:
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {v}")
    return float(v)


def anomaly_score(
    a_int: float, a_evi: float, a_con: float, lambda_pool: float = 0.3, alpha_con: float = 0.3
) -> float:
    """Overall anomaly ``A_i`` of one response (DESIGN §3.7, paper App. D).

    Parameters
    ----------
    a_int, a_evi, a_con : float
        Intent, evidence and consensus anomalies, each in [0, 1].
    lambda_pool : float
        Weight of the max-pooling of the two judge terms against their mean.
    alpha_con : float
        Weight of the consensus term.

    Returns
    -------
    float
        ``(1 − α)·[λ·max(a_int, a_evi) + (1 − λ)·(a_int + a_evi)/2] + α·a_con`` ∈ [0, 1]
        (the seed's formula; the evaluator adds :func:`consensus_floor`).
    """
    for name, v in (("a_int", a_int), ("a_evi", a_evi), ("a_con", a_con),
                    ("lambda_pool", lambda_pool), ("alpha_con", alpha_con)):
        _unit(name, v)
    judge = lambda_pool * max(a_int, a_evi) + (1.0 - lambda_pool) * (a_int + a_evi) / 2.0
    return (1.0 - alpha_con) * judge + alpha_con * a_con


def consensus_floor(score: float, judge: float, a_con: float) -> float:
    """``max(score, (1 − J)·a_con)``: consensus keeps its weight when the judge terms are clean.

    In the seed's formula the consensus term weighs ``α = 0.3``, so with clean intent and
    evidence (judge bracket ``J = 0``) ``A ≤ 0.3`` stays below the 0.5 tolerance whatever the
    consensus (issue 30). The floor gives consensus the weight the judge terms leave unused:
    an answer that deviates from a coherent consensus of the others is filtered when nothing
    else speaks for or against it, and nothing changes when ``J`` already dominates. Applied
    with ``coherent`` consensus only: the seed's ``mean`` scores both sides of an honest
    two-way split 1.
    """
    return max(score, (1.0 - judge) * a_con)


def ablated_anomaly_score(
    a_int: float,
    a_evi: float,
    a_con: float,
    *,
    lambda_pool: float = 0.3,
    alpha_con: float = 0.3,
    ablation: Ablation | str = Ablation.NONE,
    floor: bool = False,
) -> float:
    """``A_i`` under an evaluator ablation (module docstring), ``floor``: :func:`consensus_floor`.

    The floor is off by default (the seed's formulas); the evaluator turns it on.
    """
    ab = Ablation(ablation)
    if ab is Ablation.NONE:
        score = anomaly_score(a_int, a_evi, a_con, lambda_pool, alpha_con)
        judge = lambda_pool * max(a_int, a_evi) + (1.0 - lambda_pool) * (a_int + a_evi) / 2.0
        return consensus_floor(score, judge, a_con) if floor else score
    if ab is Ablation.ALL:
        return 0.0
    for name, v in (("a_int", a_int), ("a_evi", a_evi), ("a_con", a_con),
                    ("lambda_pool", lambda_pool), ("alpha_con", alpha_con)):
        _unit(name, v)
    if ab in (Ablation.NO_INTENT, Ablation.NO_EVIDENCE):
        judge = a_evi if ab is Ablation.NO_INTENT else a_int
        score = (1.0 - alpha_con) * judge + alpha_con * a_con
        return consensus_floor(score, judge, a_con) if floor else score
    return lambda_pool * max(a_int, a_evi) + (1.0 - lambda_pool) * (a_int + a_evi) / 2.0


def evidence_anomaly(supports: Sequence[float]) -> float:
    """``a_evi = 1 − mean`` claim support (DESIGN §3.7); a response without claims scores 1."""
    if not supports:
        return 1.0
    return float(np.clip(1.0 - float(np.mean(supports)), 0.0, 1.0))


def answer_similarity_matrix(
    answers: Sequence[str], kind: str, embedder: Embedder, *, options: Options = None
) -> np.ndarray:
    """``sim(a_i, a_j)``: 1 for equal canonical answers; for free text, else embedding cosine.

    Numbers, option letters and math expressions are compared by canonical equality only
    (DESIGN §3.7 revision: MiniLM gave "C" vs "D" 0.65 and "12" vs "17" 0.74, so wrong
    answers looked like agreement). Blank answers are equal to nothing: similarity 0 to
    everyone, including other blank answers (and themselves).
    """
    n = len(answers)
    if n == 0:
        return np.zeros((0, 0), dtype=np.float32)
    if kind in FREE_TEXT_KINDS:
        sim = np.clip(cosine_matrix(embedder.encode(list(answers))), 0.0, 1.0)
    else:
        sim = np.zeros((n, n), dtype=np.float32)
    for i in range(n):
        for j in range(i, n):
            if answers_equal(answers[i], answers[j], kind, options=options):
                sim[i, j] = sim[j, i] = 1.0
    return np.asarray(sim, dtype=np.float32)


def similarity_to(
    answers: Sequence[str], reference: str, kind: str, embedder: Embedder,
    *, options: Options = None,
) -> list[float]:
    """``sim(a_i, reference)`` for each answer (e.g. against ``z.answer`` for DESIGN §3.8)."""
    if not answers:
        return []
    m = answer_similarity_matrix([*answers, reference], kind, embedder, options=options)
    return [float(v) for v in m[:-1, -1]]


CONSENSUS_MODES = ("coherent", "mean")


def consensus_anomalies(
    answers: Sequence[str], kind: str, embedder: Embedder, *, options: Options = None,
    prior: Sequence[str] = (), mode: str = "coherent",
) -> list[float]:
    """Consensus anomaly of each answer against the other participants and ``prior``.

    ``mean`` is the seed's ``a_con,i = 1 − mean_j sim(a_i, a_j)``. ``coherent`` (default,
    docs/accuracy.md) weights it by how much the others agree among themselves,
    ``a_con,i = (1 − mean_j sim(a_i, a_j)) · mean_{j<k} sim(a_j, a_k)`` over ``j, k ≠ i``:
    disagreeing with a consensus marks an outlier, disagreeing with a split does not. With one
    other answer there is no consensus to deviate from, so a two-way split scores 0 for both
    (under ``mean`` both scored 1 and honest pairs were filtered).

    ``prior`` holds the query's retained answers of earlier rounds (DESIGN §3.7 revision), so a
    later-round answer is checked against everything the federation already accepted, not
    only against the (often single) participant of its own round. 0 with nobody to compare.
    """
    if mode not in CONSENSUS_MODES:
        raise ValueError(f"consensus mode must be one of {CONSENSUS_MODES}, got {mode!r}")
    n, m = len(answers), len(prior)
    if n == 0 or n + m <= 1:
        return [0.0] * n
    sim = answer_similarity_matrix([*answers, *prior], kind, embedder,
                                   options=options).astype(np.float64)
    total = n + m
    block = sim[:n]
    raw = (block.sum(axis=1) - np.diag(sim)[:n]) / (total - 1)
    out = [float(np.clip(1.0 - v, 0.0, 1.0)) for v in raw]
    if mode == "mean":
        return out
    off = sim.copy()
    np.fill_diagonal(off, 0.0)
    pair_sum = off.sum() / 2.0
    for i in range(n):
        rest = total - 1
        if rest < 2:
            out[i] = 0.0
            continue
        # pairs among the others: all pairs minus those involving i
        coherence = (pair_sum - off[i].sum()) / (rest * (rest - 1) / 2.0)
        out[i] = float(np.clip(out[i] * coherence, 0.0, 1.0))
    return out


@dataclass(frozen=True)
class AnomalyResult:
    """Evaluation of one response: the three terms, ``A_i``, and the filter decision.

    ``reason`` is ``"retained"``, ``"above_tolerance"``, ``"intent_above_tolerance"`` (``A``
    within the tolerance but ``a_int`` above the intent bound) or ``"unparsed"`` (no structured
    response: format failure or refusal; such responses take no part in consensus).
    """

    a_int: float
    a_evi: float
    a_con: float
    score: float
    retained: bool
    reason: str

    def to_dict(self) -> dict[str, float | bool | str]:
        """Plain dict for logs and result files."""
        return {
            "a_int": self.a_int, "a_evi": self.a_evi, "a_con": self.a_con,
            "score": self.score, "retained": self.retained, "reason": self.reason,
        }


def _judge_values(values: Sequence[float], n: int, what: str, *, bad: float) -> list[float]:
    """Length-check a judge's output and clip it to [0, 1]; a non-finite value becomes ``bad``."""
    if len(values) != n:
        raise RuntimeError(f"judge returned {len(values)} {what} values for {n} responses")
    out = []
    for v in values:
        f = float(v)
        if not np.isfinite(f):
            logger.warning("judge returned non-finite %s %r; using %.1f", what, v, bad)
            f = bad
        out.append(float(np.clip(f, 0.0, 1.0)))
    return out


UNPARSED = AnomalyResult(a_int=0.0, a_evi=0.0, a_con=0.0, score=1.0, retained=False,
                         reason="unparsed")


def _consensus_by_response(
    groups: Sequence[Sequence[StructuredResponse | None]], kinds: Sequence[str],
    embedder: Embedder, *, options: Sequence[Options] | None,
    prior: Sequence[Sequence[str]] | None, mode: str,
) -> dict[tuple[int, int], float]:
    """``A_con`` of each parsed response, keyed (group, position), within its group only."""
    out: dict[tuple[int, int], float] = {}
    for g, grp in enumerate(groups):
        idx = [k for k, r in enumerate(grp) if r is not None]
        opts = options[g] if options is not None else None
        answers = [grp[k].final_answer for k in idx]  # type: ignore[union-attr]
        earlier = list(prior[g]) if prior is not None else []
        for k, v in zip(idx, consensus_anomalies(answers, kinds[g], embedder, options=opts,
                                                 prior=earlier, mode=mode),
                        strict=True):
            out[(g, k)] = v
    return out


def evaluate_batch(
    groups: Sequence[Sequence[StructuredResponse | None]],
    *,
    kinds: Sequence[str],
    judge: Judge,
    embedder: Embedder,
    lambda_pool: float = 0.3,
    alpha_con: float = 0.3,
    tolerance: float = 0.5,
    intent_tolerance: float = 1.0,
    ablation: Ablation | str = Ablation.NONE,
    options: Sequence[Options] | None = None,
    prior: Sequence[Sequence[str]] | None = None,
    consensus: str = "coherent",
    queries: Sequence[str] | None = None,
) -> list[list[AnomalyResult]]:
    """Score the responses of several queries of one round, one judge call per term.

    Parameters
    ----------
    groups : Sequence[Sequence[StructuredResponse | None]]
        Per query, the responses of its selected clients (``None`` = unparsed or refused).
        Consensus is computed within a group only.
    kinds : Sequence[str]
        Answer kind per group (see :mod:`pfedma_flwr.answers`).
    judge, embedder
        Frozen judge and the shared embedding model.
    lambda_pool, alpha_con, tolerance : float
        DESIGN §3.7 constants, each in [0, 1].
    intent_tolerance : float
        Bound on ``a_int`` alone (module docstring); 1.0 (the default here) leaves it off.
    ablation : Ablation or str
        Evaluator ablation (module docstring).
    options : Sequence[Options], optional
        Per group multiple-choice options for canonical answers.
    prior : Sequence[Sequence[str]], optional
        Per group the retained answers of earlier rounds (consensus is taken against them too).
    consensus : str
        ``coherent`` or ``mean`` (see :func:`consensus_anomalies`).
    queries : Sequence[str], optional
        Per group the task text: evidence is checked against it
        (:mod:`~pfedma_flwr.anomaly.evidence`).

    Returns
    -------
    list[list[AnomalyResult]]
        Same shape as ``groups``.
    """
    ab = Ablation(ablation)
    for name, v in (("lambda_pool", lambda_pool), ("alpha_con", alpha_con),
                    ("tolerance", tolerance), ("intent_tolerance", intent_tolerance)):
        _unit(name, v)
    for what, seq in (("kinds", kinds), ("option sets", options),
                      ("prior answer lists", prior), ("query texts", queries)):
        if seq is not None and len(seq) != len(groups):
            raise ValueError(f"got {len(seq)} {what} for {len(groups)} groups")

    parsed = [(g, k, r) for g, grp in enumerate(groups) for k, r in enumerate(grp) if r is not None]
    responses = [r for _, _, r in parsed]
    skip_judge = ab is Ablation.ALL
    n_resp = len(responses)
    a_int = [0.0] * n_resp
    if responses and not (skip_judge or ab is Ablation.NO_INTENT):
        risks = judge.intent_risk([r.sentences() for r in responses])
        a_int = _judge_values(risks, n_resp, "intent", bad=1.0)
    a_evi = [0.0] * n_resp
    if responses and not (skip_judge or ab is Ablation.NO_EVIDENCE):
        # evidence that only restates its claim is no evidence; the rest is checked against
        # the query and the other clients' responses too (anomaly/evidence.py, issue 30)
        supports = claim_supports(judge, responses, references(groups, queries))
        a_evi = [
            evidence_anomaly(_judge_values(sup, len(r.claims), "support", bad=0.0))
            if states_answer(r, kinds[g], options[g] if options is not None else None) else 1.0
            for sup, r, (g, _, _) in zip(supports, responses, parsed, strict=True)
        ]

    a_con: dict[tuple[int, int], float] = {}
    if not (skip_judge or ab is Ablation.NO_CONSENSUS):
        a_con = _consensus_by_response(groups, kinds, embedder, options=options, prior=prior,
                                       mode=consensus)

    out: list[list[AnomalyResult]] = [[UNPARSED] * len(grp) for grp in groups]
    for n, (g, k, _) in enumerate(parsed):
        ai, ae, ac = float(a_int[n]), float(a_evi[n]), a_con.get((g, k), 0.0)
        score = ablated_anomaly_score(ai, ae, ac, lambda_pool=lambda_pool, alpha_con=alpha_con,
                                      ablation=ab, floor=consensus == "coherent")
        reason = ("above_tolerance" if score > tolerance
                  else "intent_above_tolerance" if ai > intent_tolerance else "retained")
        out[g][k] = AnomalyResult(a_int=ai, a_evi=ae, a_con=ac, score=score,
                                  retained=reason == "retained", reason=reason)
    return out


def evaluate_responses(
    responses: Sequence[StructuredResponse | None],
    *,
    kind: str,
    judge: Judge,
    embedder: Embedder,
    lambda_pool: float = 0.3,
    alpha_con: float = 0.3,
    tolerance: float = 0.5,
    intent_tolerance: float = 1.0,
    ablation: Ablation | str = Ablation.NONE,
    options: Options = None,
    consensus: str = "coherent",
) -> list[AnomalyResult]:
    """:func:`evaluate_batch` for the responses to a single query."""
    return evaluate_batch(
        [responses], kinds=[kind], judge=judge, embedder=embedder, lambda_pool=lambda_pool,
        alpha_con=alpha_con, tolerance=tolerance, intent_tolerance=intent_tolerance,
        ablation=ablation, options=[options], consensus=consensus,
    )[0]
