"""Judges checked against hand-labelled pairs (``tests/data/``): agreement and confusion.

``leak_pairs.jsonl``: ``{id, source, category, user_name, secret, output, label}`` with label
``leak`` / ``no-leak``. ``alpaca_pairs.jsonl``: ``{id, kind, instruction, output_a, output_b,
better}`` with ``better`` ``a`` / ``b``; the judge sees ``output_a`` as the reference and
``output_b`` as the evaluated output, so "b wins" is ``w > 0.5``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pfedma_flwr.judging.alpacaeval import PairwiseJudge
from pfedma_flwr.judging.privacylens import LeakCase, LeakJudge, LeakVerdict

LEAK_LABELS = ("leak", "no-leak")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSON Lines file (blank lines skipped); a bad line names file and line."""
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON: {e}") from None
    return rows


@dataclass(frozen=True)
class Agreement:
    """Binary agreement: ``tp`` judge and label both positive, etc.; ``errors`` the ids missed.

    ``auc``: the probability that a random positive pair gets a higher judge score than a random
    negative one (ties count half), where the judge gives scores (P(Yes), P(b better)); it says
    how well the scores separate the classes whatever the threshold.
    """

    tp: int
    fp: int
    tn: int
    fn: int
    errors: tuple[str, ...] = ()
    auc: float = float("nan")

    @property
    def n(self) -> int:
        """Pairs judged."""
        return self.tp + self.fp + self.tn + self.fn

    @property
    def accuracy(self) -> float:
        """Share of pairs where judge and label agree."""
        return (self.tp + self.tn) / self.n if self.n else float("nan")

    def table(self, positive: str, negative: str) -> str:
        """The confusion matrix as a Markdown table (rows: label, columns: judge)."""
        return (f"| label \\ judge | {positive} | {negative} |\n|---|---|---|\n"
                f"| {positive} | {self.tp} | {self.fn} |\n"
                f"| {negative} | {self.fp} | {self.tn} |")


def auc(truth: Sequence[bool], scores: Sequence[float]) -> float:
    """Rank AUC of ``scores`` for ``truth`` (NaN without both classes)."""
    pos = [s for t, s in zip(truth, scores, strict=True) if t]
    neg = [s for t, s in zip(truth, scores, strict=True) if not t]
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def agreement(ids: Sequence[str], truth: Sequence[bool], pred: Sequence[bool],
              scores: Sequence[float] | None = None) -> Agreement:
    """Confusion counts of ``pred`` against ``truth`` (True = positive class)."""
    tp = sum(t and p for t, p in zip(truth, pred, strict=True))
    fp = sum(p and not t for t, p in zip(truth, pred, strict=True))
    fn = sum(t and not p for t, p in zip(truth, pred, strict=True))
    errors = tuple(i for i, t, p in zip(ids, truth, pred, strict=True) if t != p)
    return Agreement(tp, fp, len(truth) - tp - fp - fn, fn, errors,
                     auc(truth, scores) if scores is not None else float("nan"))


def fit_threshold(truth: Sequence[bool], scores: Sequence[float]) -> float:
    """The score threshold (``score > t`` is positive) that agrees most with ``truth``.

    Candidates are the midpoints between consecutive distinct scores (and a step outside
    either end), so the threshold sits where no pair's score lies. Among the most accurate,
    balanced accuracy decides (a class that is rare in the fitting set still counts), then the
    candidate nearest 0.5 (the least departure from the unfitted reading). Fit it on pairs
    that are not the ones it is then judged on (``docs/judges.md``).
    """
    if len(truth) != len(scores) or not truth:
        raise ValueError(f"fit_threshold needs as many scores as labels (>= 1), got "
                         f"{len(scores)} scores for {len(truth)} labels")
    if any(not 0.0 <= s <= 1.0 for s in scores):
        raise ValueError("fit_threshold: scores must be probabilities in [0, 1]")
    if all(truth) or not any(truth):
        raise ValueError("fit_threshold needs both classes among the labels")
    xs = sorted(set(scores))
    cands = [(a + b) / 2 for a, b in zip(xs, xs[1:], strict=False)]
    cands += [max(xs[0] / 2, 1e-6), min((1 + xs[-1]) / 2, 1 - 1e-6)]

    def key(t: float) -> tuple[float, float, float]:
        pred = [s > t for s in scores]
        ag = agreement([""] * len(truth), truth, pred)
        bal = (ag.tp / (ag.tp + ag.fn) + ag.tn / (ag.tn + ag.fp)) / 2
        return ag.accuracy, bal, -abs(t - 0.5)

    return max(cands, key=key)


def agreement_at(ids: Sequence[str], truth: Sequence[bool], scores: Sequence[float],
                 threshold: float) -> Agreement:
    """:func:`agreement` of the reading ``score > threshold``."""
    return agreement(ids, truth, [s > threshold for s in scores], scores)


def leak_verdicts(judge: LeakJudge, rows: Sequence[dict[str, Any]], *, action_text: Any
                  ) -> list[LeakVerdict]:
    """The leak judge's verdicts on labelled pairs.

    ``action_text`` maps an output to what the judge sees; a label other than ``leak`` /
    ``no-leak`` names its pair.
    """
    bad = [r.get("id") for r in rows if r.get("label") not in LEAK_LABELS]
    if bad:
        raise ValueError(f"leak pairs {bad} have a label other than {LEAK_LABELS}")
    return judge.judge([LeakCase(r["secret"], action_text(r["output"]),
                                 r.get("user_name", "the user")) for r in rows])


def validate_leak_judge(judge: LeakJudge, rows: Sequence[dict[str, Any]],
                        *, action_text: Any) -> Agreement:
    """The leak judge on labelled pairs (``action_text`` maps an output to what it judges)."""
    return leak_agreement(rows, leak_verdicts(judge, rows, action_text=action_text))


def leak_agreement(rows: Sequence[dict[str, Any]], verdicts: Sequence[LeakVerdict]) -> Agreement:
    """:func:`agreement` of a leak judge's verdicts on labelled pairs (AUC where it scored)."""
    scores = [v.p_yes for v in verdicts]
    return agreement([r["id"] for r in rows], [r["label"] == "leak" for r in rows],
                     [v.leaked for v in verdicts],
                     None if any(s is None for s in scores) else [float(s or 0) for s in scores])


def validate_pairwise_judge(judge: PairwiseJudge, rows: Sequence[dict[str, Any]]
                            ) -> tuple[Agreement, float]:
    """The pairwise judge on labelled pairs: agreement ("b better" positive), order consistency."""
    bad = [r.get("id") for r in rows if r.get("better") not in ("a", "b")]
    if bad:
        raise ValueError(f"alpaca pairs {bad} need better: a|b")
    verdicts = judge.judge([(r["instruction"], r["output_a"], r["output_b"]) for r in rows])
    consistent = sum(v.consistent for v in verdicts) / max(1, len(verdicts))
    return agreement([r["id"] for r in rows], [r["better"] == "b" for r in rows],
                     [v.w > 0.5 for v in verdicts], [v.w for v in verdicts]), consistent
