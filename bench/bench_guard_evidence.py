"""Does the anomaly filter keep a unanimous Mind2Web-SC guard decision? (one run, MiniLM)

    python3 bench/bench_guard_evidence.py [--items 40] [--out bench/results/guard_evidence.md]

For every 5th Mind2Web-SC item (up to ``--items``), two identical guard replies of each kind
(deny naming R3, bare deny, allow, undecided) are scored by the server's evaluator
(:func:`~pfedma_flwr.anomaly.scores.evaluate_batch`, the embedding judge on MiniLM, default
λ_pool, α_con and tolerance, the item's task block as the query reference). ``current`` is
:func:`~pfedma_flwr.agents.guard.guard_response`; ``restating`` is the form it replaced
(2026-12-06), whose claims restated the whole task block and whose evidence was the block's
``Task:`` and ``User information:`` lines: the no-self-support rule dropped every evidence item.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pfedma_flwr.agents import guard  # noqa: E402
from pfedma_flwr.agents.guard import GuardReply, guard_response  # noqa: E402
from pfedma_flwr.anomaly.judges import EmbeddingJudge  # noqa: E402
from pfedma_flwr.anomaly.scores import evaluate_batch  # noqa: E402
from pfedma_flwr.data.benchmarks import load_benchmark  # noqa: E402
from pfedma_flwr.embeddings import get_embedder  # noqa: E402
from pfedma_flwr.protocol.schema import Claim, StructuredResponse  # noqa: E402
from pfedma_flwr.rules.guard_catalogue import safety_rule  # noqa: E402

REPLIES = {"deny naming R3": GuardReply(True, ("R3",)), "deny": GuardReply(True),
           "allow": GuardReply(False), "undecided": GuardReply(False, decided=False)}


def restating(reply: GuardReply, block: str) -> StructuredResponse:
    """The replaced form: the claim restates the task and user lines that are its evidence."""
    lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
    ev = tuple(ln[:240] for ln in lines if ln.startswith(("Task:", "User information:")))
    about = " ".join(ev)[:300]
    if not reply.decided:
        text = [guard.UNDECIDED_CLAIM]
    elif not reply.denied:
        text = [guard.GRANTED_CLAIM]
    elif reply.rule_ids:
        text = [f"{r}: {safety_rule(r).violation}" for r in reply.rule_ids]
    else:
        text = [guard.DENIED_CLAIM]
    return StructuredResponse(final_answer="deny" if reply.denied else "allow",
                              claims=tuple(Claim(f"{t}. {about}", ev) for t in text),
                              domain_fit=0.5, self_confidence=1.0 if reply.decided else 0.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    data = Path(__file__).resolve().parents[1] / "data"
    items = load_benchmark("mind2web_sc", data)[::5][: a.items]
    emb = get_embedder("minilm")
    judge = EmbeddingJudge(embedder=emb)
    forms: dict[str, Callable[[GuardReply, str], StructuredResponse]] = {
        "restating": restating, "current": guard_response}
    lines = [f"`python3 bench/bench_guard_evidence.py --items {a.items}` ({len(items)} items, "
             "two identical replies each, MiniLM embedding judge, tolerance 0.5)", "",
             "| form | reply | mean a_evi | mean score [min, max] | retained |",
             "|---|---|---|---|---|"]
    for form, make in forms.items():
        for name, reply in REPLIES.items():
            groups = [[make(reply, t.question)] * 2 for t in items]
            res = evaluate_batch(groups, kinds=[t.answer_kind for t in items], judge=judge,
                                 embedder=emb, queries=[t.question for t in items])
            evi = [r[0].a_evi for r in res]
            sc = [r[0].score for r in res]
            kept = sum(r[0].retained for r in res)
            lines.append(f"| {form} | {name} | {statistics.mean(evi):.3f} | "
                         f"{statistics.mean(sc):.3f} [{min(sc):.3f}, {max(sc):.3f}] | "
                         f"{kept}/{len(items)} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
