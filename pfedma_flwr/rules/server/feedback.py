"""Which rule feedback counts, and whose word may switch a rule off (DESIGN §3.3–3.5, issue 30).

Measured: one client's single −1 row for ``contact_query`` (a rule it never held: query rules
run on the server) plus a never-firing twin made Resolve switch the server's rule off, and
``P_in`` stopped redacting phone numbers and e-mail addresses for every client. So:

- **held and fired**: a client's row counts only for a response-scope rule the server sent it
  (:func:`client_scores`), with at most one trigger per response of its reply; one score per
  client, rule and round (its rows for one id are summed first);
- **query rules** are rated by the server's own ``P_in`` enforcement only
  (:func:`server_scores`); client rows for them are ignored;
- **no minority decides**: an H-score may rank a rule in Resolve only once it comes from the
  server or from enough distinct clients (:func:`credible`): at least ``min_clients`` and at
  least ``min_share`` of the clients that held the rule. Until then the rule ranks as
  unrated (H = 0), so one client's −1 (or a colluding pair's) cannot deactivate it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pfedma_flwr.protocol.schema import RuleFeedback
from pfedma_flwr.rules.server.promotion import feedback_score

#: The rater key of the server's own ``P_in`` enforcement.
SERVER_RATER = "@server"


@dataclass
class FeedbackTally:
    """Scores per rule id and what was ignored, per reason (for the round log)."""

    scores: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    n_rows: int = 0
    unknown: set[str] = field(default_factory=set)
    ignored: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, n: int = 1) -> None:
        """Count ``n`` rows (or rule scores) ignored for ``reason``."""
        self.ignored[reason] = self.ignored.get(reason, 0) + n


def client_scores(
    feedback_by_client: Mapping[str, Sequence[RuleFeedback]], *,
    resolve_id: Callable[[str], str | None], scope_of: Callable[[str], str],
    held: Callable[[str, str], bool] | None = None,
    max_triggers: Mapping[str, int] | None = None,
) -> FeedbackTally:
    """``s_i(ω)`` of each client for each rule it may rate (module docstring).

    Parameters
    ----------
    feedback_by_client : Mapping[str, Sequence[RuleFeedback]]
        ``F^t`` by client.
    resolve_id : callable
        A row's rule id -> the current id (after merges), ``None`` if unknown.
    scope_of : callable
        A current rule id -> its scope.
    held : callable, optional
        ``(client, rule_id) -> bool``: whether the server sent the rule to the client; without
        it every known rule counts as held (unit tests of the bare formula).
    max_triggers : Mapping[str, int], optional
        Per client, the responses of its reply: a rule fires at most once per response, so a
        larger summed ``Δn_trigger`` is not believed (``implausible``).
    """
    tally = FeedbackTally()
    for client in sorted(feedback_by_client):
        per_rule: dict[str, list[int]] = {}
        for row in feedback_by_client[client]:
            tally.n_rows += 1
            rid = resolve_id(row.rule_id)
            if rid is None:
                tally.unknown.add(row.rule_id)
                continue
            acc = per_rule.setdefault(rid, [0, 0, 0])
            acc[0] += row.d_trigger
            acc[1] += row.d_valid
            acc[2] += row.d_conflict
        cap = None if max_triggers is None else int(max_triggers.get(client, 0))
        for rid, (dt, dv, dc) in per_rule.items():
            reason = ("zero_trigger" if dt <= 0 else
                      "query_scope" if scope_of(rid) == "query" else
                      "not_held" if held is not None and not held(client, rid) else
                      "implausible" if cap is not None and dt > cap else "")
            if reason:
                tally.skip(reason)
                continue
            tally.scores.setdefault(rid, []).append((client, feedback_score(dt, dv, dc)))
    return tally


def server_scores(fired: Mapping[str, int], known: Collection[str]) -> dict[str, list[float]]:
    """One server score per query rule that ``P_in`` applied this round: ``s = 1``.

    Each application removed what the rule's detectors found (``valid``) and answer-option
    lines are never touched; the server cannot see a conflict, so it rates 1 (the rule did
    its job) and a rule that never fires keeps its H.
    """
    return {rid: [1.0] for rid, n in fired.items() if n > 0 and rid in known}


def credible(raters: Collection[str], holders: Collection[str], *, min_clients: int,
             min_share: float, population: int = 0) -> bool:
    """Whether a rule's H-score may rank it in Resolve (module docstring).

    The share is taken of the clients that held the rule, or of ``population`` (the
    federation's clients) when that is larger: early on, the few clients sent a rule so far
    must not be its whole electorate.
    """
    if SERVER_RATER in raters:
        return True
    clients = [r for r in raters if r != SERVER_RATER]
    need = max(min_clients, math.ceil(min_share * max(len(holders), population) - 1e-9))
    return len(clients) >= need


class Electorate:
    """Who was sent each global rule (its holders) and whose ratings counted (its raters).

    Server-side bookkeeping of :class:`~pfedma_flwr.rules.server.global_repo.GlobalRuleRepository`
    (module docstring). ``population`` is the federation's size (the engine sets it).
    """

    def __init__(self, *, min_clients: int = 2, min_share: float = 0.5) -> None:
        if not isinstance(min_clients, int) or min_clients < 1:
            raise ValueError(f"min_support_clients must be an int >= 1, got {min_clients!r}")
        if not 0.0 <= min_share <= 1.0:
            raise ValueError(f"min_support_share must be in [0, 1], got {min_share!r}")
        self.min_clients, self.min_share = min_clients, min_share
        self.population = 0
        self.holders: dict[str, set[str]] = {}
        self.raters: dict[str, set[str]] = {}

    def note_sent(self, client: str, rule_ids: Sequence[str]) -> None:
        """Record that ``client`` was sent ``rule_ids`` (it holds them: it may rate them)."""
        for rid in rule_ids:
            self.holders.setdefault(rid, set()).add(client)

    def holds(self, client: str, rule_id: str) -> bool:
        """Whether ``rule_id`` was sent to ``client``."""
        return client in self.holders.get(rule_id, ())

    def rated(self, rule_id: str, raters: Collection[str]) -> None:
        """Record whose scores moved ``rule_id``'s H."""
        self.raters.setdefault(rule_id, set()).update(raters)

    def merge(self, old: str, into: str) -> None:
        """``old`` merged into ``into``: its holders and raters are ``into``'s now."""
        for book in (self.holders, self.raters):
            book.setdefault(into, set()).update(book.pop(old, set()))

    def credible(self, rule_id: str) -> bool:
        """Whether ``rule_id``'s H may rank it in Resolve (:func:`credible`)."""
        return credible(self.raters.get(rule_id, ()), self.holders.get(rule_id, ()),
                        min_clients=self.min_clients, min_share=self.min_share,
                        population=self.population)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (checkpoints)."""
        return {"min_clients": self.min_clients, "min_share": self.min_share,
                "population": self.population,
                "holders": {k: sorted(v) for k, v in self.holders.items()},
                "raters": {k: sorted(v) for k, v in self.raters.items()}}

    @classmethod
    def from_dict(cls, d: Any) -> Electorate:
        """Inverse of :meth:`to_dict` (``TypeError``/``ValueError`` on a malformed payload)."""
        out = cls(min_clients=int(d["min_clients"]), min_share=float(d["min_share"]))
        out.population = int(d.get("population", 0))
        out.holders = {str(k): {str(c) for c in v} for k, v in dict(d["holders"]).items()}
        out.raters = {str(k): {str(c) for c in v} for k, v in dict(d["raters"]).items()}
        return out


__all__ = ["SERVER_RATER", "Electorate", "FeedbackTally", "client_scores", "credible",
           "server_scores"]
