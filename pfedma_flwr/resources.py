"""Where the app's files are: ``conf/``, ``data/`` and the Flower app dir, in a clone or a wheel.

A clone (or an editable install, or the app bundle Flower unpacks) has ``conf/`` and ``data/``
beside the package. A wheel ships them inside the package as ``pfedma_flwr/_conf`` and
``pfedma_flwr/_data`` (``[tool.setuptools.package-dir]`` in ``pyproject.toml``), and ships a
minimal Flower app dir, ``pfedma_flwr/_app`` (its ``pyproject.toml`` only): with runtime
dependency installation off, Flower imports the app's modules from the installed package.
The packaged copies are looked at first, so an unrelated ``site-packages/conf`` is never used.

Inside a Flower app bundle built from a clone (plain ``flwr run .``), the package is the
bundle's copy and the bundle carries no ``.gz`` data (Flower's FAB takes only code, text and
config files): the data is then the installed distribution's (a wheel's ``_data``, or the
source tree of an editable install), so ``flwr run .`` needs no absolute ``data-dir``.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from urllib.parse import unquote, urlsplit

PACKAGE_DIR = Path(__file__).resolve().parent
_ROOT = PACKAGE_DIR.parent


def _first_dir(*candidates: Path) -> Path:
    """The first candidate that is a directory, else the last one (errors then name it)."""
    for c in candidates:
        if c.is_dir():
            return c
    return candidates[-1]


def conf_dir() -> Path:
    """The directory of the YAML presets (``pfedma.yaml``, ``tiny.yaml``, ``experiments/``)."""
    return _first_dir(PACKAGE_DIR / "_conf", _ROOT / "conf")


def installed_dir(name: str) -> Path | None:
    """``conf`` or ``data`` of the installed ``pfedma-flwr`` (wheel or editable), if any."""
    try:
        dist = importlib.metadata.distribution("pfedma-flwr")
    except importlib.metadata.PackageNotFoundError:
        return None
    packaged = Path(str(dist.locate_file(f"pfedma_flwr/_{name}")))
    if packaged.is_dir():
        return packaged
    try:  # an editable install records the source tree it points at
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    except ValueError:
        return None
    parts = urlsplit(str(url))
    source = Path(unquote(parts.path)) / name if parts.scheme == "file" else None
    return source if source is not None and source.is_dir() else None


def _has_data(path: Path) -> bool:
    # an app bundle keeps data/SOURCES.md but none of the .gz files beside it
    return path.is_dir() and next(path.glob("*/*.gz"), None) is not None


def data_dir() -> Path:
    """The benchmark data directory shipped with the app (``gsm8k/``, ``medqa/``, ...)."""
    here = _first_dir(PACKAGE_DIR / "_data", _ROOT / "data")
    if _has_data(here):
        return here
    there = installed_dir("data")
    return there if there is not None and _has_data(there) else here


def is_source_tree() -> bool:
    """Whether the package runs from a clone: a Flower app ``pyproject.toml`` beside it."""
    project = _ROOT / "pyproject.toml"
    try:
        return project.is_file() and "[tool.flwr.app]" in project.read_text(encoding="utf-8")
    except OSError:
        return False


def app_dir() -> Path:
    """The directory ``flwr run`` is given: the clone's root, else the packaged ``_app``.

    From a clone the app bundle carries the source itself (DESIGN §2); from a wheel it carries
    only ``pyproject.toml`` and the ServerApp/ClientApp import the installed package.
    """
    return _ROOT if is_source_tree() else PACKAGE_DIR / "_app"
