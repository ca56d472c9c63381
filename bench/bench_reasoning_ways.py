"""Chain of thought vs program-aided answers of one model, alone and voting together (one run).

    python3 bench/bench_reasoning_ways.py [--model qwen2.5-coder-1.5b] [--n 20] [--seeds 11 12]
        [--temperature 0.3] [--threads 2]

For the first ``--n`` GSM8K questions of the run's evaluation stream (seed 0: the 10 default
questions, then questions never used as defaults), the agents' own prompts are answered twice
per seed: in chain of thought (the mathematician's profile, ``agents/reasoning.py``) and as a
program the client runs (the statistician's, ``agents/program.py``). Reports the accuracy of
each answer set alone and of majority votes over mixes of them (a tie goes to the first listed
answer), i.e. what a federation of agents reasoning in one way or in two ways can reach with
2-4 votes. Writes a section of ``bench/results/accuracy.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pfedma_flwr.agents.program import extract_code, program_messages, run_program  # noqa: E402
from pfedma_flwr.agents.prompting import build_reasoning_messages  # noqa: E402
from pfedma_flwr.agents.reasoning import extract_answer  # noqa: E402
from pfedma_flwr.answers import canonical_answer  # noqa: E402
from pfedma_flwr.data.profiles import get_profile  # noqa: E402
from pfedma_flwr.data.split import sample_eval_tasks  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tokens_per_solved import write_section  # noqa: E402  (the results file's writer)

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Reasoning ways"


def majority(votes: list[str]) -> str:
    """The most frequent non-empty vote; a tie goes to the earliest listed."""
    votes = [v for v in votes if v]
    if not votes:
        return ""
    count = Counter(votes)
    top = max(count.values())
    return next(v for v in votes if count[v] == top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs=2, default=[11, 12])
    ap.add_argument("--temperature", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)

    from pfedma_flwr.agents.backends.llama_cpp_backend import LlamaCppBackend

    tasks = sample_eval_tasks(["gsm8k"], args.n, 0)
    backend = LlamaCppBackend(model=args.model, n_threads=args.threads, max_batch=16)
    cot_p = [build_reasoning_messages(profile_prompt=get_profile("mathematician").prompt,
                                      query_text=t.question, answer_kind="number")
             for t in tasks]
    prog_p = [program_messages(profile_prompt=get_profile("statistician").prompt,
                               query_text=t.question) for t in tasks]
    answers: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    for i, seed in enumerate(args.seeds):
        gens = backend.generate(cot_p, max_tokens=384, temperature=args.temperature, seed=seed)
        answers[f"cot{i + 1}"] = [canonical_answer(extract_answer(g.text, "number")[0], "number")
                                  for g in gens]
        gens = backend.generate(prog_p, max_tokens=320, temperature=args.temperature, seed=seed)
        answers[f"prog{i + 1}"] = [run_program(extract_code(g.text)).answer for g in gens]
    seconds = time.perf_counter() - t0
    gold = [canonical_answer(t.gold, "number") for t in tasks]

    def acc(votes_of: list[str]) -> int:
        return sum(majority([answers[k][j] for k in votes_of]) == gold[j]
                   for j in range(len(tasks)))

    mixes = [["cot1"], ["cot2"], ["prog1"], ["prog2"], ["cot1", "cot2"], ["prog1", "prog2"],
             ["prog1", "cot1"], ["cot1", "prog1"], ["cot1", "cot2", "prog1"],
             ["prog1", "prog2", "cot1"], ["prog1", "prog2", "cot1", "cot2"]]
    rows = [f"| {' + '.join(m)} | {acc(m)}/{len(tasks)} |" for m in mixes]
    only_prog = sum(answers["prog1"][j] == gold[j] != answers["cot1"][j] for j in range(len(tasks)))
    only_cot = sum(answers["cot1"][j] == gold[j] != answers["prog1"][j] for j in range(len(tasks)))
    text = "\n".join([
        SECTION, "",
        f"`python3 bench/bench_reasoning_ways.py` ({args.model}, {len(tasks)} GSM8K questions of "
        f"the evaluation stream, temperature {args.temperature}, seeds {args.seeds}; "
        f"{seconds:.0f} s of generation). Votes: majority, a tie to the first listed.", "",
        "| answers voting | correct |", "|---|---|", *rows, "",
        f"Solved by the first program only: {only_prog}; by the first chain of thought only: "
        f"{only_cot}.", "",
    ])
    print(text)
    if not args.no_write:
        write_section(REPO / "bench" / "results" / "accuracy.md", text, SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
