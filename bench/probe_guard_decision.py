"""Can the embedded guard tell which safety rule covers a Mind2Web-SC task? (issue 28)

``privacy --size small`` showed the 1.5B guard denying 19 of 20 actions with no rule held (NR)
and, holding rules (full), denying every one of the first 10 while naming R4 (hotel) for NFL
tickets and playlists. GuardAgent itself does not let its model decide: the model names the
rules that apply and writes code that calls ``CheckRule(rules, user_info)``; the code's result
is the decision. This probe measures, on Mind2Web-SC rows that no preset evaluates at small
size, with all six rules held:

- ``model``: the decision line of GuardAgent's prompt (``agents/guard.py`` ``guard_messages``);
- GuardAgent's execution step on the same reply: deny iff a rule named on its ``RULE:`` line is
  violated by the user information (``SafetyRule.met_by``);
- ``check``: the same execution step on the rule the category question names
  (``category_messages``, what a client asks under ``agent.guard_decision: check``);
- for both prompts, the covering rule the model names for the rows that violate one.

With ``--shots K`` each prompt also shows GuardAgent's memory (``agent.guard_shots``): the K
solved deny tasks nearest to the row (MiniLM cosine, ``client/posing.guard_memory``) out of a
memory of ``--pool`` rows drawn from the rows neither a preset nor the probe uses (13: one
client's share of the small size's 40-row dev pool among 3 clients).

Usage::

    python3 bench/probe_guard_decision.py --n 40 --threads 1
    python3 bench/probe_guard_decision.py --n 40 --threads 1 --shots 2 --pool 13 \
        --out bench/results/guard_memory.md
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
    category_messages,
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


def _rows(n: int, seed: int, pool: int) -> tuple[list[tuple[int, dict]], list[int]]:
    """The probed rows (half deny) and the memory's row indices (from the rows left over)."""
    data = json.loads(gzip.open(ROOT / "data" / "mind2web_sc" / "sample_labeled_all.json.gz")
                      .read())
    used = _evaluated()
    rng = random.Random(seed)
    deny = [i for i, r in enumerate(data) if r["label"] == 1 and i not in used]
    allow = [i for i, r in enumerate(data) if r["label"] == 0 and i not in used]
    pick = rng.sample(deny, n // 2) + rng.sample(allow, n - n // 2)
    rest = [i for i in range(len(data)) if i not in used and i not in pick]
    memory = sorted(random.Random(seed + 1).sample(rest, min(pool, len(rest))))
    return [(i, data[i]) for i in sorted(pick)], memory


def _memories(blocks: list[str], memory_rows: list[int], shots: int) -> list[list[tuple[str, str]]]:
    """Each block's ``shots`` nearest solved deny tasks of the memory (as a client does)."""
    if shots <= 0:
        return [[] for _ in blocks]
    from pfedma_flwr.client.posing import guard_memory
    from pfedma_flwr.data.bench_agentic import load_mind2web_sc
    from pfedma_flwr.embeddings import get_embedder
    from pfedma_flwr.rules.client.local_repo import LocalRuleRepository
    from pfedma_flwr.rules.guard_rules import guard_rule

    tasks = load_mind2web_sc(ROOT / "data")
    pool = [tasks[i] for i in memory_rows]
    repo = LocalRuleRepository(rules=[guard_rule(r) for r in SAFETY_RULES])
    embedder = get_embedder("minilm")
    return [guard_memory(b, repo, pool, embedder, shots) for b in blocks]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shots", type=int, default=0, help="memory demonstrations per row")
    ap.add_argument("--pool", type=int, default=13, help="rows in the guard's memory")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "guard_decision.md"))
    args = ap.parse_args(argv)

    from pfedma_flwr.agents.backends.llama_cpp_backend import LlamaCppBackend

    rows, memory_rows = _rows(args.n, args.seed, args.pool)
    blocks = [mind2web_sc_question(r) for _, r in rows]
    memories = _memories(blocks, memory_rows, args.shots)
    backend = LlamaCppBackend(model="qwen2.5-coder-1.5b", n_threads=args.threads, max_batch=8)
    t0 = time.perf_counter()
    # the two ways a client poses the task (agent.guard_decision): model, then check
    spec = backend.generate([guard_messages(b, SAFETY_RULES, m)
                             for b, m in zip(blocks, memories, strict=True)],
                            max_tokens=48, temperature=0.0)
    cat = backend.generate([category_messages(b, SAFETY_RULES, m)
                            for b, m in zip(blocks, memories, strict=True)],
                           max_tokens=48, temperature=0.0)
    seconds = time.perf_counter() - t0
    ok = dict.fromkeys(("model", "check_spec", "named_spec", "check", "named", "memory"), 0)
    lines: list[str] = []
    n_deny = 0
    for (i, row), block, gs, gc, mem in zip(rows, blocks, spec, cat, memories, strict=True):
        gold = row["label"] == 1
        rule = rule_of_text(row["violation"]) if gold else None
        want = rule.rule_id if rule is not None else ""
        # what a client does with each reply (agents/guard.py), not a copy of it
        named = {k: ("?" if ids is None else " ".join(ids) or "NONE")
                 for k, ids in (("spec", covering_rules(gs.text)),
                                ("cat", covering_rules(gc.text)))}
        model = parse_guard_reply(gs.text).denied
        check_spec = check_guard_reply(gs.text, block, SAFETY_RULES).denied
        check = check_guard_reply(gc.text, block, SAFETY_RULES).denied
        ok["model"] += model == gold
        ok["check_spec"] += check_spec == gold
        ok["check"] += check == gold
        if gold:
            n_deny += 1
            ok["named_spec"] += named["spec"] == want
            ok["named"] += named["cat"] == want
            ok["memory"] += bool(mem) and mem[0][1] == want
        task = " ".join(row["confirmed_task"].split())[:70]
        shown = " ".join(rid for _, rid in mem) or "-"
        dec = {True: "deny", False: "allow"}
        lines.append(f"| {i} | {dec[gold]} {want} | {task} | {shown} | {named['spec']} | "
                     f"{dec[model]} | {dec[check_spec]} | {named['cat']} | {dec[check]} |")
    n = len(rows)
    head = [
        "# The embedded guard on Mind2Web-SC rows no preset evaluates (issue 28)", "",
        "```bash", f"python3 bench/probe_guard_decision.py --n {n} --threads {args.threads}"
        + (f" --shots {args.shots} --pool {args.pool}" if args.shots else ""),
        "```", "",
        f"{time.strftime('%Y-%m-%d')}, Qwen2.5-Coder-1.5B (llama.cpp, greedy), all six rules "
        f"held; {n} rows ({n_deny} deny, {n - n_deny} allow), "
        + (f"memory of {len(memory_rows)} rows ({args.shots} nearest solved deny tasks shown), "
           if args.shots else "no memory, ") + f"{seconds:.0f} s for both prompts.", "",
        "GuardAgent's prompt (`guard_messages`: agent specification, rule blocks, decision lines):",
        f"- its decision line (`guard_decision: model`): **{ok['model']}/{n}** right",
        f"- the check of the rule on its `RULE:` line: **{ok['check_spec']}/{n}** right",
        f"- covering rule named right on the deny rows: **{ok['named_spec']}/{n_deny}**", "",
        "The category question (`category_messages`, `guard_decision: check`):",
        f"- the check of the rule it names: **{ok['check']}/{n}** right",
        f"- covering rule named right on the deny rows: **{ok['named']}/{n_deny}**",
        *([f"- nearest memory entry's rule right on the deny rows: **{ok['memory']}/"
           f"{n_deny}**"] if args.shots else []), "",
        "| row | gold | task | memory | named (spec) | model | check (spec) | named (category) "
        "| check (category) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    text = "\n".join(head + lines) + "\n"
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
