"""What an experiment runs: one variant's run, the executor signature, and its two failures.

Shared by the runner (:mod:`pfedma_flwr.experiments.runner`), which executes variants, and
:mod:`pfedma_flwr.experiments.resume`, which decides what a second sitting does with the run
directories the first one left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pfedma_flwr.experiments import preflight


@dataclass(frozen=True)
class VariantRun:
    """Everything an executor needs to run one variant.

    Parameters
    ----------
    experiment, variant : str
        Names (for logs).
    config : str
        ``conf/`` preset the run starts from.
    num_clients : int
        Simulated clients ``N``.
    overrides : str
        Shell-quoted dotted overrides (``load_config`` / ``launch.run`` syntax).
    output_dir : Path
        Absolute output directory of the run.
    resume, overwrite : bool
        Continue the run in ``output_dir`` from its checkpoint; replace the results there.
    seed : int, optional
        The run seed of this repetition (``--seeds``); ``None``: the configuration's own.
    slot : int
        Which of the concurrent slots runs it (its own SuperLink ports; ``jobs > 1``).
    """

    experiment: str
    variant: str
    config: str
    num_clients: int
    overrides: str
    output_dir: Path
    resume: bool = False
    overwrite: bool = False
    seed: int | None = None
    slot: int = 0


Executor = Callable[[VariantRun], None]
class ExperimentRefused(ValueError):
    """The experiment cannot start (nothing ran); ``code`` is the exit status (3, or 2)."""

    def __init__(self, message: str, code: int = preflight.EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


class VariantFailed(RuntimeError):
    """A variant's run failed (``code``: the launcher's exit status)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
