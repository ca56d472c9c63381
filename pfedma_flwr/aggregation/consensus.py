"""Reliability-weighted vote that builds the collaboration state ``z^t`` (DESIGN §3.9).

Every client's latest retained response of the rounds so far votes for its canonical answer
with weight ``w_i = S_i·C_{i,d}·(1 − A_i)`` (the states at aggregation time, ``A_i`` the
response's anomaly score). Two changes to DESIGN §3.9 (issue 30), measured with two colluders
of five giving one wrong answer (``bench/bench_steering.py``, 8 seeds): a client re-asked in
round 2 voted twice and decided every 1:1 split (accuracy 0.40 against 0.85 all honest), so a
client now votes once, with its later answer (0.74); and an answer the evaluator found less
reliable (a claim with no evidence of its own scores ``a_evi = 1``) now weighs less than a
retained answer it found clean (0.88; all-honest runs 0.85 before, 0.86 after). Answers are grouped
with :func:`pfedma_flwr.answers.answers_equal`, so ``0.5`` and ``1/2`` are one group.

Winner: largest total weight, then more responses, then the smallest canonical answer
(deterministic whatever the order of the history). For a text task whose answer is a whole
action or response (``action``, ``response``) the groups are the identical answers, so the final
action is the retained response of highest weight ``S_i·C_{i,d}`` (ties: more agents wrote it,
then the smallest text), kept whole. If every retained weight is 0 the vote
falls back to equal weights, so ``z`` still names the majority. Ablations: ``-IA`` uses
``C := 1``, ``-RT`` uses ``S := 1``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pfedma_flwr.answers import OPEN_KINDS, Options, answers_equal, canonical_answer
from pfedma_flwr.protocol.schema import StructuredResponse
from pfedma_flwr.routing.state import RoutingState, RoutingTable

logger = logging.getLogger(__name__)

_MAX_ANSWER_CHARS = 300
_TIE_EPS = 1e-12


@dataclass(frozen=True)
class RoundResponse:
    """One client's evaluated response to a query in one collaboration round."""

    client_id: str
    round: int
    response: StructuredResponse | None
    retained: bool
    #: the response's anomaly score ``A_i``; its vote weighs ``1 − A_i`` (0 = not evaluated)
    anomaly: float = 0.0


@dataclass(frozen=True)
class CollabState:
    """Collaboration state ``z^t`` (DESIGN §3.9).

    Attributes
    ----------
    answer : str
        Final answer text of the heaviest response of the winning group ("" if none).
    canonical : str
        Canonical form of ``answer`` (the vote key).
    support : float
        Winning weight share in [0, 1].
    claims : tuple[str, ...]
        Top claims of the agreeing responses (heaviest responses first, de-duplicated).
    dissent : tuple[tuple[str, float], ...]
        Other answers with their weight shares, heaviest first.
    disputed_claims : tuple[str, ...]
        Top claims of the dissenting responses.
    round : int
        Collaboration round ``t`` this state summarizes.
    n_agreeing : int
        Retained responses in the winning group.
    n_retained : int
        Retained responses that voted.
    """

    answer: str = ""
    canonical: str = ""
    support: float = 0.0
    claims: tuple[str, ...] = ()
    dissent: tuple[tuple[str, float], ...] = ()
    disputed_claims: tuple[str, ...] = ()
    round: int = 0
    n_agreeing: int = 0
    n_retained: int = 0

    @property
    def empty(self) -> bool:
        """No retained response has voted yet."""
        return self.n_retained == 0

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for logs, checkpoints and the orchestrator prompt."""
        return {
            "answer": self.answer, "canonical": self.canonical, "support": self.support,
            "claims": list(self.claims), "dissent": [[a, w] for a, w in self.dissent],
            "disputed_claims": list(self.disputed_claims), "round": self.round,
            "n_agreeing": self.n_agreeing, "n_retained": self.n_retained,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CollabState:
        """Inverse of :meth:`to_dict`."""
        return cls(
            answer=str(d.get("answer", "")), canonical=str(d.get("canonical", "")),
            support=float(d.get("support", 0.0)),
            claims=tuple(str(c) for c in d.get("claims", ())),
            dissent=tuple((str(a), float(w)) for a, w in d.get("dissent", ())),
            disputed_claims=tuple(str(c) for c in d.get("disputed_claims", ())),
            round=int(d.get("round", 0)), n_agreeing=int(d.get("n_agreeing", 0)),
            n_retained=int(d.get("n_retained", 0)),
        )


@dataclass(frozen=True)
class _Vote:
    weight: float
    source: RoundResponse
    response: StructuredResponse

    @property
    def rank_key(self) -> tuple[float, int, str]:
        # Heaviest first; ties by later round (more refined), then client id.
        return (-self.weight, -self.source.round, self.source.client_id)


@dataclass
class _Group:
    canonical: str
    votes: list[_Vote] = field(default_factory=list)

    @property
    def weight(self) -> float:
        return sum(v.weight for v in self.votes)

    def best(self) -> StructuredResponse:
        return min(self.votes, key=lambda v: v.rank_key).response


def response_weight(
    state: RoutingState, domain: str, *, use_capability: bool = True, use_reliability: bool = True
) -> float:
    """``S_i·C_{i,d}``, with ``C := 1`` under -IA and ``S := 1`` under -RT (times ``1 − A_i``)."""
    c = state.c(domain) if use_capability else 1.0
    s = state.reliability if use_reliability else 1.0
    return s * c


def _top_claims(groups: Sequence[_Group], limit: int) -> tuple[str, ...]:
    votes = sorted((v for g in groups for v in g.votes), key=lambda v: v.rank_key)
    seen: set[str] = set()
    out: list[str] = []
    for v in votes:
        for claim in v.response.claims:
            key = claim.claim.casefold().strip()
            if key and key not in seen and len(out) < limit:
                seen.add(key)
                out.append(claim.claim)
    return tuple(out)


def _tie_key(w: float) -> float:
    """Weight rounded so float noise cannot break a tie between equal sums."""
    return round(w, 9)


def _voters(history: Sequence[RoundResponse], *,
            per_client: bool) -> list[tuple[RoundResponse, StructuredResponse]]:
    """The responses that vote, each with its response.

    Each client's latest retained one (``per_client``), else every retained one (the
    baselines' equal-weight votes).
    """
    latest: dict[str, RoundResponse] = {}
    for r in history:  # one vote per client: its latest retained response
        if r.retained and r.response is not None:
            prev = latest.get(r.client_id)
            if prev is None or r.round >= prev.round:
                latest[r.client_id] = r
    return [(r, r.response) for r in history if r.response is not None
            and (latest.get(r.client_id) is r or (not per_client and r.retained))]


def _group_votes(votes: Sequence[_Vote], kind: str, options: Options) -> list[_Group]:
    """Votes grouped by equal answer (in round, then client order)."""
    groups: list[_Group] = []
    for vote in sorted(votes, key=lambda v: (v.source.round, v.source.client_id)):
        ans = vote.response.final_answer
        for g in groups:
            if answers_equal(ans, g.votes[0].response.final_answer, kind, options=options):
                g.votes.append(vote)
                break
        else:
            groups.append(_Group(canonical_answer(ans, kind, options=options), [vote]))
    return groups


def aggregate(
    history: Sequence[RoundResponse],
    *,
    kind: str,
    domain: str,
    routing: RoutingTable | Mapping[str, RoutingState],
    round: int | None = None,
    use_capability: bool = True,
    use_reliability: bool = True,
    max_claims: int = 3,
    options: Options = None,
    per_client: bool = True,
    use_anomaly: bool = True,
) -> CollabState:
    """Weighted vote over the retained responses of all rounds so far (DESIGN §3.9).

    Parameters
    ----------
    history : Sequence[RoundResponse]
        Every evaluated response to this query so far (filtered ones are ignored; a client's
        latest retained one votes).
    kind : str
        Answer kind of the query (:data:`pfedma_flwr.answers.ANSWER_KINDS`).
    domain : str
        The query's domain ``d`` (selects ``C_{i,d}``).
    routing : RoutingTable or Mapping[str, RoutingState]
        Current routing states (a client missing from a mapping has the priors).
    round : int, optional
        Round stamped on ``z``; default: the latest round in ``history`` (0 if empty).
    use_capability, use_reliability : bool
        False for the -IA / -RT ablations.
    max_claims : int
        Claims kept in ``z.claims`` and in ``z.disputed_claims``.
    options : Options, optional
        Multiple-choice options for canonical answers.
    per_client, use_anomaly : bool
        One vote per client (its latest retained response), weighted by ``1 − A_i``; both off
        gives every retained response its ``S·C`` vote (the baselines' equal-weight votes).

    Returns
    -------
    CollabState
        ``answer=""``, ``support=0`` when no response was retained.
    """
    if max_claims < 0:
        raise ValueError(f"max_claims must be >= 0, got {max_claims}")
    t = round if round is not None else max((r.round for r in history), default=0)
    voters = _voters(history, per_client=per_client)
    if not voters:
        return CollabState(round=t)

    def state_of(cid: str) -> RoutingState:
        if isinstance(routing, RoutingTable):
            return routing.get(cid)
        return routing.get(cid) or RoutingState()

    weights = [
        response_weight(state_of(r.client_id), domain, use_capability=use_capability,
                        use_reliability=use_reliability)
        * (1.0 - min(max(r.anomaly, 0.0), 1.0) if use_anomaly else 1.0)
        for r, _ in voters
    ]
    if sum(weights) <= 0.0:
        logger.debug("all vote weights are 0; falling back to equal weights")
        weights = [1.0] * len(voters)
    votes = [_Vote(w, r, resp) for w, (r, resp) in zip(weights, voters, strict=True)]
    groups = _group_votes(votes, kind, options)
    groups.sort(key=lambda g: (-_tie_key(g.weight), -len(g.votes), g.canonical))
    total = sum(g.weight for g in groups)
    win, rest = groups[0], groups[1:]
    # an action or a response is the answer whole (a cut message would be judged, not the
    # agent's); the wire's text cap bounds it
    cap = None if kind in OPEN_KINDS else _MAX_ANSWER_CHARS
    return CollabState(
        answer=win.best().final_answer[:cap],
        canonical=win.canonical,
        support=win.weight / total,
        claims=_top_claims([win], max_claims),
        dissent=tuple(
            (g.best().final_answer[:cap], g.weight / total) for g in rest
        ),
        disputed_claims=_top_claims(rest, max_claims),
        round=t,
        n_agreeing=len(win.votes),
        n_retained=len(voters),
    )
