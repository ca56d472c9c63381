"""PNG plots of an experiment (matplotlib, Agg backend), driven by the preset's ``plots`` list.

Kinds (keys besides ``kind`` in brackets; ``file`` overrides the file name):

- ``bar`` [x = axis (default: the variant), y = metric]: one bar per row;
- ``line`` [x = numeric axis, y = metric, hue = axis (optional)]: one line per hue level;
- ``grid`` [x, y = axes, value = metric]: a heatmap over two axes (sensitivity);
- ``benchmarks`` [y = metric prefix, default ``ACC``]: ``ACC/<benchmark>`` bars of each row;
- ``selection`` [variant (default: the first)]: agent profile × benchmark selection frequency
  from ``queries.jsonl`` selections and the client → profile map (paper Fig. 6c);
- ``capability`` [variant]: capability ``C`` per knowledge domain per client (Fig. 6a/b);
- ``diff``: the accuracy difference of each row to the preset's reference level with its
  paired-bootstrap 95 % interval (one horizontal bar per row, :mod:`.compare`).

Metric values are drawn on the table's scale (percent for rates, :func:`display_value`). A
metric with an interval (``ACC``, ``ACC/<benchmark>``: ``ACC_lo``/``ACC_hi``) gets error bars.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from pfedma_flwr.experiments.analysis import RunData, capability_matrix, selection_matrix  # noqa: E402
from pfedma_flwr.experiments.presets import ExperimentPreset  # noqa: E402
from pfedma_flwr.experiments.tables import display_value  # noqa: E402


def _y(row: Mapping[str, Any], metric: str) -> float:
    v = display_value(metric, row["metrics"].get(metric))
    return math.nan if v is None else v


def _err(rows: Sequence[Mapping[str, Any]], metric: str) -> list[list[float]] | None:
    """Error bars (below, above) of ``metric`` from its interval metrics, if the rows have them."""
    base, sep, bench = metric.partition("/")
    lo_key, hi_key = f"{base}_lo{sep}{bench}", f"{base}_hi{sep}{bench}"
    if not any(lo_key in r["metrics"] for r in rows):
        return None
    below, above = [], []
    for r in rows:
        y, lo, hi = _y(r, metric), _y(r, lo_key), _y(r, hi_key)
        ok = not any(math.isnan(v) for v in (y, lo, hi))
        below.append(max(0.0, y - lo) if ok else 0.0)
        above.append(max(0.0, hi - y) if ok else 0.0)
    return [below, above]


def _label(row: Mapping[str, Any], axis: str | None) -> str:
    return str(row["variant"] if axis is None else row["labels"].get(axis, row["variant"]))


def _bar(ax: Any, rows: Sequence[Mapping[str, Any]], spec: Mapping[str, Any]) -> None:
    x = spec.get("x")
    names = [_label(r, x) for r in rows]
    ax.bar(range(len(rows)), [_y(r, spec["y"]) for r in rows], color="tab:blue",
           yerr=_err(rows, spec["y"]), capsize=3)
    ax.set_xticks(range(len(rows)), names, rotation=30, ha="right")
    ax.set_ylabel(spec["y"])


def _line(ax: Any, rows: Sequence[Mapping[str, Any]], spec: Mapping[str, Any]) -> None:
    x, hue = spec["x"], spec.get("hue")
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_label(r, hue) if hue else spec["y"], []).append(r)
    for name, members in groups.items():
        members = sorted(members, key=lambda r: float(r["labels"][x]))
        ax.errorbar([float(r["labels"][x]) for r in members], [_y(r, spec["y"]) for r in members],
                    yerr=_err(members, spec["y"]), marker="o", capsize=3, label=name)
    ax.set_xlabel(x)
    ax.set_ylabel(spec["y"])
    if hue:
        ax.legend(title=hue)


def _heat(fig: Any, ax: Any, matrix: Sequence[Sequence[float]], rows: Sequence[str],
          cols: Sequence[str], title: str) -> None:
    im = ax.imshow(matrix if matrix else [[math.nan]], aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_title(title)
    fig.colorbar(im, ax=ax)
    # a colour cannot be read back as a number; small grids print each cell's value
    if len(rows) * len(cols) <= 400:
        for i, line in enumerate(matrix):
            for j, v in enumerate(line):
                if not math.isnan(v):
                    # dark text on viridis' bright end, white on its dark end
                    shade = "k" if im.norm(v) > 0.6 else "w"
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color=shade)


def _grid(fig: Any, ax: Any, rows: Sequence[Mapping[str, Any]], spec: Mapping[str, Any]) -> None:
    x, y, value = spec["x"], spec["y"], spec["value"]
    xs = sorted({r["labels"][x] for r in rows}, key=float)
    ys = sorted({r["labels"][y] for r in rows}, key=float)
    cell = {(r["labels"][y], r["labels"][x]): _y(r, value) for r in rows}
    matrix = [[cell.get((b, a), math.nan) for a in xs] for b in ys]
    _heat(fig, ax, matrix, ys, xs, value)
    ax.set_xlabel(x)
    ax.set_ylabel(y)


def _benchmarks(ax: Any, rows: Sequence[Mapping[str, Any]], spec: Mapping[str, Any]) -> None:
    prefix = f"{spec.get('y', 'ACC')}/"
    benches = sorted({m[len(prefix):] for r in rows for m in r["metrics"] if m.startswith(prefix)})
    width = 0.8 / max(1, len(rows))
    for k, r in enumerate(rows):
        ax.bar([i + k * width for i in range(len(benches))],
               [_y(r, prefix + b) for b in benches], width=width, label=r["variant"],
               yerr=_bench_err(r, prefix, benches), capsize=2)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(benches))], benches, rotation=30,
                  ha="right")
    ax.set_ylabel(prefix.rstrip("/"))
    if len(rows) > 1:
        ax.legend()


def _bench_err(row: Mapping[str, Any], prefix: str, benches: Sequence[str]
               ) -> list[list[float]] | None:
    """Error bars of one row's per-benchmark metric (``ACC_lo/<b>``, ``ACC_hi/<b>``)."""
    errs = [_err([row], prefix + b) for b in benches]
    if any(e is None for e in errs):
        return None
    return [[e[0][0] for e in errs if e], [e[1][0] for e in errs if e]]


def _diff(ax: Any, rows: Sequence[Mapping[str, Any]], spec: Mapping[str, Any]) -> None:
    """The accuracy difference of each compared row, its paired-bootstrap interval, zero."""
    shown = [r for r in rows if not math.isnan(_y(r, "dACC"))]
    ys = list(range(len(shown)))
    ax.errorbar([_y(r, "dACC") for r in shown], ys, xerr=_err(shown, "dACC"), fmt="o",
                capsize=3, color="tab:blue")
    ax.axvline(0.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(ys, [_label(r, spec.get("x")) for r in shown])
    ax.invert_yaxis()  # the table's order, top down
    ax.set_xlabel("accuracy difference to the reference (points, 95% CI)")
    ax.set_title("accuracy difference to the reference level, paired on the same questions")


def _pick(rows: Sequence[Mapping[str, Any]], spec: Mapping[str, Any]) -> str:
    return str(spec.get("variant") or rows[0]["variant"])


def make_plots(preset: ExperimentPreset, rows: Sequence[Mapping[str, Any]],
               runs: Mapping[str, RunData], out_dir: Path) -> list[Path]:
    """Draw every plot of ``preset.plots``; return the PNG paths."""
    files = []
    for k, spec in enumerate(preset.plots):
        kind = spec["kind"]
        default = f"{kind}_{spec.get('y') or spec.get('value') or k}".replace("/", "-")
        path = out_dir / str(spec.get("file") or f"{default}.png")
        fig, ax = plt.subplots(figsize=(7, 4.5))
        try:
            if kind == "bar":
                _bar(ax, rows, spec)
            elif kind == "line":
                _line(ax, rows, spec)
            elif kind == "benchmarks":
                _benchmarks(ax, rows, spec)
            elif kind == "grid":
                _grid(fig, ax, rows, spec)
            elif kind == "diff":
                _diff(ax, rows, spec)
            elif kind == "selection":
                profiles, benches, m = selection_matrix(runs[_pick(rows, spec)])
                _heat(fig, ax, m, profiles, benches, "selection frequency")
            elif kind == "capability":
                clients, domains, m = capability_matrix(runs[_pick(rows, spec)])
                _heat(fig, ax, m, clients, domains, "capability C")
            what = spec.get("y") or spec.get("value") or kind
            ax.set_title(spec.get("title", ax.get_title() or f"{preset.name}: {what}"))
            fig.tight_layout()
            fig.savefig(path, dpi=110)
        finally:
            plt.close(fig)
        files.append(path)
    return files
