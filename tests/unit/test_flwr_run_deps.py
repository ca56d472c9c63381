"""Plain `flwr run .` on a CPU machine installs no CUDA package (docs/flwr_run.md).

Checked without running `flwr run .`: Flower's switch, the launcher's use of it, and that the
app's torch requirement either comes from a CPU index for `uv sync` or the docs tell users to
turn `uv sync` off.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pfedma_flwr.experiments import launch

ROOT = Path(__file__).resolve().parents[2]
VAR = "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"


def test_pinned_flower_installs_app_dependencies_unless_the_variable_is_set(monkeypatch):
    from flwr.superlink.cli.flower_superlink import _runtime_dependency_install_default

    monkeypatch.delenv(VAR, raising=False)
    assert _runtime_dependency_install_default() is True  # why a plain run pulls CUDA torch
    monkeypatch.setenv(VAR, "1")
    assert _runtime_dependency_install_default() is False


def test_the_launcher_turns_runtime_installation_off_twice(monkeypatch, tmp_path):
    monkeypatch.delenv(VAR, raising=False)
    assert launch._env(tmp_path, 39999)[VAR] == "1"
    seen = {}

    class Proc:
        pid, returncode = 0, None

        def poll(self):
            return None

    def fake_popen(cmd, **kw):
        seen["cmd"], seen["env"] = cmd, kw["env"]
        return Proc()

    monkeypatch.setattr(launch, "_healthy", lambda port: "cmd" in seen)
    monkeypatch.setattr(launch.subprocess, "Popen", fake_popen)
    launch.start_superlink(tmp_path / "home", 39999, tmp_path / "logs")
    assert "--disable-runtime-dependency-installation" in seen["cmd"]
    assert seen["env"][VAR] == "1"


def _torch_requirement(deps: list[str]) -> str | None:
    return next((d for d in deps if re.match(r"torch\b(?![-_])", d)), None)


def test_torch_comes_from_a_cpu_index_or_the_docs_say_to_turn_uv_sync_off():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    torch = _torch_requirement(project["project"]["dependencies"])
    if torch is None:
        return  # nothing for uv to pull CUDA from
    uv = project.get("tool", {}).get("uv", {})
    source = uv.get("sources", {}).get("torch")
    if source:
        sources = source if isinstance(source, list) else [source]
        indexes = {i["name"]: i for i in uv.get("index", [])}
        for s in sources:
            index = indexes[s["index"]]
            assert index["url"].rstrip("/").endswith("/whl/cpu"), index
            assert index.get("explicit") is True  # only torch comes from there
        return
    # torch from PyPI (CUDA wheels on Linux): both guides must say how to avoid uv sync
    for doc in (ROOT / "README.md", ROOT / "docs" / "flwr_run.md"):
        text = doc.read_text(encoding="utf-8")
        assert f"{VAR}=1" in text, f"{doc.name} does not tell plain `flwr run .` users {VAR}=1"


def test_the_docs_name_the_ports_and_files_flower_uses():
    from flwr.cli.constant import LOCAL_CONTROL_API_PORT, LOCAL_SUPERLINK_HTTP_API_PORT
    from flwr.supercore.superexec.dependency_installer import _RUNTIME_ENV_DIR

    text = (ROOT / "docs" / "flwr_run.md").read_text(encoding="utf-8")
    assert f"port {LOCAL_SUPERLINK_HTTP_API_PORT}/{LOCAL_CONTROL_API_PORT}" in text
    assert f"127.0.0.1:{LOCAL_CONTROL_API_PORT}" in text
    assert f"~/.flwr/{_RUNTIME_ENV_DIR}" in text
