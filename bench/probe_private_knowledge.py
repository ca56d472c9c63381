"""Do solved cases retrieved from a client's own D_i change its answers? (a short probe)

    python3 bench/probe_private_knowledge.py [--n 5] [--offset 20] [--k 2] [--threads 2]
        [--bench gsm8k|medqa] [--mode both|none|cases|report] [--no-write]

Builds two clients of the main job's 8-client federation the way a ClientApp does
(``client.components.build_agent``) with ``data.partition=profile`` (the mathematician holds
math cases, the physician medical ones), greedy, and asks each ``--n`` development questions
of its domain (questions ``offset..offset+n-1`` of each evaluation stream, never main's test
questions) twice: without private knowledge (``agent.few_shot=0``) and with its ``--k``
nearest solved cases (``agent.few_shot_style=cases``). Reports per question the gold, both
answers and the cases' ids, and how many answers changed, improved or got worse. Writes a
section of ``bench/results/accuracy.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pfedma_flwr.answers import canonical_answer  # noqa: E402
from pfedma_flwr.client import components  # noqa: E402
from pfedma_flwr.data.split import sample_eval_tasks  # noqa: E402
from pfedma_flwr.protocol.schema import RespondInstruction, RoutedQuery  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tokens_per_solved import write_section  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Private knowledge probe"
CLIENTS = {"gsm8k": 0, "medqa": 1}  # the rotation's mathematician and physician


def answers(pid: int, tasks: list, overrides: str) -> tuple[list[str], list[list[str]], int]:
    """The client's final answers, the cases each prompt showed, and the tokens spent."""
    agent = components.build_agent({"config-name": "pfedma", "overrides": overrides},
                                   {"partition-id": pid, "num-partitions": 8})
    qs = tuple(RoutedQuery(query_id=t.task_id, text=t.question, domain=t.domain, round=1,
                           answer_kind=t.answer_kind) for t in tasks)
    shots = agent._demonstrations(qs)  # what retrieval gives each query (no generation)
    t0 = time.perf_counter()
    reply = agent.respond(RespondInstruction(server_round=1, queries=qs), agent.new_state())
    print(f"[probe] client {pid}, {overrides.split()[-1]}: {len(qs)} answers in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    got = [r.response.final_answer if r.response is not None else "" for r in reply.responses]
    return got, [[s.task_id for s in shots[q.query_id]] for q in qs], reply.tokens


def _record(bench: str, pid: int, a: argparse.Namespace, base: str, cases: bool) -> dict:
    """One client's answers to its ``--n`` questions, with or without solved cases."""
    tasks = sample_eval_tasks([bench], a.n, 0, offset=a.offset)
    extra = f"agent.few_shot={a.k} agent.few_shot_style=cases" if cases else "agent.few_shot=0"
    got, shown, tokens = answers(pid, tasks, f"{base} {extra}")
    return {"ids": [t.task_id for t in tasks],
            "gold": [canonical_answer(t.gold, t.answer_kind) for t in tasks],
            "kinds": [t.answer_kind for t in tasks], "answers": got, "cases": shown,
            "tokens": tokens}


def _merge(old: dict | None, new: dict) -> dict:
    """Answers of an earlier call (other ``--offset``) followed by this call's new questions."""
    if old is None:
        return new
    keep = [j for j, q in enumerate(new["ids"]) if q not in old["ids"]]
    out = {k: old[k] + [new[k][j] for j in keep] for k in ("ids", "gold", "kinds", "answers",
                                                              "cases")}
    out["tokens"] = old["tokens"] + (new["tokens"] if keep else 0)
    return out


def report(saved: dict, a: argparse.Namespace) -> str:
    """The section text: both configurations per question, and what changed."""
    rows, changed, better, worse, right, tokens = [], 0, 0, 0, [0, 0], [0, 0]
    for bench in sorted(CLIENTS):
        x, y = saved.get(f"{bench}/none"), saved.get(f"{bench}/cases")
        if x is None or y is None:
            continue
        for j, qid in enumerate(x["ids"]):
            kind, gold = x["kinds"][j], x["gold"][j]
            ans = (x["answers"][j], y["answers"][j])
            ok = [bool(v) and canonical_answer(v, kind) == gold for v in ans]
            right[0] += ok[0]
            right[1] += ok[1]
            changed += ans[0] != ans[1]
            better += ok[1] and not ok[0]
            worse += ok[0] and not ok[1]
            rows.append(f"| {qid} | {gold} | {ans[0] or '-'} | {ans[1] or '-'} | "
                        f"{', '.join(y['cases'][j])} |")
        tokens[0] += x["tokens"]
        tokens[1] += y["tokens"]
    n = len(rows)
    return "\n".join([
        SECTION, "",
        f"`python3 bench/probe_private_knowledge.py --bench B --mode M --threads {a.threads} "
        f"--k {a.k} --offset O --n N`, one call per benchmark, mode and batch of questions, "
        f"then `--mode report` (Qwen2.5-Coder-1.5B, greedy; the mathematician answers GSM8K "
        f"and the physician MedQA, D_i dealt by expertise over 8 clients; development "
        f"questions from 20 on).", "",
        "| question | gold | no cases | with cases | cases shown (own D_i) |",
        "|---|---|---|---|---|", *rows, "",
        f"Correct: {right[0]}/{n} without cases, {right[1]}/{n} with {a.k} solved cases; "
        f"{changed} of {n} answers changed ({better} to right, {worse} to wrong); tokens "
        f"{tokens[0]} vs {tokens[1]} (prompt and answer).", "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--offset", type=int, default=20)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2,
                    help="llama.cpp threads (1 on a machine other processes load: 2 threads "
                         "spin-wait for each other, 0.4 vs 3.7 tokens/s measured)")
    ap.add_argument("--bench", choices=sorted(CLIENTS), action="append", default=[],
                    help="benchmarks to probe (default both; repeat)")
    ap.add_argument("--mode", choices=("both", "none", "cases", "report"), default="both",
                    help="answer without cases, with cases, both, or only report the saved "
                         "answers (one configuration per call keeps each call short)")
    ap.add_argument("--save", type=Path, default=REPO / "outputs" / "probe_private_knowledge.json")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    base = (f"agent.backend.temperature=0.0 data.partition=profile agent.few_shot_scope=query "
            f"agent.backend.n_threads={a.threads}")
    saved = json.loads(a.save.read_text()) if a.save.is_file() else {}
    for bench, pid in CLIENTS.items():
        if a.bench and bench not in a.bench:
            continue
        for mode in ("none", "cases"):
            if a.mode in (mode, "both"):
                key = f"{bench}/{mode}"
                saved[key] = _merge(saved.get(key), _record(bench, pid, a, base,
                                                            mode == "cases"))
                a.save.parent.mkdir(parents=True, exist_ok=True)
                a.save.write_text(json.dumps(saved, indent=1))
    text = report(saved, a)
    print(text)
    if not a.no_write and a.mode in ("both", "report"):
        write_section(REPO / "bench" / "results" / "accuracy.md", text, SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
