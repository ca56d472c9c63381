"""scripts/installed.py: install.sh skips its pip steps only when they would change nothing."""

from __future__ import annotations

import importlib.util
import json
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed():
    spec = importlib.util.spec_from_file_location("installed", REPO / "scripts" / "installed.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_pin_at_another_version_makes_install_run(installed, capsys) -> None:
    version = metadata.version("numpy")
    assert installed.main([f"numpy!={version}"]) == 1
    assert f"numpy!={version} (installed {version})" in capsys.readouterr().out


def test_a_missing_pin_makes_install_run(installed, capsys) -> None:
    assert installed.main(["no-such-distribution-pfedma==1.0"]) == 1
    assert "no-such-distribution-pfedma==1.0 (not installed)" in capsys.readouterr().out


def test_the_closure_is_followed_into_extras(installed) -> None:
    # flwr[simulation] needs ray: a missing extra requirement anywhere below must be found
    seen: set[tuple[str, str]] = set()
    assert installed._unmet(Requirement("flwr[simulation]"), seen) is None
    assert ("ray", "") in {(n, e) for n, e in seen}
    assert installed._unmet(Requirement("numpy<1"), set()).startswith("numpy<1 (installed")


def test_installed_pins_and_app_pass_in_this_environment(installed) -> None:
    # the test environment is what install.sh built: the pins hold, so only the app's location
    # decides between "nothing to do" (0) and "reinstall the app" (3)
    pins = [f"numpy=={metadata.version('numpy')}", f"torch=={metadata.version('torch')}"]
    raw = metadata.distribution("pfedma-flwr").read_text("direct_url.json") or "{}"
    here = json.loads(raw).get("url", "").removeprefix("file://") == str(REPO)
    assert installed.main(pins) == (0 if here else 3)
