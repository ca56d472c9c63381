"""A report for every run dir: ``report.md``, its PNG plots and ``run_info.json`` (provenance).

Written at the end of each run (by the ServerApp and again by ``pfedma run``, which knows the
command line and the exit code) and on demand by ``pfedma report DIR``. Everything here reads
the run's own files (``summary.json``, ``rounds.jsonl``, ``queries.jsonl``); a file that is
missing or damaged leaves its section out with a note, it never stops the report. The tables
behind the plots are pure functions here; :mod:`pfedma_flwr.server.report_plots` draws them,
:mod:`pfedma_flwr.server.report_markdown` writes them into ``report.md``, and :func:`load_run`
gives them as pandas frames.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pfedma_flwr.persistence import read_jsonl_lines
from pfedma_flwr.server.progress_lines import RunningAccuracy
from pfedma_flwr.server.provenance import (  # noqa: F401  (re-exported: cli, server_app, tests use them)
    RUN_INFO,
    VERSIONED,
    base_run_info,
    git_commit,
    model_info,
    now,
    package_versions,
    update_run_info,
)
from pfedma_flwr.server.results import write_text_atomic

REPORT = "report.md"
ACCURACY_PNG = "accuracy.png"
ACCURACY_ROUNDS_PNG = "accuracy_rounds.png"
ROUNDS_PNG = "rounds.png"
SELECTION_PNG = "selection.png"
CAPABILITY_PNG = "capability.png"
RULES_PNG = "rules.png"
PLOTS = (ACCURACY_PNG, ACCURACY_ROUNDS_PNG, ROUNDS_PNG, SELECTION_PNG, CAPABILITY_PNG, RULES_PNG)
#: every file a run leaves in its output dir (``pfedma run --overwrite`` removes exactly these)
RUN_FILES = ("summary.json", "rounds.jsonl", "queries.jsonl", "checkpoint.json", "config.yaml",
             "run.log", "progress.jsonl", RUN_INFO, REPORT, *PLOTS)



@dataclass(frozen=True)
class RunDir:
    """The files of one run dir, decoded; ``problems`` names what could not be read."""

    path: Path
    summary: dict[str, Any]
    rounds: list[dict[str, Any]]
    queries: list[dict[str, Any]]
    run_info: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def _read_json(path: Path, problems: list[str]) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        problems.append(f"{path.name} is missing")
        return {}
    except (OSError, ValueError) as e:
        problems.append(f"{path.name} cannot be read ({str(e)[:120]})")
        return {}
    if not isinstance(obj, dict):
        problems.append(f"{path.name} is not a JSON object")
        return {}
    return obj


def _read_lines(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    if not path.is_file():
        problems.append(f"{path.name} is missing")
        return []
    try:
        return [rec for _, rec in read_jsonl_lines(path) if isinstance(rec, dict)]
    except (OSError, ValueError) as e:
        problems.append(f"{path.name} cannot be read ({str(e)[:120]})")
        return []


def load_run_dir(path: Path | str) -> RunDir:
    """Read a run dir's result files.

    Raises
    ------
    NotADirectoryError
        If ``path`` is not a directory.
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise NotADirectoryError(f"run dir {str(p)!r} does not exist or is not a directory")
    problems: list[str] = []
    summary = _read_json(p / "summary.json", problems)
    rounds = _read_lines(p / "rounds.jsonl", problems)
    queries = _read_lines(p / "queries.jsonl", problems)
    info = _read_json(p / RUN_INFO, []) if (p / RUN_INFO).exists() else {}
    return RunDir(p, summary, rounds, queries, info, problems)


def load_run(path: Path | str) -> dict[str, Any]:
    """The run dir as pandas frames, by name.

    ``queries`` (one row per finished query, ``queries.jsonl``), ``rounds``
    (:func:`round_table`), ``accuracy`` (:func:`accuracy_by_round`, per benchmark as
    ``acc/<benchmark>`` columns), ``selections`` (:func:`selection_table`), ``capability``
    (:func:`capability_table`), ``rules`` (:func:`rule_coverage`). Needs pandas
    (``pip install 'pfedma-flwr[report]'``).
    """
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("load_run needs pandas: pip install 'pfedma-flwr[report]'") from e
    run = load_run_dir(path)
    acc = [{"round": a.round, "done": a.done, "scored": a.scored, "correct": a.correct,
            "accuracy": a.correct / a.scored if a.scored else None,
            **{f"acc/{b}": c / d for b, (c, d) in sorted(a.by_benchmark.items())}}
           for a in accuracy_by_round(run)]
    profiles = client_profiles(run.summary)
    sel = [{**r, "profile": profiles.get(r["client"], "")} for r in selection_table(run.rounds)]
    return {"queries": pd.DataFrame(run.queries),
            "rounds": pd.DataFrame(round_table(run.rounds, run.queries)),
            "accuracy": pd.DataFrame(acc), "selections": pd.DataFrame(sel),
            "capability": pd.DataFrame(capability_table(run.summary)),
            "rules": pd.DataFrame(rule_coverage(run.rounds))}


#: the earlier name of :func:`load_run` (``queries`` and ``rounds`` are the same frames)
load_frames = load_run


@dataclass(frozen=True)
class RoundAccuracy:
    """Queries finished by the end of Flower round ``round`` and how many were correct."""

    round: int
    done: int
    correct: int
    by_benchmark: dict[str, list[int]]  # benchmark -> [correct, scored]

    @property
    def scored(self) -> int:
        """Queries with a gold verdict: accuracy is correct / scored, as in summary.json.

        A judged benchmark's ``correct`` is None (AlpacaEval is judged after the run): such a
        query is finished (``done``) but never "wrong".
        """
        return sum(d for _, d in self.by_benchmark.values())


def settled_round(rounds: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The Flower round each query's answer was settled in: the last round it was asked in.

    A query the orchestrator stops after round 1 is decided while round 2 is planned (the
    engine's ``queries/num_finished`` counts it then), but its answer is round 1's: every table
    of the report counts it from round 1.
    """
    last_seen: dict[str, int] = {}
    for r in rounds:
        for q in r.get("queries") or []:
            if isinstance(q, dict):
                last_seen[str(q.get("query_id"))] = int(_num(r.get("round")))
    return last_seen


def accuracy_by_round(run: RunDir) -> list[RoundAccuracy]:
    """Cumulative accuracy after each Flower round (overall and per benchmark).

    A query finished in the round it was settled in (:func:`settled_round`); one in no round
    (ended after the last one, or never started) counts from the last round on.
    """
    nums = sorted({int(_num(r.get("round"))) for r in run.rounds})
    if not nums:
        return []
    last_seen = settled_round(run.rounds)
    out = []
    for n in nums:
        # the live progress lines' counter: one rule for what counts as finished and scored
        acc = RunningAccuracy()
        for q in run.queries:
            if last_seen.get(str(q.get("query_id")), nums[-1]) <= n:
                acc.add(q)
        out.append(RoundAccuracy(n, acc.done, acc.correct, acc.by_benchmark))
    return out


def client_profiles(summary: Mapping[str, Any]) -> dict[str, str]:
    """Client key -> the profile it announced at the handshake (``summary.json`` ``clients``)."""
    return {str(k): str(_obj(d).get("profile_name", ""))
            for k, d in _obj(summary.get("clients")).items()}


def client_label(key: str, profiles: Mapping[str, str]) -> str:
    """``partition-3 (statistician)``: the key with its profile, where one is known."""
    return f"{key} ({profiles[key]})" if profiles.get(key) else key


def selection_table(rounds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (round, query, selected client): the client's anomaly score and retention.

    ``A`` is the anomaly score the round record keeps as ``score`` (``A`` in older records).
    """
    rows = []
    for r in rounds:
        for q in r.get("queries") or []:
            if not isinstance(q, dict):
                continue
            anomaly = _obj(q.get("anomaly"))
            for c in q.get("selected") or []:
                a = _obj(anomaly.get(c))
                rows.append({"round": int(_num(r.get("round"))), "query_id": q.get("query_id"),
                             "t": int(_num(q.get("t"))), "client": str(c),
                             "A": a.get("score", a.get("A")), "retained": a.get("retained")})
    return rows


def capability_table(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per client of the final routing state: its profile, ``S``, ``C <domain>``.

    ``C`` of a domain the client was never asked about is ``None`` (undefined, not 0).
    """
    clients = _obj(_obj(summary.get("routing")).get("clients"))
    profiles = client_profiles(summary)
    domains = sorted({d for c in clients.values() for d in _obj(_obj(c).get("capability"))})
    return [{"client": k, "profile": profiles.get(k, ""), "S": _obj(c).get("reliability"),
             **{f"C {d}": _obj(_obj(c).get("capability")).get(d) for d in domains}}
            for k, c in sorted(clients.items())]


def rule_coverage(rounds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per Flower round: global rules, active ones and promotions (rule coverage vs round)."""
    rows = []
    for r in rounds:
        ru = _obj(r.get("rules"))
        h = _obj(ru.get("h_scores"))
        rows.append({
            "round": int(_num(r.get("round"))),
            "global": int(_num(_obj(r.get("metrics")).get("rules/num_global"))) or len(h),
            "active": sum(1 for v in h.values() if isinstance(v, list) and len(v) > 2 and v[2]),
            "promoted": int(_num(ru.get("promoted"))),
        })
    return rows


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def round_table(rounds: Sequence[Mapping[str, Any]],
                queries: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """Per Flower round: queries asked, answers retained and filtered, tokens, backend calls.

    ``finished`` counts the ``queries`` settled by the end of the round, as
    :func:`accuracy_by_round` does (one definition for every table of the report).
    """
    settled = settled_round(rounds)
    last = max((int(_num(r.get("round"))) for r in rounds), default=0)
    rows = []
    for r in rounds:
        m = _obj(r.get("metrics"))
        n = int(_num(r.get("round")))
        rows.append({
            "round": int(_num(r.get("round"))),
            "queries": int(_num(m.get("select/num_queries"))),
            "retained": int(_num(m.get("anomaly/num_retained"))),
            "filtered": int(_num(m.get("anomaly/num_filtered"))),
            "tokens": int(_num(m.get("cost/tokens"))),
            "backend_calls": int(_num(m.get("cost/backend_calls"))),
            "finished": sum(1 for q in queries
                            if settled.get(str(q.get("query_id")), last) <= n),
            "promoted": int(_num(m.get("rules/num_promoted"))),
        })
    return rows


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def headline(path: Path | str) -> str:
    """The headline table of a run dir's ``report.md`` (status, accuracy, cost), for a terminal."""
    text = (Path(path) / REPORT).read_text(encoding="utf-8")
    return text.split("\n\n")[1] if text.count("\n\n") >= 1 else text


def write_report(path: Path | str) -> Path:
    """Write ``report.md`` and its plots into the run dir ``path``; return the report's path."""
    from pfedma_flwr.server.report_markdown import render_markdown
    from pfedma_flwr.server.report_plots import write_plots

    run = load_run_dir(path)
    plots = write_plots(run, run.path)
    target = run.path / REPORT
    write_text_atomic(target, render_markdown(run, plots))
    return target


def finish_server_run(out: Path, cfg: Any, *, flower_run_id: int | None,
                      started_at: str) -> None:
    """The ServerApp's end-of-run hook: provenance plus report; never raises (logs instead).

    A report that cannot be written must not turn a finished run into a failed one.
    """
    import logging

    try:
        import sys

        update_run_info(out, {**base_run_info(cfg), "flower_run_id": flower_run_id,
                              "server_python": sys.executable,  # the launcher compares it
                              "server_started_at": started_at, "server_finished_at": now()})
        write_report(out)
    except Exception as e:  # noqa: BLE001  (reported, and the results themselves are on disk)
        logging.getLogger(__name__).warning("report for %s not written: %s: %s", out,
                                            type(e).__name__, e)
