"""A report for every run dir: ``report.md``, two PNG plots and ``run_info.json`` (provenance).

Written at the end of each run (by the ServerApp and again by ``pfedma run``, which knows the
command line and the exit code) and on demand by ``pfedma report DIR``. Everything here reads
the run's own files (``summary.json``, ``rounds.jsonl``, ``queries.jsonl``); a file that is
missing or damaged leaves its section out with a note, it never stops the report.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pfedma_flwr import __version__
from pfedma_flwr.agents.backends.embedded import EMBEDDED_MODELS, file_sha256
from pfedma_flwr.persistence import read_jsonl_lines
from pfedma_flwr.resources import PACKAGE_DIR, is_source_tree
from pfedma_flwr.results import write_json_atomic, write_text_atomic

RUN_INFO = "run_info.json"
REPORT = "report.md"
ACCURACY_PNG = "accuracy.png"
ROUNDS_PNG = "rounds.png"
#: every file a run leaves in its output dir (``pfedma run --overwrite`` removes exactly these)
RUN_FILES = ("summary.json", "rounds.jsonl", "queries.jsonl", "checkpoint.json", "config.yaml",
             "run.log", RUN_INFO, REPORT, ACCURACY_PNG, ROUNDS_PNG)
#: distributions whose versions decide what a run computes
VERSIONED = ("pfedma-flwr", "flwr", "torch", "transformers", "sentence-transformers",
             "llama_cpp_python", "openai", "numpy", "presidio-analyzer")


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


def load_frames(path: Path | str) -> dict[str, Any]:
    """The run dir as pandas frames: ``queries`` (one row per query), ``rounds`` (per round).

    Needs pandas (``pip install 'pfedma-flwr[report]'``).
    """
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("load_frames needs pandas: pip install 'pfedma-flwr[report]'") from e
    run = load_run_dir(path)
    return {"queries": pd.DataFrame(run.queries), "rounds": pd.DataFrame(round_table(run.rounds))}


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def round_table(rounds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per Flower round: queries asked, answers retained and filtered, tokens, backend calls."""
    rows = []
    for r in rounds:
        m = _obj(r.get("metrics"))
        rows.append({
            "round": int(_num(r.get("round"))),
            "queries": int(_num(m.get("select/num_queries"))),
            "retained": int(_num(m.get("anomaly/num_retained"))),
            "filtered": int(_num(m.get("anomaly/num_filtered"))),
            "tokens": int(_num(m.get("cost/tokens"))),
            "backend_calls": int(_num(m.get("cost/backend_calls"))),
            "finished": int(_num(m.get("queries/num_finished"))),
            "promoted": int(_num(m.get("rules/num_promoted"))),
        })
    return rows


def _cell(v: Any) -> str:
    """A Markdown table cell: one line, pipes escaped, at most 120 characters."""
    s = " ".join(str(v).split()).replace("|", "\\|")
    return s if len(s) <= 120 else s[:117] + "..."


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows), ""]


def _pct(v: Any) -> str:
    return f"{100 * v:.1f} %" if isinstance(v, int | float) and not isinstance(v, bool) else "-"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return "-" if v is None else str(v)


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def render_markdown(run: RunDir, plots: Sequence[str] = ()) -> str:
    """``report.md`` of a run: headline numbers first, then failures, rules, routing, rounds."""
    s, info = run.summary, run.run_info
    lines = [f"# PFedMA run report: {run.path.name}", ""]
    lines += _table(["", ""], [
        ("status", s.get("status", "unknown (no summary.json)")),
        ("accuracy", _pct(s.get("accuracy"))),
        ("queries", _fmt(s.get("num_queries"))), ("clients", _fmt(s.get("num_clients"))),
        ("rounds per query", _fmt(s.get("rounds_per_query"))),
        ("tokens per query", _fmt(s.get("tokens_per_query"))),
        ("backend calls per query", _fmt(s.get("backend_calls_per_query"))),
        ("wall time (s)", _fmt(s.get("wall_seconds"))),
    ])
    if run.problems:
        lines += ["Not in this report: " + "; ".join(run.problems) + ".", ""]
    acc = _obj(s.get("accuracy_by_benchmark"))
    if acc:
        lines += ["## Accuracy per benchmark", ""]
        lines += _table(["benchmark", "accuracy"], [(k, _pct(v)) for k, v in sorted(acc.items())])
    gen = _obj(s.get("generation"))
    if gen:
        lines += ["## Failures", "",
                  f"{_fmt(gen.get('failed'))} of {_fmt(gen.get('answers'))} agent answers failed "
                  f"({_fmt(gen.get('generation_failed'))} not produced by the agents; the run "
                  f"fails above a share of {_fmt(gen.get('max_failed_share'))}).", ""]
        codes = _obj(gen.get("failed_by_code"))
        if codes:
            lines += _table(["reason code", "answers"], sorted(codes.items(), key=lambda kv:
                                                               (-_num(kv[1]), kv[0])))
        by_client = _obj(gen.get("failed_by_client"))
        if by_client:
            lines += _table(["client", "failures"], [(k, json.dumps(v, sort_keys=True))
                                                     for k, v in sorted(by_client.items())])
    stops = _obj(s.get("stop_reasons"))
    if stops:
        lines += ["## Stop reasons", ""] + _table(["reason", "queries"], sorted(stops.items()))
    rules = [r for r in s.get("global_rules") or [] if isinstance(r, dict)]
    lines += ["## Global rule repository", ""]
    lines += (_table(["rule", "text", "action", "H", "N", "active"],
                     [(r.get("rule_id"), r.get("text"), r.get("action"), _fmt(r.get("h_score")),
                       _fmt(r.get("n_evals")), r.get("active")) for r in rules])
              if rules else ["No global rule was promoted.", ""])
    clients = _obj(_obj(s.get("routing")).get("clients"))
    if clients:
        domains = sorted({d for c in clients.values() for d in _obj(_obj(c).get("capability"))})
        lines += ["## Routing state per client", "",
                  "C: capability per knowledge domain; S: reliability.", ""]
        lines += _table(["client", "S", *(f"C {d}" for d in domains)], [
            (k, _fmt(_obj(c).get("reliability")),
             *(_fmt(_obj(_obj(c).get("capability")).get(d)) for d in domains))
            for k, c in sorted(clients.items())])
    table = round_table(run.rounds)
    if table:
        head = list(table[0])
        lines += ["## Flower rounds", ""] + _table(head, [[r[h] for h in head] for r in table])
    lines += [f"![{Path(p).stem}]({p})" for p in plots] + ([""] if plots else [])
    if info:
        lines += ["## Provenance", ""] + _table(["", ""], [
            (k, json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v)
            for k, v in sorted(info.items())])
    return "\n".join(lines).rstrip() + "\n"


def write_plots(run: RunDir, out: Path) -> list[str]:
    """``accuracy.png`` (per benchmark) and ``rounds.png`` (answers and tokens per round).

    Returns the file names written (a plot without data is skipped).
    """
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    written = []
    acc = {k: v for k, v in _obj(run.summary.get("accuracy_by_benchmark")).items()
           if isinstance(v, int | float)}
    if acc:
        fig, ax = plt.subplots(figsize=(max(3.0, 1.2 * len(acc) + 1.5), 3.2))
        names = sorted(acc)
        bars = ax.bar(names, [100 * acc[n] for n in names], color="#4c72b0")
        ax.bar_label(bars, fmt="%.1f")  # a 0 % bar is otherwise invisible
        ax.set_ylim(0, 100)
        ax.set_ylabel("accuracy (%)")
        ax.set_title("accuracy per benchmark")
        fig.tight_layout()
        _save(fig, out / ACCURACY_PNG)
        plt.close(fig)
        written.append(ACCURACY_PNG)
    table = round_table(run.rounds)
    if table:
        x = [r["round"] for r in table]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(8.0, 3.2))
        a1.bar(x, [r["retained"] for r in table], label="retained", color="#55a868")
        a1.bar(x, [r["filtered"] for r in table], bottom=[r["retained"] for r in table],
               label="filtered", color="#c44e52")
        a1.set_xlabel("Flower round")
        a1.set_ylabel("answers")
        a1.legend()
        a2.plot(x, [r["tokens"] for r in table], marker="o")
        a2.set_xlabel("Flower round")
        a2.set_ylabel("tokens")
        a2.set_ylim(bottom=0)
        for a in (a1, a2):
            a.set_xticks(x)
        fig.suptitle("answers and tokens per round")
        fig.tight_layout()
        _save(fig, out / ROUNDS_PNG)
        plt.close(fig)
        written.append(ROUNDS_PNG)
    return written


def _save(fig: Any, path: Path) -> None:
    # owner-only like every other file of the run (results.py)
    fig.savefig(path, dpi=110)
    os.chmod(path, 0o600)


def headline(path: Path | str) -> str:
    """The headline table of a run dir's ``report.md`` (status, accuracy, cost), for a terminal."""
    text = (Path(path) / REPORT).read_text(encoding="utf-8")
    return text.split("\n\n")[1] if text.count("\n\n") >= 1 else text


def write_report(path: Path | str) -> Path:
    """Write ``report.md`` and its plots into the run dir ``path``; return the report's path."""
    run = load_run_dir(path)
    plots = write_plots(run, run.path)
    target = run.path / REPORT
    write_text_atomic(target, render_markdown(run, plots))
    return target


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def package_versions() -> dict[str, str]:
    """Installed versions of :data:`VERSIONED` (``"missing"`` where not installed)."""
    out = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def git_commit(root: Path | None = None) -> str | None:
    """The source tree's commit (``+dirty`` with uncommitted changes), ``None`` outside a clone."""
    root = root or PACKAGE_DIR.parent
    if root == PACKAGE_DIR.parent and not is_source_tree():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "-uno"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def model_info(backend: Any) -> dict[str, Any]:
    """What the agents' model was: the embedded file and its sha256, else backend and model."""
    name, model = str(getattr(backend, "name", "")), str(getattr(backend, "model", ""))
    info: dict[str, Any] = {"backend": name, "model": model}
    if name == "embedded":
        spec = EMBEDDED_MODELS.get(model)
        if spec is not None:
            # the digest the assembled file is checked against (none recorded for smollm2)
            info.update(file=spec.filename, sha256=spec.sha256 or None)
    elif name == "transformers" and Path(model).expanduser().is_file():
        info.update(file=Path(model).name, sha256=file_sha256(Path(model).expanduser()))
    if getattr(backend, "base_url", ""):
        from pfedma_flwr.agents.backends.openai_backend import _safe_url

        info["base_url"] = _safe_url(str(backend.base_url))
    return info


def update_run_info(path: Path | str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``fields`` into ``<path>/run_info.json``.

    A ``None`` value (this writer does not know, e.g. the commit inside the app bundle) keeps
    a value another writer recorded, and is written only where there is none.
    """
    target = Path(path) / RUN_INFO
    current = _read_json(target, []) if target.exists() else {}
    current.update({k: v for k, v in fields.items() if v is not None or k not in current})
    write_json_atomic(target, current)
    return current


def base_run_info(cfg: Any = None) -> dict[str, Any]:
    """Provenance every writer records: versions, commit, platform, and the config's seed/model."""
    info: dict[str, Any] = {
        "pfedma_version": __version__, "packages": package_versions(),
        "git_commit": git_commit(), "python": sys.version.split()[0],
        "platform": platform.platform(), "host_cpus": os.cpu_count(),
    }
    if cfg is not None:
        info.update(seed=cfg.seed, model=model_info(cfg.agent.backend))
    return info


def finish_server_run(out: Path, cfg: Any, *, flower_run_id: int | None,
                      started_at: str) -> None:
    """The ServerApp's end-of-run hook: provenance plus report; never raises (logs instead).

    A report that cannot be written must not turn a finished run into a failed one.
    """
    import logging

    try:
        update_run_info(out, {**base_run_info(cfg), "flower_run_id": flower_run_id,
                              "server_started_at": started_at, "server_finished_at": now()})
        write_report(out)
    except Exception as e:  # noqa: BLE001  (reported, and the results themselves are on disk)
        logging.getLogger(__name__).warning("report for %s not written: %s: %s", out,
                                            type(e).__name__, e)
