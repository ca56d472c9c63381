"""How often P_in alters or damages real GSM8K / MedQA questions, beside what it removes.

Issue 11 item 6. For each P_in policy: the share of sampled GSM8K and MedQA questions it alters
(target 0 % for policies without PERSON) and damages (a number lost, an option's text changed,
two people merged), and the share of PrivacyLens sensitive items it removes. Uses the real
Presidio recognizer. Writes a Markdown table to bench/results/pin_alteration.md.

    python3 bench/bench_pin_alteration.py [--n 50] [--n-privacy 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pfedma_flwr.data.benchmarks import Task, load_benchmark  # noqa: E402
from pfedma_flwr.protocol.schema import GlobalRule  # noqa: E402
from pfedma_flwr.rules.pii import PiiSpan, get_presidio_engine, get_recognizer  # noqa: E402
from pfedma_flwr.rules.pin_audit import audit_alteration, audit_removal  # noqa: E402
from pfedma_flwr.rules.query_rules import apply_query_rules  # noqa: E402
from pfedma_flwr.rules.spans import (
    Span,  # noqa: E402
    redact,  # noqa: E402
)

REPO = Path(__file__).resolve().parents[1]
IDENTIFIERS = ("EMAIL_ADDRESS", "PHONE_NUMBER", "US_SSN", "CREDIT_CARD", "IBAN_CODE",
               "IP_ADDRESS", "US_PASSPORT")


class CachedRecognizer:
    """The real recognizer, memoised per (text, types): every policy sees the same spans."""

    def __init__(self) -> None:
        self.inner = get_recognizer("presidio")
        self.supported_entities = self.inner.supported_entities
        self._analyze = functools.lru_cache(maxsize=None)(self._run)

    def _run(self, text: str, types: tuple[str, ...]) -> tuple[PiiSpan, ...]:
        return tuple(self.inner.analyze(text, list(types)))

    def analyze(self, text: str, entity_types: Sequence[str] | None = None) -> list[PiiSpan]:
        return list(self._analyze(text, tuple(entity_types or ())))


def _rule(scope: str, ents: Sequence[str]) -> GlobalRule:
    return GlobalRule(rule_id="g1", text=f"do not reveal personal data in {scope}s",
                      category="personal name", scope=scope, entity_types=tuple(ents))


def old_pin(text: str) -> str:
    """P_in as measured before (the learned PERSON rule on queries, raw spaCy spans)."""
    res = get_presidio_engine().analyze(text=text, entities=["PERSON"], language="en",
                                        score_threshold=0.5)
    return redact(text, [(Span(r.start, r.end, "PERSON"), "redact") for r in res])


def policies(rec: CachedRecognizer) -> dict[str, Callable[[str], str]]:
    def pin(rules: list[GlobalRule]) -> Callable[[str], str]:
        return lambda text: apply_query_rules(text, rules, rec)[0]

    return {
        "before: learned PERSON rule on queries (raw spaCy)": old_pin,
        "learned PERSON rule (response scope)": pin([_rule("response", ["PERSON"])]),
        "query rule: identifiers": pin([_rule("query", IDENTIFIERS)]),
        "query rule: identifiers + PERSON": pin([_rule("query", (*IDENTIFIERS, "PERSON"))]),
    }


def sample(tasks: list[Task], n: int, seed: int) -> list[Task]:
    idx = np.random.default_rng(seed).choice(len(tasks), size=min(n, len(tasks)), replace=False)
    return [tasks[i] for i in sorted(idx)]


def pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50, help="questions per benchmark (GSM8K, MedQA)")
    ap.add_argument("--n-privacy", type=int, default=100, help="PrivacyLens trajectories")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "pin_alteration.md")
    args = ap.parse_args()
    data = REPO / "data"
    gsm = sample(load_benchmark("gsm8k", data), args.n, args.seed)
    med = sample(load_benchmark("medqa", data), args.n, args.seed)
    lens = sample(load_benchmark("privacylens", data), args.n_privacy, args.seed)
    rec = CachedRecognizer()
    rows, notes = [], []
    t0 = time.perf_counter()
    for name, pin in policies(rec).items():
        g, m = audit_alteration(gsm, pin), audit_alteration(med, pin)
        if not name.startswith("before"):
            for t, a in zip(med, m, strict=True):
                if a.altered:
                    gone = sorted(set(t.question.split()) - set(pin(t.question).split()))
                    notes.append(f"- {name}: MedQA `{t.task_id}` lost {gone[:5]}")
        r = audit_removal(lens, pin, rec)
        cells = [name]
        for audit in (g, m):
            cells += [pct(sum(a.altered for a in audit) / len(audit)),
                      pct(sum(bool(a.damage) for a in audit) / len(audit))]
        cells += [f"{pct(r.verbatim_removed)} of {r.n_verbatim}",
                  f"{pct(r.identifiers_removed)} of {r.n_identifiers}"]
        rows.append(cells)
        print(f"{name}: done ({time.perf_counter() - t0:.0f} s)", flush=True)
    head = ("| P_in policy | GSM8K altered | GSM8K damaged | MedQA altered | MedQA damaged "
            "| PrivacyLens items removed (verbatim) | PrivacyLens names/ids removed |")
    lines = [
        "# P_in on real task text", "",
        f"`python3 bench/bench_pin_alteration.py --n {args.n} --n-privacy {args.n_privacy} "
        f"--seed {args.seed}`: {len(gsm)} GSM8K and {len(med)} MedQA test questions and "
        f"{len(lens)} PrivacyLens trajectories (seeded sample), Presidio over en_core_web_sm. "
        "*Damaged*: a number lost, an option's text changed or two people merged into one "
        "placeholder. *Verbatim*: sensitive items that occur word for word in the question; "
        "*names/ids*: names and identifiers found inside the sensitive items that occur in the "
        "question.", "", head, "|" + "---|" * 7,
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if notes:
        lines += ["", "Altered MedQA questions (words no longer in the text):", "", *notes]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
