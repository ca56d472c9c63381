"""Node-local persistent client state: one versioned JSON file per key, written atomically.

In deployment a SuperNode spawns a fresh ClientApp process per message and ``context.state``
lives only as long as one run, so a client's private state (``Ω_local`` with its literals, the
counters and ``X_i``) would be lost on a SuperNode restart or a new run. :class:`StateStore` keeps
it in the node's ``state-dir`` instead. A file that cannot be read back is never dropped
silently: it is moved aside to ``<name>.corrupt-<timestamp>`` and :class:`StateCorruptError`
names both paths.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

logger = logging.getLogger(__name__)

STATE_FORMAT = "pfedma-client-state"
STATE_FILE_VERSION = 1
# Keys become file names: keep them to a safe, portable alphabet (no separators, no dot-files).
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class StateCorruptError(RuntimeError):
    """A state file could not be read back; it was moved to ``backup`` (nothing is deleted)."""

    def __init__(self, path: Path, backup: Path, reason: str) -> None:
        super().__init__(
            f"client state file {path} is unreadable ({reason}); it was moved to {backup}. "
            "Inspect or restore it, or delete the backup to start this client from scratch."
        )
        self.path = path
        self.backup = backup
        self.reason = reason


def validate_key(key: str) -> str:
    """Return ``key`` if it is a safe file stem, else raise ``ValueError``.

    A key is 1–128 characters of ``[A-Za-z0-9_.-]``, not starting with ``.``, ``-`` or ``_``,
    so it can never escape the state directory or hide as a dot-file.
    """
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key) or ".." in key:
        raise ValueError(
            f"invalid state key {key!r}: use 1-128 characters of [A-Za-z0-9_.-] starting with "
            "a letter or digit, without '..'"
        )
    return key


class StateStore:
    """Versioned JSON documents under a directory, one file ``<key>.json`` per key.

    Parameters
    ----------
    state_dir : str | Path
        Directory for the state files (created on first save, mode 0700 where supported,
        because the files hold the client's private rules and experience).

    Notes
    -----
    File layout: ``{"format": "pfedma-client-state", "version": 1, "saved_at": <unix s>,
    "payload": <obj>}``. Writes go to a temp file in the same directory, are fsynced and then
    ``os.replace``-d over the target, so a crash leaves either the old or the new file and
    concurrent writers never interleave bytes (last writer wins).
    """

    def __init__(self, state_dir: str | Path) -> None:
        if not str(state_dir).strip():
            raise ValueError("state_dir must be a non-empty path")
        self.state_dir = Path(state_dir).expanduser()

    def path(self, key: str) -> Path:
        """The file that holds ``key``."""
        return self.state_dir / f"{validate_key(key)}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        """The payload saved under ``key``, or ``None`` if nothing was saved yet.

        Raises
        ------
        StateCorruptError
            If the file is not valid JSON, has another format/version or a non-object payload;
            the file has been moved aside when this is raised.
        """
        path = self.path(key)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as e:
            self._quarantine(path, f"invalid JSON: {e}")
        if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
            self._quarantine(path, f"not a {STATE_FORMAT!r} document")
        if doc.get("version") != STATE_FILE_VERSION:
            self._quarantine(path, f"unsupported version {doc.get('version')!r} "
                                   f"(this code reads version {STATE_FILE_VERSION})")
        payload = doc.get("payload")
        if not isinstance(payload, dict):
            self._quarantine(path, "payload is not a JSON object")
        return payload

    def save(self, key: str, obj: dict[str, Any]) -> Path:
        """Atomically write ``obj`` under ``key``; return the file path."""
        path = self.path(key)
        if not isinstance(obj, dict):
            raise TypeError(f"state payload must be a dict, got {type(obj).__name__}")
        doc = {"format": STATE_FORMAT, "version": STATE_FILE_VERSION,
               "saved_at": round(time.time(), 3), "payload": obj}
        # Serialize before touching the disk so an unserializable payload leaves no temp file.
        text = json.dumps(doc, allow_nan=False, ensure_ascii=False, sort_keys=True)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(self.state_dir)
        return path

    def keys(self) -> list[str]:
        """Keys with a saved state file (sorted)."""
        if not self.state_dir.is_dir():
            return []
        return sorted(p.name[:-5] for p in self.state_dir.glob("*.json")
                      if _KEY_RE.fullmatch(p.name[:-5]))

    def quarantine(self, key: str, reason: str) -> NoReturn:
        """Move ``key``'s file aside and raise :class:`StateCorruptError`.

        For callers whose own validation of a well-formed payload fails.
        """
        self._quarantine(self.path(key), reason)

    def _quarantine(self, path: Path, reason: str) -> NoReturn:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        backup = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while backup.exists():  # two failures within a second must not overwrite a backup
            backup = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
            n += 1
        os.replace(path, backup)
        logger.error("client state %s unreadable (%s); moved to %s", path, reason, backup)
        raise StateCorruptError(path, backup, reason)


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the data file itself is synced
    finally:
        os.close(fd)
