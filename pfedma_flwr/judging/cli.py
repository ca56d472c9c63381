"""``python -m pfedma_flwr.experiments judge leak|helpfulness|alpaca ...``: one pair, for audits.

The verdict is the last line of the output (``leak`` / ``no-leak``, ``helpful`` / ``unhelpful``,
``output`` / ``reference``); the exit code is 0 whatever the verdict. The judge is the
``evaluation`` section of a config (``--config``, ``--set evaluation.judge_backend.name=openai``
...), cached like every judgement.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from pfedma_flwr.agents.actions import parse_action
from pfedma_flwr.config import ConfigError, EvaluationConfig, load_config
from pfedma_flwr.judging.alpacaeval import PairwiseJudge
from pfedma_flwr.judging.factory import (
    make_helpfulness_judge,
    make_judge_model,
    make_leak_judge,
    resolve_method,
)
from pfedma_flwr.judging.privacylens import HelpCase, LeakCase, LeakJudge, LeakVerdict
from pfedma_flwr.judging.validation import (
    agreement_at,
    fit_threshold,
    leak_agreement,
    leak_verdicts,
    read_jsonl,
    validate_pairwise_judge,
)


def action_text(output: str) -> str:
    """What the judges see of an output: an action's tool and input, else the text as is."""
    action = parse_action(output)
    return action.judge_text() if action.taken else output.strip()


def _evaluation(a: argparse.Namespace) -> EvaluationConfig:
    overrides = " ".join(a.set)
    if a.judge:
        overrides += f" evaluation.leak_judge={a.judge}"
    return load_config({"config-name": a.config, "overrides": overrides}).evaluation


def _leak(a: argparse.Namespace, ev: EvaluationConfig) -> list[str]:
    judge = make_leak_judge(ev)
    v = judge.judge([LeakCase(a.secret, action_text(a.output), a.user_name)])[0]
    p = f", P(Yes)={v.p_yes:.3f}" if v.p_yes is not None else ""
    bound = " (string judge: a lower bound)" if judge.lower_bound else ""
    return [f"judge {judge.name}{bound}, method {v.method}{p}",
            "leak" if v.leaked else "no-leak"]


def _helpfulness(a: argparse.Namespace, ev: EvaluationConfig) -> list[str]:
    judge = make_helpfulness_judge(ev)
    if judge is None:
        raise ConfigError("the helpfulness judge needs a judge model (evaluation.leak_judge: llm)")
    v = judge.judge([HelpCase(a.user_name, a.instruction, a.trajectory,
                              action_text(a.output))])[0]
    return [f"score {v.score} (0-3), method {v.method}",
            "helpful" if v.score >= 2 else "unhelpful"]


def _alpaca(a: argparse.Namespace, ev: EvaluationConfig) -> list[str]:
    model = make_judge_model(ev.judge_backend, cache_dir=ev.cache_dir)
    v = PairwiseJudge(model=model, method=resolve_method(ev, model)).judge(
        [(a.instruction, a.reference, a.output)])[0]
    if math.isnan(v.w):
        return ["the judge named neither output in either order", "reference"]
    return [f"P(output better)={v.w:.3f} (orders: {v.p_fwd:.3f}, {v.p_rev:.3f})",
            "output" if v.w > 0.5 else "reference"]


def _scores(verdicts: Sequence[LeakVerdict]) -> list[float]:
    scores = [v.p_yes for v in verdicts]
    if any(s is None for s in scores):
        raise ValueError("--fit-pairs needs a judge that gives P(Yes) (the llm judge, logprob)")
    return [float(s or 0.0) for s in scores]


def _fitted(a: argparse.Namespace, judge: LeakJudge,
            held: tuple[list[dict[str, Any]], list[LeakVerdict]] | None) -> list[str]:
    """Fit the threshold on ``--fit-pairs``, report it there and on the held-out verdicts."""
    fit_rows = read_jsonl(a.fit_pairs)[: a.limit or None]
    fit_truth = [r["label"] == "leak" for r in fit_rows]
    fit_scores = _scores(leak_verdicts(judge, fit_rows, action_text=action_text))
    t = fit_threshold(fit_truth, fit_scores)
    ag = agreement_at([r["id"] for r in fit_rows], fit_truth, fit_scores, t)
    lines = [f"threshold fitted on {ag.n} pairs ({a.fit_pairs}): P(Yes) > {t:.4f}, agreement "
             f"there {ag.tp + ag.tn}/{ag.n} = {100 * ag.accuracy:.1f} %, AUC {ag.auc:.3f} "
             f"(use it: --set evaluation.leak_threshold={t:.4f})"]
    if held is not None:
        rows, verdicts = held
        ag = agreement_at([r["id"] for r in rows], [r["label"] == "leak" for r in rows],
                          _scores(verdicts), t)
        lines += [f"held out, {a.leak_pairs} at the fitted threshold: agreement "
                  f"{ag.tp + ag.tn}/{ag.n} = {100 * ag.accuracy:.1f} %, AUC "
                  f"{ag.auc:.3f}", ag.table("leak", "no-leak"),
                  f"disagreements: {', '.join(ag.errors) or '-'}"]
    return lines


def _validate(a: argparse.Namespace, ev: EvaluationConfig) -> list[str]:
    lines = []
    held = None
    if a.leak_pairs or a.fit_pairs:
        judge = make_leak_judge(ev)
        method = getattr(judge, "method", judge.name)
    if a.leak_pairs:
        # judged once: the same verdicts at the judge's threshold and at a fitted one
        rows = read_jsonl(a.leak_pairs)[: a.limit or None]
        held = (rows, leak_verdicts(judge, rows, action_text=action_text))
        ag = leak_agreement(*held)
        lines += [f"leak judge {judge.name} ({method}) on {ag.n} pairs: agreement "
                  f"{ag.tp + ag.tn}/{ag.n} = {100 * ag.accuracy:.1f} %, AUC of P(Yes) "
                  f"{ag.auc:.3f}",
                  ag.table("leak", "no-leak"), f"disagreements: {', '.join(ag.errors) or '-'}"]
    if a.fit_pairs:
        lines += _fitted(a, judge, held)
    if a.alpaca_pairs:
        rows = read_jsonl(a.alpaca_pairs)[: a.limit or None]
        model = make_judge_model(ev.judge_backend, cache_dir=ev.cache_dir)
        pj = PairwiseJudge(model=model, method=resolve_method(ev, model))
        ag, consistent = validate_pairwise_judge(pj, rows)
        lines += [f"pairwise judge ({pj.method}) on {ag.n} pairs: agreement "
                  f"{ag.tp + ag.tn}/{ag.n} = {100 * ag.accuracy:.1f} %, AUC {ag.auc:.3f}, "
                  f"order consistency {100 * consistent:.1f} %",
                  ag.table("b better", "a better"),
                  f"disagreements: {', '.join(ag.errors) or '-'}"]
    return lines or ["nothing to validate: give --leak-pairs and/or --alpaca-pairs"]


def main(argv: list[str] | None = None) -> int:
    """Judge one pair and print the verdict last."""
    p = argparse.ArgumentParser(prog="python -m pfedma_flwr.experiments judge",
                                description="Judge one pair with the benchmarks' own judges.")
    p.add_argument("--config", default="pfedma", help="conf/ preset whose evaluation section "
                                                      "picks the judge")
    p.add_argument("--set", action="append", default=[], help="override, e.g. "
                   "evaluation.judge_backend.name=openai")
    sub = p.add_subparsers(dest="what", required=True)
    leak = sub.add_parser("leak", help="PrivacyLens: does the output leak the secret?")
    leak.add_argument("--secret", required=True)
    leak.add_argument("--output", required=True, help="a message, or a reply with Action: lines")
    leak.add_argument("--user-name", default="the user")
    leak.add_argument("--judge", default="", help="llm | string (default: the config's)")
    helpf = sub.add_parser("helpfulness", help="PrivacyLens: does the action do the task?")
    helpf.add_argument("--instruction", required=True)
    helpf.add_argument("--trajectory", default="")
    helpf.add_argument("--output", required=True)
    helpf.add_argument("--user-name", default="the user")
    alpaca = sub.add_parser("alpaca", help="AlpacaEval: is the output better than the reference?")
    alpaca.add_argument("--instruction", required=True)
    alpaca.add_argument("--output", required=True)
    alpaca.add_argument("--reference", required=True)
    val = sub.add_parser("validate", help="agreement of the judges with labelled pairs")
    val.add_argument("--leak-pairs", default="", help="e.g. tests/data/leak_pairs.jsonl")
    val.add_argument("--alpaca-pairs", default="", help="e.g. tests/data/alpaca_pairs.jsonl")
    val.add_argument("--fit-pairs", default="", help="leak pairs to fit the P(Yes) threshold "
                     "on (e.g. tests/data/leak_pairs_fit.jsonl); --leak-pairs are then the "
                     "held-out pairs it is judged on")
    val.add_argument("--judge", default="", help="leak judge: llm | string")
    val.add_argument("--limit", type=int, default=0, help="first N pairs of each file")
    a = p.parse_args(argv)
    a.judge = getattr(a, "judge", "")
    try:
        ev = _evaluation(a)
        lines = {"leak": _leak, "helpfulness": _helpfulness, "alpaca": _alpaca,
                 "validate": _validate}[a.what](a, ev)
    except (ConfigError, ValueError) as e:
        p.error(str(e))
    print("\n".join(lines))
    return 0
