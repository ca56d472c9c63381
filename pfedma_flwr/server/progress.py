"""Progress and logs of a run: the ServerApp's ``rich`` bar and the launcher's live lines.

The ServerApp logs plain lines (:class:`RoundProgress`: its output is never a terminal). The
launcher shows its own progress (:class:`LiveProgress`): it tails the run's ``queries.jsonl``,
``rounds.jsonl`` and ``progress.jsonl`` (each node's reply inside a round, and a heartbeat
every 15 s while none arrives) and prints one line per finished query, Flower round and reply,
with the running accuracy; on a terminal a ``rich`` bar (:class:`TerminalBar`) takes the
replies instead of a line each. The lines themselves are
:mod:`~pfedma_flwr.server.progress_lines`; log levels and plain log lines are
:mod:`pfedma_flwr.logs`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from pfedma_flwr.server.progress_lines import (
    RunningAccuracy,
    as_int,
    delivery_line,
    duration_text,
    query_line,
    round_line,
)


class RoundProgress:
    """The ServerApp's own progress: plain log lines (its output is never a terminal).

    One line per finished query and Flower round, and per node reply inside a round (with a
    heartbeat while none arrives); silent when disabled (the launcher prints its own, from the
    run's files). ``log`` takes one formatted line (default: Flower's logger at INFO).
    """

    def __init__(
        self, *, total: int, enabled: bool = True, log: Callable[[str], None] | None = None
    ) -> None:
        self.enabled = enabled
        self.acc = RunningAccuracy(total=total)
        self._log = log or _flower_info

    def __enter__(self) -> RoundProgress:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def query_done(self, rec: Mapping[str, Any]) -> None:
        """Count one finished query (its ``queries.jsonl`` record) and log it."""
        self.acc.add(rec)
        if self.enabled:
            self._log(query_line(rec, self.acc))

    def round_done(self, server_round: int, record: Mapping[str, Any]) -> None:
        """Log the round's counts."""
        if self.enabled:
            self._log(round_line({"round": server_round, **record}, self.acc))

    def delivery(self, event: Mapping[str, Any]) -> None:
        """Log a reply (or a heartbeat) inside a round (:func:`delivery_line`)."""
        if self.enabled and event.get("event") != "done":
            self._log(delivery_line(event, self.acc))


def _flower_info(line: str) -> None:
    # Flower's own logger (its console handler, its format in run.log), without importing
    # Flower on the server side of the library
    logging.getLogger("flwr").info("%s", line)


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


#: the ServerApp's record of replies inside a round (:func:`delivery_line`), one JSON a line
PROGRESS_FILE = "progress.jsonl"


class TerminalBar:
    """A ``rich`` bar for a terminal: queries done (with accuracy) and the current round."""

    def __init__(self, total: int | None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]PFedMA[/bold] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=False,
        )
        self.queries = self.progress.add_task("queries", total=total)
        self.round = self.progress.add_task("starting", total=None, visible=True)

    def line(self, text: str) -> None:
        """Print ``text`` above the bar."""
        self.progress.console.print(text, markup=False, highlight=False)

    def update(self, acc: RunningAccuracy, event: Mapping[str, Any] | None = None) -> None:
        self.progress.update(
            self.queries,
            completed=acc.done,
            description=f"queries, {acc.text()}",
        )
        if event is not None:
            r = as_int(event.get("round"))
            self.progress.update(
                self.round,
                completed=as_int(event.get("answers" if r else "replied")),
                total=as_int(event.get("answers_total" if r else "nodes")) or None,
                description=f"round {r} answers" if r else "handshake, clients",
            )

    def start(self) -> None:
        self.progress.start()

    def stop(self) -> None:
        self.progress.stop()


class LiveProgress:
    """Prints a run's progress from its result files while it goes (a background thread).

    Parameters
    ----------
    output_dir
        The run's output dir (``rounds.jsonl``, ``queries.jsonl`` and ``progress.jsonl``
        appear there).
    total
        Queries the run will answer, if known (shown as ``k/total``).
    emit
        Where each line goes (default: stdout, flushed).
    on_round
        Called with every round record as it arrives and the running accuracy after it (the
        tracking hook); one that raises is reported once and dropped.
    interval
        Seconds between polls.
    bar
        A :class:`TerminalBar` (on a terminal): replies inside a round move the bar instead of
        printing a line each, and query/round lines print above it.
    quiet_after
        Seconds without a line after which one says the run is still going (before the first
        reply: Ray, the ServerApp and the agents are starting); the bar shows its own clock.
    """

    def __init__(
        self,
        *,
        output_dir: Path,
        total: int | None = None,
        emit: Callable[[str], None] | None = None,
        on_round: Callable[[Mapping[str, Any], RunningAccuracy], None] | None = None,
        interval: float = 1.0,
        bar: TerminalBar | None = None,
        quiet_after: float = 25.0,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"LiveProgress: interval must be > 0, got {interval}")
        self.rounds = JsonlTail(Path(output_dir) / "rounds.jsonl")
        self.queries = JsonlTail(Path(output_dir) / "queries.jsonl")
        self.deliveries = JsonlTail(Path(output_dir) / PROGRESS_FILE)
        self.acc = RunningAccuracy(total=total)
        self.bar = bar
        self._out = bar.line if bar is not None else (emit or _print)
        self.on_round = on_round
        self.quiet_after = quiet_after
        self._started = self._last = time.monotonic()
        self._replies = False
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def skip_existing(self) -> None:
        """Count what is already on disk (a resumed run) without printing it."""
        for rec in self.queries.read():
            self.acc.add(rec)
        self.rounds.read()
        self.deliveries.read()

    def poll(self) -> None:
        """Print the queries, rounds and in-round replies since the last poll."""
        with self._lock:  # the thread's last poll and the final one on exit never interleave
            for rec in self.queries.read():
                self.acc.add(rec)
                self.emit(query_line(rec, self.acc))
            for rec in self.rounds.read():
                self.emit(round_line(rec, self.acc))
                self._track(rec)
            for ev in self.deliveries.read():
                self._replies = True
                if self.bar is not None:
                    self.bar.update(self.acc, ev)
                elif ev.get("event") != "done":
                    self.emit(delivery_line(ev, self.acc))
            if self.bar is not None:
                self.bar.update(self.acc)

    def _track(self, rec: Mapping[str, Any]) -> None:
        if self.on_round is None:
            return
        try:
            self.on_round(rec, self.acc)
        except Exception as e:  # noqa: BLE001  (tracking must not stop the run)
            self.emit(f"[pfedma] tracking hook failed: {type(e).__name__}: {e}")
            self.on_round = None

    def emit(self, line: str) -> None:
        """Print ``line`` (and note when, for :meth:`still_running`)."""
        self._last = time.monotonic()
        self._out(line)

    def still_running(self, now: float | None = None) -> None:
        """A line when nothing was printed for ``quiet_after`` seconds (not with a bar)."""
        now = time.monotonic() if now is None else now
        if self.bar is not None or now - self._last < self.quiet_after:
            return
        phase = (
            "waiting for the next reply"
            if self._replies
            else "starting Ray, the ServerApp and the agents"
        )
        self._out(f"[pfedma] still running after {duration_text(now - self._started)}: {phase}")
        self._last = now

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()
            self.still_running()

    def __enter__(self) -> LiveProgress:
        if self.bar is not None:
            self.bar.start()
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
        if self.bar is not None:
            self.bar.stop()


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
