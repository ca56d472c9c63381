"""The text of a run's ``report.md``, from the tables of :mod:`pfedma_flwr.server.report`.

One renderer per section, each returning its lines (an empty list where the run has nothing
for it); :func:`render_markdown` joins them in the report's order. Only
:func:`pfedma_flwr.server.report.write_report` calls it, through a function-local import, so
this module may import the table functions from ``report`` without an import cycle at load time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.server.report import (
    RunDir,
    _num,
    _obj,
    accuracy_by_round,
    client_label,
    client_profiles,
    round_table,
    rule_coverage,
)


def _cell(v: Any) -> str:
    """A Markdown table cell: one line, pipes escaped, at most 120 characters."""
    s = " ".join(str(v).split()).replace("|", "\\|")
    return s if len(s) <= 120 else s[:117] + "..."


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows),
        "",
    ]


def _pct(v: Any) -> str:
    return f"{100 * v:.1f} %" if isinstance(v, int | float) and not isinstance(v, bool) else "-"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return "-" if v is None else str(v)


def _headline(run: RunDir) -> list[str]:
    """Title, the headline numbers (status, accuracy, cost) and what could not be read."""
    s = run.summary
    lines = [f"# PFedMA run report: {run.path.name}", ""]
    lines += _table(
        ["", ""],
        [
            ("status", s.get("status", "unknown (no summary.json)")),
            *((("cause", s["cause"]),) if s.get("cause") else ()),
            ("accuracy", _pct(s.get("accuracy"))),
            ("queries", _fmt(s.get("num_queries"))),
            ("clients", _fmt(s.get("num_clients"))),
            ("rounds per query", _fmt(s.get("rounds_per_query"))),
            ("tokens per query", _fmt(s.get("tokens_per_query"))),
            ("backend calls per query", _fmt(s.get("backend_calls_per_query"))),
            ("wall time (s)", _fmt(s.get("wall_seconds"))),
        ],
    )
    if run.problems:
        lines += ["Not in this report: " + "; ".join(run.problems) + ".", ""]
    return lines


def _accuracy(s: Mapping[str, Any]) -> list[str]:
    acc = _obj(s.get("accuracy_by_benchmark"))
    if not acc:
        return []
    rows = [(k, _pct(v)) for k, v in sorted(acc.items())]
    return ["## Accuracy per benchmark", "", *_table(["benchmark", "accuracy"], rows)]


def _failures(s: Mapping[str, Any], profiles: Mapping[str, str]) -> list[str]:
    """Failed agent answers: the counts, then by reason code and by client."""
    gen = _obj(s.get("generation"))
    if not gen:
        return []
    lines = [
        "## Failures",
        "",
        f"{_fmt(gen.get('failed'))} of {_fmt(gen.get('answers'))} agent answers failed "
        f"({_fmt(gen.get('generation_failed'))} not produced by the agents; the run "
        f"fails above a share of {_fmt(gen.get('max_failed_share'))}).",
        "",
    ]
    codes = _obj(gen.get("failed_by_code"))
    if codes:
        by_count = sorted(codes.items(), key=lambda kv: (-_num(kv[1]), kv[0]))
        lines += _table(["reason code", "answers"], by_count)
    by_client = _obj(gen.get("failed_by_client"))
    if by_client:
        rows = [
            (client_label(k, profiles), json.dumps(v, sort_keys=True))
            for k, v in sorted(by_client.items())
        ]
        lines += _table(["client", "failures"], rows)
    return lines


def _stop_reasons(s: Mapping[str, Any]) -> list[str]:
    stops = _obj(s.get("stop_reasons"))
    if not stops:
        return []
    return ["## Stop reasons", "", *_table(["reason", "queries"], sorted(stops.items()))]


def _global_rules(s: Mapping[str, Any]) -> list[str]:
    """The global rule repository; always present (an empty one says so)."""
    rules = [r for r in s.get("global_rules") or [] if isinstance(r, dict)]
    if not rules:
        return ["## Global rule repository", "", "No global rule was promoted.", ""]
    rows = [
        (
            r.get("rule_id"),
            r.get("text"),
            r.get("action"),
            _fmt(r.get("h_score")),
            _fmt(r.get("n_evals")),
            r.get("active"),
        )
        for r in rules
    ]
    head = ["rule", "text", "action", "H", "N", "active"]
    return ["## Global rule repository", "", *_table(head, rows)]


def _routing(s: Mapping[str, Any], profiles: Mapping[str, str]) -> list[str]:
    """The final routing state: per client its profile, reliability S and capabilities C."""
    clients = _obj(_obj(s.get("routing")).get("clients"))
    if not clients:
        return []
    domains = sorted({d for c in clients.values() for d in _obj(_obj(c).get("capability"))})
    rows = [
        (
            k,
            profiles.get(k, "") or "-",
            _fmt(_obj(c).get("reliability")),
            *(_fmt(_obj(_obj(c).get("capability")).get(d)) for d in domains),
        )
        for k, c in sorted(clients.items())
    ]
    return [
        "## Routing state per client",
        "",
        "C: capability per knowledge domain (- where the client was never asked "
        "about it); S: reliability.",
        "",
        *_table(["client", "profile", "S", *(f"C {d}" for d in domains)], rows),
    ]


def _rounds(run: RunDir) -> list[str]:
    """Per Flower round: answers, cost, queries finished, accuracy so far and rule coverage."""
    table = round_table(run.rounds, run.queries)
    if not table:
        return []
    # one table: the queries finished by the end of a round and their accuracy come from
    # the same rule (settled_round), so two tables can no longer disagree
    by_round = {a.round: a for a in accuracy_by_round(run)}
    benches = sorted({b for a in by_round.values() for b in a.by_benchmark})
    cov = {c["round"]: c for c in rule_coverage(run.rounds)}
    head = [*table[0], "accuracy", *benches, "global rules", "active"]

    def _row(r: dict[str, Any]) -> list[Any]:
        a = by_round.get(r["round"])
        by_b = a.by_benchmark if a is not None else {}
        return [
            *r.values(),
            _pct(a.correct / a.scored if a and a.scored else None),
            *(_pct(by_b[b][0] / by_b[b][1]) if b in by_b else "-" for b in benches),
            cov[r["round"]]["global"],
            cov[r["round"]]["active"],
        ]

    return [
        "## Flower rounds",
        "",
        "Answers and cost per round; queries finished by its end (their answer "
        "settled), their accuracy so far, and global rules (rule coverage).",
        "",
        *_table(head, [_row(r) for r in table]),
    ]


def _provenance(info: Mapping[str, Any]) -> list[str]:
    if not info:
        return []
    rows = [
        (k, json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v)
        for k, v in sorted(info.items())
    ]
    return ["## Provenance", "", *_table(["", ""], rows)]


def render_markdown(run: RunDir, plots: Sequence[str] = ()) -> str:
    """``report.md`` of a run: headline numbers first, then failures, rules, routing, rounds.

    Parameters
    ----------
    run : RunDir
        The run dir's files, as :func:`pfedma_flwr.server.report.load_run_dir` reads them.
    plots : Sequence[str]
        File names of the PNG plots written beside the report, embedded after the rounds.

    Returns
    -------
    str
        The Markdown text, ending in one newline.
    """
    s = run.summary
    profiles = client_profiles(s)
    lines = [
        *_headline(run),
        *_accuracy(s),
        *_failures(s, profiles),
        *_stop_reasons(s),
        *_global_rules(s),
        *_routing(s, profiles),
        *_rounds(run),
    ]
    lines += [f"![{Path(p).stem}]({p})" for p in plots] + ([""] if plots else [])
    lines += _provenance(run.run_info)
    return "\n".join(lines).rstrip() + "\n"
