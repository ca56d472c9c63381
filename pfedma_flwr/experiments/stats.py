"""How sure a table is: intervals and paired tests over per-question correctness.

Pure functions over 0/1 vectors (numpy; ``scipy.stats.binomtest`` when installed):

- :func:`wilson_interval`: the 95 % Wilson score interval of an accuracy ``k / n``;
- :func:`paired_bootstrap`: the percentile interval of the accuracy difference of two methods
  on the **same** questions, resampling questions with replacement (fixed seed, 10,000
  resamples, one vectorized draw);
- :func:`mcnemar_exact`: the exact two-sided McNemar p-value, the binomial test of the
  discordant pairs ``b`` (only the first method right) against ``c`` (only the second);
- :func:`above_chance`: the exact one-sided binomial p-value of ``k / n`` against a guessing
  rate (a vote among multiple-choice members that guess is itself a guess);
- :func:`mean_sd`: mean and sample standard deviation over seeds.

Forty questions separate little: with 4 discordant pairs all favouring one method, the exact
McNemar test gives p = 2 · 0.5⁴ = 0.125, and the bootstrap interval of a 10-point gain spans
zero. The tables print these numbers beside every accuracy so that a gain is read with them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Resamples of the paired bootstrap (the issue's floor) and its fixed seed.
RESAMPLES = 10_000
SEED = 0
LEVEL = 0.95


def _z(level: float) -> float:
    """The two-sided standard-normal quantile of ``level`` (1.96 for 0.95)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2.0)


def wilson_interval(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k / n`` (NaNs for ``n = 0``).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at ``k = 0`` or
    ``k = n`` (0 of 10 gives [0, 0.278]).
    """
    if n < 0 or not 0 <= k <= max(n, 0):
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return math.nan, math.nan
    z = _z(level)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at k = 0 (k = n) the bound is 0 (1) exactly; floating point leaves 1e-17 otherwise
    return (0.0 if k == 0 else centre - half), (1.0 if k == n else centre + half)


def _vector(x: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    if np.any((a < 0) | (a > 1)) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must hold correctness values in [0, 1]")
    return a


@dataclass(frozen=True)
class PairedDiff:
    """Accuracy difference ``mean(a) − mean(b)`` on the same questions, with its interval."""

    n: int
    diff: float
    lo: float
    hi: float
    # discordant pairs: only a right (b), only b right (c); fractional with seed-averaged values
    b: float
    c: float
    p_mcnemar: float


def paired_bootstrap(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
    resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL,
) -> tuple[float, float, float]:
    """Percentile interval of ``mean(a) − mean(b)`` resampling question indices.

    ``a[i]`` and ``b[i]`` are the two methods' correctness on question ``i`` (0/1, or a mean
    over seeds). One ``(resamples, n)`` index matrix is drawn from ``default_rng(seed)``, so
    the interval is reproducible and the same for every call with equal inputs.

    Returns
    -------
    tuple[float, float, float]
        ``(difference, lower, upper)``; NaNs when there are no questions.
    """
    x, y = _vector(a, "a"), _vector(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"a and b must pair the same questions, got {x.size} and {y.size}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    _z(level)  # validates the level
    if x.size == 0:
        return math.nan, math.nan, math.nan
    d = x - y
    idx = np.random.default_rng(seed).integers(0, d.size, size=(resamples, d.size))
    means = d[idx].mean(axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(means, [tail, 100.0 - tail])
    return float(d.mean()), float(lo), float(hi)


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: ``binomtest(b, b + c, 0.5)`` on the discordant pairs.

    ``p = min(1, 2 · Σ_{i ≤ min(b, c)} C(b + c, i) / 2^(b + c))``; 1 without discordant pairs.
    ``b = 4, c = 0`` gives 0.125.
    """
    if b < 0 or c < 0 or int(b) != b or int(c) != c:
        raise ValueError(f"discordant counts must be integers >= 0, got b={b}, c={c}")
    b, c = int(b), int(c)
    n = b + c
    if n == 0:
        return 1.0
    try:
        from scipy.stats import binomtest
    except ImportError:  # exact sum; both tails are equal for p = 0.5
        tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2.0**n
        return min(1.0, 2.0 * tail)
    return float(binomtest(b, n, 0.5, alternative="two-sided").pvalue)


def above_chance(k: int, n: int, chance: float) -> float:
    """Exact one-sided binomial p-value ``P(X ≥ k)`` for ``X ~ Bin(n, chance)``.

    The probability of scoring at least ``k`` of ``n`` by guessing at rate ``chance`` (¼ for
    four options): 10 of 30 at ¼ gives 0.197, 14 of 30 gives 0.0082. 1 for ``n = 0``.
    """
    if n < 0 or not 0 <= k <= max(n, 0) or int(k) != k or int(n) != n:
        raise ValueError(f"need integers 0 <= k <= n, got k={k}, n={n}")
    if not 0.0 < chance < 1.0:
        raise ValueError(f"chance must be in (0, 1), got {chance}")
    k, n = int(k), int(n)
    if n == 0 or k == 0:
        return 1.0
    tail = sum(math.comb(n, i) * chance**i * (1.0 - chance) ** (n - i) for i in range(k, n + 1))
    return min(1.0, float(tail))


def compare(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
            resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL) -> PairedDiff:
    """The paired bootstrap interval and the exact McNemar test of ``a`` against ``b``.

    With seed-averaged (fractional) correctness the McNemar counts are taken on the values
    rounded to 0/1 (a question answered right by most seeds counts as right).
    """
    diff, lo, hi = paired_bootstrap(a, b, resamples=resamples, seed=seed, level=level)
    x, y = np.round(_vector(a, "a")), np.round(_vector(b, "b"))
    nb, nc = int(np.sum((x == 1) & (y == 0))), int(np.sum((x == 0) & (y == 1)))
    return PairedDiff(n=int(x.size), diff=diff, lo=lo, hi=hi, b=nb, c=nc,
                      p_mcnemar=mcnemar_exact(nb, nc))


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof = 1``; 0 for one value; NaNs for none)."""
    v = [float(x) for x in values if not math.isnan(float(x))]
    if not v:
        return math.nan, math.nan
    sd = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
    return float(np.mean(v)), sd
