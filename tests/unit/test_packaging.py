"""Packaging: the wheel carries conf/, data/, the app dir, LICENSE and the `pfedma` script.

A plain (non-editable) install once could not find conf/ (issue 16). The wheel is built from a
copy of the source tree into a temp dir (no network: --no-build-isolation --no-index), then
installed with --no-deps into a throwaway venv that borrows this environment's dependencies,
and conf/data/app dir are resolved there from another working directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

import pfedma_flwr
from pfedma_flwr import resources

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
APP_PYPROJECT = tomllib.loads(
    (ROOT / "pfedma_flwr" / "_app" / "pyproject.toml").read_text(encoding="utf-8"))
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "pfedma_flwr", "strategies", "client_apps",
           "conf", "data")


def test_version_is_the_one_in_both_pyprojects():
    assert pfedma_flwr.__version__ == PYPROJECT["project"]["version"]
    assert APP_PYPROJECT["project"]["version"] == PYPROJECT["project"]["version"]


def test_installed_app_dir_declares_the_same_flower_app():
    # components and run-config keys must not drift between the clone and the wheel
    assert APP_PYPROJECT["tool"]["flwr"]["app"] == PYPROJECT["tool"]["flwr"]["app"]
    assert APP_PYPROJECT["project"]["dependencies"] == []


def test_every_source_package_is_listed():
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=["pfedma_flwr*", "strategies*", "client_apps*"]))
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    assert found - listed == set(), "add these packages to [tool.setuptools] packages"
    assert {"pfedma_flwr._conf", "pfedma_flwr._data"} <= listed


def test_dependencies_match_what_the_code_needs():
    deps = PYPROJECT["project"]["dependencies"]
    names = {d.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip() for d in deps}
    assert "ray" not in names  # flwr[simulation] pins it; a second, unpinned entry only conflicts
    assert "llama-cpp-python" in names  # the default backend (embedded) runs on it
    assert "transformers>=4.56" in deps  # from_pretrained(dtype=...) appeared in 4.56
    assert "rl" not in PYPROJECT["project"]["optional-dependencies"]
    assert PYPROJECT["project"]["scripts"]["pfedma"] == "pfedma_flwr.cli:main"


def test_resources_in_a_clone_are_the_repository_dirs():
    assert resources.conf_dir() == ROOT / "conf"
    assert resources.data_dir() == ROOT / "data"
    assert resources.app_dir() == ROOT


def test_resources_prefer_the_packaged_copies(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "pfedma_flwr"
    for sub in ("_conf", "_data/gsm8k", "_app"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "_data" / "gsm8k" / "test.jsonl.gz").write_bytes(b"")
    (tmp_path / "site" / "conf").mkdir()  # some other distribution's top-level conf/
    monkeypatch.setattr(resources, "PACKAGE_DIR", pkg)
    monkeypatch.setattr(resources, "_ROOT", pkg.parent)
    assert resources.conf_dir() == pkg / "_conf"
    assert resources.data_dir() == pkg / "_data"
    assert resources.app_dir() == pkg / "_app"  # no Flower pyproject.toml beside the package


def test_an_app_bundle_without_data_uses_the_installed_distributions(tmp_path, monkeypatch):
    # plain `flwr run .`: Flower's FAB carries data/SOURCES.md but no .gz file
    bundle = tmp_path / "fab"
    (bundle / "pfedma_flwr").mkdir(parents=True)
    (bundle / "data").mkdir()
    (bundle / "data" / "SOURCES.md").write_text("sources")
    monkeypatch.setattr(resources, "PACKAGE_DIR", bundle / "pfedma_flwr")
    monkeypatch.setattr(resources, "_ROOT", bundle)
    monkeypatch.setattr(resources, "installed_dir", lambda name: ROOT / name)
    assert resources.data_dir() == ROOT / "data"
    monkeypatch.setattr(resources, "installed_dir", lambda name: None)
    assert resources.data_dir() == bundle / "data"  # then the loader's error names it


def test_installed_dir_follows_an_editable_install_to_its_source_tree(monkeypatch, tmp_path):
    class Dist:
        def locate_file(self, rel):
            return tmp_path / "site" / rel

        def read_text(self, name):
            return json.dumps({"url": f"file://{ROOT}", "dir_info": {"editable": True}})

    monkeypatch.setattr(resources.importlib.metadata, "distribution", lambda name: Dist())
    assert resources.installed_dir("data") == ROOT / "data"
    assert resources.installed_dir("nope") is None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools")
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=ignore)
        else:
            shutil.copy2(p, src / name)
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    (whl,) = out.glob("pfedma_flwr-*.whl")
    return whl


def test_wheel_holds_conf_data_app_license_and_script(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for yaml in (ROOT / "conf").rglob("*.yaml"):
        assert f"pfedma_flwr/_conf/{yaml.relative_to(ROOT / 'conf').as_posix()}" in names
    for gz in (ROOT / "data").rglob("*.gz"):
        assert f"pfedma_flwr/_data/{gz.relative_to(ROOT / 'data').as_posix()}" in names
    for pkg in ("pfedma_flwr", "strategies", "client_apps"):
        for py in (ROOT / pkg).rglob("*.py"):
            assert py.relative_to(ROOT).as_posix() in names
    assert "pfedma_flwr/_app/pyproject.toml" in names
    info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert f"{info}/licenses/LICENSE" in names
    entry = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "pfedma = pfedma_flwr.cli:main" in entry
    # what the FAB limits care about stays out of the package: no result files or outputs
    assert not [n for n in names if n.endswith((".fab", ".jsonl")) or "outputs/" in n]


@pytest.mark.slow
def test_plain_install_finds_conf_data_and_app_dir(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                          "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    probe = (
        "import json, pfedma_flwr, pfedma_flwr.resources as r\n"
        "from pfedma_flwr.config import CONF_DIR, load_config\n"
        "from pfedma_flwr.experiments.presets import EXPERIMENTS_DIR\n"
        "from pfedma_flwr.data.benchmarks import resolve_data_dir\n"
        "cfg = load_config({'config-name': 'tiny'})\n"
        "print(json.dumps({'pkg': pfedma_flwr.__file__, 'conf': str(CONF_DIR),\n"
        "  'loads_from': str(resolve_data_dir(None)),\n"
        "  'data': str(r.data_dir()), 'app': str(r.app_dir()), 'exp': str(EXPERIMENTS_DIR),\n"
        "  'backend': cfg.agent.backend.name, 'version': pfedma_flwr.__version__}))\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = subprocess.run([str(py), "-c", probe], cwd=elsewhere, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    site = str(env_dir)
    assert got["pkg"].startswith(site)  # the installed copy, not this clone
    assert got["conf"].startswith(site) and got["conf"].endswith("pfedma_flwr/_conf")
    assert got["exp"] == got["conf"] + "/experiments"
    assert Path(got["data"], "gsm8k", "test.jsonl.gz").is_file()
    # what the benchmark loaders use by default (it once looked for site-packages/data)
    assert got["loads_from"] == got["data"] and got["data"].startswith(site)
    assert Path(got["app"], "pyproject.toml").is_file() and got["app"].startswith(site)
    assert got["version"] == pfedma_flwr.__version__
    script = env_dir / "bin" / "pfedma"
    res = subprocess.run([str(script), "--version"], cwd=elsewhere, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == f"pfedma-flwr {pfedma_flwr.__version__}"


def test_cli_dispatches_experiment_and_names_unknown_commands(monkeypatch, capsys):
    from pfedma_flwr import cli

    seen = []
    monkeypatch.setattr("pfedma_flwr.experiments.__main__.main",
                        lambda argv: seen.append(argv) or 0)
    assert cli.main(["experiment", "robustness", "--size", "tiny"]) == 0
    assert seen == [["robustness", "--size", "tiny"]]
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err
    assert cli.main([]) == 2 and cli.main(["--help"]) == 0
    assert "report" in capsys.readouterr().out
