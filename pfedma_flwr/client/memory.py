"""What a client knows beyond its model: retrieval from ``D_i`` and the experience ``X_i``.

Both stay on the client (:class:`~pfedma_flwr.client.state.AgentState`); only answers derived
with them leave it.

- **Private knowledge** (:func:`demonstrations`): per query, the nearest examples of the
  client's own partition ``D_i`` of the query's answer format (never another client's data: the
  pool is the one the agent was built with).
- **Experience** ``X_i``: a bounded buffer of what the agent answered (:func:`remember`), and
  *verified lessons* (:func:`learn_lesson`): this agent's answer confirmed the candidate answer
  of the earlier rounds that the server sent with the refinement. Two independent attempts
  agreeing is the only verification there is without ground truth. A lesson is recalled into
  a later prompt when its question is close to the new one (:func:`recall_lessons`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.retrieval import get_retriever, retrieve_examples
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.schema import RoutedQuery

FEW_SHOT_SCOPES: tuple[str, ...] = ("batch", "query")
#: What a lesson keeps of its question.
LESSON_CHARS = 160


def demonstrations(
    queries: Sequence[RoutedQuery], pool: Sequence[Task], embedder: Embedder, *, k: int,
    scope: str,
) -> dict[str, list[Task]]:
    """Up to ``k`` examples of ``pool`` (the client's ``D_i``) per query, of its answer format.

    ``scope="batch"`` gives all queries of one answer format the same examples (nearest to the
    group's mean embedding), so their prompts share a prefix that the batched backend prefills
    once; ``"query"`` retrieves per query.
    """
    if scope not in FEW_SHOT_SCOPES:
        raise ValueError(f"few_shot_scope must be one of {FEW_SHOT_SCOPES}, got {scope!r}")
    out: dict[str, list[Task]] = {q.query_id: [] for q in queries}
    if not k:
        return out
    for kind in dict.fromkeys(q.answer_kind for q in queries):
        of_kind = [t for t in pool if t.answer_kind == kind]
        group = [q for q in queries if q.answer_kind == kind]
        if not of_kind:
            continue
        if scope == "batch":
            shots = get_retriever(of_kind, embedder).retrieve_for_batch(
                [q.text for q in group], k)
            out.update({q.query_id: shots for q in group})
        else:
            out.update({q.query_id: retrieve_examples(q.text, of_kind, k, embedder)
                        for q in group})
    return out


def recall_lessons(
    queries: Sequence[RoutedQuery], lessons: Sequence[str], embedder: Embedder, *, n: int,
    min_sim: float,
) -> dict[str, list[str]]:
    """The ``n`` lessons most similar to each query with cosine ≥ ``min_sim``.

    A lesson learned on the query itself is not recalled for it (it would hand the agent its
    own earlier answer as if verified elsewhere).
    """
    if not n or not lessons:
        return {}
    gists = [ls.split(" -> ", 1)[0] for ls in lessons]
    embs = embedder.encode([q.text for q in queries] + gists)
    qe, le = embs[: len(queries)], embs[len(queries):]
    out: dict[str, list[str]] = {}
    for i, q in enumerate(queries):
        sims = le @ qe[i]
        best = [j for j in sims.argsort()[::-1][:n]
                if sims[j] >= min_sim and not q.text.startswith(gists[j][:80])]
        if best:
            out[q.query_id] = [lessons[j] for j in best]
    return out


def learn_lesson(lessons: list[str], q: RoutedQuery, answer: str, *, capacity: int) -> bool:
    """Append a lesson when ``answer`` confirms ``q``'s candidate; keep ``capacity``.

    The candidate is the structured field the server sends beside its refinement
    (:attr:`~pfedma_flwr.protocol.schema.RoutedQuery.candidate`), whatever the refiner wrote.
    Returns whether a lesson was learned.
    """
    if not q.candidate.strip() or q.candidate.strip() != answer.strip():
        return False
    gist = " ".join(q.text.split())[:LESSON_CHARS]
    lessons.append(f"{gist} -> verified answer {answer.strip()[:60]}")
    del lessons[: max(0, len(lessons) - max(capacity, 1))]
    return True


def remember(buffer: list[str], item: str, *, capacity: int) -> None:
    """Append ``item`` to the experience buffer, keeping the newest ``capacity`` (0: none)."""
    if capacity == 0:
        return
    buffer.append(item)
    del buffer[: max(0, len(buffer) - capacity)]
