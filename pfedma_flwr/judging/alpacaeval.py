"""AlpacaEval 2.0's pairwise annotator, win rate and length-controlled win rate.

The annotator prompt is AlpacaEval 2.0's default (:mod:`.alpacaeval_prompts`), sent as its two
chat messages (contents stripped, slots filled once each in order). The judge
answers with the identifier of the better output, ``m`` (shown first) or ``M`` (second); like
AlpacaEval's ``logprob_parser`` the preference is the probability mass on those exact tokens at
the first generated position, not a sampled answer.

Both orders are judged (AlpacaEval judges one, by a seeded coin per instruction) and averaged:
``w = (P_fwd(M) + P_rev(m)) / 2`` = P(the evaluated output beats the reference), which cancels
position bias and any m/M token prior. An output identical to the reference gets 0.5 without a
call. Win rate = ``100·mean(w)``.

Length-controlled win rate: AlpacaEval's ``length_controlled_v1`` GLM (Dubois et al. 2024,
``metrics/glm_winrate.py``) refit on our judge's soft preferences, ``logit w = φ·tanh(Δ/sd(Δ))
+ ψ·γ + θ`` with ``Δ = len(reference) − len(output)`` in characters (sd without centering),
LC = ``100·mean σ(ψ·γ + θ)``. What replaces the hub-only inputs (docs/judges.md): γ, the
instruction difficulty, is used when given (else the term is dropped), the verbose/concise
baseline regularisation is not applied, and the fit is a Newton solve with a small L2 instead
of cross-validated L1; below :data:`LC_MIN_ROWS` rows LC is not estimated (NaN).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pfedma_flwr.judging.alpacaeval_prompts import ANNOTATOR_SYSTEM, ANNOTATOR_USER
from pfedma_flwr.judging.model import JudgeModel, label_probabilities

#: Exact identifier tokens, as AlpacaEval's logprob_parser matches them (case-sensitive).
IDENTIFIERS = {"m": ("m",), "M": ("M",)}
LC_MIN_ROWS = 100
_L2 = 1e-3


def annotator_messages(instruction: str, output_1: str, output_2: str) -> list[dict[str, str]]:
    """The annotator's chat: system and user with the three slots filled.

    One pass over the template's own slots (AlpacaEval replaces them one after the other, which
    differs only when an instruction or output itself holds a slot name such as
    ``{output_2}``: there AE would fill the text, here the text stays as written).
    """
    values = {"instruction": instruction, "output_1": output_1, "output_2": output_2}
    user = re.sub(r"\{(instruction|output_1|output_2)\}", lambda m: values[m.group(1)],
                  ANNOTATOR_USER)
    return [{"role": "system", "content": ANNOTATOR_SYSTEM},
            {"role": "user", "content": user.strip()}]


@dataclass(frozen=True)
class PairVerdict:
    """P(output beats reference) ``w`` from both orders; NaN where neither order was read."""

    w: float
    p_fwd: float  # P(M) with the reference first (m) and the output second (M)
    p_rev: float  # P(m) with the output first (m) and the reference second (M)

    @property
    def consistent(self) -> bool:
        """Both orders prefer the same output."""
        return (self.p_fwd > 0.5) == (self.p_rev > 0.5)


class PairwiseJudge:
    """AlpacaEval's annotator on a frozen judge model (module docstring).

    ``method="logprob"`` reads the identifier's probability; ``"generate"`` (endpoints without
    logprobs) reads the first character of a short greedy reply as a hard 0/1 preference.
    """

    def __init__(self, *, model: JudgeModel, method: str = "logprob") -> None:
        if method not in ("logprob", "generate"):
            raise ValueError(f"pairwise judge method must be logprob|generate, got {method!r}")
        if method == "logprob" and not model.has_logprobs:
            raise ValueError("pairwise judge method 'logprob' needs a backend with logits")
        self.model, self.method = model, method

    def _second_wins(self, chats: list[list[dict[str, str]]]) -> list[float]:
        """P(second output is best) per chat; NaN where the reply names neither."""
        if self.method == "logprob":
            lps = self.model.label_logprobs(chats, prefix="", labels=IDENTIFIERS)
            return [label_probabilities(lp)["M"] if any(math.isfinite(v) for v in lp.values())
                    else math.nan for lp in lps]
        out = []
        for text in self.model.generate(chats, max_tokens=5):
            first = text.strip().strip("`'\"*")[:1]
            out.append(1.0 if first == "M" else 0.0 if first == "m" else math.nan)
        return out

    def judge(self, pairs: Sequence[tuple[str, str, str]]) -> list[PairVerdict]:
        """``(instruction, reference, output)`` → one verdict per pair, both orders judged."""
        todo = [k for k, (_, ref, out) in enumerate(pairs) if ref.strip() != out.strip()]
        chats = [annotator_messages(pairs[k][0], pairs[k][1], pairs[k][2]) for k in todo]
        chats += [annotator_messages(pairs[k][0], pairs[k][2], pairs[k][1]) for k in todo]
        second = self._second_wins(chats)
        verdicts = [PairVerdict(0.5, 0.5, 0.5)] * len(pairs)
        for j, k in enumerate(todo):
            p_fwd = second[j]
            p_rev = 1.0 - second[len(todo) + j] if not math.isnan(second[len(todo) + j]) \
                else math.nan
            both = [p for p in (p_fwd, p_rev) if not math.isnan(p)]
            verdicts[k] = PairVerdict(sum(both) / len(both) if both else math.nan, p_fwd, p_rev)
        return verdicts


def win_rate(w: Sequence[float]) -> tuple[float, float]:
    """AlpacaEval's soft win rate and its standard error, in percent (NaN rows dropped)."""
    x = np.array([v for v in w if not math.isnan(v)], dtype=float)
    if not len(x):
        return math.nan, math.nan
    se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan
    return 100.0 * float(x.mean()), 100.0 * se


def _newton(x: np.ndarray, y: np.ndarray, iters: int = 50) -> np.ndarray:
    """Soft-label logistic regression (no intercept column added), L2 ``_L2``, Newton steps."""
    beta = np.zeros(x.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        grad = x.T @ (p - y) + _L2 * beta
        hess = (x * (p * (1 - p))[:, None]).T @ x + _L2 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        beta -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return beta


@dataclass(frozen=True)
class LengthControlled:
    """LC win rate (percent), its standard error, the length slope φ and the rows fitted."""

    lc: float
    se: float
    phi: float
    n: int


def length_controlled_win_rate(
    w: Sequence[float], ref_chars: Sequence[int], out_chars: Sequence[int],
    gamma: Sequence[float] | None = None, *, min_rows: int = LC_MIN_ROWS,
) -> LengthControlled:
    """LC win rate of the module docstring; NaN below ``min_rows`` rows or with Δ constant."""
    rows = [k for k, v in enumerate(w) if not math.isnan(v)]
    n = len(rows)
    delta = np.array([ref_chars[k] - out_chars[k] for k in rows], dtype=float)
    sd = float(delta.std(ddof=1)) if n > 1 else 0.0
    if n < max(min_rows, 3) or sd == 0.0:
        return LengthControlled(math.nan, math.nan, math.nan, n)
    y = np.array([w[k] for k in rows], dtype=float)
    cols = [np.tanh(delta / sd)]
    if gamma is not None:
        cols.append(np.array([gamma[k] for k in rows], dtype=float))
    cols.append(np.ones(n))
    beta = _newton(np.column_stack(cols), y)
    counterfactual = beta[-1] + (beta[1] * cols[1] if gamma is not None else 0.0)
    pred = 1.0 / (1.0 + np.exp(-counterfactual * np.ones(n)))
    return LengthControlled(100.0 * float(pred.mean()),
                            100.0 * float(pred.std(ddof=1) / math.sqrt(n)), float(beta[0]), n)
