"""Finding a finished run's benchmark data again after its recorded data dir is gone.

A run records its data dir as an absolute path (``config.yaml``'s ``data.data_dir``), which
stops existing when the run was made from a git worktree that was removed, or is read on
another machine. Its scores are still recomputable from ``queries.jsonl`` as long as the
benchmark files give every recorded question the gold the run recorded; anything else is
refused with the path to fix rather than misread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.data.benchmarks import DATA_DIR_ENV, load_benchmark, resolve_data_dir

logger = logging.getLogger(__name__)


def relocated_data_dir(out_dir: Path, recorded: str, queries: Sequence[Mapping[str, Any]]) -> str:
    """The data dir that replaces a run's missing ``recorded`` one, checked against its golds.

    Raises
    ------
    FileNotFoundError
        If no data dir resolves, or the one found lacks a recorded question or gives it
        another gold answer (other benchmark files: the run's scores would be misread).
    """
    try:
        found = resolve_data_dir(None)
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{out_dir}: the run's data dir {recorded!r} no longer exists and no other "
            f"resolves ({e})") from e
    golds: dict[str, dict[str, str]] = {}
    for rec in queries:
        bench_name, qid = rec.get("benchmark"), rec.get("query_id")
        if isinstance(bench_name, str) and isinstance(qid, str) and "gold" in rec:
            golds.setdefault(bench_name, {})[qid] = str(rec["gold"])
    for bench_name, want in sorted(golds.items()):
        try:
            tasks = {t.task_id: t.gold for t in load_benchmark(bench_name, str(found))}
        except (FileNotFoundError, ValueError) as e:
            raise FileNotFoundError(
                f"{out_dir}: the run's data dir {recorded!r} no longer exists, and {found} "
                f"cannot give its {bench_name} questions ({e})") from e
        bad = sorted(q for q, g in want.items() if tasks.get(q) != g)
        if bad:
            raise FileNotFoundError(
                f"{out_dir}: the run's data dir {recorded!r} no longer exists, and {found} "
                f"does not hold its {bench_name} questions as recorded ({len(bad)} of "
                f"{len(want)} missing or with another gold, e.g. {bad[0]}); set "
                f"{DATA_DIR_ENV} to the benchmark data the run used")
    logger.warning("%s: data dir %r no longer exists; reading the same questions from %s",
                   out_dir, recorded, found)
    return str(found)
