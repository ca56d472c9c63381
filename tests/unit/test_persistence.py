"""StateStore: versioned atomic JSON state files; corrupt files are moved aside, never lost."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from pfedma_flwr.persistence import (
    STATE_FILE_VERSION,
    STATE_FORMAT,
    StateCorruptError,
    StateStore,
    validate_key,
)


def test_round_trip_and_envelope(tmp_path: Path):
    st = StateStore(tmp_path / "s")
    assert st.load("agent-p0") is None  # nothing saved yet: not an error
    payload = {"version": 1, "rules": [{"text": "ünïcode"}], "rounds": 3}
    path = st.save("agent-p0", payload)
    assert path == tmp_path / "s" / "agent-p0.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["format"] == STATE_FORMAT and doc["version"] == STATE_FILE_VERSION == 1
    assert doc["payload"] == payload
    assert st.load("agent-p0") == payload
    assert st.keys() == ["agent-p0"]


def test_restart_new_store_object_reads_old_state(tmp_path: Path):
    StateStore(tmp_path).save("agent-p2", {"rounds": 7, "experience": ["x"]})
    # a new process = a new StateStore over the same directory
    assert StateStore(str(tmp_path)).load("agent-p2") == {"rounds": 7, "experience": ["x"]}


def test_overwrite_keeps_only_latest(tmp_path: Path):
    st = StateStore(tmp_path)
    for k in range(3):
        st.save("a", {"k": k})
    assert st.load("a") == {"k": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]  # no temp files left


@pytest.mark.parametrize("content, reason", [
    ("{not json", "invalid JSON"),
    ('{"format": "other", "version": 1, "payload": {}}', "not a 'pfedma-client-state'"),
    ('{"format": "pfedma-client-state", "version": 2, "payload": {}}', "unsupported version 2"),
    ('{"format": "pfedma-client-state", "payload": {}}', "unsupported version None"),
    ('{"format": "pfedma-client-state", "version": 1, "payload": [1]}', "payload is not"),
    ("[]", "not a 'pfedma-client-state'"),
    ("", "invalid JSON"),  # a truncated (empty) file
])
def test_corrupt_or_wrong_version_is_moved_aside_with_clear_error(tmp_path: Path, content,
                                                                   reason):
    st = StateStore(tmp_path)
    path = st.path("agent-p0")
    path.write_text(content, encoding="utf-8")
    with pytest.raises(StateCorruptError) as ei:
        st.load("agent-p0")
    err = ei.value
    assert reason in err.reason
    assert err.path == path and str(path) in str(err) and str(err.backup) in str(err)
    assert not path.exists()
    assert err.backup.read_text(encoding="utf-8") == content  # nothing lost
    assert err.backup.name.startswith("agent-p0.json.corrupt-")
    assert st.load("agent-p0") is None  # the next load starts fresh


def test_two_corruptions_in_the_same_second_keep_both_backups(tmp_path: Path):
    st = StateStore(tmp_path)
    backups = []
    for text in ("bad1", "bad2"):
        st.path("k").write_text(text)
        with pytest.raises(StateCorruptError) as ei:
            st.load("k")
        backups.append(ei.value.backup)
    assert backups[0] != backups[1]
    assert {b.read_text() for b in backups} == {"bad1", "bad2"}


def test_quarantine_by_key_for_payload_validation_failures(tmp_path: Path):
    st = StateStore(tmp_path)
    st.save("k", {"version": 99})
    with pytest.raises(StateCorruptError, match="agent state payload"):
        st.quarantine("k", "agent state payload: expected version 1")
    assert not st.path("k").exists() and st.load("k") is None


@pytest.mark.parametrize("key", ["", ".hidden", "../x", "a/b", "a\\b", "a..b", "-x", "_x",
                                 "x" * 129, "a b", "ä"])
def test_invalid_keys_rejected(tmp_path: Path, key):
    with pytest.raises(ValueError, match="invalid state key"):
        StateStore(tmp_path).save(key, {})
    with pytest.raises(ValueError):
        validate_key(key)


@pytest.mark.parametrize("key", ["a", "agent-p0", "A.b_c-9", "x" * 128])
def test_valid_keys(key):
    assert validate_key(key) == key


def test_unserializable_payload_leaves_no_file(tmp_path: Path):
    st = StateStore(tmp_path)
    with pytest.raises(ValueError):  # NaN is not JSON (allow_nan=False)
        st.save("k", {"x": float("nan")})
    with pytest.raises(TypeError):
        st.save("k", {"x": object()})
    with pytest.raises(TypeError, match="must be a dict"):
        st.save("k", [1, 2])  # type: ignore[arg-type]
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_failed_replace_cleans_temp_file(tmp_path: Path, monkeypatch):
    st = StateStore(tmp_path)
    st.save("k", {"v": 1})

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        st.save("k", {"v": 2})
    monkeypatch.undo()
    assert st.load("k") == {"v": 1}  # old state intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json"]


def test_concurrent_writers_never_produce_a_torn_file(tmp_path: Path):
    st = StateStore(tmp_path)
    big = "y" * 200_000  # large enough that a non-atomic write could be observed half-done
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for k in range(15):
                st.save("shared", {"writer": n, "k": k, "blob": big})
        except BaseException as e:  # noqa: BLE001 - surfaced via the assertion below
            errors.append(e)

    def reader() -> None:
        for _ in range(60):
            try:
                got = st.load("shared")
            except StateCorruptError as e:  # a torn read would land here
                errors.append(e)
                return
            assert got is None or got["blob"] == big

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=reader))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    final = st.load("shared")
    # the last write of some writer wins
    assert final is not None and final["k"] == 14 and final["blob"] == big
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json"]  # temp files cleaned


def test_state_dir_must_not_be_empty():
    with pytest.raises(ValueError, match="non-empty"):
        StateStore("  ")
