"""How a launched run ended: its exit code, its status and one line naming the cause.

Exit codes of ``pfedma run``: 0 ``completed``; 1 ``failed`` (the ServerApp failed); 2
``failed:generation`` (more than ``strategy.max_failed_share`` of the agents' answers were not
produced, or the agents could not start their model: a dead endpoint, a model id it does not
serve, missing weights); 3 refused before anything started
(:mod:`pfedma_flwr.experiments.preflight`); 128+N stopped by signal N (status ``interrupted``,
with the command that continues the run).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from pfedma_flwr.experiments.preflight import EXIT_GENERATION, existing_results
from pfedma_flwr.server import report as rep
from pfedma_flwr.server.results import write_json_atomic

EXIT_FAILED = 1
__all__ = ["EXIT_FAILED", "existing_results", "finish", "log_problems", "outcome",
           "resume_command", "summary_problem"]


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def outcome(run_id: int, flower: str, out: Path, timeout: float) -> tuple[int, str, str]:
    """Exit code, status and the one-line verdict (naming the cause) of a finished run.

    The verdict is printed last, after the report (:func:`finish`); the log lines that led to
    a failure are printed here, before it.
    """
    summary = out / "summary.json"
    if flower == "finished:completed":
        if not summary.is_file():
            return EXIT_FAILED, "failed", (f"[pfedma] run {run_id} completed but wrote no "
                                           f"{summary} (exit {EXIT_FAILED})")
        problem = summary_problem(summary)
        if problem:
            status = str(_read_summary(summary).get("status") or "failed:generation")
            code = EXIT_GENERATION if status == "failed:generation" else EXIT_FAILED
            return code, status, (
                f"[pfedma] run {run_id} finished, but {problem}; see {summary} "
                f"(exit {code})")
        return 0, "completed", f"[pfedma] run {run_id} finished: {summary}"
    s = _read_summary(summary)
    status = str(s.get("status") or "failed")
    if flower == "timeout":
        cause = f"stopped after --timeout {timeout:g} s"
    else:
        cause = str(s.get("cause") or "") or failure_cause(out / "run.log") or "see run.log"
    code = EXIT_GENERATION if status == "failed:generation" else EXIT_FAILED
    for ln in log_problems(out / "run.log"):
        sys.stderr.write(f"[pfedma]   {ln}\n")
    return code, status, (f"[pfedma] run {run_id} {status} (Flower: {flower}): {cause} "
                          f"(exit {code}; log: {out / 'run.log'})")


def _read_summary(path: Path) -> dict[str, Any]:
    try:
        s = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return s if isinstance(s, dict) else {}


def finish(out: Path, cmd: list[str], rc: int, status: str, verdict: str = "") -> None:
    """Record the end, write the report, then print the verdict line last.

    ``run_info.json`` gets the exit code and status (an interrupted run's ``summary.json`` its
    status too); the ``verdict`` goes to stderr unless the run completed; an interrupted run's
    verdict is the command that continues it.
    """
    if status == "interrupted":
        s = _read_summary(out / "summary.json")
        write_json_atomic(out / "summary.json", {**s, "status": "interrupted"})
    info = rep.update_run_info(out, {"finished_at": rep.now(), "exit_code": rc,
                                     "status": status})
    ran, ours = info.get("server_python"), info.get("launcher_python")
    if ran and ours and ran != ours:  # Flower's processes must run the code the user invoked
        sys.stderr.write(f"[pfedma] warning: the ServerApp ran on {ran}, not on {ours} that "
                         "started the run; its results came from that interpreter's install\n")
    if existing_results(out):
        try:
            path = rep.write_report(out)
            _say(f"{rep.headline(out)}\n[pfedma] report: {path}")
        except (OSError, ValueError) as e:
            sys.stderr.write(f"[pfedma] report not written: {e}\n")
    if status == "interrupted":
        verdict = (f"[pfedma] interrupted (exit {rc}); every process of the run was stopped. "
                   f"Continue with: {resume_command(cmd)}")
    if verdict:
        stream = sys.stdout if rc == 0 else sys.stderr
        stream.write(verdict + "\n")
        stream.flush()


def resume_command(cmd: list[str]) -> str:
    """``cmd`` with ``--overwrite`` dropped and ``--resume`` added: continues the same run."""
    args = [a for a in cmd if a != "--overwrite"]
    return shlex.join(args if "--resume" in args else [*args, "--resume"])


def summary_problem(path: Path) -> str:
    """Why the run's ``summary.json`` does not report success, or ``""`` if it does.

    ``failed:generation`` names how many agent answers failed and the commonest reason codes
    with the clients that had them, so a dead endpoint reads as one, not as accuracy 0.
    """
    try:
        summary = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as e:
        return f"its summary cannot be read ({str(e)[:120]})"
    if not isinstance(summary, dict):
        return "its summary is not a JSON object"
    status = summary.get("status")
    if status == "completed":
        return ""
    gen = _obj(summary.get("generation"))
    codes = _obj(gen.get("failed_by_code"))
    top = sorted(((str(k), v) for k, v in codes.items() if isinstance(v, int)),
                 key=lambda kv: (-kv[1], kv[0]))
    where = ", ".join(sorted(str(c) for c in _obj(gen.get("failed_by_client")))[:8])
    detail = ""
    if status == "failed:no_answers":
        detail = (f": {summary.get('num_queries')} queries finished and no agent was asked one "
                  "(every selection was refused or invalid; see rounds.jsonl)")
    elif gen:
        detail = (f": {gen.get('generation_failed')} of {gen.get('answers')} agent answers "
                  f"were not produced (threshold {gen.get('max_failed_share')}), failures by "
                  f"reason {dict(top[:5])}" + (f" on {where}" if where else ""))
    return f"its status is {status!r}{detail}"


def log_problems(path: Path, limit: int = 6) -> list[str]:
    """The last ``limit`` WARNING/ERROR lines of a run log (each at most 300 characters)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    hits = [ln.strip() for ln in lines if "WARNING" in ln or "ERROR" in ln or "Error:" in ln]
    return [ln[:300] for ln in hits[-limit:]]


_EXC = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Failed)\w*: .+")


def failure_cause(path: Path) -> str:
    """The last exception line of a run log (``FileNotFoundError: ...``), or ``""``."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    hits = [ln.strip() for ln in lines if _EXC.match(ln.strip())]
    return " ".join(hits[-1].split())[:400] if hits else ""


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}
