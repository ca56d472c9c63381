"""Run outputs: ``rounds.jsonl`` (one line per Flower round), ``queries.jsonl``, ``summary.json``.

Lines are appended and flushed as rounds end, so nothing computed is lost if a run dies later;
a line torn by a crash mid-write is dropped (and logged) on resume. Every file is written 0600
and a directory this module creates is 0700: results carry answers and claims of private agents.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pfedma_flwr.persistence import (
    append_line,
    private_dir,
    read_jsonl_lines,
    write_text_atomic,
)
from pfedma_flwr.server.totals import run_status


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _jsonable(obj.item())
    return obj


def _json_line(rec: Any) -> str:
    """One ``.jsonl`` line (sorted keys, non-finite floats as null)."""
    return json.dumps(_jsonable(rec), sort_keys=True) + "\n"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON atomically (see :func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(_jsonable(obj), indent=2, sort_keys=True) + "\n")


class ResultsWriter:
    """Appends round and query records to the run's output directory.

    Parameters
    ----------
    out_dir : Path
        Absolute output directory (created if missing).
    truncate : bool
        Start ``rounds.jsonl`` and ``queries.jsonl`` empty (a new run); :meth:`resume` keeps them.
    """

    def __init__(self, out_dir: Path, *, truncate: bool = True) -> None:
        self.out_dir = out_dir
        if not out_dir.is_dir():  # a directory the user made keeps the mode they chose
            private_dir(out_dir)
        self._rounds = out_dir / "rounds.jsonl"
        self._queries = out_dir / "queries.jsonl"
        self._progress = out_dir / "progress.jsonl"
        self.checkpoint_path = out_dir / "checkpoint.json"
        if truncate:
            for p in (self._rounds, self._queries, self._progress):
                write_text_atomic(p, "")

    @classmethod
    def resume(cls, out_dir: Path, last_round: int, finished: list[dict[str, Any]]
               ) -> ResultsWriter:
        """Reopen a run's directory so it matches its checkpoint exactly.

        Rounds after ``last_round`` (written before a crash, but not checkpointed) are dropped
        and ``queries.jsonl`` is rewritten from the checkpoint's finished queries, so a resumed
        run neither loses nor duplicates a line. A torn last line of ``rounds.jsonl`` (a crash
        mid-append) is dropped and logged; a damaged line before it raises ``ValueError``.
        """
        kept = [ln for ln, rec in read_jsonl_lines(out_dir / "rounds.jsonl")
                if _round_of(rec, out_dir / "rounds.jsonl") <= last_round]
        self = cls(out_dir, truncate=False)
        # Replace, never truncate-then-append: a crash here must not lose the kept lines.
        write_text_atomic(self._rounds, "".join(ln + "\n" for ln in kept))
        write_text_atomic(self._queries, "".join(_json_line(rec) for rec in finished))
        return self

    @staticmethod
    def load_checkpoint(out_dir: Path) -> dict[str, Any] | None:
        """The last checkpoint written in ``out_dir``, if any."""
        path = out_dir / "checkpoint.json"
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (ValueError, RecursionError) as e:  # bad UTF-8, bad JSON, int-str limit
            raise ValueError(f"corrupt checkpoint {path}: {str(e)[:200]}; delete it (or "
                             "restore a copy) to start over") from e
        if not isinstance(data, dict):
            raise ValueError(f"corrupt checkpoint {path}: not a JSON object")
        return data

    def checkpoint(self, state: dict[str, Any]) -> None:
        """Write the engine state atomically (after each completed round)."""
        write_json_atomic(self.checkpoint_path, state)

    def _append(self, path: Path, rec: dict[str, Any]) -> None:
        append_line(path, _json_line(rec))

    def round(self, rec: dict[str, Any]) -> None:
        """Append one round record."""
        self._append(self._rounds, rec)

    def query(self, rec: dict[str, Any]) -> None:
        """Append one finished query."""
        self._append(self._queries, rec)

    def progress(self, rec: dict[str, Any]) -> None:
        """Append one in-round progress event (a node's reply, a heartbeat)."""
        self._append(self._progress, rec)

    def text(self, name: str, content: str) -> None:
        """Write a small text file (e.g. the resolved config)."""
        write_text_atomic(self.out_dir / name, content)

    def summary(self, summary: dict[str, Any]) -> None:
        """Write ``summary.json`` atomically.

        A ``completed`` status is checked against the summary's own ``generation`` block
        (:func:`~pfedma_flwr.server.totals.run_status`): a run whose agents mostly failed to
        answer is never reported as completed.
        """
        if summary.get("status") == "completed":
            summary = {**summary, "status": run_status(summary)}
        write_json_atomic(self.out_dir / "summary.json", summary)


def _round_of(rec: Any, path: Path) -> int:
    r = rec.get("round", 0) if isinstance(rec, dict) else None
    if type(r) is not int:
        raise ValueError(f"{path}: a line has no integer 'round' ({str(rec)[:80]})")
    return r
