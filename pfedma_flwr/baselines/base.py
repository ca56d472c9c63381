"""Pieces the baseline orchestrators share: seeded draws, answer digests, outcome agreement."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from pfedma_flwr.aggregation.consensus import CollabState, RoundResponse
from pfedma_flwr.answers import Options, answers_equal
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.orchestrator import (
    BaseOrchestrator,
    CandidateState,
    OrchestratorQuery,
    Selection,
    round_budget,
    validate_selection,
)
from pfedma_flwr.text import clip_line

#: Characters of one quoted answer / claim in a digest sent to other agents.
ANSWER_CHARS = 160
CLAIM_CHARS = 200
#: Cap on a whole digest (well under the protocol's 8000-character text cap).
DIGEST_CHARS = 2000


def query_rng(seed: int, query_id: str, round: int) -> np.random.Generator:
    """A stream fixed by ``(seed, query_id, round)``: selections do not depend on query order."""
    h = int.from_bytes(hashlib.blake2b(query_id.encode(), digest_size=8).digest(), "little")
    return np.random.default_rng([seed, h, round])


def digest(responses: Sequence[RoundResponse], *, header: str, ask: str,
           max_chars: int = DIGEST_CHARS) -> str:
    """``header``, one line per answer (``Agent k: 'answer' (because: first claim)``), ``ask``.

    Agents are numbered, not named: a client id is the server's routing key, not content.
    Answers that failed are left out; ``""`` when none is left.
    """
    lines = []
    answered = [r.response for r in responses if r.response is not None]
    for k, resp in enumerate(answered, start=1):
        line = f"- Agent {k}: '{clip_line(resp.final_answer, ANSWER_CHARS)}'"
        if resp.claims:
            line += f" (because: {clip_line(resp.claims[0].claim, CLAIM_CHARS)})"
        lines.append(line)
    if not lines:
        return ""
    budget = max_chars - len(header) - len(ask) - 2
    kept: list[str] = []
    for line in lines:
        if sum(len(x) + 1 for x in kept) + len(line) > budget:
            break
        kept.append(line)
    return "\n".join([header, *kept, ask])


def agreement(history: Sequence[RoundResponse], z: CollabState | None, kind: str,
              options: Options = None) -> dict[str, float]:
    """Per client: 1.0 if its latest answer agrees with ``z``'s answer, else 0.0.

    A client whose latest answer failed or was filtered scores 0; every client of ``history``
    gets a score (the outcome feedback of KABB and OPTAGENT).
    """
    latest: dict[str, RoundResponse] = {}
    for r in sorted(history, key=lambda h: h.round):
        latest[r.client_id] = r
    final = z.answer if z is not None and not z.empty else ""
    return {c: float(bool(final) and r.retained and r.response is not None
                     and answers_equal(r.response.final_answer, final, kind, options=options))
            for c, r in sorted(latest.items())}


def round_responses(history: Sequence[RoundResponse], round: int,
                    exclude: str | None = None) -> list[RoundResponse]:
    """The responses of ``round`` (in client order), without ``exclude``'s."""
    return sorted((r for r in history if r.round == round and r.client_id != exclude),
                  key=lambda r: r.client_id)


def as_mapping(options: Mapping[str, str]) -> Options:
    """Task options as the answer functions take them (``None`` when there are none)."""
    return dict(options) or None


class BaselineOrchestrator(BaseOrchestrator):
    """Common constructor and checks of the baseline orchestrators.

    Parameters
    ----------
    k_max : int
        Default K_max (the same budget as PFedMA's ``strategy.k_max``).
    embedder : Embedder, optional
        Unused by most; accepted so every orchestrator takes the same factory arguments.
    """

    def __init__(self, *, k_max: int, embedder: Embedder | None = None) -> None:
        self.k_max = round_budget(k_max, 1, 1)
        self.embedder = embedder

    def _k(self, round: int, k_max: int | None) -> int:
        return round_budget(k_max, self.k_max, round)

    #: The STOP reason after round 1 of a one-round method; empty for multi-round methods.
    one_round: ClassVar[str] = ""

    def select(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int,
               k_max: int | None = None) -> Selection:
        """See :class:`~pfedma_flwr.routing.Orchestrator`.

        The checks every baseline shares (``k``, no candidates, one-round methods), then
        :meth:`stop_reason` and :meth:`choose` of the method.
        """
        k = self._k(round, k_max)
        if not candidates:
            return Selection.stop_now("no candidates")
        if round > 1 and self.one_round:
            return Selection.stop_now(self.one_round)
        why = self.stop_reason(query, z, round=round)
        if why:
            return Selection.stop_now(why)
        return self.choose(query, z, candidates, round=round, k=k)

    def stop_reason(self, query: OrchestratorQuery, z: CollabState | None, *,
                    round: int) -> str:
        """Why the method stops this query before ``round`` (empty: it goes on)."""
        return ""

    def choose(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int, k: int) -> Selection:
        """The method's selection for ``round`` (at most ``k`` of ``candidates``)."""
        raise NotImplementedError

    @staticmethod
    def _pick(chosen: Sequence[str], candidates: Sequence[CandidateState], k: int) -> Selection:
        return validate_selection(Selection(tuple(chosen)), [c.client_id for c in candidates], k)


def same_team(candidates: Sequence[CandidateState], ranking: Sequence[str], k: int) -> list[str]:
    """The earlier agents of the query (still available), filled up from ``ranking`` to ``k``."""
    team = [c for c in ranking if any(x.client_id == c and x.asked_for_this_query
                                      for x in candidates)][:k]
    return team + [c for c in ranking if c not in team][: k - len(team)]


def unanimous(z: CollabState | None) -> bool:
    """At least two retained answers and all of them agree."""
    return z is not None and z.n_retained >= 2 and z.n_agreeing == z.n_retained
