"""Where a federation loses the questions a reference run answers: per-query evidence (issue 33).

``python -m pfedma_flwr.experiments.diagnose RUN --reference REF [--output FILE.md]`` reads two
run directories over the same questions (a federation and, e.g., the best single agent) and
sorts every question the run got wrong by the first mechanism that lost it:

- ``never_produced``: no agent answered correctly in any round (the agents, their ways of
  working and the routing that picked them);
- ``filtered``: a correct answer arrived but the anomaly filter removed every correct one;
- ``outvoted``: a correct answer was retained, yet ``z`` chose another (aggregation, or a
  stop before the correct side won).

It also reports each client's accuracy over its own answers (round 1 only: independent
attempts), the share of queries the federation stopped after one round on a wrong agreement,
and how the final answers fared where round 1's members agreed and where they split. On
multiple choice each score comes with the exact one-sided binomial p-value against guessing
(one option at random): a vote among members that guess is itself a guess, whatever the
orchestration does. Where the routing policy recorded why it picked (the heuristic's score
parts, ``rounds.jsonl`` ``routing``), it counts what put each selection's last client ahead of
the first one left out (:func:`decided_by`). Nothing here uses ground truth during a run;
gold is read from the run's records and the benchmark files only to score what the run did.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pfedma_flwr.answers import is_correct
from pfedma_flwr.data.benchmarks import Task, load_benchmark
from pfedma_flwr.experiments.analysis import RunData, load_run
from pfedma_flwr.experiments.compare import guessing_rates
from pfedma_flwr.experiments.stats import above_chance
from pfedma_flwr.routing.orchestrator import SCORE_PARTS, TIER_PARTS

LOSSES = ("never_produced", "filtered", "outvoted")


@dataclass
class QueryTrace:
    """One query of a run: its answers by round and client, and how each was scored."""

    query_id: str
    benchmark: str
    correct: bool
    stop_reason: str
    rounds: int
    # (round, client, answer, retained, correct)
    answers: list[tuple[int, str, str, bool, bool]] = field(default_factory=list)

    def switches(self) -> tuple[int, int]:
        """(right → wrong, wrong → right) changes of a client's own answer in later rounds.

        Refinement conformity (a client re-asked adopts the other answer listed) shows as
        right → wrong.
        """
        first: dict[str, bool] = {}
        bad = good = 0
        for _rnd, client, _a, _ret, ok in sorted(self.answers):
            if client in first and first[client] != ok:
                bad += first[client] and not ok
                good += ok and not first[client]
            first[client] = ok
        return bad, good

    def loss(self) -> str | None:
        """The first mechanism that lost a wrongly answered query (module docstring)."""
        if self.correct:
            return None
        right = [a for a in self.answers if a[4]]
        if not right:
            return "never_produced"
        if not any(a[3] for a in right):
            return "filtered"
        return "outvoted"


def tasks_of(run: RunData) -> dict[str, Task]:
    """The tasks of every benchmark ``run`` answered, by task id."""
    out: dict[str, Task] = {}
    for bench in dict.fromkeys(str(r.get("benchmark", "")) for r in run.queries):
        out.update({t.task_id: t for t in load_benchmark(bench, run.cfg.data.data_dir or None)})
    return out


def traces(run: RunData) -> dict[str, QueryTrace]:
    """Every gold-scored query of ``run`` with its answers (from ``rounds.jsonl``)."""
    tasks = tasks_of(run)
    out = {str(r["query_id"]): QueryTrace(
        query_id=str(r["query_id"]), benchmark=str(r.get("benchmark", "")),
        correct=bool(r["correct"]), stop_reason=str(r.get("stop_reason", "")),
        rounds=int(r.get("rounds", 0)))
        for r in run.queries if r.get("correct") is not None}
    for rnd in run.rounds:
        for q in rnd.get("queries", []):
            tr = out.get(str(q.get("query_id", "")))
            task = tasks.get(tr.query_id) if tr is not None else None
            if tr is None or task is None:
                continue
            anomaly = q.get("anomaly", {})
            for client, view in sorted(q.get("responses", {}).items()):
                if not isinstance(view, Mapping) or not str(view.get("answer", "")).strip():
                    continue
                answer = str(view["answer"])
                ok = is_correct(answer, task.gold, task.answer_kind,
                                options=task.options or None)
                tr.answers.append((int(q.get("t", 0)), client, answer,
                                   bool(anomaly.get(client, {}).get("retained", False)),
                                   bool(ok)))
    return out


def client_accuracy(tr: Mapping[str, QueryTrace]) -> dict[str, dict[str, tuple[int, int]]]:
    """Client → benchmark → (correct, answered) over its round-1 answers."""
    acc: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for t in tr.values():
        for rnd, client, _a, _ret, ok in t.answers:
            if rnd == 1:
                acc[client][t.benchmark][0] += ok
                acc[client][t.benchmark][1] += 1
    return {c: {b: (v[0], v[1]) for b, v in sorted(per.items())} for c, per in sorted(acc.items())}


def round_one_agreement(tr: Mapping[str, QueryTrace], ref: Mapping[str, bool]
                        ) -> dict[str, dict[str, dict[str, int]]]:
    """Benchmark → kind → counts, over queries with ≥ 2 round-1 answers.

    Kinds: ``agree`` (every round-1 answer the same text); ``split, then majority`` (they
    differed, and over all rounds two clients gave some answer); ``split, no majority``
    (no two clients ever gave the same answer: ``z`` is a pick among singletons). Per kind: ``n``
    queries, ``produced`` (an answer of any round was right), ``run`` (the final answer was right)
    and, on the queries the reference answered, ``ref_n`` and ``reference`` (it was right).
    Where the members split the federation must pick; this is where it can gain or lose
    against one agent.
    """
    out: dict[str, dict[str, dict[str, int]]] = {}
    for qid, t in sorted(tr.items()):
        first = [a for a in t.answers if a[0] == 1]
        if len(first) < 2:
            continue
        # an answer counts once per client: a client re-asked that repeats itself is no majority
        backers: dict[str, set[str]] = defaultdict(set)
        for a in t.answers:
            backers[a[2].strip()].add(a[1])
        if len({a[2].strip() for a in first}) == 1:
            kind = "agree"
        elif max(len(v) for v in backers.values()) >= 2:
            kind = "split, then majority"
        else:
            kind = "split, no majority"
        c = out.setdefault(t.benchmark, {}).setdefault(
            kind, {"n": 0, "produced": 0, "run": 0, "ref_n": 0, "reference": 0})
        c["n"] += 1
        c["produced"] += any(a[4] for a in t.answers)
        c["run"] += t.correct
        if qid in ref:
            c["ref_n"] += 1
            c["reference"] += ref[qid]
    return {b: dict(sorted(v.items())) for b, v in sorted(out.items())}


def decided_by(chosen: Mapping[str, float], left: Mapping[str, float]) -> str:
    """What put ``chosen`` (a selection's last client) ahead of ``left`` (the first left out).

    Both are a heuristic selection's reasons (``rounds.jsonl`` ``routing``): the first tier part
    that differs, else the score part that favoured ``chosen`` most. The score difference is
    split exactly into parts, ``(C + sim)/2·S`` by the midpoint rule
    (``a₁b₁ − a₂b₂ = (a₁ − a₂)(b₁ + b₂)/2 + (a₁ + a₂)(b₁ − b₂)/2``), plus ``bonus`` and ``−cost``.
    """
    for t in TIER_PARTS:
        if float(chosen.get(t, 0.0)) != float(left.get(t, 0.0)):
            return t
    a, b = ({k: float(side.get(k, 0.0)) for k in SCORE_PARTS} for side in (chosen, left))
    s_mid = (a["S"] + b["S"]) / 2.0
    parts = {"C": (a["C"] - b["C"]) / 2.0 * s_mid,
             "sim": (a["sim"] - b["sim"]) / 2.0 * s_mid,
             "S": (a["C"] + a["sim"] + b["C"] + b["sim"]) / 4.0 * (a["S"] - b["S"]),
             "bonus": a["bonus"] - b["bonus"],
             "cost": b["cost"] - a["cost"]}
    best = max(parts, key=lambda k: (parts[k], k))
    return best if parts[best] > 0 else "tie"


def routing_decisions(run: RunData) -> dict[str, dict[str, Counter[str]]]:
    """Benchmark → ``"round 1"`` / ``"later rounds"`` → what decided each selection's last pick.

    Read from the ``routing`` reasons a heuristic policy writes into ``rounds.jsonl``; queries
    without them (another policy, an older run) are skipped.
    """
    out: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    bench = {str(r["query_id"]): str(r.get("benchmark", "")) for r in run.queries}
    for rnd in run.rounds:
        for q in rnd.get("queries", []):
            why, sel = q.get("routing"), q.get("selected") or []
            if not isinstance(why, Mapping) or not sel or sel[-1] not in why:
                continue
            left = [c for c in why if c not in sel]
            kind = "round 1" if int(q.get("t", 1)) <= 1 else "later rounds"
            b = bench.get(str(q.get("query_id", "")), "")
            out[b][kind][decided_by(why[sel[-1]], why[left[0]]) if left else "no one left"] += 1
    return out


def benchmark_accuracy(outcomes: Iterable[tuple[str, bool]]) -> dict[str, tuple[int, int]]:
    """Benchmark → (correct, scored) over ``(benchmark, correct)`` final answers."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for bench, ok in outcomes:
        acc[bench][0] += ok
        acc[bench][1] += 1
    return {b: (v[0], v[1]) for b, v in sorted(acc.items())}


def diagnose(run_dir: Path, reference_dir: Path | None = None) -> dict[str, Any]:
    """The loss of every wrong query of ``run_dir``, and against ``reference_dir`` if given."""
    run = load_run(run_dir)
    tr = traces(run)
    ref_rows = [r for r in load_run(reference_dir).queries if r.get("correct") is not None] \
        if reference_dir is not None else []
    ref = {str(r["query_id"]): bool(r["correct"]) for r in ref_rows}
    losses: dict[str, Counter[str]] = defaultdict(Counter)
    lost_vs_ref: list[dict[str, Any]] = []
    won_vs_ref: list[dict[str, Any]] = []
    wrong_stop = 0
    switched = [0, 0]
    for qid, t in sorted(tr.items()):
        bad, good = t.switches()
        switched[0] += bad
        switched[1] += good
        loss = t.loss()
        if loss is not None:
            losses[t.benchmark][loss] += 1
            if t.rounds == 1 and len(t.answers) > 1 and len({a[2] for a in t.answers}) == 1:
                wrong_stop += 1
        if qid in ref and ref[qid] != t.correct:
            rec = {"query_id": qid, "benchmark": t.benchmark, "loss": loss,
                   "stop_reason": t.stop_reason, "rounds": t.rounds,
                   "answers": [f"r{a[0]} {a[1]}: {a[2][:24]}{'' if a[3] else ' (filtered)'}"
                               f"{' ✓' if a[4] else ''}" for a in t.answers]}
            (won_vs_ref if t.correct else lost_vs_ref).append(rec)
    return {"run": str(run_dir), "reference": str(reference_dir) if reference_dir else None,
            "queries": len(tr), "correct": sum(t.correct for t in tr.values()),
            "losses": {b: {k: c[k] for k in LOSSES} for b, c in sorted(losses.items())},
            "wrong_after_one_agreeing_round": wrong_stop,
            "switched": {"right_to_wrong": switched[0], "wrong_to_right": switched[1]},
            "clients": client_accuracy(tr),
            "chance": guessing_rates([run]),
            "accuracy": benchmark_accuracy((t.benchmark, t.correct) for t in tr.values()),
            "reference_accuracy": benchmark_accuracy(
                (str(r.get("benchmark", "")), bool(r["correct"])) for r in ref_rows),
            "profiles": {c: str(d.get("description", ""))[:60]
                         for c, d in run.summary.get("clients", {}).items()
                         if isinstance(d, Mapping)},
            "round_one": round_one_agreement(tr, ref),
            "routing": {b: {k: dict(c) for k, c in v.items()}
                        for b, v in sorted(routing_decisions(run).items())},
            "lost_vs_reference": lost_vs_ref, "won_vs_reference": won_vs_ref,
            "on_common": _common(tr, ref)}


def _common(tr: Mapping[str, QueryTrace], ref: Mapping[str, bool]) -> dict[str, int]:
    both = [q for q in tr if q in ref]
    return {"n": len(both), "run": sum(tr[q].correct for q in both),
            "reference": sum(ref[q] for q in both)}


def to_markdown(d: Mapping[str, Any]) -> str:
    """A report of :func:`diagnose` for ``bench/results`` or a closing note."""
    lines = [f"# Where `{Path(d['run']).name}` loses questions", "",
             f"{d['correct']}/{d['queries']} correct."]
    if d["reference"]:
        c = d["on_common"]
        lines.append(f"On the {c['n']} questions both answered: run {c['run']}, reference "
                     f"`{Path(d['reference']).name}` {c['reference']}; lost "
                     f"{len(d['lost_vs_reference'])} that the reference answered, won "
                     f"{len(d['won_vs_reference'])} that it missed.")
    lines += ["", "| benchmark | " + " | ".join(LOSSES) + " |", "|---|" + "---|" * len(LOSSES)]
    lines += [f"| {b} | " + " | ".join(str(v[k]) for k in LOSSES) + " |"
              for b, v in d["losses"].items()]
    lines += ["", f"Wrong queries that stopped after one round on one agreed answer: "
              f"{d['wrong_after_one_agreeing_round']}. A client asked again changed its own "
              f"answer right → wrong {d['switched']['right_to_wrong']} times, wrong → right "
              f"{d['switched']['wrong_to_right']} times.", "",
              "| client | profile | " + " | ".join(_benches(d)) + " |",
              "|---|---|" + "---|" * len(_benches(d))]
    chance = d.get("chance", {})
    for c, per in d["clients"].items():
        cells = [_score(per[b], chance.get(b)) if b in per else "-" for b in _benches(d)]
        lines.append(f"| {c} | {d['profiles'].get(c, '')} | " + " | ".join(cells) + " |")
    if chance:
        run = [f"{b} {_score(d['accuracy'][b], r)}" for b, r in chance.items()
               if b in d.get("accuracy", {})]
        lines += ["", "Guessing (one option at random) scores "
                  + ", ".join(f"{100 * r:.0f} % on {b}" for b, r in chance.items())
                  + "; p: the exact one-sided binomial test of a score against it. The run's "
                  "final answers: " + ", ".join(run)
                  + "".join(f"; the reference's: {b} {_score(d['reference_accuracy'][b], r)}"
                            for b, r in chance.items() if b in d.get("reference_accuracy", {}))
                  + "."]
    if d.get("round_one"):
        lines += ["", "Round 1 asked several members: did they agree? (produced: an answer of "
                  "any round was right; run / reference: the final answers)", "",
                  "| benchmark | round 1 | queries | produced | run | reference |",
                  "|---|---|---|---|---|---|"]
        for b, kinds in d["round_one"].items():
            for kind, c in kinds.items():
                refc = f"{c['reference']}/{c['ref_n']}" if c["ref_n"] else "-"
                lines.append(f"| {b} | {kind} | {c['n']} | {c['produced']} | {c['run']} | "
                             f"{refc} |")
    if d.get("routing"):
        lines += ["", "What put each selection's last client ahead of the first one left out "
                  "(a tier part, else the score part that favoured it most):", "",
                  "| benchmark | rounds | decided by |", "|---|---|---|"]
        lines += [f"| {b} | {kind} | " + ", ".join(f"{k} {n}" for k, n in sorted(
                      c.items(), key=lambda kv: (-kv[1], kv[0]))) + " |"
                  for b, kinds in d["routing"].items() for kind, c in sorted(kinds.items())]
    for key, title in (("lost_vs_reference", "Lost (reference right, run wrong)"),
                       ("won_vs_reference", "Won (run right, reference wrong)")):
        if d.get(key):
            lines += ["", f"## {title}", ""]
            lines += [f"- `{r['query_id']}` {r['loss'] or ''} (stop {r['stop_reason']}, "
                      f"{r['rounds']} rounds): " + "; ".join(r["answers"]) for r in d[key]]
    return "\n".join(lines) + "\n"


def _score(kn: Sequence[int], chance: float | None) -> str:
    """``k/n``, with the p-value against guessing where the benchmark has options."""
    k, n = int(kn[0]), int(kn[1])
    if chance is None or n == 0:
        return f"{k}/{n}"
    return f"{k}/{n} (p {above_chance(k, n, chance):.2g})"


def _benches(d: Mapping[str, Any]) -> list[str]:
    return sorted({b for per in d["clients"].values() for b in per})


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m pfedma_flwr.experiments.diagnose",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="run directory (summary.json, queries/rounds.jsonl)")
    ap.add_argument("--reference", type=Path, default=None,
                    help="a run over the same questions to compare with")
    ap.add_argument("--output", type=Path, default=None, help="write the markdown here too")
    args = ap.parse_args(argv)
    for p in (args.run, args.reference):
        if p is not None and not (p / "summary.json").is_file():
            print(f"diagnose: {p} holds no run (summary.json missing)", file=sys.stderr)
            return 2
    md = to_markdown(diagnose(args.run, args.reference))
    if args.output is not None:
        args.output.write_text(md, encoding="utf-8")
    print(md, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
