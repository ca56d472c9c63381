"""The one-line texts of a run's progress and the running accuracy they show.

A finished query (:func:`query_line`), a finished Flower round (:func:`round_line`) and a reply
or heartbeat inside a round (:func:`delivery_line`), each ending with the accuracy so far
(:class:`RunningAccuracy`). Both the ServerApp's log lines and the launcher's live output
(:mod:`pfedma_flwr.server.progress`) print them; they are separate from that module because
they are pure text from a record, with no file, thread or terminal, and read every field
defensively (a record may be truncated or hostile).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def as_int(v: Any) -> int:
    """A record's count: a number truncated, anything else (a hostile or missing field) 0."""
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0


def _short(v: Any, limit: int = 40) -> str:
    s = " ".join(str(v).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def accuracy_text(correct: int, done: int) -> str:
    """``acc 2/3 (66.7 %)``, or ``acc -`` before the first query is done."""
    return f"acc {correct}/{done} ({100 * correct / done:.1f} %)" if done else "acc -"


@dataclass
class RunningAccuracy:
    """Queries finished, and of those with a gold verdict the ones answered correctly.

    A query without a boolean ``correct`` (a benchmark judged after the run, AlpacaEval's
    ``None``, or a hostile field) counts as done but not in the accuracy: AlpacaEval's answers
    read "acc 0/20" before, though no exact-match verdict exists for them.
    """

    total: int | None = None
    done: int = 0
    correct: int = 0
    by_benchmark: dict[str, list[int]] = field(default_factory=dict)  # -> [correct, scored]

    @property
    def scored(self) -> int:
        """Finished queries with a gold verdict (the accuracy's denominator)."""
        return sum(d for _, d in self.by_benchmark.values())

    def add(self, rec: Mapping[str, Any]) -> None:
        """Count one finished query (its ``queries.jsonl`` record)."""
        self.done += 1
        ok = rec.get("correct")
        if not isinstance(ok, bool):
            return
        self.correct += ok
        b = self.by_benchmark.setdefault(str(rec.get("benchmark", "?")), [0, 0])
        b[0] += ok
        b[1] += 1

    def text(self) -> str:
        """``acc 2/3 (66.7 %)`` over the scored queries, ``acc -`` before the first."""
        return accuracy_text(self.correct, self.scored)


def query_line(rec: Mapping[str, Any], acc: RunningAccuracy) -> str:
    """One finished query (after ``acc.add(rec)``), e.g.

    ``[pfedma] query 3/6 gsm8k/q2: correct, answer '42' (gold '42'), 2 rounds, t_max | acc 2/3
    (66.7 %)``.
    """
    of = f"/{acc.total}" if acc.total else ""
    ok = rec.get("correct")
    verdict = ("correct" if ok else "wrong") if isinstance(ok, bool) else "judged after the run"
    return (
        f"[pfedma] query {acc.done}{of} {_short(rec.get('benchmark', '?'), 20)}/"
        f"{_short(rec.get('query_id', '?'), 30)}: {verdict}, answer "
        f"{_short(rec.get('answer', ''))!r} (gold {_short(rec.get('gold', ''))!r}), "
        f"{as_int(rec.get('rounds'))} rounds, {_short(rec.get('stop_reason', '?'), 30)} | "
        f"{acc.text()}"
    )


def round_line(rec: Mapping[str, Any], acc: RunningAccuracy) -> str:
    """One finished Flower round, e.g.

    ``[pfedma] round 2: 4 queries, 6 retained / 2 filtered, 1 unusable, 1 node failed, 900
    tokens, 6 backend calls, 3 global rules | 2/6 queries done, acc 2/2 (100.0 %)``.

    *unusable*: answers a node sent without a response (its own error code, e.g. a reply cut
    off by ``max_tokens``); *node failed*: nodes whose whole reply was lost or rejected.
    """
    m = rec.get("metrics")
    m = m if isinstance(m, Mapping) else {}
    failures = rec.get("failures")
    failed = len(failures) if isinstance(failures, Mapping) else 0
    queries = rec.get("queries")
    unusable = sum(
        len(q["client_errors"])
        for q in (queries if isinstance(queries, list) else [])
        if isinstance(q, Mapping) and isinstance(q.get("client_errors"), Mapping)
    )
    of = f"/{acc.total}" if acc.total else ""
    per_bench = ", ".join(f"{b} {c}/{d}" for b, (c, d) in sorted(acc.by_benchmark.items()))
    return (
        f"[pfedma] round {as_int(rec.get('round'))}: "
        f"{as_int(m.get('select/num_queries'))} queries, "
        f"{as_int(m.get('anomaly/num_retained'))} retained / "
        f"{as_int(m.get('anomaly/num_filtered'))} filtered, {unusable} unusable, "
        f"{failed} node{'' if failed == 1 else 's'} failed, "
        f"{as_int(m.get('cost/tokens'))} tokens, "
        f"{as_int(m.get('cost/backend_calls'))} backend calls, "
        f"{as_int(m.get('rules/num_global'))} global rules | {acc.done}{of} queries done, "
        f"{acc.text()}" + (f" ({per_bench})" if per_bench else "")
    )


def duration_text(seconds: Any) -> str:
    """``1 min 25 s`` from seconds (whole seconds; ``0 s`` for a field that is no number)."""
    s = as_int(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def delivery_line(event: Mapping[str, Any], acc: RunningAccuracy) -> str:
    """A node's reply inside a round, or a heartbeat while replies are outstanding, e.g.

    ``[pfedma] round 1: partition-3 replied (5 answers) | 15/40 answers from 3/8 clients after
    1 min 25 s | 0/20 queries done, acc -``. Round 0 is the handshake (clients starting).
    """
    r = as_int(event.get("round"))
    where = "handshake" if r == 0 else f"round {r}"
    if event.get("event") == "reply":
        n = as_int(event.get("answers_of")) if "answers_of" in event else None
        who = event.get("client") or f"node {as_int(event.get('node'))}"
        what = f"{_short(who, 40)} replied" + (f" ({n} answer{'' if n == 1 else 's'})" if n else "")
    else:
        waiting = as_int(event.get("nodes")) - as_int(event.get("replied"))
        what = f"waiting for {waiting} client{'' if waiting == 1 else 's'}"
    counts = (
        f"{as_int(event.get('replied'))}/{as_int(event.get('nodes'))} clients"
        if r == 0
        else f"{as_int(event.get('answers'))}/{as_int(event.get('answers_total'))} answers from "
        f"{as_int(event.get('replied'))}/{as_int(event.get('nodes'))} clients"
    )
    of = f"/{acc.total}" if acc.total else ""
    return (
        f"[pfedma] {where}: {what} | {counts} after {duration_text(event.get('elapsed'))} | "
        f"{acc.done}{of} queries done, {acc.text()}"
    )
