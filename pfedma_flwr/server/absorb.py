"""The stages of absorbing one Flower round, as functions over query states (DESIGN §1 step 4).

:meth:`~pfedma_flwr.server.engine.CollaborationEngine.absorb_round` runs them in order:
:func:`gather` (each query's answers and their cost), the anomaly filter over the whole batch,
then per query :func:`absorb_answers` (history, ``z``, the routing signals) and
:func:`query_log` (what ``rounds.jsonl`` keeps).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pfedma_flwr.aggregation.consensus import RoundResponse
from pfedma_flwr.data.profiles import knowledge_domain
from pfedma_flwr.server.capability import Consensus, leave_one_out_quality
from pfedma_flwr.server.query_state import QueryState, response_views


@dataclass
class RoundSignals:
    """What one Flower round teaches the routing state and the rule election.

    ``quality`` and ``retained``: per (client, domain), the quality signals ``g`` and the
    retention flags of its answers; ``client_ok``: whether a client had at least one answer
    retained (it may then contribute rule candidates, issue 12).
    """

    quality: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    retained: dict[tuple[str, str], list[bool]] = field(default_factory=dict)
    client_ok: dict[str, bool] = field(default_factory=dict)


def gather(
    in_flight: Sequence[QueryState], by_query: Mapping[str, Mapping[str, Any]],
    price: Callable[[str], float],
) -> tuple[list[list[str]], list[list[Any]], list[dict[str, str]]]:
    """Per query in flight: its clients, their responses and the clients' error codes.

    ``None`` stands for a missing response. The answers' tokens, cached tokens and cost
    (``price``: USD per million tokens of a client) are charged to the query.
    """
    order, groups, client_errors = [], [], []
    for q in in_flight:
        got = by_query.get(q.task.task_id, {})
        cids = sorted(q.routed)
        order.append(cids)
        groups.append([got[c].response if c in got else None for c in cids])
        # the client's own reason for an answer without a response (parse/backend codes)
        client_errors.append({c: got[c].error[:120] for c in cids
                              if c in got and got[c].response is None and got[c].error})
        for c in cids:
            if c in got:
                q.tokens += got[c].tokens
                q.cached_tokens += min(got[c].cached_tokens, got[c].tokens)
                q.cost += got[c].tokens * price(c) / 1e6
    return order, groups, client_errors


def absorb_answers(
    q: QueryState, cids: Sequence[str], grp: Sequence[Any], res: Sequence[Any],
    consensus: Consensus, signals: RoundSignals,
) -> tuple[int, int]:
    """Append ``q``'s round to its history, form ``z``, add each answer's signals.

    Returns the answers retained and those filtered (a response the filter removed).
    """
    q.t += 1
    domain = knowledge_domain(q.task.domain)
    for c, r, a in zip(cids, grp, res, strict=True):
        q.history.append(RoundResponse(client_id=c, round=q.t, response=r,
                                       retained=a.retained, anomaly=a.score))
        signals.client_ok[c] = signals.client_ok.get(c, False) or a.retained
    q.z = consensus.z(q, q.history, domain)
    for c, r, a in zip(cids, grp, res, strict=True):
        key = (c, domain)
        signals.retained.setdefault(key, []).append(r is not None and a.retained)
        g = leave_one_out_quality(consensus, q, c, r, a, domain)
        if g is not None:
            signals.quality.setdefault(key, []).append(g)
    return (sum(a.retained for a in res),
            sum(r is not None and not a.retained for r, a in zip(grp, res, strict=True)))


def query_log(q: QueryState, cids: Sequence[str], grp: Sequence[Any], res: Sequence[Any],
              errs: Mapping[str, str]) -> dict[str, Any]:
    """The query's entry of the round record (``rounds.jsonl``)."""
    return {
        "query_id": q.task.task_id, "t": q.t, "selected": list(cids),
        "anomaly": {c: a.to_dict() for c, a in zip(cids, res, strict=True)},
        "responses": response_views(cids, grp),
        "z": q.z.to_dict() if q.z is not None else {},
        **({"client_errors": dict(errs)} if errs else {}),
        # what decided the selection (the heuristic's score parts and tiers), when said
        **({"routing": q.why} if q.why else {}),
    }
