"""The orchestrator's trajectory reward (DESIGN §3.11) as a veRL/TRL ``compute_score``.

``R(τ) = R_fmt + R_ans + Σ_t [β·(c_t − c_{t−1}) − κ·|E^t|] − cost_coe·tokens`` with ``c_0 = 0``,
``R_fmt`` = 0 when every routing action parsed and −1 otherwise, ``R_ans`` = 1 when the final
collaboration state ``z`` is correct. The agent loop (:mod:`pfedma_flwr.training.agent_loop`)
writes the trajectory summary into its ``extra_fields``, which veRL's reward manager merges
into ``extra_info``; this module only reads it, so the function is pure and framework-free.
Point veRL at it with ``reward.custom_reward_function.path=<this file>
reward.custom_reward_function.name=compute_score``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

#: §3.11 defaults: step-wise correctness gain weight β and per-selected-agent cost κ
BETA = 0.2
KAPPA = 0.01

#: trajectory-summary keys the agent loop writes (``tokens`` is optional)
SUMMARY_KEYS = ("format_ok", "correct", "step_correct", "num_selected")


def _bool(extra: Mapping[str, Any], key: str) -> bool:
    v = extra[key]
    # numpy bools arrive from veRL's non-tensor batch; they are not ``bool`` instances
    if not isinstance(v, bool | np.bool_):
        raise ValueError(f"extra_info[{key!r}] must be a bool, got {v!r}")
    return bool(v)


def _number(v: Any, where: str, lo: float, hi: float) -> float:
    if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Real):
        raise ValueError(f"{where} must be a number, got {v!r}")
    x = float(v)
    if not (math.isfinite(x) and lo <= x <= hi):
        raise ValueError(f"{where} must be in [{lo}, {hi}], got {v!r}")
    return x


def _series(extra: Mapping[str, Any], key: str, lo: float, hi: float) -> list[float]:
    v = extra[key]
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if not isinstance(v, list | tuple):
        raise ValueError(f"extra_info[{key!r}] must be a list, got {type(v).__name__}")
    return [_number(x, f"extra_info[{key!r}][{t}]", lo, hi) for t, x in enumerate(v)]


def trajectory_reward(
    extra_info: Mapping[str, Any] | None,
    *,
    beta: float = BETA,
    kappa: float = KAPPA,
    cost_coe: float = 0.0,
) -> dict[str, float]:
    """The reward of one trajectory summary and its parts.

    Parameters
    ----------
    extra_info : Mapping
        ``format_ok`` (bool: every action parsed), ``correct`` (bool: final ``z`` correct),
        ``step_correct`` (``c_1..c_T`` in [0, 1]: correctness of ``z`` after each round),
        ``num_selected`` (``|E^1|..|E^T|``, integers >= 0, same length) and optionally
        ``tokens`` (>= 0, the trajectory's token count). Other keys are ignored.
    beta, kappa : float
        Weight of the step-wise correctness gain and cost per selected agent (§3.11).
    cost_coe : float
        Cost per token (Router-R1's ``cost_coe``); 0 (default) drops the term.

    Returns
    -------
    dict
        ``score`` (the total) and ``r_fmt``, ``r_ans``, ``r_step``, ``r_cost``.

    Raises
    ------
    ValueError
        When a key is missing or malformed; the message names the key.
    """
    if not isinstance(extra_info, Mapping):
        raise ValueError(f"extra_info must be a mapping holding {list(SUMMARY_KEYS)}, "
                         f"got {type(extra_info).__name__}")
    missing = [k for k in SUMMARY_KEYS if k not in extra_info]
    if missing:
        raise ValueError(f"extra_info lacks the trajectory key(s) {missing} (the orchestrator "
                         f"agent loop writes {list(SUMMARY_KEYS)})")
    for name, v in (("beta", beta), ("kappa", kappa), ("cost_coe", cost_coe)):
        _number(v, name, 0.0, math.inf)
    fmt_ok = _bool(extra_info, "format_ok")
    correct = _bool(extra_info, "correct")
    steps = _series(extra_info, "step_correct", 0.0, 1.0)
    sizes = _series(extra_info, "num_selected", 0.0, math.inf)
    if any(n != int(n) for n in sizes):
        raise ValueError(f"extra_info['num_selected'] must hold integers, got {sizes}")
    if len(steps) != len(sizes):
        raise ValueError(f"extra_info['step_correct'] has {len(steps)} rounds but "
                         f"extra_info['num_selected'] has {len(sizes)}")
    tokens = (_number(extra_info["tokens"], "extra_info['tokens']", 0.0, math.inf)
              if extra_info.get("tokens") is not None else 0.0)
    r_step = 0.0
    previous = 0.0  # c_0 = 0
    for c_t, n_t in zip(steps, sizes, strict=True):
        r_step += beta * (c_t - previous) - kappa * n_t
        previous = c_t
    r_fmt = 0.0 if fmt_ok else -1.0
    r_ans = 1.0 if correct else 0.0
    r_cost = -cost_coe * tokens
    return {"score": r_fmt + r_ans + r_step + r_cost, "r_fmt": r_fmt, "r_ans": r_ans,
            "r_step": r_step, "r_cost": r_cost}


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """The custom reward signature of veRL; see :func:`trajectory_reward`.

    ``solution_str`` and ``ground_truth`` are not re-graded here: the agent loop grades ``z``
    with the project's answer comparison and reports ``correct``/``step_correct``, so the
    reward agrees with the run's accuracy. ``beta``, ``kappa`` and ``cost_coe`` may come as
    keyword arguments (veRL: ``reward.custom_reward_function.reward_kwargs``).
    """
    # other keywords (reward managers pass their own extras) are not ours: ignored
    params = {k: kwargs[k] for k in ("beta", "kappa", "cost_coe") if k in kwargs}
    return trajectory_reward(extra_info, **params)
