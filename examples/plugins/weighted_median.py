"""Aggregator plug-in: the median of numeric answers, each weighted by its self-confidence.

--set strategy.aggregator=examples.plugins.weighted_median:weighted_median
--set strategy.aggregator_options.floor=0.1
"""

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.answers import canonical_answer
from pfedma_flwr.baselines.voting import vote_all


def weighted_median(history, *, kind, round=None, options=None, floor=0.1, **_ignored):
    """Weight ``max(floor, self_confidence) * (1 - A_i)``; other kinds: majority vote."""
    votes = []
    for r in history:
        if kind == "number" and r.retained and r.response is not None:
            key = canonical_answer(r.response.final_answer, kind)
            try:
                value = float(key)
            except ValueError:  # no number in the answer: no vote
                continue
            weight = max(floor, r.response.self_confidence) * (1.0 - r.anomaly)
            votes.append((value, weight, key, r.response.final_answer))
    if not votes or sum(w for _, w, _, _ in votes) <= 0:
        return vote_all(history, kind=kind, round=round, options=options)
    votes.sort()
    total, acc, i = sum(w for _, w, _, _ in votes), 0.0, -1
    while acc < total / 2:  # the first value at which half the weight is reached
        i += 1
        acc += votes[i][1]
    value, _, key, text = votes[i]
    agreeing = [w for v, w, _, _ in votes if v == value]
    return CollabState(answer=text, canonical=key, support=sum(agreeing) / total,
                       round=round if round is not None else max(r.round for r in history),
                       n_agreeing=len(agreeing), n_retained=len(votes))
