"""StateStore: versioned atomic JSON state files; corrupt files are moved aside, never lost."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pfedma_flwr.persistence import (
    STATE_FILE_VERSION,
    STATE_FORMAT,
    StateCorruptError,
    StateDecodeError,
    StateStore,
    append_line,
    decode_state_document,
    read_jsonl_lines,
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
    ('{"format": "pfedma-client-state", "version": true, "payload": {}}', "version True"),
    ('{"format": "pfedma-client-state", "version": 1, "payload": [1]}', "payload is not"),
    ("[]", "not a 'pfedma-client-state'"),
    ("", "invalid JSON"),  # a truncated (empty) file
])
def test_corrupt_or_wrong_version_is_moved_aside_and_loads_fresh(tmp_path: Path, content,
                                                                 reason, caplog):
    st = StateStore(tmp_path)
    path = st.path("agent-p0")
    path.write_text(content, encoding="utf-8")
    assert st.load("agent-p0") is None  # a fresh state, not an error on every later message
    assert not path.exists()
    [(orig, backup)] = st.quarantined
    assert orig == path and backup.name.startswith("agent-p0.json.corrupt-")
    assert backup.read_text(encoding="utf-8") == content  # nothing lost
    [rec] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert reason in rec.getMessage() and str(backup) in rec.getMessage()
    assert st.load("agent-p0") is None and len(st.quarantined) == 1  # stays fresh


def _envelope(payload_text: str) -> bytes:
    return ('{"format": "pfedma-client-state", "version": 1, "saved_at": 1.0, "payload": '
            + payload_text + "}").encode("utf-8")


@pytest.mark.parametrize("raw, reason", [
    # invalid UTF-8 inside a string (a torn multi-byte write, a bit flip)
    (_envelope('{"experience": ["ok"]}').replace(b"ok", b"o\xff\xfek"), "invalid UTF-8"),
    # 5,000 digits: json.loads itself raises ValueError (int-str limit) without the hook
    (_envelope('{"rounds": ' + "9" * 5000 + "}"), "integer out of range (5000 digits"),
    # 400 digits parse as an int but overflow float() wherever the code converts it
    (_envelope('{"rounds": ' + "9" * 400 + "}"), "integer out of range (400 digits"),
    # one past uint64 (20 digits, same length as the largest allowed)
    (_envelope('{"rounds": 18446744073709551616}'), "integer out of range (20 digits"),
    (_envelope('{"rounds": -18446744073709551616}'), "integer out of range (20 digits"),
    (_envelope('{"h": 1e999}'), "number out of range: 1e999"),
    (_envelope('{"h": NaN}'), "NaN is not a JSON number"),
    (_envelope('{"h": -Infinity}'), "-Infinity is not a JSON number"),
    # a lone surrogate parses, but the next save could not encode it
    (_envelope('{"experience": ["\\ud800"]}'), "lone surrogate"),
    (_envelope("[" * 100_000 + "]" * 100_000), "invalid JSON"),  # RecursionError
])
def test_every_undecodable_form_is_quarantined(tmp_path: Path, raw: bytes, reason: str,
                                               caplog):
    st = StateStore(tmp_path)
    path = st.path("agent-p0")
    path.write_bytes(raw)
    assert st.load("agent-p0") is None
    [(_, backup)] = st.quarantined
    assert backup.read_bytes() == raw and not path.exists()
    assert reason in caplog.text
    # the client goes on: the next save and load work on the same key
    st.save("agent-p0", {"rounds": 1})
    assert st.load("agent-p0") == {"rounds": 1}


def test_largest_allowed_integers_load(tmp_path: Path):
    # the bounds are exclusive at 2**64: uint64 node ids still load
    st = StateStore(tmp_path)
    st.path("k").write_bytes(_envelope('{"a": 18446744073709551615, "b": -18446744073709551615}'))
    assert st.load("k") == {"a": 2**64 - 1, "b": -(2**64 - 1)}
    assert st.quarantined == []


class _Typed:
    """A caller's reader that checks types the way AgentState.from_dict does (or fails)."""

    @staticmethod
    def decode(d: dict) -> tuple[int, list[str]]:
        rounds = d["rounds"]                       # KeyError when missing
        exp = [x.strip() for x in d["experience"]]  # AttributeError/TypeError on wrong types
        if rounds < 0:                              # TypeError for a string
            raise ValueError("rounds must be >= 0")
        return rounds, exp


@pytest.mark.parametrize("payload, exc", [
    ('{"experience": []}', "KeyError"),
    ('{"rounds": "3", "experience": []}', "TypeError"),
    ('{"rounds": 1, "experience": [1, 2]}', "AttributeError"),
    ('{"rounds": 1, "experience": 5}', "TypeError"),
    ('{"rounds": -1, "experience": []}', "ValueError: rounds must be >= 0"),
])
def test_load_as_quarantines_whatever_the_typed_reader_raises(tmp_path: Path, payload, exc,
                                                              caplog):
    st = StateStore(tmp_path)
    st.path("k").write_bytes(_envelope(payload))
    assert st.load_as("k", _Typed.decode) is None
    assert len(st.quarantined) == 1 and not st.path("k").exists()
    assert f"payload rejected by _Typed.decode: {exc}" in caplog.text


def test_load_as_returns_the_decoded_value(tmp_path: Path):
    st = StateStore(tmp_path)
    st.save("k", {"rounds": 2, "experience": [" a "]})
    assert st.load_as("k", _Typed.decode) == (2, ["a"])
    assert st.load_as("missing", _Typed.decode) is None and st.quarantined == []


def test_two_corruptions_in_the_same_second_keep_both_backups(tmp_path: Path):
    st = StateStore(tmp_path)
    for text in ("bad1", "bad2"):
        st.path("k").write_text(text)
        assert st.load("k") is None
    backups = [b for _, b in st.quarantined]
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
            got = st.load("shared")
            if st.quarantined:  # a torn read would have moved the file aside
                errors.append(RuntimeError(f"torn read: {st.quarantined}"))
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


# ----------------------------------------------------------------------------- permissions


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_state_dir_0700_and_files_0600_even_when_created_open(tmp_path: Path):
    d = tmp_path / "state"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)  # as a deployment script may leave it (umask 022)
    st = StateStore(d)
    path = st.save("agent-p0", {"rounds": 1})
    assert _mode(d) == 0o700 and _mode(path) == 0o600
    path.write_text("bad")
    st.load("agent-p0")
    [(_, backup)] = st.quarantined
    assert _mode(backup) == 0o600  # a write_text'd file keeps its mode: still owner-only
    st.save("agent-p0", {"rounds": 2})
    assert _mode(st.path("agent-p0")) == 0o600


def test_new_state_dir_is_0700(tmp_path: Path):
    st = StateStore(tmp_path / "a" / "b")
    st.save("k", {})
    assert _mode(tmp_path / "a" / "b") == 0o700


# ----------------------------------------------------------------------------- JSONL files


def test_append_line_creates_0600_and_tightens_an_old_0644_file(tmp_path: Path):
    p = tmp_path / "log.jsonl"
    append_line(p, '{"a": 1}')
    assert _mode(p) == 0o600 and p.read_text() == '{"a": 1}\n'
    old = tmp_path / "old.jsonl"
    old.write_text('{"a": 1}\n')
    os.chmod(old, 0o644)
    append_line(old, '{"a": 2}\n')  # a trailing newline is not doubled
    assert _mode(old) == 0o600 and old.read_text() == '{"a": 1}\n{"a": 2}\n'


def test_append_after_a_torn_tail_cuts_the_fragment_off(tmp_path: Path, caplog):
    p = tmp_path / "log.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2, "b": "\xc3')  # crash inside a 2-byte character
    append_line(p, '{"a": 3}')
    assert p.read_bytes() == b'{"a": 1}\n{"a": 3}\n'
    assert "dropped a torn last line (16 bytes)" in caplog.text
    q = tmp_path / "only.jsonl"
    q.write_bytes(b'{"torn')  # no complete line at all
    append_line(q, '{"a": 1}')
    assert q.read_text() == '{"a": 1}\n'


def test_append_finds_the_last_newline_beyond_one_chunk(tmp_path: Path):
    p = tmp_path / "big.jsonl"
    p.write_bytes(b'{"a": 1}\n' + b"x" * 200_000)  # the fragment spans several 64 kB reads
    append_line(p, '{"a": 2}')
    assert p.read_bytes() == b'{"a": 1}\n{"a": 2}\n'


def test_read_jsonl_lines_drops_only_a_torn_last_line(tmp_path: Path, caplog):
    p = tmp_path / "r.jsonl"
    assert read_jsonl_lines(p) == []  # missing file: nothing
    p.write_bytes(b'{"round": 1}\n\n{"round": 2}\n{"round": 3, "q')
    assert [rec for _, rec in read_jsonl_lines(p)] == [{"round": 1}, {"round": 2}]
    assert "dropped a torn last line 4" in caplog.text
    p.write_bytes(b'{"round": 1}\n{"round": 2, "x": "\xe2\x82')  # torn inside UTF-8
    assert [rec for _, rec in read_jsonl_lines(p)] == [{"round": 1}]
    p.write_bytes(b'{"round": 1}\ngarbage\n{"round": 3}\n')
    with pytest.raises(ValueError, match=r"r.jsonl: line 2 is not valid JSON"):
        read_jsonl_lines(p)
    p.write_bytes(b'{"round": 1}\n\xff\xfe\n{"round": 3}\n')  # bad bytes mid-file
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl_lines(p)


def test_a_file_quarantined_concurrently_is_not_an_error(tmp_path: Path, monkeypatch):
    st = StateStore(tmp_path)
    st.path("k").write_text("bad")
    real = os.replace

    def racing(src, dst):  # another process moves the file between our read and our move
        Path(src).unlink()
        return real(src, dst)

    monkeypatch.setattr(os, "replace", racing)
    assert st.load("k") is None and st.quarantined == []


# ----------------------------------------------------------------------------- fuzz (the class)

_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                              max_size=4),
    max_leaves=20)


def _mutations() -> st.SearchStrategy[bytes]:
    """Valid state files with bytes flipped, cut or spliced, plus arbitrary bytes."""
    def doc(payload: object) -> bytes:
        return json.dumps({"format": STATE_FORMAT, "version": 1, "payload": payload},
                          ensure_ascii=False).encode("utf-8", "surrogatepass")

    base = st.builds(doc, st.dictionaries(st.text(max_size=8), _JSONISH, max_size=4))
    cut = st.tuples(base, st.integers(0, 400)).map(lambda t: t[0][:t[1]])
    flipped = st.tuples(base, st.integers(0, 400), st.integers(0, 255)).map(
        lambda t: t[0][:t[1]] + bytes([t[2]]) + t[0][t[1] + 1:])
    spliced = st.tuples(base, st.sampled_from([b"9" * 5000, b"1e999", b"NaN", b'"\\ud800"',
                                               b"[" * 3000, b"\xff", b"-" * 30]),
                        st.integers(0, 400)).map(lambda t: t[0][:t[2]] + t[1] + t[0][t[2]:])
    return base | cut | flipped | spliced | st.binary(max_size=300)


@settings(max_examples=300, deadline=None, database=None)
@given(raw=_mutations())
def test_fuzz_decode_state_document_returns_a_payload_or_a_decode_error(raw: bytes):
    try:
        payload = decode_state_document(raw)
    except StateDecodeError:
        return
    assert isinstance(payload, dict)
    # whatever decodes can be saved again (no lone surrogate, no NaN, ints in range)
    json.dumps(payload, allow_nan=False, ensure_ascii=False).encode("utf-8")


@settings(max_examples=150, deadline=None, database=None)
@given(raw=_mutations())
def test_fuzz_store_load_never_raises_and_never_loses_bytes(raw: bytes, tmp_path_factory):
    d = tmp_path_factory.mktemp("s")
    store = StateStore(d)
    store.path("k").write_bytes(raw)
    got = store.load("k")
    if got is None:  # quarantined: the bytes are kept aside, the next load is fresh
        [(_, backup)] = store.quarantined
        assert backup.read_bytes() == raw and store.load("k") is None
    else:
        assert store.path("k").read_bytes() == raw


@settings(max_examples=300, deadline=None, database=None)
@given(lines=st.lists(st.binary(max_size=40) | st.builds(
    lambda o: json.dumps(o).encode(), _JSONISH), max_size=6), tail=st.binary(max_size=20))
def test_fuzz_read_jsonl_lines_raises_only_valueerror(lines, tail, tmp_path_factory):
    p = tmp_path_factory.mktemp("j") / "r.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n" + tail)
    try:
        out = read_jsonl_lines(p)
    except ValueError as e:
        assert "is not valid JSON" in str(e)
        return
    assert all(json.loads(ln) == rec for ln, rec in out)
