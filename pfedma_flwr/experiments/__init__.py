"""The paper's evaluation: presets, runner, tables (``python -m pfedma_flwr.experiments``)."""

from pfedma_flwr.experiments.presets import ExperimentPreset, load_preset, preset_names
from pfedma_flwr.experiments.runner import Executor, VariantRun, flwr_executor, run_experiment

__all__ = [
    "ExperimentPreset",
    "Executor",
    "VariantRun",
    "flwr_executor",
    "load_preset",
    "preset_names",
    "run_experiment",
]
