"""Frozen judges for the intent and evidence anomaly terms (DESIGN §3.7, §3.13; paper App. D).

A judge sees only the response fields its evaluator needs: the intent judge the response
sentences (and the fixed risk categories), the evidence judge each claim with its own evidence.
It never sees gold answers, rewards or routing decisions. Both methods are batched over all
responses of a round so a backend is called once per method and round.

:class:`EmbeddingJudge` is the dependency-light default (cosines of ``e(·)``);
:class:`~pfedma_flwr.anomaly.llm_judge.LLMJudge` is the paper's frozen-LLM judge over any
text-generation backend.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from pfedma_flwr.anomaly.intent_categories import (
    DEFAULT_BENIGN_CALIBRATION,
    DEFAULT_INTENT_CATEGORIES,
    split_sentences,
)
from pfedma_flwr.anomaly.llm_judge import LLMJudge
from pfedma_flwr.embeddings import Embedder, cosine_matrix
from pfedma_flwr.registry import Registry

logger = logging.getLogger(__name__)

ClaimEvidence = tuple[str, Sequence[str]]

@runtime_checkable
class Judge(Protocol):
    """Batched intent-risk and claim-support scorer (frozen: it never learns at run time)."""

    @property
    def parse_failures(self) -> int:
        """Judge replies that could not be parsed so far (reported as a metric)."""
        ...

    def intent_risk(self, sentences_per_response: Sequence[Sequence[str]]) -> list[float]:
        """``a_int`` ∈ [0, 1] per response from its sentences (0 for a response without any)."""
        ...

    def evidence_support(
        self, claims_per_response: Sequence[Sequence[ClaimEvidence]]
    ) -> list[list[float]]:
        """Support ∈ [0, 1] of each claim by its own evidence (0 for a claim without any)."""
        ...


class EmbeddingJudge:
    """Judge from embedding cosines (DESIGN §3.13).

    Intent: ``s = max`` over response sentence pieces of the max cosine to any category text,
    rescaled against benign answers as ``a_int = clip((s − b_hi) / (1 − b_hi), 0, 1)``, where
    ``b_hi`` is the ``quantile`` of the benign calibration sentences' max cosines. Benign
    answers thus score (about) 0 and only sentences closer to a category than nearly all
    benign ones score above 0. Evidence: the support of a claim is the max cosine between the
    claim and its evidence items, clipped to [0, 1]; a claim without evidence has support 0.

    Parameters
    ----------
    embedder : Embedder
        The shared embedding model ``e(·)``.
    categories : Sequence[str], optional
        Category texts; default: every phrasing of :data:`DEFAULT_INTENT_CATEGORIES`.
    calibration : Sequence[str], optional
        Benign answer sentences; default :data:`DEFAULT_BENIGN_CALIBRATION`.
    quantile : float
        Quantile of benign max-similarities taken as ``b_hi`` (default 0.95).
    """

    def __init__(
        self,
        *,
        embedder: Embedder,
        categories: Sequence[str] | None = None,
        calibration: Sequence[str] | None = None,
        quantile: float = 0.95,
    ) -> None:
        cats = list(categories) if categories is not None else [
            p for phrasings in DEFAULT_INTENT_CATEGORIES.values() for p in phrasings
        ]
        calib = list(calibration) if calibration is not None else list(DEFAULT_BENIGN_CALIBRATION)
        if not cats or not all(c.strip() for c in cats):
            raise ValueError("EmbeddingJudge categories must be non-empty, non-blank texts")
        if not calib:
            raise ValueError("EmbeddingJudge calibration must hold at least one benign sentence")
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"EmbeddingJudge quantile must be in [0, 1], got {quantile}")
        self.embedder = embedder
        self.categories = tuple(cats)
        self.quantile = quantile
        self._cat_emb = embedder.encode(self.categories)
        benign = cosine_matrix(embedder.encode(calib), self._cat_emb).max(axis=1)
        # b_hi = 1 would divide by zero; cap so a near-copy of a category still scores > 0.
        self.b_hi = float(min(np.quantile(benign, quantile), 0.99))

    @property
    def parse_failures(self) -> int:
        """Always 0: embeddings cannot fail to parse."""
        return 0

    def rescale(self, s: float) -> float:
        """Map a raw max-similarity ``s`` to ``a_int = clip((s − b_hi)/(1 − b_hi), 0, 1)``."""
        return float(np.clip((s - self.b_hi) / (1.0 - self.b_hi), 0.0, 1.0))

    def intent_risk(self, sentences_per_response: Sequence[Sequence[str]]) -> list[float]:
        """See :meth:`Judge.intent_risk`; one ``encode`` call for the whole batch."""
        pieces = [split_sentences(list(s)) for s in sentences_per_response]
        flat = [p for ps in pieces for p in ps]
        if not flat:
            return [0.0] * len(pieces)
        sims = cosine_matrix(self.embedder.encode(flat), self._cat_emb).max(axis=1)
        out: list[float] = []
        start = 0
        for ps in pieces:
            chunk = sims[start : start + len(ps)]
            start += len(ps)
            out.append(self.rescale(float(chunk.max())) if len(ps) else 0.0)
        return out

    def evidence_support(
        self, claims_per_response: Sequence[Sequence[ClaimEvidence]],
        references: Sequence[Sequence[str]] | None = None,
    ) -> list[list[float]]:
        """See :meth:`Judge.evidence_support`; one ``encode`` call for the whole batch.

        Without ``references`` an item supports a claim by its cosine to it. With them (per
        response: the query and other clients' texts, :mod:`pfedma_flwr.anomaly.evidence`),
        by the mean of that cosine and the item's largest cosine to a reference (grounding).
        """
        if references is not None and len(references) != len(claims_per_response):
            raise ValueError("evidence_support: one reference list per response")
        texts: list[str] = []
        for k, claims in enumerate(claims_per_response):
            for claim, evidence in claims:
                texts.append(claim)
                texts.extend(evidence)
            texts.extend(references[k] if references is not None else ())
        emb = self.embedder.encode(texts) if texts else np.zeros((0, 1), dtype=np.float32)
        out: list[list[float]] = []
        row = 0
        for k, claims in enumerate(claims_per_response):
            spans = []
            for _, evidence in claims:
                spans.append((row, row + 1, row + 1 + len(evidence)))
                row += 1 + len(evidence)
            n_ref = len(references[k]) if references is not None else 0
            refs, row = emb[row : row + n_ref], row + n_ref
            supports: list[float] = []
            for c, a, b in spans:
                ev = emb[a:b]
                if not len(ev):
                    supports.append(0.0)
                    continue
                score = ev @ emb[c]
                if references is not None:
                    ground = (ev @ refs.T).max(axis=1) if n_ref else np.zeros(len(ev))
                    score = (np.clip(score, 0.0, 1.0) + np.clip(ground, 0.0, 1.0)) / 2
                supports.append(float(np.clip(score.max(), 0.0, 1.0)))
            out.append(supports)
        return out

    def summary(self) -> None:
        """Log the configuration."""
        logger.info(
            "EmbeddingJudge: %d category texts, benign b_hi=%.3f (q=%.2f)",
            len(self.categories), self.b_hi, self.quantile,
        )


JUDGES: Registry[Callable[..., Judge]] = Registry("judge")
JUDGES.add("embedding", EmbeddingJudge)
JUDGES.add("llm", LLMJudge)
