"""Judged metrics of a finished run: PrivacyLens (LR, helpfulness) and AlpacaEval (WR, LC).

Read from a run's records, judged by the run's ``evaluation`` section (docs/judges.md): the
frozen judge model (embedded 1.5B by default, cached per judge and prompt), or the string judge
where no model is wanted (the ``tiny`` size). Separate from :mod:`.analysis` so the judged
benchmarks' evaluation stays in one place; Mind2Web-SC's guard metrics live in ``analysis``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pfedma_flwr.config import EvaluationConfig
from pfedma_flwr.data.bench_agentic import privacylens_trajectories
from pfedma_flwr.data.benchmarks import load_benchmark, resolve_data_dir
from pfedma_flwr.experiments.privacy_eval import PrivacyCase, evaluate
from pfedma_flwr.judging.alpacaeval import (
    PairwiseJudge,
    length_controlled_win_rate,
    win_rate,
)
from pfedma_flwr.judging.factory import (
    make_helpfulness_judge,
    make_judge_model,
    make_leak_judge,
    resolve_method,
)


def _is_privacylens(benchmark: str) -> bool:
    return benchmark.startswith("privacylens")


def privacy_cases(benchmarks: Iterable[str], data_dir: str) -> dict[str, PrivacyCase]:
    """Query id → :class:`PrivacyCase` for the PrivacyLens benchmarks named."""
    root = resolve_data_dir(data_dir or None)
    out: dict[str, PrivacyCase] = {}
    for b in sorted({b for b in benchmarks if _is_privacylens(b)}):
        items = {t.task_id: t.sensitive_items for t in load_benchmark(b, os.fspath(root))}
        for qid, traj in privacylens_trajectories(root, b).items():
            out[qid] = PrivacyCase(str(traj["user_name"]), str(traj["user_instruction"]),
                                   str(traj["executable_trajectory"]), items.get(qid, ()))
    return out


def privacylens_metrics(answers: Mapping[str, str], benchmarks: Iterable[str],
                        ev: EvaluationConfig, data_dir: str = "") -> dict[str, float]:
    """:func:`pfedma_flwr.experiments.privacy_eval.evaluate` with the run's judges."""
    cases = privacy_cases(benchmarks, data_dir)
    picked = {q: a for q, a in answers.items() if q in cases}
    if not picked:
        return {}
    return evaluate(picked, cases, leak_judge=make_leak_judge(ev),
                    help_judge=make_helpfulness_judge(ev))


def run_privacylens(queries: Sequence[Mapping[str, Any]], ev: EvaluationConfig,
                    data_dir: str = "") -> dict[str, float]:
    """PrivacyLens metrics of the final answers in ``queries.jsonl`` records."""
    recs = [r for r in queries if _is_privacylens(str(r["benchmark"]))]
    return privacylens_metrics({str(r["query_id"]): str(r.get("answer", "")) for r in recs},
                               {str(r["benchmark"]) for r in recs}, ev, data_dir)


def privacylens_by_round(z_by_round: Mapping[int, Mapping[str, Mapping[str, Any]]],
                         ev: EvaluationConfig, data_dir: str = "") -> dict[str, float]:
    """``LR@t``, ``helpfulness@t``, ``LR_string@t`` of ``z`` after collaboration round ``t``."""
    out: dict[str, float] = {}
    for t, recs in sorted(z_by_round.items()):
        answers = {q: str(z.get("answer", "")) for q, z in recs.items()}
        benches = {"privacylens" if "-main-" in q else "privacylens_" + q.split("-")[1]
                   for q in answers}
        m = privacylens_metrics(answers, benches, ev, data_dir)
        for key in ("LR", "helpfulness", "LR_string"):
            if key in m:
                out[f"{key}@{t}"] = m[key]
    return out


def alpacaeval_metrics(queries: Sequence[Mapping[str, Any]], ev: EvaluationConfig,
                       data_dir: str = "") -> dict[str, float]:
    """AlpacaEval WR and LC (percent → fractions), order consistency, mean output length.

    Empty without AlpacaEval queries; NaN rates where the run judges without a model
    (``evaluation.leak_judge: string``: there is no string version of a pairwise judge).
    """
    recs = [r for r in queries if r["benchmark"] == "alpacaeval"]
    if not recs:
        return {}
    tasks = {t.task_id: t for t in load_benchmark("alpacaeval", data_dir or None)}
    rows = [(tasks[str(r["query_id"])], str(r.get("answer", ""))) for r in recs
            if str(r["query_id"]) in tasks]
    out = {"out_chars": sum(len(a) for _, a in rows) / max(1, len(rows))}
    if ev.leak_judge == "string" or not rows:
        return {**out, "WR": math.nan, "LC": math.nan}
    model = make_judge_model(ev.judge_backend, cache_dir=ev.cache_dir)
    judge = PairwiseJudge(model=model, method=resolve_method(ev, model))
    verdicts = judge.judge([(t.question, t.gold, a) for t, a in rows])
    w = [v.w for v in verdicts]
    wr, se = win_rate(w)
    lc = length_controlled_win_rate(w, [len(t.gold) for t, _ in rows], [len(a) for _, a in rows])
    judged = [v for v in verdicts if not math.isnan(v.w)]
    out.update({"WR": wr / 100.0, "WR_se": se / 100.0, "LC": lc.lc / 100.0,
                "order_consistency": sum(v.consistent for v in judged) / max(1, len(judged))})
    return out
