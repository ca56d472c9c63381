"""The paper's evaluation: presets, runner, tables (``python -m pfedma_flwr.experiments``).

The names below load on first use (PEP 562): ``pfedma run`` imports only the launcher from this
package, not the runner's tables and plots (matplotlib: seconds on a loaded machine).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pfedma_flwr.experiments.presets import ExperimentPreset, load_preset, preset_names
    from pfedma_flwr.experiments.runner import (
        Executor,
        VariantRun,
        flwr_executor,
        run_experiment,
    )

_WHERE = {"ExperimentPreset": "presets", "load_preset": "presets", "preset_names": "presets",
          "Executor": "runner", "VariantRun": "runner", "flwr_executor": "runner",
          "run_experiment": "runner"}
__all__ = ["ExperimentPreset", "Executor", "VariantRun", "flwr_executor", "load_preset",
           "preset_names", "run_experiment"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
