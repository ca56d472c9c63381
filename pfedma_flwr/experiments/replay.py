"""Replay a finished run's recorded answers with fewer of its later-round answers (issue 33).

A run that asked ``K`` clients in a later round holds every answer a run asking fewer of them
would have had: the orchestrator ranks the clients of a round in one order and takes the first
ones, and the round's prompt (the query with ``z`` of the earlier rounds) does not depend on how
many are asked. Re-voting each query with only the first ``m`` answers of every round after the
first tells what ``K = m`` in those rounds would have given, with no generation. This is how
``routing.adaptive_k`` (ask one client after a two-way split) was set against asking two
(``bench/results/gsm8k_dev_round2.md``).

The vote is the project's own (:func:`pfedma_flwr.aggregation.consensus.aggregate`) over the
recorded retained answers with their anomaly scores. Two approximations, both named in the
output: the weights use the routing states at the end of the run (the run voted with the
states of the time), and the run's later queries are kept as they were (a run asking fewer
clients learns ``C`` from fewer answers and may route a few later queries differently). Replaying
a run unchanged (``m`` = all) must give its recorded accuracy; the table says when it does not.

``python3 -m pfedma_flwr.experiments.replay RUN_DIR [--later-k 1,2]``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pfedma_flwr.aggregation.consensus import RoundResponse, aggregate
from pfedma_flwr.answers import is_correct
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.profiles import knowledge_domain
from pfedma_flwr.experiments.analysis import RunData, load_run
from pfedma_flwr.experiments.diagnose import tasks_of
from pfedma_flwr.experiments.stats import compare, wilson_interval
from pfedma_flwr.protocol.schema import Claim, StructuredResponse
from pfedma_flwr.routing.state import RoutingTable


@dataclass(frozen=True)
class Replayed:
    """One replayed configuration of a run.

    Attributes
    ----------
    later_k : int or None
        Answers kept per later round (``None``: all the run recorded).
    correct : dict[str, bool]
        Query id → the replayed ``z`` is right.
    answers : int
        Answers the configuration uses over all queries (the cost proxy).
    """

    later_k: int | None
    correct: dict[str, bool]
    answers: int


def _history(rounds: Sequence[Mapping[str, Any]], later_k: int | None) -> list[RoundResponse]:
    """One query's recorded answers, each later round cut to its first ``later_k`` selected."""
    out: list[RoundResponse] = []
    for q in sorted(rounds, key=lambda r: int(r.get("t", 0))):
        t = int(q.get("t", 0))
        selected = [str(c) for c in q.get("selected", [])]
        keep = selected if t <= 1 or later_k is None else selected[:later_k]
        anomaly = q.get("anomaly", {})
        for client, view in q.get("responses", {}).items():
            if client not in keep or not isinstance(view, Mapping):
                continue
            answer = str(view.get("answer", ""))
            if not answer.strip():
                continue
            a = anomaly.get(client)
            a = a if isinstance(a, Mapping) else {}
            resp = StructuredResponse(final_answer=answer, claims=tuple(
                Claim(claim=str(c)) for c in view.get("claims", []) if str(c).strip()))
            out.append(RoundResponse(client_id=str(client), round=t, response=resp,
                                     retained=bool(a.get("retained", False)),
                                     anomaly=float(a.get("score", 0.0))))
    return out


def replay_queries(
    rounds_by_query: Mapping[str, Sequence[Mapping[str, Any]]],
    tasks: Mapping[str, Task],
    routing: RoutingTable,
    *,
    later_k: int | None,
    use_capability: bool = True,
    use_reliability: bool = True,
) -> Replayed:
    """Re-vote every query of ``tasks`` from its recorded rounds (module docstring).

    Parameters
    ----------
    rounds_by_query : Mapping[str, Sequence[Mapping]]
        Query id → its records of ``rounds.jsonl`` (``t``, ``selected`` in the orchestrator's
        order, ``responses``, ``anomaly``).
    tasks : Mapping[str, Task]
        The gold-scored queries to replay (a query with no retained answer is wrong).
    routing : RoutingTable
        The states that weigh the votes.
    later_k : int or None
        Answers kept in each round after the first; ``None`` keeps all.
    use_capability, use_reliability : bool
        The run's ``routing.use_capability`` / ``routing.use_reliability``.
    """
    if later_k is not None and later_k < 1:
        raise ValueError(f"later_k must be >= 1 or None, got {later_k}")
    correct: dict[str, bool] = {}
    used = 0
    for qid, task in sorted(tasks.items()):
        history = _history(rounds_by_query.get(qid, ()), later_k)
        used += len(history)
        z = aggregate(history, kind=task.answer_kind, domain=knowledge_domain(task.domain),
                      routing=routing, use_capability=use_capability,
                      use_reliability=use_reliability, options=task.options or None)
        correct[qid] = bool(not z.empty and is_correct(z.answer, task.gold, task.answer_kind,
                                                       options=task.options or None))
    return Replayed(later_k=later_k, correct=correct, answers=used)


def replay(run_dir: Path, later_ks: Sequence[int | None]) -> dict[str, Any]:
    """Replay ``run_dir`` for each of ``later_ks`` (``None``: unchanged) against its record."""
    run: RunData = load_run(run_dir)
    checkpoint = json.loads((run_dir / "checkpoint.json").read_text(encoding="utf-8"))
    routing = RoutingTable.from_dict(checkpoint.get("routing", {}))
    by_query: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for rnd in run.rounds:
        for q in rnd.get("queries", []):
            by_query[str(q.get("query_id", ""))].append(q)
    recorded = {str(r["query_id"]): bool(r["correct"]) for r in run.queries
                if r.get("correct") is not None}
    tasks = {qid: t for qid, t in tasks_of(run).items() if qid in recorded}
    ids = sorted(tasks)
    rows = []
    for k in later_ks:
        rep = replay_queries(by_query, tasks, routing, later_k=k,
                             use_capability=run.cfg.routing.use_capability,
                             use_reliability=run.cfg.routing.use_reliability)
        solved = sum(rep.correct.values())
        lo, hi = wilson_interval(solved, len(ids))
        d = compare([float(rep.correct[q]) for q in ids], [float(recorded[q]) for q in ids])
        rows.append({"later_k": "all" if k is None else k, "solved": solved, "n": len(ids),
                     "lo": lo, "hi": hi, "answers_per_query": rep.answers / max(len(ids), 1),
                     "diff": d.diff, "diff_lo": d.lo, "diff_hi": d.hi, "b": d.b, "c": d.c,
                     "p_mcnemar": d.p_mcnemar})
    return {"run": str(run_dir), "recorded": sum(recorded[q] for q in ids), "n": len(ids),
            "rows": rows}


def to_markdown(d: Mapping[str, Any]) -> str:
    """The replay table, with the recorded accuracy it is checked against."""
    lines = [f"# Replay of `{d['run']}`", "",
             f"Recorded: {d['recorded']}/{d['n']}. Weights: the routing states at the end of "
             "the run; later queries as the run routed them.", "",
             "| later rounds keep | solved/n | ACC [95% CI] | answers/query | "
             "replay − recorded [95% CI] | b:c | p_mcnemar |", "|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        lines.append(
            f"| {r['later_k']} | {r['solved']}/{r['n']} | {100 * r['solved'] / max(r['n'], 1):.1f}"
            f" [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}] | {r['answers_per_query']:.2f} | "
            f"{100 * r['diff']:+.1f} [{100 * r['diff_lo']:+.1f}, {100 * r['diff_hi']:+.1f}] | "
            f"{r['b']}:{r['c']} | {r['p_mcnemar']:.3g} |")
    return "\n".join(lines) + "\n"


def _ks(text: str) -> list[int | None]:
    out: list[int | None] = [None]
    for part in text.split(","):
        if part.strip():
            k = int(part)
            if k < 1:
                raise argparse.ArgumentTypeError(f"--later-k values must be >= 1, got {k}")
            out.append(k)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: print the replay table of one run."""
    p = argparse.ArgumentParser(prog="python3 -m pfedma_flwr.experiments.replay",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="a finished run's output dir (checkpoint.json)")
    p.add_argument("--later-k", type=_ks, default=_ks("1"),
                   help="answers kept per round after the first, comma-separated (default 1)")
    args = p.parse_args(argv)
    for name in ("summary.json", "checkpoint.json", "rounds.jsonl"):
        if not (args.run_dir / name).is_file():
            print(f"replay: {args.run_dir / name} is missing (not a finished run dir)",
                  file=sys.stderr)
            return 2
    sys.stdout.write(to_markdown(replay(args.run_dir, args.later_k)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
