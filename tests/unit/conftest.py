"""Fixtures shared by the unit tests' modules."""

from __future__ import annotations

import os

import pytest

from pfedma_flwr.experiments import launch
from tests.unit.launch_fakes import FakeLauncher


@pytest.fixture
def fake(monkeypatch, tmp_path) -> FakeLauncher:
    """The launcher with its SuperLink, ``flwr`` and ``flwr log`` stubbed (``launch_fakes``)."""
    f = FakeLauncher(tmp_path / "out")
    monkeypatch.setattr(launch, "start_superlink", f.superlink)
    monkeypatch.setattr(launch, "_flwr", f.flwr)
    monkeypatch.setattr(launch, "_follow", f.follow)
    monkeypatch.setenv("PATH", os.environ["PATH"])
    return f
