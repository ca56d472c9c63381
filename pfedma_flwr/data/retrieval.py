"""Few-shot retrieval from a client's private dataset ``D_i`` by question-embedding cosine.

An agent ``A_i(q̃, D_i, X_i)`` shows its ``k`` most similar private examples as demonstrations;
they never leave the client.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import numpy as np

from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.embeddings import Embedder


class FewShotRetriever:
    """Top-``k`` nearest tasks of a fixed pool; the pool is embedded once.

    Parameters
    ----------
    pool : Sequence[Task]
        The client's private tasks ``D_i`` (may be empty).
    embedder : Embedder
        Encoder of unit-norm rows, so a dot product is the cosine.
    """

    def __init__(self, pool: Sequence[Task], embedder: Embedder) -> None:
        self.pool: tuple[Task, ...] = tuple(pool)
        self.embedder = embedder
        self._matrix = (
            embedder.encode([t.question for t in self.pool])
            if self.pool else np.zeros((0, embedder.dim), dtype=np.float32)
        )

    def scores(self, query: str) -> np.ndarray:
        """Cosine of ``query`` with every pool question, shape ``(len(pool),)``."""
        if not self.pool:
            return np.zeros(0, dtype=np.float32)
        return np.asarray(self._matrix @ self.embedder.encode([query])[0], dtype=np.float32)

    def retrieve(self, query: str, k: int, *, exclude_same_question: bool = True) -> list[Task]:
        """The ``k`` pool tasks most similar to ``query``, most similar first.

        Ties keep pool order (stable sort), so results are deterministic. With
        ``exclude_same_question`` a pool task whose question equals ``query`` is skipped, so a
        query can never be shown its own gold answer.

        Raises
        ------
        ValueError
            If ``k`` is negative.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if k == 0 or not self.pool:
            return []
        return self._top(self.scores(query), k, {query} if exclude_same_question else set())

    def retrieve_for_batch(self, queries: Sequence[str], k: int) -> list[Task]:
        """The ``k`` pool tasks with the highest mean cosine to all ``queries``.

        One set of demonstrations for a whole batch keeps the prompts' prefix (system prompt +
        demonstrations) identical, so a batched backend prefills it once instead of once per
        query. A pool task whose question equals any of the queries is skipped.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if k == 0 or not self.pool or not queries:
            return []
        q = self.embedder.encode(list(queries))
        return self._top(np.asarray(self._matrix @ q.mean(axis=0), dtype=np.float32), k,
                         set(queries))

    def _top(self, sims: np.ndarray, k: int, exclude: set[str]) -> list[Task]:
        out: list[Task] = []
        for i in np.argsort(-sims, kind="stable"):  # ties keep pool order
            task = self.pool[int(i)]
            if task.question in exclude:
                continue
            out.append(task)
            if len(out) == k:
                break
        return out


# Per embedder, per pool (by task ids): the retriever holding the pool's embedding matrix.
# Keyed weakly on the embedder so dropping an embedder frees its matrices.
_RETRIEVERS: weakref.WeakKeyDictionary[Embedder, dict[tuple[str, ...], FewShotRetriever]] = (
    weakref.WeakKeyDictionary()
)
_MAX_POOLS_PER_EMBEDDER = 256
_LOCK = threading.Lock()


def get_retriever(pool: Sequence[Task], embedder: Embedder) -> FewShotRetriever:
    """The cached :class:`FewShotRetriever` of ``(pool, embedder)`` (built on first use)."""
    key = tuple(t.task_id for t in pool)
    with _LOCK:
        try:
            per_embedder = _RETRIEVERS.setdefault(embedder, {})
        except TypeError:  # an embedder that cannot be weakly referenced is not cached
            return FewShotRetriever(pool, embedder)
        retriever = per_embedder.get(key)
    if retriever is None:
        retriever = FewShotRetriever(pool, embedder)
        with _LOCK:
            if len(per_embedder) >= _MAX_POOLS_PER_EMBEDDER:
                per_embedder.pop(next(iter(per_embedder)))
            per_embedder[key] = retriever
    return retriever


def retrieve_examples(
    query: str,
    pool: Sequence[Task],
    k: int,
    embedder: Embedder,
    *,
    exclude_same_question: bool = True,
) -> list[Task]:
    """The ``k`` tasks of ``pool`` whose questions are most cosine-similar to ``query``.

    Pool embeddings are cached per ``(embedder, pool task ids)``; see
    :meth:`FewShotRetriever.retrieve` for tie-breaking and exclusion.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k == 0 or not pool:
        return []
    return get_retriever(pool, embedder).retrieve(
        query, k, exclude_same_question=exclude_same_question
    )


def as_case(task: Task) -> tuple[str, str, str]:
    """A retrieved task as a solved case: its question, worked solution and answer.

    A multiple-choice answer names its option (``"A. Intravenous thiamine"``), so a case
    without a worked solution (MedQA) still says what was right.
    """
    answer = task.gold
    if task.answer_kind == "option" and task.options.get(task.gold):
        answer = f"{task.gold}. {task.options[task.gold]}"
    return task.question, task.rationale, answer


def clear_retrieval_cache() -> None:
    """Drop every cached pool embedding matrix."""
    with _LOCK:
        _RETRIEVERS.clear()
