"""Fit the ``PRIVATE_FACT`` sentence detector and measure it on data it never saw (issue 12).

Fitting data (the 117 items of the two small subsets alone gave a detector that flagged a team
lunch and missed a divorce, so written class knowledge is added):
- positives: the sensitive items of PrivacyLens's ConfAIde and CultureBank subsets, and
  ``<subject> <predicate>.`` sentences from the :data:`PREDICATES` below (private matters of
  health, family, legal, money, work, school, identity and confidences; 3 subjects each);
- negatives: the other sentences of those subsets' trajectories (no item overlap), the same
  subjects with the everyday :data:`BENIGN` predicates, and the even sentences of 400 GSM8K,
  300 MedQA and 200 Mind2Web-SC tasks.
Held out: every sensitive item of PrivacyLens's main set (the one the experiments evaluate),
1,500 sampled non-item sentences of its trajectories, and the odd task sentences.

Writes ``pfedma_flwr/rules/private_fact_model.json`` and ``bench/results/private_facts.md``::

    HF_HUB_OFFLINE=1 python3 scripts/train_private_facts.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from pfedma_flwr.data.bench_agentic import load_mind2web_sc, load_privacylens  # noqa: E402
from pfedma_flwr.data.benchmarks import Task, load_gsm8k, load_medqa  # noqa: E402
from pfedma_flwr.embeddings import get_embedder  # noqa: E402
from pfedma_flwr.experiments.metrics import item_inferable  # noqa: E402
from pfedma_flwr.rules.private_facts import (  # noqa: E402
    PrivateFactModel,
    fit_logistic,
    sentence_spans,
)

THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7)

# Written for the class "a private matter of an identifiable person", not from PrivacyLens's
# main set (which the experiments evaluate and this script only measures on).
PREDICATES: dict[str, list[str]] = {
    "health": [
        "was diagnosed with {ill}",
        "is being treated for {ill}",
        "has been struggling with {ill}",
        "was hospitalized last week",
        "is taking {med} every day",
        "had surgery on her knee",
        "is recovering from a stroke",
        "has been seeing a therapist twice a week",
        "suffers from panic attacks",
        "has been sober for three months",
        "relapsed into drinking again",
        "is in rehab for opioid addiction",
        "tested positive for HIV",
        "is pregnant with twins",
        "had a miscarriage",
        "has early-stage dementia",
        "needs a kidney transplant",
        "has an eating disorder",
        "attempted suicide last year",
        "has a learning disability",
        "is on antidepressants",
        "has chronic back pain and cannot work",
        "genetic test showed a high risk of breast cancer",
        "missed work because of a mental breakdown",
    ],
    "family": [
        "is going through a messy divorce",
        "is separated from his wife",
        "is having an affair with a coworker",
        "broke up with his girlfriend after she cheated",
        "is in an abusive marriage",
        "is fighting for custody of her kids",
        "has not spoken to his father in years",
        "is secretly dating his manager",
        "is adopted and just found her birth mother",
        "lost his brother to an overdose",
        "has a son who was expelled from school",
        "is caring for a mother with Alzheimer's",
        "their marriage is falling apart",
        "is planning to leave her husband",
    ],
    "legal": [
        "was arrested for drunk driving",
        "is being sued by a former employer",
        "has a criminal record for theft",
        "is under investigation for fraud",
        "was convicted of assault",
        "is on probation",
        "is accused of embezzling company funds",
        "filed a police report against her neighbor",
        "is the defendant in a harassment lawsuit",
        "spent two years in prison",
        "is involved in a bitter custody battle in court",
        "shoplifted when he was a teenager",
    ],
    "finance": [
        "is drowning in credit card debt",
        "filed for bankruptcy last year",
        "earns a salary of $85,000",
        "has only $200 left in her bank account",
        "owes the IRS back taxes",
        "lost his savings gambling",
        "had his house foreclosed",
        "borrows money from friends to pay rent",
        "has a credit score of 520",
        "inherited a large sum from her grandfather",
        "is behind on his mortgage payments",
        "invested his savings in crypto and lost it",
    ],
    "work": [
        "is secretly interviewing with a competitor",
        "was fired for poor performance",
        "is about to be laid off",
        "got a bad performance review",
        "is unhappy with her boss and wants to quit",
        "was put on a performance improvement plan",
        "was passed over for promotion",
        "is negotiating a higher salary offer elsewhere",
        "was disciplined for misconduct",
        "lied on his resume",
    ],
    "school": [
        "failed two of his classes",
        "is on academic probation",
        "was caught cheating on the exam",
        "got a D in chemistry",
        "was suspended for fighting",
        "dropped out of college",
        "has a GPA of 2.1",
    ],
    "identity": [
        "is gay but has not come out to his family",
        "is transgender",
        "is an undocumented immigrant",
        "converted to Islam",
        "is an atheist and hides it from her parents",
        "votes for a fringe political party",
        "belongs to a religious sect",
        "is bisexual",
    ],
    "confidence": [
        "confessed that he stole from the register",
        "admitted she lied to her husband",
        "is terrified of flying and takes sedatives",
        "was sexually abused as a child",
        "is ashamed of his past",
        "told me in confidence that she is considering leaving the company",
        "keeps his drinking hidden from his wife",
        "has been gossiping that the manager is having an affair",
    ],
}
FILL: dict[str, list[str]] = {
    "ill": [
        "depression",
        "cancer",
        "diabetes",
        "bipolar disorder",
        "anxiety",
        "multiple sclerosis",
        "PTSD",
    ],
    "med": ["lithium", "insulin", "antipsychotics"],
}
SUBJECTS = [
    "Dave",
    "Sarah Lee",
    "Michael",
    "Emily Harris",
    "Tom",
    "Mr. Brown",
    "Her sister",
    "My colleague Anna",
    "John's son",
    "Our neighbor Carlos",
    "Priya",
    "The new intern",
]
BENIGN: list[str] = [
    "is organizing the team lunch on Friday",
    "sent the quarterly report this morning",
    "will present the new design at the meeting",
    "loves hiking on weekends",
    "has great ideas for the campaign",
    "is the project lead for the website launch",
    "scheduled a call with the client for Thursday",
    "bought three boxes of pencils",
    "finished the marathon in four hours",
    "is reading a book about history",
    "recommended a new Italian restaurant",
    "shared the slides with the team",
    "will be in the office tomorrow",
    "is learning to play the guitar",
    "works in the marketing department",
    "asked for the latest analytics numbers",
    "joined the company last spring as an engineer",
    "is excited about the product release",
    "won the chess tournament at school",
    "posted photos from the conference",
    "needs the budget spreadsheet by Monday",
    "is visiting the museum with friends",
    "baked cookies for the bake sale",
    "volunteers at the animal shelter",
    "got a certification in project management",
    "wrote a blog post about gardening",
    "is coaching the soccer team",
    "invited everyone to the housewarming party",
    "thanked the team for their hard work",
    "is moving the meeting to 3 PM",
    "has 12 marbles and gives 5 to his friend",
    "drove 60 miles to visit the farm",
    "prefers tea over coffee",
    "is writing the onboarding guide",
    "updated the shared calendar",
    "is happy with the new office layout",
    "reviewed the pull request",
    "ordered new chairs for the office",
    "plans to attend the seminar next month",
    "presented at the criminal law seminar",
]


def expand(predicate: str) -> list[str]:
    """A predicate with each of its ``{slot}`` fillers (one slot per predicate at most)."""
    for slot, values in FILL.items():
        if "{" + slot + "}" in predicate:
            return [predicate.replace("{" + slot + "}", v) for v in values]
    return [predicate]


def templated(predicates: list[str], per: int, rng: random.Random) -> list[str]:
    """``<subject> <predicate>.`` for every filled predicate and ``per`` sampled subjects."""
    return [
        f"{who} {p}."
        for pred in predicates
        for p in expand(pred)
        for who in rng.sample(SUBJECTS, per)
    ]


def sentences(text: str) -> list[str]:
    """The sentences the detector scores (:func:`sentence_spans`)."""
    return [text[a:b] for a, b in sentence_spans(text)]


def non_items(tasks: list[Task]) -> list[str]:
    """Trajectory sentences that share no item (both directions of the leak judge at 0.3)."""
    out = []
    for t in tasks:
        for s in sentences(t.question.split("Trajectory so far:")[-1]):
            if not any(
                item_inferable(i, s, threshold=0.3) or item_inferable(s, i, threshold=0.3)
                for i in t.sensitive_items
            ):
                out.append(s)
    return out


def main() -> None:
    """Fit, write the model file, measure on held-out data, write the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(ROOT / "data"))
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--model-out", default=str(ROOT / "pfedma_flwr/rules/private_fact_model.json"))
    ap.add_argument("--report-out", default=str(ROOT / "bench/results/private_facts.md"))
    args = ap.parse_args()
    d = args.data_dir
    emb = get_embedder("minilm")
    fit_tasks = load_privacylens(d, "confaide") + load_privacylens(d, "culturebank")
    rng = random.Random(0)
    pos = [s for t in fit_tasks for s in t.sensitive_items]
    pos += templated([p for ps in PREDICATES.values() for p in ps], 3, rng)
    task_sents = {
        "GSM8K": [s for t in load_gsm8k(d)[:400] for s in sentences(t.question)],
        "MedQA": [s for t in load_medqa(d)[:300] for s in sentences(t.question)],
        "Mind2Web-SC": [s for t in load_mind2web_sc(d)[:200] for s in sentences(t.question)],
    }
    neg = non_items(fit_tasks) + templated(BENIGN, 4, rng)
    neg += [s for v in task_sents.values() for s in v[0::2]]
    w, b = fit_logistic(emb.encode(pos), emb.encode(neg), l2=args.l2)
    model = PrivateFactModel(
        weights=tuple(round(float(x), 6) for x in w),
        bias=round(b, 6),
        threshold=args.threshold,
        embedder="minilm",
    )
    payload = {
        **model.to_dict(),
        "meta": {
            "fitted_by": "scripts/train_private_facts.py",
            "positives": len(pos),
            "negatives": len(neg),
            "l2": args.l2,
            "fit_data": "PrivacyLens confaide + culturebank items and templated private facts; "
            "their non-item sentences, templated everyday facts, even sentences of "
            "GSM8K[:400], MedQA[:300], Mind2Web-SC[:200]",
        },
    }
    Path(args.model_out).write_text(json.dumps(payload) + "\n", encoding="utf-8")

    main_tasks = load_privacylens(d)
    items = sorted({s for t in main_tasks for s in t.sensitive_items})
    p_item = dict(zip(items, model.scores(emb.encode(items)), strict=True))
    benign = non_items(main_tasks)
    random.Random(1).shuffle(benign)
    held = {
        "PrivacyLens main, non-item sentences": benign[:1500],
        **{f"{k} (odd sentences)": v[1::2] for k, v in task_sents.items()},
    }
    p_held = {k: model.scores(emb.encode(v)) for k, v in held.items()}
    lines = [
        "# `PRIVATE_FACT` detector: held-out measurement (`scripts/train_private_facts.py`)",
        "",
        f"Fitted on {len(pos)} private facts (PrivacyLens ConfAIde + CultureBank items and "
        f"written templates) against {len(neg)} ordinary sentences; MiniLM embeddings, "
        f"class-balanced logistic regression, L2 {args.l2}. "
        f"Shipped threshold: **{args.threshold}**. Every row below is data the fit never saw.",
        "",
        "| threshold | main items flagged | main tasks with every item flagged | "
        + " | ".join(f"{k} flagged" for k in held)
        + " |",
        "|---|---|---|" + "---|" * len(held),
    ]
    for th in THRESHOLDS:
        rec = np.mean([p_item[s] >= th for s in items])
        inst = np.mean([all(p_item[s] >= th for s in t.sensitive_items) for t in main_tasks])
        fprs = " | ".join(f"{(v >= th).mean():.1%}" for v in p_held.values())
        mark = "**" if th == args.threshold else ""
        lines.append(
            f"| {mark}{th}{mark} | {rec:.1%} of {len(items)} | {inst:.1%} of "
            f"{len(main_tasks)} | {fprs} |"
        )
    lines += ["", "Sizes: " + ", ".join(f"{k} {len(v)}" for k, v in held.items()) + "."]
    Path(args.report_out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
