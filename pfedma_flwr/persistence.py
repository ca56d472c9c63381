"""Node-local persistent client state: one versioned JSON file per key, written atomically.

In deployment a SuperNode spawns a fresh ClientApp process per message and ``context.state``
lives only as long as one run, so a client's private state (``Ω_local`` with its literals, the
counters and ``X_i``) would be lost on a SuperNode restart or a new run. :class:`StateStore` keeps
it in the node's ``state-dir`` instead. A file that cannot be read back is never dropped
silently and never fails every later message: it is moved aside to
``<name>.corrupt-<timestamp>``, logged with both paths, and the client starts fresh.
State directories are 0700 and state files 0600 (they hold private rules and experience).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")
STATE_FORMAT = "pfedma-client-state"
STATE_FILE_VERSION = 1
# Counters and ids (Flower node ids are uint64) fit in 64 bits; a larger integer is damage or
# an attack, and one of thousands of digits raises ValueError inside json.loads (int-str limit).
MAX_ABS_INT = 2**64
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# Keys become file names: keep them to a safe, portable alphabet (no separators, no dot-files).
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class StateDecodeError(ValueError):
    """The bytes of a state file are not a valid state document (the reason says why)."""


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
        #: ``(original, backup)`` of every file this store moved aside
        self.quarantined: list[tuple[Path, Path]] = []

    def path(self, key: str) -> Path:
        """The file that holds ``key``."""
        return self.state_dir / f"{validate_key(key)}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        """The payload saved under ``key``, or ``None`` if nothing (readable) was saved.

        A file that cannot be decoded (invalid UTF-8, bad JSON, an integer beyond
        ±:data:`MAX_ABS_INT`, a non-finite number, a lone surrogate, another
        format/version or a non-object payload) is moved aside to
        ``<name>.corrupt-<timestamp>``, logged at ERROR with both paths and recorded in
        :attr:`quarantined`; the caller then starts from a fresh state instead of failing every
        later message on the same file.
        """
        return self.load_as(key, _identity)

    def load_as(self, key: str, decode: Callable[[dict[str, Any]], T]) -> T | None:
        """Like :meth:`load`, then ``decode(payload)``; any exception of ``decode`` quarantines.

        ``decode`` is the caller's typed reader (e.g. ``AgentState.from_dict``): whatever it
        raises on a well-formed but wrong payload (``ValueError``, ``TypeError``, ``KeyError``,
        ``OverflowError`` ...) moves the file aside like a decode error, and ``None`` is returned.
        """
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            payload = decode_state_document(raw)
            return decode(payload)
        except StateDecodeError as e:
            self._move_aside(path, str(e))
        except Exception as e:  # noqa: BLE001 - any failure of the caller's reader quarantines
            self._move_aside(path, f"payload rejected by {_name(decode)}: "
                                   f"{type(e).__name__}: {str(e)[:200]}")
        return None

    def save(self, key: str, obj: dict[str, Any]) -> Path:
        """Atomically write ``obj`` under ``key``; return the file path."""
        path = self.path(key)
        if not isinstance(obj, dict):
            raise TypeError(f"state payload must be a dict, got {type(obj).__name__}")
        doc = {"format": STATE_FORMAT, "version": STATE_FILE_VERSION,
               "saved_at": round(time.time(), 3), "payload": obj}
        # Serialize before touching the disk so an unserializable payload leaves no temp file.
        text = json.dumps(doc, allow_nan=False, ensure_ascii=False, sort_keys=True)
        private_dir(self.state_dir)
        write_text_atomic(path, text)
        return path

    def keys(self) -> list[str]:
        """Keys with a saved state file (sorted)."""
        if not self.state_dir.is_dir():
            return []
        return sorted(p.name[:-5] for p in self.state_dir.glob("*.json")
                      if _KEY_RE.fullmatch(p.name[:-5]))

    def quarantine(self, key: str, reason: str) -> NoReturn:
        """Move ``key``'s file aside and raise :class:`StateCorruptError`.

        For callers whose own validation of a well-formed payload fails (prefer
        :meth:`load_as`, which quarantines and returns ``None`` instead of raising).
        """
        path = self.path(key)
        raise StateCorruptError(path, self._move_aside(path, reason), reason)

    def _move_aside(self, path: Path, reason: str) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        backup = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while backup.exists():  # two failures within a second must not overwrite a backup
            backup = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
            n += 1
        try:
            os.replace(path, backup)
        except FileNotFoundError:  # another process of this node quarantined it first
            logger.warning("client state %s unreadable (%s); already moved aside", path, reason)
            return backup
        self.quarantined.append((path, backup))
        logger.error("client state %s unreadable (%s); moved to %s, starting from a fresh "
                     "state", path, reason, backup)
        return backup


def decode_state_document(raw: bytes) -> dict[str, Any]:
    """The payload of a state file's bytes; any defect raises :class:`StateDecodeError`.

    Strict UTF-8, JSON without NaN/Infinity, integers within ±:data:`MAX_ABS_INT`,
    finite floats, no lone surrogates (they would fail the next save), then the
    ``format``/``version`` envelope and an object payload.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StateDecodeError(f"invalid UTF-8 at byte {e.start}") from None
    try:
        doc = json.loads(text, parse_int=_bounded_int, parse_float=_finite_float,
                         parse_constant=_no_constant)
    except StateDecodeError:
        raise
    except (ValueError, RecursionError, MemoryError) as e:  # JSONDecodeError is a ValueError
        raise StateDecodeError(f"invalid JSON: {str(e)[:200]}") from None
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise StateDecodeError("a string holds a lone surrogate (not encodable)") from None
    except RecursionError:
        raise StateDecodeError("nested too deeply") from None
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
        raise StateDecodeError(f"not a {STATE_FORMAT!r} document")
    version = doc.get("version")
    if type(version) is not int or version != STATE_FILE_VERSION:
        raise StateDecodeError(f"unsupported version {version!r} "
                               f"(this code reads version {STATE_FILE_VERSION})")
    payload = doc.get("payload")
    if not isinstance(payload, dict):
        raise StateDecodeError("payload is not a JSON object")
    return payload


def _bounded_int(s: str) -> int:
    # The length test comes first: int() of a 5,000-digit string is itself the failure.
    if len(s.lstrip("-")) > len(str(MAX_ABS_INT)) or abs(int(s)) >= MAX_ABS_INT:
        raise StateDecodeError(f"integer out of range ({len(s.lstrip('-'))} digits; "
                               f"|n| must be < 2**64)")
    return int(s)


def _finite_float(s: str) -> float:
    x = float(s)
    if not math.isfinite(x):
        raise StateDecodeError(f"number out of range: {s[:40]}")
    return x


def _no_constant(s: str) -> Any:
    raise StateDecodeError(f"{s} is not a JSON number")


def _identity(payload: dict[str, Any]) -> dict[str, Any]:
    return payload


def _name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


def private_dir(directory: Path) -> Path:
    """Create ``directory`` (and parents) and make it 0700: it holds private files.

    An existing directory is tightened too (a deployment script may have created it 0755);
    where that is not allowed (not the owner), a warning says so instead of failing the run.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    try:
        if stat.S_IMODE(directory.stat().st_mode) != PRIVATE_DIR_MODE:
            os.chmod(directory, PRIVATE_DIR_MODE)
    except OSError as e:
        logger.warning("cannot make %s private (0700): %s", directory, e)
    return directory


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old file or the new one.

    The one atomic writer (state files, ``checkpoint.json``, ``summary.json``, reports): the
    text goes to a temp file in the same directory, is flushed and fsynced, ``os.replace``-d
    over the target, and the directory is fsynced so the rename itself survives a power loss.
    The file is 0600 (``mkstemp`` creates it so and the rename keeps the mode); a missing
    directory is created 0700, an existing one keeps its mode.
    """
    if not path.parent.is_dir():
        private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def append_line(path: Path, line: str) -> None:
    """Append one line (a newline added) to a 0600 file, dropping a torn last line first.

    A crash mid-append leaves a last line without its newline; appending after it would glue
    the next record onto the fragment and turn it into damage in the middle of the file. So
    the fragment is cut off (and logged) before the new line goes in: only the last line of a
    file written here can ever be torn. An older 0644 file is tightened to 0600.
    """
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != PRIVATE_FILE_MODE:
            os.fchmod(fd, PRIVATE_FILE_MODE)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            cut = _end_of_last_line(fd, size)
            logger.warning("%s: dropped a torn last line (%d bytes) before appending", path,
                           size - cut)
            os.ftruncate(fd, cut)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _end_of_last_line(fd: int, size: int, chunk: int = 65536) -> int:
    """Offset just after the last newline before ``size`` (0 if there is none)."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        k = os.pread(fd, end - start, start).rfind(b"\n")
        if k >= 0:
            return start + k + 1
        end = start
    return 0


def read_jsonl_lines(path: Path) -> list[tuple[str, Any]]:
    """``(line, record)`` for each non-blank line of a ``.jsonl`` file (none if it is missing).

    A last line that does not decode (UTF-8, JSON) was torn by a crash mid-write: it is
    dropped and logged. A bad line anywhere else is damage this code did not cause
    (:func:`append_line` never leaves one), so it raises ``ValueError`` naming the file and
    line instead of being skipped.
    """
    if not path.exists():
        return []
    numbered = [(k + 1, ln) for k, ln in enumerate(path.read_bytes().split(b"\n"))
                if ln.strip()]
    out: list[tuple[str, Any]] = []
    for pos, (lineno, raw) in enumerate(numbered):
        try:
            # Decoded per line: a write torn inside a multi-byte character is a torn line.
            ln = raw.decode("utf-8")
            out.append((ln, json.loads(ln)))
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            if pos == len(numbered) - 1:
                logger.warning("%s: dropped a torn last line %d (%d bytes): %s", path,
                               lineno, len(raw), str(e)[:100])
                break
            raise ValueError(f"{path}: line {lineno} is not valid JSON ({str(e)[:100]}); "
                             "only a torn last line is repaired automatically") from e
    return out


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
