"""Do solved cases retrieved from a client's own D_i change its answers? (a short probe)

    python3 bench/probe_private_knowledge.py [--n 5] [--offset 20] [--k 2] [--no-write]

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
    reply = agent.respond(RespondInstruction(server_round=1, queries=qs), agent.new_state())
    got = [r.response.final_answer if r.response is not None else "" for r in reply.responses]
    return got, [[s.task_id for s in shots[q.query_id]] for q in qs], reply.tokens


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--offset", type=int, default=20)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    base = "agent.backend.temperature=0.0 data.partition=profile agent.few_shot_scope=query"
    rows, changed, better, worse, right = [], 0, 0, 0, [0, 0]
    t0 = time.perf_counter()
    tokens = [0, 0]
    for bench, pid in CLIENTS.items():
        tasks = sample_eval_tasks([bench], a.n, 0, offset=a.offset)
        without, _, tok0 = answers(pid, tasks, f"{base} agent.few_shot=0")
        with_k, cases, tok1 = answers(pid, tasks, f"{base} agent.few_shot={a.k} "
                                                  "agent.few_shot_style=cases")
        tokens[0] += tok0
        tokens[1] += tok1
        for t, x, y, c in zip(tasks, without, with_k, cases, strict=True):
            gold = canonical_answer(t.gold, t.answer_kind)
            ok = [canonical_answer(v, t.answer_kind) == gold if v else False for v in (x, y)]
            right[0] += ok[0]
            right[1] += ok[1]
            changed += x != y
            better += ok[1] and not ok[0]
            worse += ok[0] and not ok[1]
            rows.append(f"| {t.task_id} | {gold} | {x or '-'} | {y or '-'} | {', '.join(c)} |")
    seconds = time.perf_counter() - t0
    n = len(rows)
    text = "\n".join([
        SECTION, "",
        f"`python3 bench/probe_private_knowledge.py --n {a.n} --offset {a.offset} --k {a.k}` "
        f"(Qwen2.5-Coder-1.5B, greedy; the mathematician answers GSM8K and the physician MedQA, "
        f"with D_i dealt by expertise over 8 clients; development questions; {seconds:.0f} s).",
        "",
        "| question | gold | no cases | with cases | cases shown (own D_i) |",
        "|---|---|---|---|---|",
        *rows, "",
        f"Correct: {right[0]}/{n} without cases, {right[1]}/{n} with {a.k} solved cases; "
        f"{changed} of {n} answers changed ({better} to right, {worse} to wrong); tokens "
        f"{tokens[0]} vs {tokens[1]} (the cases lengthen the prompt, not the answer).", "",
    ])
    print(text)
    if not a.no_write:
        write_section(REPO / "bench" / "results" / "accuracy.md", text, SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
