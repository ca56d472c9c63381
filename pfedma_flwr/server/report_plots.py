"""The PNG plots of a run's ``report.md``, from the tables of :mod:`pfedma_flwr.server.report`.

One file per view: accuracy per benchmark, accuracy per round, answers and tokens per round,
the selection heatmap (client x round), the capability matrix (client x domain, with S) and
rule coverage per round. A plot without data (no rows, or nothing but zeros and undefined
values) is skipped and an old copy removed; files are owner-only like every other result file.
Clients are labelled with their profile, lines at 100 % stay clear of the legend (drawn beside
the axes), and an undefined capability is a blank cell, not 0.00.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pfedma_flwr.server import report as rep


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    return plt


def _value(v: Any) -> float:
    """A number for a heatmap cell; NaN (drawn blank) where the value is undefined."""
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else float("nan")


def _save(plt: Any, fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    os.chmod(path, 0o600)  # owner-only like every other file of the run (results.py)


def _accuracy(plt: Any, run: rep.RunDir, out: Path) -> bool:
    acc = {
        k: v
        for k, v in rep._obj(run.summary.get("accuracy_by_benchmark")).items()
        if isinstance(v, int | float)
    }
    if not acc:
        return False
    fig, ax = plt.subplots(figsize=(max(3.0, 1.2 * len(acc) + 1.5), 3.2))
    names = sorted(acc)
    bars = ax.bar(names, [100 * acc[n] for n in names], color="#4c72b0")
    ax.bar_label(bars, fmt="%.1f")  # a 0 % bar is otherwise invisible
    ax.set_ylim(0, 100)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("accuracy per benchmark")
    _save(plt, fig, out / rep.ACCURACY_PNG)
    return True


def _accuracy_rounds(plt: Any, run: rep.RunDir, out: Path) -> bool:
    rows = [a for a in rep.accuracy_by_round(run) if a.scored]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    x = [a.round for a in rows]
    ax.plot(x, [100 * a.correct / a.scored for a in rows], marker="o", color="black", label="all")
    for b in sorted({b for a in rows for b in a.by_benchmark}):
        pts = [
            (a.round, 100 * a.by_benchmark[b][0] / a.by_benchmark[b][1])
            for a in rows
            if a.by_benchmark.get(b, [0, 0])[1]
        ]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", linestyle="--", label=b)
    ax.set_xticks(x)
    ax.set_ylim(0, 105)  # a line at 100 % stays visible above the top tick
    ax.set_xlabel("Flower round")
    ax.set_ylabel("accuracy of finished queries (%)")
    ax.set_title("accuracy per round (cumulative)")
    _legend_beside(ax)
    _save(plt, fig, out / rep.ACCURACY_ROUNDS_PNG)
    return True


def _legend_beside(ax: Any) -> None:
    """The legend right of the axes, where it hides no line."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _rounds(plt: Any, run: rep.RunDir, out: Path) -> bool:
    table = rep.round_table(run.rounds)
    if not any(r["retained"] or r["filtered"] or r["tokens"] for r in table):
        return False
    x = [r["round"] for r in table]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8.0, 3.2))
    a1.bar(x, [r["retained"] for r in table], label="retained", color="#55a868")
    a1.bar(
        x,
        [r["filtered"] for r in table],
        bottom=[r["retained"] for r in table],
        label="filtered",
        color="#c44e52",
    )
    a1.set_xlabel("Flower round")
    a1.set_ylabel("answers")
    a1.set_ylim(0, 1.15 * max(r["retained"] + r["filtered"] for r in table))
    a1.legend(fontsize=8, loc="upper right")
    a2.plot(x, [r["tokens"] for r in table], marker="o")
    a2.set_xlabel("Flower round")
    a2.set_ylabel("tokens")
    a2.set_ylim(bottom=0)
    for a in (a1, a2):
        a.set_xticks(x)
    fig.suptitle("answers and tokens per round")
    _save(plt, fig, out / rep.ROUNDS_PNG)
    return True


def _heatmap(
    plt: Any,
    ax: Any,
    values: list[list[float]],
    rows: list[str],
    cols: list[str],
    fmt: str,
    cmap: str,
) -> None:
    import numpy as np

    grid = np.ma.masked_invalid(np.array(values, dtype=float))  # NaN: undefined, drawn blank
    colours = plt.get_cmap(cmap).with_extremes(bad="white")
    im = ax.imshow(grid, aspect="auto", cmap=colours)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xticks(range(len(cols)), cols, fontsize=8)
    if len(rows) * len(cols) <= 400:  # numbers stay readable; larger grids keep the colours
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                text = "-" if v != v else format(v, fmt)  # NaN != NaN
                ax.text(j, i, text, ha="center", va="center", fontsize=7)
    plt.colorbar(im, ax=ax)


def _selection(plt: Any, run: rep.RunDir, out: Path) -> bool:
    sel = rep.selection_table(run.rounds)
    if not sel:
        return False
    clients = sorted({s["client"] for s in sel})
    rounds = sorted({s["round"] for s in sel})
    counts = [
        [float(sum(1 for s in sel if s["client"] == c and s["round"] == r)) for r in rounds]
        for c in clients
    ]
    profiles = rep.client_profiles(run.summary)
    fig, ax = plt.subplots(
        figsize=(max(4.0, 0.5 * len(rounds) + 4), max(2.5, 0.3 * len(clients) + 1.2))
    )
    labels = [rep.client_label(c, profiles) for c in clients]
    _heatmap(plt, ax, counts, labels, [str(r) for r in rounds], ".0f", "Blues")
    ax.set_xlabel("Flower round")
    ax.set_title("selections per client and round")
    _save(plt, fig, out / rep.SELECTION_PNG)
    return True


def _capability(plt: Any, run: rep.RunDir, out: Path) -> bool:
    table = rep.capability_table(run.summary)
    cols = [k for k in (table[0] if table else {}) if k not in ("client", "profile")]
    values = [[_value(r.get(k)) for k in cols] for r in table]
    if not any(v == v for row in values for v in row):  # no defined value at all
        return False
    fig, ax = plt.subplots(
        figsize=(max(3.5, 0.9 * len(cols) + 3.5), max(2.5, 0.3 * len(table) + 1.2))
    )
    labels = [f"{r['client']} ({r['profile']})" if r.get("profile") else r["client"] for r in table]
    _heatmap(plt, ax, values, labels, cols, ".2f", "viridis")
    ax.set_title("routing state: capability C per domain, reliability S")
    _save(plt, fig, out / rep.CAPABILITY_PNG)
    return True


def _rules(plt: Any, run: rep.RunDir, out: Path) -> bool:
    cov = rep.rule_coverage(run.rounds)
    if not any(r["global"] or r["active"] or r["promoted"] for r in cov):
        return False  # no rule in any round (e.g. rules.mode NR): nothing to draw
    x = [r["round"] for r in cov]
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.plot(x, [r["global"] for r in cov], marker="o", label="global rules")
    ax.plot(x, [r["active"] for r in cov], marker="s", label="active")
    ax.bar(x, [r["promoted"] for r in cov], alpha=0.4, label="promoted this round")
    ax.set_xticks(x)
    ax.set_ylim(bottom=0)
    ax.set_ylim(0, 1.15 * max(max(r["global"], r["active"], r["promoted"]) for r in cov))
    ax.set_xlabel("Flower round")
    ax.set_ylabel("rules")
    ax.set_title("rule coverage per round")
    _legend_beside(ax)
    _save(plt, fig, out / rep.RULES_PNG)
    return True


#: file name -> drawer, in the order report.md shows them
_DRAWERS = (
    (rep.ACCURACY_PNG, _accuracy),
    (rep.ACCURACY_ROUNDS_PNG, _accuracy_rounds),
    (rep.ROUNDS_PNG, _rounds),
    (rep.SELECTION_PNG, _selection),
    (rep.CAPABILITY_PNG, _capability),
    (rep.RULES_PNG, _rules),
)


def write_plots(run: rep.RunDir, out: Path) -> list[str]:
    """Draw every plot that has data into ``out``; return the file names written.

    A stale plot of an earlier report whose data is gone now is removed, so ``report.md``
    and the PNGs beside it always agree.
    """
    plt = _plt()
    written = []
    for name, draw in _DRAWERS:
        if draw(plt, run, out):
            written.append(name)
        else:
            (out / name).unlink(missing_ok=True)
    return written
