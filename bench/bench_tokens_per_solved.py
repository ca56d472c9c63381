"""Tokens per solved query of PFedMA vs a single agent of the same model (one experiment run).

    python3 bench/bench_tokens_per_solved.py [--from DIR] [--size small] [--set KEY=VALUE ...]

Without ``--from`` it runs ``python -m pfedma_flwr.experiments main --only
method=pfedma,single-agent`` (both methods on the same questions, one command); with ``--from``
it reads such an experiment's output dir. Writes a section of ``bench/results/accuracy.md``:
accuracy, tokens per query, tokens per solved query (all tokens of the run over the queries
answered correctly) and the PFedMA / single-agent ratio of the last.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Tokens per solved query"


def _method_rows(exp_dir: Path) -> dict[str, dict[str, float]]:
    exp = json.loads((exp_dir / "experiment.json").read_text(encoding="utf-8"))
    return {r["labels"]["method"]: r["metrics"] for r in exp["rows"]}


def write_section(path: Path, text: str, section: str = SECTION) -> None:
    """Replace (or append) the section headed ``section`` of ``path`` (``text`` starts with it)."""
    old = path.read_text(encoding="utf-8") if path.is_file() else "# Accuracy benchmarks\n"
    head, _, rest = old.partition(section)
    tail = rest.split("\n## ", 1)[1] if "\n## " in rest else ""
    body = head.rstrip() + "\n\n" + text.rstrip() + "\n"
    if tail:
        body += "\n## " + tail
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--from", dest="src", type=Path, default=None)
    ap.add_argument("--size", default="small")
    ap.add_argument("--set", dest="extra", action="append", default=[])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "accuracy.md")
    a = ap.parse_args()
    exp_dir = a.src
    if exp_dir is None:
        from pfedma_flwr.experiments import run_experiment

        exp_dir = REPO / "outputs" / "bench_tokens_per_solved"
        run_experiment("main", size=a.size, output_dir=exp_dir, extra=a.extra,
                       only={"method": ["pfedma", "single-agent"]})
    rows = _method_rows(exp_dir)
    p, s = rows["pfedma"], rows["single-agent"]
    ratio = p["tokens_per_solved"] / s["tokens_per_solved"] \
        if s.get("tokens_per_solved") and not math.isnan(s["tokens_per_solved"]) else math.nan
    lines = [
        SECTION, "",
        f"`bench/bench_tokens_per_solved.py --from {exp_dir}` (both methods from one "
        "`experiments main --only method=pfedma,single-agent` run; tokens = prompt + "
        "completion of every answer of the run).", "",
        "| method | ACC | ACC/gsm8k | ACC/medqa | tokens/query | tokens/solved query |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in (("pfedma", p), ("single-agent", s)):
        g, md = 100 * m.get("ACC/gsm8k", math.nan), 100 * m.get("ACC/medqa", math.nan)
        lines.append(f"| {name} | {100 * m['ACC']:.0f} % | {g:.0f} % | {md:.0f} % | "
                     f"{m['tokens']:.0f} | {m['tokens_per_solved']:.0f} |")
    lines += ["", f"PFedMA / single agent, tokens per solved query: **{ratio:.2f}x**"]
    write_section(a.out, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
