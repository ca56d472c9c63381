"""Batched vs one-by-one generation on the embedded llama.cpp model (both measured in one run).

    python3 bench/bench_batched_generation.py [--model smollm2-135m] [--n 8] [--max-tokens 64]
        [--schema] [--threads 2] [--reps 2]

Greedy; both modes get the same 8 prompts (shared agent system prompt, different questions),
and the script checks that their texts are identical before reporting the speed ratio. Without
``--schema`` the prompts are the agents' free-text reasoning prompts (``response_format:
reasoning``, what clients run by default); with it, the JSON-schema answer format.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pfedma_flwr.agents.backends.llama_cpp_backend import LlamaCppBackend  # noqa: E402
from pfedma_flwr.agents.prompting import (  # noqa: E402
    RESPONSE_JSON_SCHEMA,
    build_agent_messages,
    build_reasoning_messages,
)

logger = logging.getLogger("bench_batched")
REPO = Path(__file__).resolve().parents[1]
SECTION = "## Batched vs one-by-one"
QUESTIONS = [
    "Tom has 5 apples and buys 7 more. How many apples does he have now?",
    "A shop sells pens at 3 dollars each. How much do 9 pens cost in dollars?",
    "Sara had 40 stickers and gave away 15. How many stickers does she have left?",
    "A train travels 60 km per hour for 3 hours. How many km does it travel?",
    "There are 4 boxes with 6 eggs in each box. How many eggs are there in total?",
    "Mia reads 12 pages a day. How many pages does she read in 5 days?",
    "A class has 18 girls and 14 boys. How many students are in the class?",
    "Leo had 50 dollars. He spent 18 dollars on a book. How many dollars does he have left?",
]


def write_row(path: Path, row: str) -> None:
    """Add ``row`` to the batched section of the results file (one row per model, replaced)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    head, _, section = text.partition(SECTION)
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| model")]
    key = row.split("|")[1:3]  # one row per (model, schema); rows of an older layout dropped
    ncols = row.count("|")
    rows = [r for r in rows if r.split("|")[1:3] != key and r.count("|") == ncols] + [row]
    section = "\n".join(
        [
            SECTION,
            "",
            "`bench/bench_batched_generation.py [--schema]`: agent prompts (shared system "
            "prompt), greedy, best of `--reps`, both modes in one run; JSON schema = the "
            "grammar-constrained JSON answer format, no = the free-text reasoning prompt (what "
            "clients run by default); identical = batched texts equal one-by-one.",
            "",
            "| model | JSON schema | prompts | max tokens | batched s | one-by-one s | speed-up "
            "| identical |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head.rstrip() + ("\n\n" if head.strip() else "") + section + "\n", "utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--schema", action="store_true",
                    help="constrain answers to the agents' JSON schema (the clients' workload)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "models.md")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    build = build_agent_messages if args.schema else build_reasoning_messages
    prompts = [build(profile_prompt="You are a careful math tutor.", query_text=q)
               for q in (QUESTIONS * 4)[: args.n]]
    kw = {"model": args.model, "n_ctx": 2048, "n_threads": args.threads, "max_batch": args.n}
    backends = {m: LlamaCppBackend(mode=m, **kw) for m in ("batched", "sequential")}
    best: dict[str, float] = {}
    texts: dict[str, list[str]] = {}
    tokens: dict[str, int] = {}
    for rep in range(args.reps):
        for mode, be in backends.items():
            t0 = time.perf_counter()
            res = be.generate(prompts, max_tokens=args.max_tokens,
                              json_schema=RESPONSE_JSON_SCHEMA if args.schema else None)
            dt = time.perf_counter() - t0
            best[mode] = min(best.get(mode, float("inf")), dt)
            texts[mode] = [r.text for r in res]
            tokens[mode] = sum(r.completion_tokens for r in res)
            logger.info("rep %d %-10s %.2f s, %d tokens", rep, mode, dt, tokens[mode])
    same = texts["batched"] == texts["sequential"]
    ratio = best["sequential"] / best["batched"]
    line = (
        f"| {args.model} | {'yes' if args.schema else 'no'} | {args.n} | {args.max_tokens} "
        f"| {best['batched']:.2f} "
        f"({tokens['batched'] / best['batched']:.1f} tok/s) | {best['sequential']:.2f} "
        f"({tokens['sequential'] / best['sequential']:.1f} tok/s) | {ratio:.2f}x | {same} |"
    )
    write_row(args.out, line)
    logger.info(
        "%s, %d prompts x %d max tokens: batched %.2f s (%.1f tok/s), one-by-one %.2f s "
        "(%.1f tok/s); speed-up %.2fx; identical greedy texts: %s",
        args.model,
        args.n,
        args.max_tokens,
        best["batched"],
        tokens["batched"] / best["batched"],
        best["sequential"],
        tokens["sequential"] / best["sequential"],
        ratio,
        same,
    )


if __name__ == "__main__":
    main()
