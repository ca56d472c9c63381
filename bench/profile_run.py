"""Where a run's time goes, from its own files (run_info.json, summary.json, rounds.jsonl).

Usage::

    python3 bench/profile_run.py /tmp/i29-run1 [/tmp/i29-run2 ...] [--out bench/results/x.md]

Phases, in wall-clock order (``run_info.json`` timestamps are whole seconds):

- **start-up**: launcher start to ServerApp start (SuperLink, ``flwr run``, app bundle);
- **server setup**: ServerApp start to strategy start (config, questions, MiniLM, engine), plus
  the report after the last round;
- **nodes + handshake**: waiting for the simulated SuperNodes (Ray start), then each client's
  ``describe`` (which builds its agent: model load, PII recognizer, private-fact detector);
- per Flower round: **plan** (routing), **wait** (the clients' replies), **absorb** (anomaly
  judges and their embeddings, aggregation, rules);
- **teardown**: ServerApp end to launcher end (SuperLink stop).

Inside *wait*, each client's reply reports ``respond_s`` (its whole message), ``gen_seconds``
(its generations, programs and repairs) and the embedded backend's ``prefill_s``/``decode_s``
with their token counts; ``wait - Σ respond_s`` is what no client computed (transport, Ray
scheduling, state load/save). Simulated clients share the cores one at a time, so the clients'
times add up; on separate machines the slowest client's time would bound the round instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any


def _stamp(s: Any) -> float | None:
    try:
        return datetime.strptime(str(s), "%Y-%m-%dT%H:%M:%SZ").timestamp()
    except ValueError:
        return None


def _span(a: Any, b: Any) -> float | None:
    x, y = _stamp(a), _stamp(b)
    return None if x is None or y is None else y - x


def profile(run_dir: Path) -> dict[str, Any]:
    """The phases of one run (seconds) and its generation counters."""
    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    rounds = [json.loads(ln) for ln in
              (run_dir / "rounds.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip()]
    timing = summary.get("timing", {})
    total = _span(info.get("started_at"), info.get("finished_at"))
    server = _span(info.get("server_started_at"), info.get("server_finished_at"))
    wall = float(summary.get("wall_seconds", 0.0))
    out: dict[str, Any] = {
        "dir": str(run_dir), "total_s": total,
        "startup_s": _span(info.get("started_at"), info.get("server_started_at")),
        "server_setup_s": None if server is None else server - wall,
        "nodes_s": timing.get("nodes_s"), "handshake_s": timing.get("handshake_s"),
        "teardown_s": _span(info.get("server_finished_at"), info.get("finished_at")),
        "accuracy": summary.get("accuracy"), "tokens_per_query": summary.get("tokens_per_query"),
        "cached_share": summary.get("cached_share"), "rounds": [],
    }
    for rec in rounds:
        clients = rec.get("clients", {}).values()
        row = {k: rec.get("timing", {}).get(f"{k}_s") for k in ("plan", "wait", "absorb")}
        for k in ("respond_s", "gen_seconds", "prefill_s", "decode_s", "prefill_tokens",
                  "decode_tokens", "tokens", "cached_tokens"):
            row[k] = sum(float(c.get(k, 0.0)) for c in clients)
        row["slowest_respond_s"] = max((float(c.get("respond_s", 0.0)) for c in clients),
                                       default=0.0)
        row["round"], row["clients"] = rec.get("round"), len(rec.get("clients", {}))
        out["rounds"].append(row)
    return out


def _f(v: Any, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _pct(part: Any, whole: Any) -> str:
    if not part or not whole:
        return ""
    return f"{100 * part / whole:.0f} %"


def markdown(p: dict[str, Any]) -> list[str]:
    """The profile of one run as Markdown lines."""
    total, rs = p["total_s"], p["rounds"]
    lines = [f"### {p['dir']}", "",
             f"accuracy {_f(p['accuracy'], 3)}, tokens/query {_f(p['tokens_per_query'])}, "
             f"cached_share {_f(p['cached_share'], 3)}, total {_f(total)} s", "",
             "| phase | seconds | share of total |", "|---|---|---|"]
    phases = [("start-up (launcher → ServerApp)", p["startup_s"]),
              ("server setup + report", p["server_setup_s"]),
              ("nodes (Ray, SuperNodes)", p["nodes_s"]),
              ("handshake (agents built: model load)", p["handshake_s"])]
    for r in rs:
        phases += [(f"round {r['round']}: plan (routing)", r["plan"]),
                   (f"round {r['round']}: wait for {r['clients']} clients", r["wait"]),
                   (f"round {r['round']}: absorb (judges, embeddings, rules)", r["absorb"])]
    phases.append(("teardown (SuperLink stop)", p["teardown_s"]))
    lines += [f"| {name} | {_f(v)} | {_pct(v, total)} |" for name, v in phases]
    lines += ["", "| round | Σ respond_s | Σ gen_seconds | prefill s (tokens, tok/s) | "
              "decode s (tokens, tok/s) | wait − Σ respond | slowest client s | tokens | "
              "cached tokens |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        pre = f"{_f(r['prefill_s'])} ({r['prefill_tokens']:.0f}, " \
              f"{_f(r['prefill_tokens'] / r['prefill_s'] if r['prefill_s'] else None)})"
        dec = f"{_f(r['decode_s'])} ({r['decode_tokens']:.0f}, " \
              f"{_f(r['decode_tokens'] / r['decode_s'] if r['decode_s'] else None)})"
        gap = None if r["wait"] is None else r["wait"] - r["respond_s"]
        lines.append(f"| {r['round']} | {_f(r['respond_s'])} | {_f(r['gen_seconds'])} | {pre} "
                     f"| {dec} | {_f(gap)} | {_f(r['slowest_respond_s'])} | "
                     f"{r['tokens']:.0f} | {r['cached_tokens']:.0f} |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run output directories")
    ap.add_argument("--out", type=Path, help="also write the Markdown here")
    a = ap.parse_args(argv)
    lines: list[str] = []
    for d in a.runs:
        lines += markdown(profile(d))
    text = "\n".join(lines)
    sys.stdout.write(text + "\n")
    if a.out:
        a.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
