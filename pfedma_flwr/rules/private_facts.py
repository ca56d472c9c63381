"""``PRIVATE_FACT``: a sentence detector of private facts about people (issue 12).

PrivacyLens's sensitive items are facts ("Dave Thompson is going through a divorce."), not
identifiers: rules that redact names, e-mails and numbers leave the fact readable, and the leak
judge (content words of the item) still finds it. So LR stayed 100 % in every rule mode. This
detector gives rules a way to act on facts: it marks each *sentence* whose MiniLM embedding a
logistic model scores at or above a threshold, and it plugs in as one more entity type of the
client's recognizer (:class:`PrivateFactRecognizer`), so a rule ``entity_types=("PRIVATE_FACT",)``
runs through the same machinery as every other rule: uncovered detection, local creation,
``P_gen``, promotion, ``Rel`` from firing on ``X_i``, adoption and Δ-count feedback.

The model was fitted by ``scripts/train_private_facts.py`` on PrivacyLens's ConfAIde and
CultureBank subsets and on written templates of private matters (462 facts against 4,141
ordinary sentences), so the 1,487 items of the main set that the experiments evaluate were never
seen in fitting. On them it flags 50.7 %, on unseen GSM8K / MedQA sentences 4.7 % / 4.6 %
(``bench/results/private_facts.md``): a coarse detector, not a judge.
It is never a query rule (``P_in`` keeps only
:data:`~pfedma_flwr.rules.query_rules.QUERY_ENTITIES`), so it cannot alter a task.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.rules.pii import PiiRecognizer, PiiSpan

logger = logging.getLogger(__name__)

PRIVATE_FACT = "PRIVATE_FACT"
MODEL_FILE = "private_fact_model.json"
#: Shortest sentence scored: shorter ones (a number, "Yes.", a name) state no fact.
MIN_SENTENCE_CHARS = 20
# Sentence ends, line breaks, and the quote boundaries of JSON-ish tool outputs.
_BOUNDARY = re.compile(r"(?<=[.!?])\s+|\n+|\"\s*[,:]\s*\"|\"\s*[}\]]")
_TRIM = " \t\"'{}[],:"


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence of ``text`` with at least ``MIN_SENTENCE_CHARS`` chars.

    Spans are trimmed of spaces, quotes and brackets, so redacting one leaves the rest intact.
    """
    out, start = [], 0
    for m in [*_BOUNDARY.finditer(text), None]:
        end = m.start() if m is not None else len(text)
        a, b = start, end
        while a < b and text[a] in _TRIM:
            a += 1
        while b > a and text[b - 1] in _TRIM:
            b -= 1
        if b - a >= MIN_SENTENCE_CHARS:
            out.append((a, b))
        if m is not None:
            start = m.end()
    return out


@dataclass(frozen=True)
class PrivateFactModel:
    """Logistic model ``p = σ(w · e + b)`` over unit-norm sentence embeddings ``e``.

    Parameters
    ----------
    weights : tuple of float
        ``w``, one per embedding dimension.
    bias : float
        ``b``.
    threshold : float
        A sentence is a private fact when ``p ≥ threshold``.
    embedder : str
        The embedder the model was fitted for (``"minilm"``); others give meaningless scores.
    """

    weights: tuple[float, ...]
    bias: float
    threshold: float
    embedder: str = "minilm"

    def __post_init__(self) -> None:
        if not self.weights:
            raise ValueError("PrivateFactModel.weights must not be empty")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")

    @property
    def dim(self) -> int:
        """Embedding dimension the model expects."""
        return len(self.weights)

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        """``p`` per row of ``vectors`` (unit-norm embeddings)."""
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected embeddings of dim {self.dim}, got shape {vectors.shape}")
        z = vectors @ np.asarray(self.weights, dtype=np.float64) + self.bias
        return 1.0 / (1.0 + np.exp(-z))

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (the shipped model file's content, without its ``meta``)."""
        return {
            "weights": list(self.weights),
            "bias": self.bias,
            "threshold": self.threshold,
            "embedder": self.embedder,
        }

    @classmethod
    def from_dict(cls, d: object) -> PrivateFactModel:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` naming what is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"private-fact model must be an object, got {type(d).__name__}")
        try:
            return cls(
                weights=tuple(float(w) for w in d["weights"]),
                bias=float(d["bias"]),
                threshold=float(d["threshold"]),
                embedder=str(d.get("embedder", "minilm")),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"private-fact model: bad or missing field ({e})") from None


def load_default_model() -> PrivateFactModel:
    """The shipped model (``pfedma_flwr/rules/private_fact_model.json``)."""
    text = resources.files("pfedma_flwr.rules").joinpath(MODEL_FILE).read_text(encoding="utf-8")
    return PrivateFactModel.from_dict(json.loads(text))


def fit_logistic(
    positives: np.ndarray, negatives: np.ndarray, *, l2: float = 1.0, max_iter: int = 100
) -> tuple[np.ndarray, float]:
    """Class-balanced, L2-regularized logistic regression by Newton's method (IRLS).

    Each class weighs half of the loss whatever its size, so a few hundred facts are not drowned
    by thousands of ordinary sentences. The bias is not regularized. Returns ``(w, b)``.
    """
    if len(positives) == 0 or len(negatives) == 0:
        raise ValueError("fit_logistic needs positives and negatives")
    x = np.vstack([positives, negatives]).astype(np.float64)
    y = np.r_[np.ones(len(positives)), np.zeros(len(negatives))]
    sw = np.where(y == 1, len(y) / (2 * len(positives)), len(y) / (2 * len(negatives)))
    xb = np.hstack([x, np.ones((len(x), 1))])
    reg = np.r_[np.full(x.shape[1], l2), 0.0]
    beta = np.zeros(xb.shape[1])
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-xb @ beta))
        grad = xb.T @ (sw * (p - y)) + reg * beta
        hess = (xb * (sw * p * (1 - p))[:, None]).T @ xb + np.diag(reg)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if float(np.abs(step).max()) < 1e-9:
            break
    return beta[:-1], float(beta[-1])


class PrivateFactRecognizer:
    """A recognizer that adds ``PRIVATE_FACT`` sentence spans to another recognizer's entities.

    Parameters
    ----------
    base : PiiRecognizer
        Finds every other entity type (Presidio or regex).
    embedder : Embedder
        Sentence embedder; its dimension must match the model's (MiniLM for the shipped one).
    model : PrivateFactModel, optional
        Default: :func:`load_default_model`.
    """

    def __init__(
        self, *, base: PiiRecognizer, embedder: Embedder, model: PrivateFactModel | None = None
    ) -> None:
        self.base, self.embedder = base, embedder
        self.model = model or load_default_model()
        if embedder.dim != self.model.dim:
            raise ValueError(
                f"private-fact model expects {self.model.dim}-dim embeddings "
                f"({self.model.embedder}); the embedder gives {embedder.dim}"
            )

    @property
    def supported_entities(self) -> tuple[str, ...]:
        """The base recognizer's entity types plus ``PRIVATE_FACT``."""
        return (*self.base.supported_entities, PRIVATE_FACT)

    def analyze(self, text: str, entity_types: Sequence[str] | None = None) -> list[PiiSpan]:
        """Base spans of the other requested types, plus private-fact sentences if requested."""
        if entity_types is None:  # the base's defaults; facts only when asked for by name
            return list(self.base.analyze(text, None))
        others = [t for t in entity_types if t != PRIVATE_FACT]
        spans = list(self.base.analyze(text, others)) if others else []
        if len(others) < len(entity_types):
            spans.extend(self.facts(text))
        return spans

    def facts(self, text: str) -> list[PiiSpan]:
        """``PRIVATE_FACT`` spans of ``text``: the sentences scoring at least the threshold."""
        sents = sentence_spans(text)
        if not sents:
            return []
        p = self.model.scores(self.embedder.encode([text[a:b] for a, b in sents]))
        return [
            PiiSpan(a, b, PRIVATE_FACT, float(s))
            for (a, b), s in zip(sents, p, strict=True)
            if s >= self.model.threshold
        ]


def with_private_facts(
    base: PiiRecognizer, embedder: Embedder, embedder_name: str
) -> PiiRecognizer:
    """``base`` with the ``PRIVATE_FACT`` detector, or ``base`` alone if the embedder can't run it.

    The shipped model is fitted on MiniLM embeddings (``embedding.name: minilm``); with another
    embedder (the hashing one of the scripted test runs) its scores would be noise, so the
    detector is left out with a warning, never guessed.
    """
    model = load_default_model()
    if embedder_name != model.embedder:
        logger.warning(
            "private-fact detector off: it needs embedding.name=%s, not %r",
            model.embedder,
            embedder_name,
        )
        return base
    return PrivateFactRecognizer(base=base, embedder=embedder, model=model)


__all__ = [
    "MIN_SENTENCE_CHARS",
    "PRIVATE_FACT",
    "PrivateFactModel",
    "PrivateFactRecognizer",
    "fit_logistic",
    "load_default_model",
    "sentence_spans",
    "with_private_facts",
]
