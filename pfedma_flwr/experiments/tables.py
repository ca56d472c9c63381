"""The experiment table: one row per variant, label columns then the preset's metric columns.

Rates are written in percent like the paper's tables (NRP is already in percent); counts
(``rounds``, ``tokens``, ``calls``, ``global_rules``, ``query_rules``) as they are. A metric
that is NaN or not measured in a variant is an empty CSV cell and ``n/a`` in Markdown.
A column ending in ``/*`` (e.g. ``ACC/*``) expands to every per-benchmark metric present.

Where a row has them (:mod:`pfedma_flwr.experiments.compare`), ``ACC`` is followed by its 95 %
interval (``ACC_lo``, ``ACC_hi``), ``ACC_sd`` over seeds, and the table ends with ``n`` and the
paired comparison with the reference level: ``dACC`` and its interval, ``p_mcnemar``. In
Markdown an interval shares its value's cell (``47.5 [33.0, 62.4]``). ``comparison.csv`` and
the second Markdown table give the same per benchmark. An attacked row's ``ASR`` is followed by
its interval (``ASR_lo``, ``ASR_hi``) and the table by ``dASR`` (its interval) and ``p_ASR``.
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
                         "cost_per_solved", "n", "solved", "n_paired", "b", "c", "p_mcnemar",
                         "p_guess", "helpfulness", "out_chars", "p_ASR"})
#: Rates that may be negative (differences to the reference level).
SIGNED_METRICS = frozenset({"dACC", "dACC_lo", "dACC_hi", "dASR", "dASR_lo", "dASR_hi"})
#: Columns added after a metric / at the end when a row has them (compare.py).
_AFTER = {"ACC": ("ACC_lo", "ACC_hi", "ACC_sd"), "ASR": ("ASR_lo", "ASR_hi")}
_PAIRED = ("n", "dACC", "dACC_lo", "dACC_hi", "p_mcnemar", "dASR", "dASR_lo", "dASR_hi",
           "p_ASR")
# Markdown: an interval is printed in its value's cell
_CELL = {"ACC": ("ACC_lo", "ACC_hi"), "dACC": ("dACC_lo", "dACC_hi"),
         "ASR": ("ASR_lo", "ASR_hi"), "dASR": ("dASR_lo", "dASR_hi")}


def display_value(metric: str, value: float | None) -> float | None:
    """The table value of ``metric``: percent for rates, raw for counts, ``None`` if absent."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    base = metric.split("/")[0].split("@")[0]
    return float(value) if base in RAW_METRICS else 100.0 * float(value)


def columns(preset: ExperimentPreset, rows: Sequence[dict[str, Any]]) -> list[str]:
    """The metric columns of the table, with ``X/*`` expanded over the rows' metrics."""
    out: list[str] = []
    present = {m for r in rows for m in r["metrics"]}
    for c in preset.columns:
        if c.endswith("/*"):
            prefix = c[:-1]
            found = sorted(m for m in present if m.startswith(prefix))
            out.extend(m for m in found if m not in out)
        elif c not in out:
            out.append(c)
            out.extend(m for m in _AFTER.get(c, ()) if m in present and m not in out)
    if "tokens" in out and "cached_share" not in out:
        # what the token columns count but the caches served (0 on a first run)
        out.insert(out.index("tokens") + 1, "cached_share")
    out.extend(m for m in _PAIRED if m in present and m not in out)
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


def _fmt(v: Any, signed: bool = False) -> str:
    if v is None:
        return "n/a"
    if signed and isinstance(v, float):
        return f"{v:+.1f}"
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
    md_head, md_body = markdown_cells(header, body)
    lines = [f"# {preset.name}", "", preset.description.strip(), "",
             "| " + " | ".join(md_head) + " |", "|" + "---|" * len(md_head)]
    lines += ["| " + " | ".join(row) + " |" for row in md_body]
    lines += ["", "Rates in percent (NRP in percent); rounds, tokens and backend calls per query; "
              "cached_share: percent of the tokens that generation caches served."]
    if "ACC_lo" in header:
        lines += ["ACC [95 % interval: Wilson for one run, bootstrap over questions for seed "
                  "means]; dACC = ACC - the reference level's ACC on the same questions "
                  "[paired bootstrap, 10,000 resamples, seed 0]; p_mcnemar: exact McNemar test "
                  "of the discordant questions."]
    if "ASR_lo" in header:
        lines += ["ASR [95 % Wilson interval over the attacked tasks]; dASR = ASR - the "
                  "reference level's ASR on the same attacked tasks [paired bootstrap]; p_ASR: "
                  "exact McNemar test of the tasks where one of the two was attacked "
                  "successfully."]
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [csv_path, md_path]


_COUNTS = frozenset({"n", "solved", "n_paired", "b", "c"})


def _cell_text(metric: str, v: Any) -> str:
    """A Markdown cell: counts as integers, p-values to 3 digits, differences signed."""
    base = metric.split("/")[0]
    if v is not None and isinstance(v, float) and not math.isnan(v):
        if base in _COUNTS:
            return f"{v:g}"
        if base in ("p_mcnemar", "p_ASR"):
            return f"{v:.3g}"
    return _fmt(v, base in SIGNED_METRICS)


def markdown_cells(header: Sequence[str], body: Sequence[Sequence[Any]]
                   ) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the Markdown table: each interval joins its value's cell."""
    merged = {b for pair in _CELL.values() for b in pair if b in header}
    keep = [i for i, h in enumerate(header) if h not in merged]
    head = [f"{header[i]} [95% CI]" if header[i] in _CELL and _CELL[header[i]][0] in header
            else header[i] for i in keep]
    out = []
    for row in body:
        cell = dict(zip(header, row, strict=True))
        line = []
        for i in keep:
            h, signed = header[i], header[i] in SIGNED_METRICS
            text = _cell_text(h, row[i])
            lo_hi = _CELL.get(h)
            if lo_hi and lo_hi[0] in cell and row[i] is not None \
                    and cell[lo_hi[0]] is not None:
                text += f" [{_fmt(cell[lo_hi[0]], signed)}, {_fmt(cell[lo_hi[1]], signed)}]"
            line.append(text)
        out.append(line)
    return head, out


#: Columns of ``comparison.csv`` after the labels (rates as fractions, like experiment.json).
COMPARISON_COLUMNS = ("benchmark", "n", "solved", "ACC", "ACC_lo", "ACC_hi", "p_guess",
                      "n_paired", "dACC", "dACC_lo", "dACC_hi", "b", "c", "p_mcnemar")


def write_comparison(preset: ExperimentPreset, long: Sequence[dict[str, Any]], out_dir: Path,
                     reference: str = "") -> list[Path]:
    """``comparison.csv`` (per row and benchmark) and its table appended to ``results.md``."""
    labels = list(preset.axes) or ["variant"]
    path = out_dir / "comparison.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([*labels, *COMPARISON_COLUMNS])
        for r in long:
            w.writerow([r.get(a, r["variant"]) for a in labels]
                       + [_csv(r.get(c)) if c != "benchmark" else r[c]
                          for c in COMPARISON_COLUMNS])
    head = [*labels, "benchmark", "solved/n", "ACC [95% CI]", "p_guess",
            f"dACC vs {reference or 'reference'} [95% CI]", "b:c", "p_mcnemar"]
    lines = ["", "## Per benchmark, paired on the same questions", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in long:
        def pct(k: str, row: dict[str, Any] = r) -> float | None:
            return display_value("ACC", row.get(k))

        acc = f"{_fmt(pct('ACC'))} [{_fmt(pct('ACC_lo'))}, {_fmt(pct('ACC_hi'))}]"
        d = "n/a" if r.get("dACC") is None else (
            f"{_fmt(pct('dACC'), True)} [{_fmt(pct('dACC_lo'), True)}, "
            f"{_fmt(pct('dACC_hi'), True)}]")
        bc = "n/a" if r.get("b") is None else f"{r['b']:g}:{r['c']:g}"
        p = "n/a" if r.get("p_mcnemar") is None else f"{r['p_mcnemar']:.3g}"
        g = "n/a" if r.get("p_guess") is None else f"{r['p_guess']:.2g}"
        lines.append("| " + " | ".join([*(str(r.get(a, r["variant"])) for a in labels),
                                         r["benchmark"], f"{r['solved']:g}/{r['n']:g}", acc,
                                         g, d, bc, p]) + " |")
    if any(r.get("p_guess") is not None for r in long):
        lines += ["", "p_guess: on a multiple-choice benchmark, the exact one-sided binomial "
                  "p-value of the score against picking one option at random."]
    md = out_dir / "results.md"
    with open(md, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return [path]
