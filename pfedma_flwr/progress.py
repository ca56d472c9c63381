"""A ``rich`` progress line for the ServerApp (queries finished, accuracy so far, round)."""

from __future__ import annotations

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
                TextColumn("[bold]PFedMA[/bold] {task.description}"), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(), transient=False,
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
            self._progress.update(self._task, advance=1,
                                  description=f"acc {self.correct}/{self.done}")

    def round_done(self, server_round: int, record: dict[str, Any]) -> None:
        """Show the last round's counts."""
        if self._progress is not None:
            m = record.get("metrics", {})
            self._progress.update(self._task, description=(
                f"round {server_round} acc {self.correct}/{self.done} "
                f"filtered {int(m.get('anomaly/num_filtered', 0))} "
                f"rules {int(m.get('rules/num_global', 0))}"))
