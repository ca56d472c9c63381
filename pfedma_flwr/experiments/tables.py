"""The experiment table: one row per variant, label columns then the preset's metric columns.

Rates are written in percent like the paper's tables (NRP is already in percent); counts
(``rounds``, ``tokens``, ``calls``, ``global_rules``, ``query_rules``) as they are. A metric
that is NaN or not measured in a variant is an empty CSV cell and ``n/a`` in Markdown.
A column ending in ``/*`` (e.g. ``ACC/*``) expands to every per-benchmark metric present.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.experiments.presets import ExperimentPreset

#: Metrics written as they are (not fractions).
RAW_METRICS = frozenset({"rounds", "tokens", "calls", "global_rules", "query_rules", "NRP",
                         "tokens_per_solved", "orchestrator_tokens", "cost",
                         "cost_per_solved"})


def display_value(metric: str, value: float | None) -> float | None:
    """The table value of ``metric``: percent for rates, raw for counts, ``None`` if absent."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    base = metric.split("/")[0]
    return float(value) if base in RAW_METRICS else 100.0 * float(value)


def columns(preset: ExperimentPreset, rows: Sequence[dict[str, Any]]) -> list[str]:
    """The metric columns of the table, with ``X/*`` expanded over the rows' metrics."""
    out: list[str] = []
    for c in preset.columns:
        if c.endswith("/*"):
            prefix = c[:-1]
            found = sorted({m for r in rows for m in r["metrics"] if m.startswith(prefix)})
            out.extend(m for m in found if m not in out)
        elif c not in out:
            out.append(c)
    if "tokens" in out and "cached_share" not in out:
        # what the token columns count but the caches served (0 on a first run)
        out.insert(out.index("tokens") + 1, "cached_share")
    return out


def table(preset: ExperimentPreset, rows: Sequence[dict[str, Any]]
          ) -> tuple[list[str], list[list[Any]]]:
    """Header and rows (label values as strings, metrics as display values or ``None``)."""
    labels = list(preset.axes) or ["variant"]
    metrics = columns(preset, rows)
    body = []
    for r in rows:
        lab = [r["labels"].get(a, r["variant"]) for a in labels]
        body.append(lab + [display_value(m, r["metrics"].get(m)) for m in metrics])
    return labels + metrics, body


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        # USD per query is ~1e-4 at a cheap backbone's prices: two decimals read 0.00
        return f"{v:.3g}" if 0 < abs(v) < 0.1 else f"{v:.2f}"
    return str(v)


def _csv(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if 0 < abs(v) < 0.1 else f"{v:.4f}"
    return v


def write_tables(preset: ExperimentPreset, rows: Sequence[dict[str, Any]], out_dir: Path
                 ) -> list[Path]:
    """Write ``results.csv`` and ``results.md``; return their paths."""
    header, body = table(preset, rows)
    csv_path, md_path = out_dir / "results.csv", out_dir / "results.md"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        for row in body:
            w.writerow([_csv(v) for v in row])
    lines = [f"# {preset.name}", "", preset.description.strip(), "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in body]
    lines += ["", "Rates in percent (NRP in percent); rounds, tokens and backend calls per query; "
              "cached_share: percent of the tokens that generation caches served."]
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [csv_path, md_path]
