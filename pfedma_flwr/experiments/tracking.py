"""Optional experiment tracking, off by default: config and round metrics to TensorBoard/MLflow.

Fed from the per-round records the run writes (``rounds.jsonl``): live by the launcher
(``pfedma run --tracking tensorboard``, through :class:`pfedma_flwr.server.progress.LiveProgress`)
or afterwards from a run dir (``pfedma report DIR --tracking tensorboard``, :func:`replay`).
Neither tracker is a dependency: ``tensorboard`` (written through ``torch.utils.tensorboard``)
or ``mlflow`` must be installed; asking for a missing one is a clear error before the run
starts. Each run's resolved configuration is logged first (:meth:`Tracker.config`); the
experiment harness adds each variant's final metrics (:meth:`Tracker.final`). The trackers see
only the configuration, counts and rates, never answers or rule texts.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

BACKENDS = ("none", "tensorboard", "mlflow")


class TrackingError(ValueError):
    """The tracking backend is unknown or not installed; the message says which and how."""


class _Accuracy(Protocol):
    # read-only: progress.RunningAccuracy and the frozen report.RoundAccuracy both fit
    @property
    def done(self) -> int: ...
    @property
    def scored(self) -> int: ...
    @property
    def correct(self) -> int: ...
    @property
    def by_benchmark(self) -> dict[str, list[int]]: ...


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def round_scalars(rec: Mapping[str, Any], acc: _Accuracy | None = None) -> dict[str, float]:
    """The scalars of one round record, by name.

    Its ``metrics``, ``rules/num_active`` (active global rules), ``clients/<id>/tokens`` and,
    given the running accuracy after the round, ``queries/accuracy`` (+ ``/<benchmark>``).
    """
    out: dict[str, float] = {}
    metrics = rec.get("metrics")
    for k, v in metrics.items() if isinstance(metrics, Mapping) else ():
        x = _num(v)
        if x is not None:
            out[str(k)] = x
    rules = rec.get("rules")
    h = rules.get("h_scores") if isinstance(rules, Mapping) else None
    if isinstance(h, Mapping):
        out["rules/num_active"] = float(
            sum(1 for v in h.values() if isinstance(v, list | tuple) and len(v) > 2 and v[2])
        )
    clients = rec.get("clients")
    for cid, c in clients.items() if isinstance(clients, Mapping) else ():
        t = _num(c.get("tokens")) if isinstance(c, Mapping) else None
        if t is not None:
            out[f"clients/{cid}/tokens"] = t
    if acc is not None and acc.scored:
        out["queries/accuracy"] = acc.correct / acc.scored
        for b, (c, d) in acc.by_benchmark.items():
            out[f"queries/accuracy/{b}"] = c / d if d else 0.0
    return out


class Tracker:
    """Writes :func:`round_scalars` per round; the writer opens at the first round."""

    def __init__(self, *, backend: str, target: Path | str) -> None:
        if backend not in BACKENDS[1:]:
            raise TrackingError(f"tracking backend {backend!r} is not one of {BACKENDS[1:]}")
        self.backend, self.target = backend, target
        self._writer: Any = None
        self.steps = 0

    def _open(self) -> Any:
        if self.backend == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            Path(self.target).mkdir(parents=True, exist_ok=True)
            return SummaryWriter(log_dir=str(self.target))
        import mlflow

        target = str(self.target)
        mlflow.set_tracking_uri(target if "://" in target else Path(target).resolve().as_uri())
        mlflow.start_run()
        return mlflow

    def _writer_open(self) -> Any:
        if self._writer is None:
            self._writer = self._open()
        return self._writer

    def config(self, yaml_text: str) -> None:
        """Record the run's resolved configuration (``config.yaml``) once, before its rounds.

        TensorBoard: a text entry ``config``; MLflow: the file as an artifact and every scalar
        leaf as a parameter (``strategy.t_max``).
        """
        w = self._writer_open()
        if self.backend == "tensorboard":
            w.add_text("config", "```yaml\n" + yaml_text + "\n```", global_step=0)
            w.flush()
            return
        import yaml

        w.log_text(yaml_text, "config.yaml")
        params = _flat(yaml.safe_load(yaml_text) or {})
        w.log_params({k: str(v)[:500] for k, v in params.items()})

    def final(self, metrics: Mapping[str, Any]) -> None:
        """Record a run's final metrics (a results-table row) at the step after its last round."""
        scalars = {f"final/{k}": x for k, v in metrics.items() if (x := _num(v)) is not None}
        if not scalars:
            return
        w = self._writer_open()
        if self.backend == "tensorboard":
            for k, v in scalars.items():
                w.add_scalar(k, v, global_step=self.steps + 1)
            w.flush()
        else:
            w.log_metrics(scalars, step=self.steps + 1)

    def round(self, rec: Mapping[str, Any], acc: _Accuracy | None = None) -> None:
        """Record one round (its ``round`` number is the step)."""
        step = int(_num(rec.get("round")) or self.steps + 1)
        scalars = round_scalars(rec, acc)
        self._writer_open()
        if self.backend == "tensorboard":
            for k, v in scalars.items():
                self._writer.add_scalar(k, v, global_step=step)
            self._writer.flush()
        else:
            # mlflow metric keys allow "/" but not "@"; ours have neither beyond "/"
            self._writer.log_metrics(scalars, step=step)
        self.steps += 1

    def close(self) -> None:
        """Flush and close the writer (a tracker that saw no round writes nothing)."""
        if self._writer is None:
            return
        if self.backend == "tensorboard":
            self._writer.close()
        else:
            self._writer.end_run()
        self._writer = None


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Scalar leaves of a nested mapping by dotted key (lists as their text)."""
    if not isinstance(tree, Mapping):
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, Mapping) else {f"{prefix}{k}": v})
    return {k.rstrip("."): v for k, v in out.items()}


def make_tracker(backend: str, target: Path | str) -> Tracker | None:
    """The tracker for ``backend`` (``None`` for ``"none"``), checked to be installed.

    Raises
    ------
    TrackingError
        If ``backend`` is unknown or its package is not installed.
    """
    name = (backend or "none").strip().lower()
    if name == "none":
        return None
    if name not in BACKENDS:
        raise TrackingError(f"tracking backend {backend!r} is not one of {', '.join(BACKENDS)}")
    module = "tensorboard" if name == "tensorboard" else "mlflow"
    if importlib.util.find_spec(module) is None:
        raise TrackingError(
            f"tracking backend {name!r} needs the {module!r} package: pip install {module}"
        )
    return Tracker(backend=name, target=target)


def replay(run_dir: Path | str, tracker: Tracker, final: Mapping[str, Any] | None = None) -> int:
    """Feed a run dir's config, rounds (with the accuracy after each) and ``final`` metrics.

    ``final`` is an experiment's results-table row, logged after the last round. Returns the
    number of rounds recorded; the tracker is closed.
    """
    from pfedma_flwr.server.report import accuracy_by_round, load_run_dir

    run = load_run_dir(run_dir)
    acc = {a.round: a for a in accuracy_by_round(run)}
    config = Path(run_dir) / "config.yaml"
    try:
        if config.is_file():
            tracker.config(config.read_text(encoding="utf-8"))
        for rec in run.rounds:
            tracker.round(rec, acc.get(int(_num(rec.get("round")) or 0)))
        if final:
            tracker.final(final)
    finally:
        tracker.close()
    return tracker.steps
