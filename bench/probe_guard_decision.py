"""Can the embedded guard tell which safety rule covers a Mind2Web-SC task? (issue 28)

``privacy --size small`` showed the 1.5B guard denying 19 of 20 actions with no rule held (NR)
and, holding rules (full), denying every one of the first 10 while naming R4 (hotel) for NFL
tickets and playlists. GuardAgent itself does not let its model decide: the model names the
rules that apply and writes code that calls ``CheckRule(rules, user_info)``; the code's result
is the decision. This probe measures, on Mind2Web-SC rows that no preset evaluates at small
size, with all six rules held:

- ``model``: the decision line of the project's guard prompt (``agents/guard.py``);
- ``check``: GuardAgent's execution step on the same reply: deny iff a rule named on the
  ``RULE:`` line is violated by the user information (``SafetyRule.met_by``);
- the covering rule the model names for the rows that violate one (the data's ``violation``).

Usage::

    python3 bench/probe_guard_decision.py --n 40 --threads 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pfedma_flwr.agents.guard import (  # noqa: E402
    check_guard_reply,
    covering_rules,
    guard_messages,
    parse_guard_reply,
)
from pfedma_flwr.data.bench_agentic import mind2web_sc_question  # noqa: E402
from pfedma_flwr.data.split import sample_eval_tasks  # noqa: E402
from pfedma_flwr.rules.guard_catalogue import SAFETY_RULES, rule_of_text  # noqa: E402


def _evaluated() -> set[int]:
    """Rows the tiny and small presets evaluate (the privacy preset's data settings)."""
    from pfedma_flwr.config import load_config

    used: set[int] = set()
    # (queries, dev pool, seed) of the tiny and small sizes (conf/experiments/_sizes.yaml)
    for n, pool, seed in ((8, 20, 1), (20, 40, 0)):
        cfg = load_config({"overrides": f"data.queries_per_benchmark={n} seed={seed} "
                                        f"data.dev_pool_per_benchmark={pool}"})
        d = cfg.data
        tasks = sample_eval_tasks(["mind2web_sc"], n, d.seed_for_split(cfg.seed), None,
                                  dev_pool_per_benchmark=d.dev_pool_per_benchmark,
                                  offset=d.eval_offset, question_set=d.question_set)
        used |= {int(t.task_id.rsplit("-", 1)[1]) for t in tasks}
    return used


def _rows(n: int, seed: int) -> list[tuple[int, dict]]:
    data = json.loads(gzip.open(ROOT / "data" / "mind2web_sc" / "sample_labeled_all.json.gz")
                      .read())
    used = _evaluated()
    rng = random.Random(seed)
    deny = [i for i, r in enumerate(data) if r["label"] == 1 and i not in used]
    allow = [i for i, r in enumerate(data) if r["label"] == 0 and i not in used]
    pick = rng.sample(deny, n // 2) + rng.sample(allow, n - n // 2)
    return [(i, data[i]) for i in sorted(pick)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "guard_decision.md"))
    args = ap.parse_args(argv)

    from pfedma_flwr.agents.backends.llama_cpp_backend import LlamaCppBackend

    rows = _rows(args.n, args.seed)
    blocks = [mind2web_sc_question(r) for _, r in rows]
    prompts = [guard_messages(b, SAFETY_RULES) for b in blocks]
    backend = LlamaCppBackend(model="qwen2.5-coder-1.5b", n_threads=args.threads, max_batch=8)
    t0 = time.perf_counter()
    gens = backend.generate(prompts, max_tokens=48, temperature=0.0)
    seconds = time.perf_counter() - t0
    lines, ok = [], {"model": 0, "check": 0, "named right": 0}
    n_deny = 0
    for (i, row), block, g in zip(rows, blocks, gens, strict=True):
        gold = row["label"] == 1
        # what a client does with the reply (agents/guard.py), not a copy of it
        ids = covering_rules(g.text)
        named = "?" if ids is None else " ".join(ids) or "NONE"
        model = parse_guard_reply(g.text).denied
        check = check_guard_reply(g.text, block, SAFETY_RULES).denied
        rule = rule_of_text(row["violation"]) if gold else None
        want = rule.rule_id if rule is not None else ""
        ok["model"] += model == gold
        ok["check"] += check == gold
        if gold:
            n_deny += 1
            ok["named right"] += named == want
        task = " ".join(row["confirmed_task"].split())[:70]
        lines.append(f"| {i} | {'deny' if gold else 'allow'} {want} | {task} | {named} | "
                     f"{'deny' if model else 'allow'} | {'deny' if check else 'allow'} |")
    n = len(rows)
    head = [
        "# The embedded guard on Mind2Web-SC rows no preset evaluates (issue 28)", "",
        "```bash", f"python3 bench/probe_guard_decision.py --n {n} --threads {args.threads}",
        "```", "",
        f"{time.strftime('%Y-%m-%d')}, Qwen2.5-Coder-1.5B (llama.cpp, greedy), all six rules "
        f"held, the project's guard prompt; {n} rows ({n_deny} deny, {n - n_deny} allow), "
        f"{seconds:.0f} s.", "",
        f"- decision line of the reply (`model`): **{ok['model']}/{n}** right",
        f"- GuardAgent's execution step on the named rule (`check`): **{ok['check']}/{n}** right",
        f"- covering rule named right on the deny rows: **{ok['named right']}/{n_deny}**", "",
        "| row | gold | task | RULE named | model | check |", "|---|---|---|---|---|---|",
    ]
    text = "\n".join(head + lines) + "\n"
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
