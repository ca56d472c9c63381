"""Progress and logs of a run: the ServerApp's ``rich`` bar and the launcher's live lines.

The ServerApp's bar (:class:`RoundProgress`) is drawn inside a process whose output Flower
relays only in chunks, so the launcher shows its own progress instead (:class:`LiveProgress`):
it tails the run's ``rounds.jsonl`` and ``queries.jsonl`` while the run goes and prints one
line per finished query and per finished Flower round, with the running accuracy.
Log levels and plain log lines are :mod:`pfedma_flwr.logs`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RoundProgress:
    """Progress over the query stream; a no-op when disabled."""

    def __init__(self, *, total: int, enabled: bool = True) -> None:
        self.total, self.enabled = total, enabled
        self.correct = self.done = 0
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> RoundProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]PFedMA[/bold] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("queries", total=self.total)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def query_done(self, correct: bool) -> None:
        """Count one finished query."""
        self.done += 1
        self.correct += int(correct)
        if self._progress is not None:
            self._progress.update(
                self._task, advance=1, description=f"acc {self.correct}/{self.done}"
            )

    def round_done(self, server_round: int, record: dict[str, Any]) -> None:
        """Show the last round's counts."""
        if self._progress is not None:
            m = record.get("metrics", {})
            self._progress.update(
                self._task,
                description=(
                    f"round {server_round} acc {self.correct}/{self.done} "
                    f"filtered {int(m.get('anomaly/num_filtered', 0))} "
                    f"rules {int(m.get('rules/num_global', 0))}"
                ),
            )


class JsonlTail:
    """The complete lines appended to a JSONL file since the last :meth:`read`.

    A line still being written (no newline yet) waits for the next read; a line that does not
    decode is skipped (the run's own readers report it); a file that shrank (an
    ``--overwrite`` or a resume trimming it) is read again from its start.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        """The new complete records (JSON objects only)."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:
                    self.offset = 0
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out = []
        for raw in data[:end].split(b"\n"):
            try:
                rec = json.loads(raw.decode("utf-8"))
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out


def _n(v: Any) -> int:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0


def _short(v: Any, limit: int = 40) -> str:
    s = " ".join(str(v).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _acc(correct: int, done: int) -> str:
    return f"acc {correct}/{done} ({100 * correct / done:.1f} %)" if done else "acc -"


@dataclass
class RunningAccuracy:
    """Queries finished and answered correctly so far, overall and per benchmark."""

    total: int | None = None
    done: int = 0
    correct: int = 0
    by_benchmark: dict[str, list[int]] = field(default_factory=dict)

    def add(self, rec: Mapping[str, Any]) -> None:
        ok = rec.get("correct") is True
        self.done += 1
        self.correct += ok
        b = self.by_benchmark.setdefault(str(rec.get("benchmark", "?")), [0, 0])
        b[0] += ok
        b[1] += 1


def query_line(rec: Mapping[str, Any], acc: RunningAccuracy) -> str:
    """One finished query (after ``acc.add(rec)``), e.g.

    ``[pfedma] query 3/6 gsm8k/q2: correct, answer '42' (gold '42'), 2 rounds, t_max | acc 2/3
    (66.7 %)``.
    """
    of = f"/{acc.total}" if acc.total else ""
    verdict = "correct" if rec.get("correct") is True else "wrong"
    return (
        f"[pfedma] query {acc.done}{of} {_short(rec.get('benchmark', '?'), 20)}/"
        f"{_short(rec.get('query_id', '?'), 30)}: {verdict}, answer "
        f"{_short(rec.get('answer', ''))!r} (gold {_short(rec.get('gold', ''))!r}), "
        f"{_n(rec.get('rounds'))} rounds, {_short(rec.get('stop_reason', '?'), 30)} | "
        f"{_acc(acc.correct, acc.done)}"
    )


def round_line(rec: Mapping[str, Any], acc: RunningAccuracy) -> str:
    """One finished Flower round, e.g.

    ``[pfedma] round 2: 4 queries, 6 retained / 2 filtered, 1 unusable, 1 node failed, 900
    tokens, 6 backend calls, 3 global rules | 2/6 queries done, acc 2/2 (100.0 %)``.

    *unusable*: answers a node sent without a response (its own error code, e.g. a reply cut
    off by ``max_tokens``); *node failed*: nodes whose whole reply was lost or rejected.
    """
    m = rec.get("metrics")
    m = m if isinstance(m, Mapping) else {}
    failures = rec.get("failures")
    failed = len(failures) if isinstance(failures, Mapping) else 0
    queries = rec.get("queries")
    unusable = sum(
        len(q["client_errors"])
        for q in (queries if isinstance(queries, list) else [])
        if isinstance(q, Mapping) and isinstance(q.get("client_errors"), Mapping)
    )
    of = f"/{acc.total}" if acc.total else ""
    per_bench = ", ".join(f"{b} {c}/{d}" for b, (c, d) in sorted(acc.by_benchmark.items()))
    return (
        f"[pfedma] round {_n(rec.get('round'))}: {_n(m.get('select/num_queries'))} queries, "
        f"{_n(m.get('anomaly/num_retained'))} retained / "
        f"{_n(m.get('anomaly/num_filtered'))} filtered, {unusable} unusable, "
        f"{failed} node{'' if failed == 1 else 's'} failed, "
        f"{_n(m.get('cost/tokens'))} tokens, {_n(m.get('cost/backend_calls'))} backend calls, "
        f"{_n(m.get('rules/num_global'))} global rules | {acc.done}{of} queries done, "
        f"{_acc(acc.correct, acc.done)}" + (f" ({per_bench})" if per_bench else "")
    )


class LiveProgress:
    """Prints a run's progress from its result files while it goes (a background thread).

    Parameters
    ----------
    output_dir
        The run's output dir (``rounds.jsonl``, ``queries.jsonl`` appear there).
    total
        Queries the run will answer, if known (shown as ``k/total``).
    emit
        Where each line goes (default: stdout, flushed).
    on_round
        Called with every round record as it arrives and the running accuracy after it (the
        tracking hook); one that raises is reported once and dropped.
    interval
        Seconds between polls.
    """

    def __init__(
        self,
        *,
        output_dir: Path,
        total: int | None = None,
        emit: Callable[[str], None] | None = None,
        on_round: Callable[[Mapping[str, Any], RunningAccuracy], None] | None = None,
        interval: float = 1.0,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"LiveProgress: interval must be > 0, got {interval}")
        self.rounds = JsonlTail(Path(output_dir) / "rounds.jsonl")
        self.queries = JsonlTail(Path(output_dir) / "queries.jsonl")
        self.acc = RunningAccuracy(total=total)
        self.emit = emit or _print
        self.on_round = on_round
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def skip_existing(self) -> None:
        """Count what is already on disk (a resumed run) without printing it."""
        for rec in self.queries.read():
            self.acc.add(rec)
        self.rounds.read()

    def poll(self) -> None:
        """Print the queries and rounds finished since the last poll."""
        for rec in self.queries.read():
            self.acc.add(rec)
            self.emit(query_line(rec, self.acc))
        for rec in self.rounds.read():
            self.emit(round_line(rec, self.acc))
            if self.on_round is not None:
                try:
                    self.on_round(rec, self.acc)
                except Exception as e:  # noqa: BLE001  (tracking must not stop the run)
                    self.emit(f"[pfedma] tracking hook failed: {type(e).__name__}: {e}")
                    self.on_round = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def __enter__(self) -> LiveProgress:
        self._thread = threading.Thread(target=self._loop, name="pfedma-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.poll()  # what the last round wrote after the thread's last look


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
