"""Provenance of a run (``run_info.json``): versions, commit, platform, model and its digest.

Written by the launcher (command line, timestamps, exit code) and the ServerApp (seed, model,
Flower run id); :func:`update_run_info` merges what each writer knows.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from pfedma_flwr import __version__
from pfedma_flwr.agents.backends.embedded import EMBEDDED_MODELS, file_sha256
from pfedma_flwr.resources import PACKAGE_DIR, is_source_tree
from pfedma_flwr.server.results import write_json_atomic

RUN_INFO = "run_info.json"

#: distributions whose versions decide what a run computes
VERSIONED = (
    "pfedma-flwr",
    "flwr",
    "torch",
    "transformers",
    "sentence-transformers",
    "llama_cpp_python",
    "openai",
    "numpy",
    "presidio-analyzer",
)


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def package_versions() -> dict[str, str]:
    """Installed versions of :data:`VERSIONED` (``"missing"`` where not installed)."""
    out = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def git_commit(root: Path | None = None) -> str | None:
    """The source tree's commit (``+dirty`` with uncommitted changes), ``None`` outside a clone."""
    root = root or PACKAGE_DIR.parent
    if root == PACKAGE_DIR.parent and not is_source_tree():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "-uno"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def model_info(backend: Any) -> dict[str, Any]:
    """What the agents' model was: the embedded file and its sha256, else backend and model."""
    name, model = str(getattr(backend, "name", "")), str(getattr(backend, "model", ""))
    info: dict[str, Any] = {"backend": name, "model": model}
    if name == "embedded":
        spec = EMBEDDED_MODELS.get(model)
        if spec is not None:
            # the digest the assembled file is checked against; where none is recorded
            # (smollm2) the installed file's own, when it is small enough to hash in a moment
            info.update(file=spec.filename, sha256=spec.sha256 or _small_file_sha256(model))
    elif name == "transformers" and Path(model).expanduser().is_file():
        info.update(file=Path(model).name, sha256=file_sha256(Path(model).expanduser()))
    if getattr(backend, "base_url", ""):
        from pfedma_flwr.agents.backends.openai_backend import _safe_url

        info["base_url"] = _safe_url(str(backend.base_url))
    return info


def update_run_info(path: Path | str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``fields`` into ``<path>/run_info.json``.

    A ``None`` value (this writer does not know, e.g. the commit inside the app bundle) keeps
    a value another writer recorded, and is written only where there is none.
    """
    target = Path(path) / RUN_INFO
    current = _read_json(target) if target.exists() else {}
    current.update({k: v for k, v in fields.items() if v is not None or k not in current})
    write_json_atomic(target, current)
    return current


def base_run_info(cfg: Any = None) -> dict[str, Any]:
    """Provenance every writer records: versions, commit, platform, and the config's seed/model."""
    info: dict[str, Any] = {
        "pfedma_version": __version__,
        "packages": package_versions(),
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host_cpus": os.cpu_count(),
    }
    if cfg is not None:
        info.update(seed=cfg.seed, model=model_info(cfg.agent.backend))
    return info


def _read_json(path: Path) -> dict[str, Any]:
    # a damaged run_info.json is replaced, not fatal: provenance must not fail a run
    try:
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _small_file_sha256(name: str, limit: int = 256 << 20) -> str | None:
    from pfedma_flwr.agents.backends.embedded import embedded_model_path

    try:
        path = embedded_model_path(name)
        return file_sha256(path) if path.stat().st_size <= limit else None
    except (OSError, ValueError):  # not installed here: the digest stays unknown
        return None
