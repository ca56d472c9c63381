"""Run outputs: failed answers counted per client and code, the run status, durable files.

Covers issue 13 items 7 and 8 below the strategy: reason codes, the failure tally and its
threshold (numbers derived by hand), ``summary.json`` never saying ``completed`` over its own
failure counts, 0600/0700 result files, a torn ``rounds.jsonl`` line on resume, a checkpoint
that does not decode, and the launcher's exit code and message for a failed-generation run.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pfedma_flwr.experiments import launch
from pfedma_flwr.protocol.schema import ProcessedResponse, StructuredResponse
from pfedma_flwr.server.query_state import EngineSettings
from pfedma_flwr.server.results import ResultsWriter
from pfedma_flwr.server.totals import (
    GENERATION_FAILED,
    MAX_CODES_PER_CLIENT,
    generation_summary,
    reason_code,
    run_status,
    with_answer_failures,
)
from tests.unit.launch_fakes import follow_finished_run

OK = StructuredResponse(final_answer="7")


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("error, code", [
    ("backend:connect refused by 127.0.0.1", "backend:connect"),   # the client's coded form
    ("backend:connect: detail", "backend:connect"),
    ("backend: connect: openai backend at ...", "backend:connect"),  # code nested after prefix
    ("backend: APIConnectionError: Connection error.", "backend"),  # no lowercase code inside
    ("parse:bad_json 'excerpt'", "parse:bad_json"),
    ("timeout: no reply within the round", "timeout"),              # strategy failure reasons
    ("error reply (code 0): <'agent crashed'>", "error"),
    ("malformed reply: schema:responses", "malformed"),
    ("duplicate reply", "duplicate"),
    ("", "unknown"),
    ("\u00e4\u00f6\u00fc", "unknown"),                           # nothing of the code alphabet
    ("x" * 5000, "x" * 48),                                     # a hostile error stays short
])
def test_reason_code(error, code):
    assert reason_code(error) == code


def test_answer_failures_by_client_and_code_by_hand():
    routed = {"q1": ["a", "b", "c"], "q2": ["a", "c"], "q3": ["b"]}
    got = {
        "q1": {"a": ProcessedResponse("q1", OK),
               "b": ProcessedResponse("q1", None, format_ok=False,
                                      error="backend:connect refused")},
        # q2: a replied but left q2 out -> missing; c's whole message failed
        "q3": {"b": ProcessedResponse("q3", None, refused=True)},  # a privacy refusal: not
    }                                                             # a failed generation
    failures = {"c": "timeout: no reply within the round"}
    before = {"failures": 3, "answers": 10, "answers_failed": 1,
              "failed_by_client": {"a": {"missing": 1}}}
    after = with_answer_failures(before, routed, got, failures)
    # 6 asked: q1 a/b/c, q2 a/c, q3 b; failed: q1 b (connect), q1 c + q2 c (timeout), q2 a
    assert after["answers"] == 10 + 6 and after["answers_failed"] == 1 + 4
    # not produced by the agent: q1 b (its own error) and the two timeouts; "missing" is a
    # reply that left a query out (a reply defect, like a malformed reply)
    assert after["generation_failed"] == 3
    assert after["failed_by_client"] == {"a": {"missing": 2}, "b": {"backend:connect": 1},
                                         "c": {"timeout": 2}}
    assert after["failures"] == 3  # the per-message count is the engine's, untouched
    assert before["failed_by_client"] == {"a": {"missing": 1}}  # input not mutated


def test_an_empty_error_without_response_is_no_response():
    after = with_answer_failures({}, {"q": ["a"]},
                                 {"q": {"a": ProcessedResponse("q", None, format_ok=False)}}, {})
    assert after["failed_by_client"] == {"a": {"no_response": 1}}
    assert after["generation_failed"] == 1


def test_seam_rejections_count_per_client_but_not_as_generation_failures():
    # the strategy's reasons for whole messages (strategies/pfedma.py)
    failures = {"a": "malformed reply: bad_json at reply", "b": "duplicate reply",
                "c": "error reply (code 0): <'agent crashed'>",
                "d": "timeout: no reply within the round", "e": "engine_error: x"}
    after = with_answer_failures({}, {"q": sorted(failures)}, {}, failures)
    assert after["failed_by_client"] == {"a": {"malformed": 1}, "b": {"duplicate": 1},
                                         "c": {"error": 1}, "d": {"timeout": 1},
                                         "e": {"engine_error": 1}}
    assert after["answers_failed"] == 5 and after["generation_failed"] == 2  # c and d


def test_a_client_cannot_grow_the_code_table():
    routed = {f"q{k}": ["evil"] for k in range(40)}
    got = {f"q{k}": {"evil": ProcessedResponse(f"q{k}", None, error=f"code{k} x")}
           for k in range(40)}
    per = with_answer_failures({}, routed, got, {})["failed_by_client"]["evil"]
    assert len(per) == MAX_CODES_PER_CLIENT + 1 and per["other"] == 40 - MAX_CODES_PER_CLIENT
    assert sum(per.values()) == 40


def test_generation_summary_and_threshold():
    totals = {"answers": 8, "answers_failed": 6, "generation_failed": 4,
              "failed_by_client": {"b": {"timeout": 1, "malformed": 2},
                                   "a": {"backend:connect": 2, "timeout": 1}}}
    gen = generation_summary(totals, 0.5)
    assert gen == {"answers": 8, "failed": 6, "failed_share": 0.75, "generation_failed": 4,
                   "generation_failed_share": 0.5, "max_failed_share": 0.5,
                   "failed_by_code": {"backend:connect": 2, "malformed": 2, "timeout": 2},
                   "failed_by_client": {"a": {"backend:connect": 2, "timeout": 1},
                                        "b": {"malformed": 2, "timeout": 1}}}
    # "most generations fail" is strictly more than the share of answers NOT PRODUCED: 4/8 is
    # not (the two malformed replies do not count), 5/8 is
    assert run_status({"generation": gen}) == "completed"
    five = generation_summary({**totals, "generation_failed": 5}, 0.5)
    assert run_status({"generation": five}) == GENERATION_FAILED == "failed:generation"
    assert run_status({"generation": generation_summary(totals, 0.49)}) == GENERATION_FAILED
    assert generation_summary({}, 0.5)["failed_share"] == 0.0  # nothing asked: not failed
    assert run_status({}) == "completed"  # a summary from before this block
    # queries finished, no agent asked (every selection refused or invalid): ACC 0 would
    # measure the routing, not the agents
    nothing = generation_summary({}, 0.5)
    assert run_status({"num_queries": 20, "generation": nothing}) == "failed:no_answers"
    assert run_status({"num_queries": 0, "generation": nothing}) == "completed"


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_threshold_must_be_a_share(share):
    with pytest.raises(ValueError, match="max_failed_share"):
        EngineSettings(max_failed_share=share)


# ----------------------------------------------------------------------------- results files


def test_summary_json_never_says_completed_over_its_own_counts(tmp_path: Path):
    w = ResultsWriter(tmp_path / "out")
    gen = generation_summary({"answers": 4, "answers_failed": 4, "generation_failed": 4,
                              "failed_by_client": {"a": {"backend:connect": 4}}}, 0.5)
    w.summary({"status": "completed", "generation": gen})  # what server_app passes
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["status"] == \
        "failed:generation"
    w.summary({"status": "failed", "generation": gen})  # a crash stays a crash
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["status"] == "failed"


def test_result_files_are_owner_only(tmp_path: Path):
    out = tmp_path / "new" / "out"
    w = ResultsWriter(out)
    w.round({"round": 1})
    w.query({"query_id": "q"})
    w.checkpoint({"server_round": 1})
    w.text("config.yaml", "a: 1\n")
    w.summary({"status": "failed"})
    assert _mode(out) == 0o700
    names = ["rounds.jsonl", "queries.jsonl", "checkpoint.json", "config.yaml", "summary.json"]
    assert {n: _mode(out / n) for n in names} == dict.fromkeys(names, 0o600)
    # resume rewrites them, still 0600
    ResultsWriter.resume(out, 1, [{"query_id": "q"}])
    assert _mode(out / "rounds.jsonl") == _mode(out / "queries.jsonl") == 0o600


def test_resume_drops_a_torn_rounds_line_and_keeps_the_rest(tmp_path: Path, caplog):
    out = tmp_path / "out"
    w = ResultsWriter(out)
    for r in (1, 2, 3):
        w.round({"round": r, "x": "é"})
    with open(out / "rounds.jsonl", "ab") as f:
        f.write(b'{"round": 4, "x": "\xc3')  # killed inside a 2-byte character of round 4
    with open(out / "queries.jsonl", "ab") as f:
        f.write(b'{"query_id": "q1", "ans')
    ResultsWriter.resume(out, 2, [{"query_id": "q0"}])
    rounds = [json.loads(ln) for ln in (out / "rounds.jsonl").read_text().splitlines()]
    assert rounds == [{"round": 1, "x": "é"}, {"round": 2, "x": "é"}]  # 3: after the checkpoint
    assert (out / "queries.jsonl").read_text() == '{"query_id": "q0"}\n'
    assert "dropped a torn last line 4" in caplog.text


def test_resume_refuses_damage_before_the_last_line(tmp_path: Path):
    out = tmp_path / "out"
    ResultsWriter(out)
    (out / "rounds.jsonl").write_text('{"round": 1}\nnot json\n{"round": 2}\n')
    with pytest.raises(ValueError, match=r"rounds.jsonl: line 2 is not valid JSON"):
        ResultsWriter.resume(out, 2, [])
    (out / "rounds.jsonl").write_text('{"round": 1}\n{"round": "2"}\n')
    with pytest.raises(ValueError, match="no integer 'round'"):
        ResultsWriter.resume(out, 2, [])


@pytest.mark.parametrize("raw", [
    b'{"server_round": 1, "x": "\xff"}',                # invalid UTF-8
    b'{"server_round": ' + b"9" * 5000 + b"}",           # int-str limit inside json.loads
    b'{"server_round": 1',                              # torn (should not happen: atomic)
    b"[" * 100_000,                                     # too deep
])
def test_undecodable_checkpoint_is_a_clear_error(tmp_path: Path, raw: bytes):
    (tmp_path / "checkpoint.json").write_bytes(raw)
    with pytest.raises(ValueError, match=r"corrupt checkpoint .*checkpoint.json.*start over"):
        ResultsWriter.load_checkpoint(tmp_path)


# ----------------------------------------------------------------------------- launcher


def _fake_launch(monkeypatch, tmp_path: Path, summary: dict | None, status: str,
                 log: str = "") -> None:
    """The launcher with Flower stubbed out: the run 'ends' with ``status``."""
    monkeypatch.setattr(launch, "start_superlink", lambda *a, **k: None)
    monkeypatch.setattr(launch, "stop_superlink", lambda *a, **k: None)
    monkeypatch.setattr(launch, "_flwr", lambda args, env, **kw: subprocess.CompletedProcess(
        args, 0, stdout='{"run-id": 5}', stderr=""))

    def follow(run_id, env, log_path, timeout, echo=True):
        log_path.write_text(log)
        if summary is not None:
            (tmp_path / "out" / "summary.json").write_text(json.dumps(summary))
        return status

    monkeypatch.setattr(launch, "_follow", follow)


def test_launcher_exits_nonzero_for_a_failed_generation_run(tmp_path, monkeypatch, capsys):
    gen = generation_summary({"answers": 20, "answers_failed": 20, "generation_failed": 20,
                              "failed_by_client": {
        "partition-0": {"backend:connect": 12}, "partition-1": {"backend:connect": 8}}}, 0.5)
    _fake_launch(monkeypatch, tmp_path, {"status": "failed:generation", "generation": gen},
                 "finished:completed")
    rc = launch.run(config="tiny", num_clients=2, output_dir=tmp_path / "out",
                    cpus_per_client=1.0)
    err = capsys.readouterr().err
    assert rc == 2
    assert "run 5 finished, but its status is 'failed:generation': 20 of 20 agent answers " \
           "were not produced (threshold 0.5), failures by reason {'backend:connect': 20} on " \
           "partition-0, partition-1" in err


def test_launcher_exit_codes_for_success_and_flower_failure(tmp_path, monkeypatch, capsys):
    _fake_launch(monkeypatch, tmp_path, {"status": "completed"}, "finished:completed")
    assert launch.run(config="tiny", num_clients=2, output_dir=tmp_path / "out",
                      cpus_per_client=1.0) == 0
    assert _mode(tmp_path / "out") == 0o700  # made by the launcher: owner-only
    _fake_launch(monkeypatch, tmp_path, None, "finished:failed", log=(
        "INFO : [ROUND 1]\n"
        "WARNING :   Node 1000 left out of routing: error reply: client p0: openai backend at "
        "http://127.0.0.1:9/v1 (model 'm'): endpoint does not answer within 10s\n"
        "ERROR :     ServerApp raised an exception\n"
        "RuntimeError: only 0 nodes answered the handshake; need 2\n"))
    assert launch.run(config="tiny", num_clients=2, output_dir=tmp_path / "out",
                      cpus_per_client=1.0, overwrite=True) == 1
    err = capsys.readouterr().err
    # the reasons are repeated, not only "see run.log", and the last line names the cause
    assert "[pfedma]   WARNING :   Node 1000 left out of routing: error reply: client p0: " \
           "openai backend at http://127.0.0.1:9/v1" in err
    assert err.strip().splitlines()[-1].startswith(
        "[pfedma] run 5 failed (Flower: finished:failed): RuntimeError: only 0 nodes answered "
        "the handshake; need 2 (exit 1; log: ")
    assert "[ROUND 1]" not in err


def test_launcher_exit_1_when_no_agent_was_asked(tmp_path, monkeypatch, capsys):
    _fake_launch(monkeypatch, tmp_path, {"status": "failed:no_answers", "num_queries": 20,
                                         "generation": {"answers": 0}}, "finished:completed")
    assert launch.run(config="tiny", num_clients=2, output_dir=tmp_path / "out",
                      cpus_per_client=1.0, backend_check=False) == 1
    err = capsys.readouterr().err
    assert "its status is 'failed:no_answers': 20 queries finished and no agent was asked " \
           "one" in err


def test_launcher_exit_2_and_cause_for_agents_that_could_not_start(tmp_path, monkeypatch,
                                                                   capsys):
    cause = ("only 0 of 2 nodes started their agent (need strategy.min_nodes=2): clients p0, "
             "p1: openai backend at http://127.0.0.1:9/v1 (model 'm'): cannot connect")
    _fake_launch(monkeypatch, tmp_path, {"status": "failed:generation", "cause": cause},
                 "finished:failed")
    assert launch.run(config="tiny", num_clients=2, output_dir=tmp_path / "out",
                      cpus_per_client=1.0, backend_check=False) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"[pfedma] run 5 failed:generation (Flower: finished:failed): "
                           f"{cause} (exit 2; log: ")


@pytest.mark.parametrize("text, problem", [
    ('{"status": "completed"}', ""),
    ('{"status": "failed"}', "its status is 'failed'"),
    ("{", "its summary cannot be read"),
    ("[]", "its summary is not a JSON object"),
])
def test_summary_problem(tmp_path: Path, text, problem):
    p = tmp_path / "summary.json"
    p.write_text(text)
    got = launch.summary_problem(p)
    assert got.startswith(problem) if problem else got == ""


def test_run_log_is_owner_only(tmp_path: Path, monkeypatch):
    follow_finished_run(monkeypatch, ["line 1\n"])
    log = tmp_path / "run.log"
    log.write_text("old")
    os.chmod(log, 0o644)
    assert launch._follow(1, {}, log, timeout=5) == "finished:completed"
    assert log.read_text() == "line 1\n" and _mode(log) == 0o600


# ----------------------------------------------------------------------------- fuzz (the class)

_CODE = re.compile(r"[A-Za-z0-9_.:-]{1,48}")


@settings(max_examples=500, deadline=None, database=None)
@given(st.text())
def test_fuzz_reason_code_is_always_a_short_code(error: str):
    assert _CODE.fullmatch(reason_code(error))


_CLIENTS = ["a", "b", "c"]
_pr = st.builds(ProcessedResponse, query_id=st.just("q"),
                response=st.none() | st.just(OK), refused=st.booleans(), error=st.text(max_size=30))


@settings(max_examples=300, deadline=None, database=None)
@given(rounds=st.lists(st.tuples(
    st.dictionaries(st.sampled_from(["q1", "q2", "q3"]),
                    st.lists(st.sampled_from(_CLIENTS), unique=True, max_size=3), max_size=3),
    st.dictionaries(st.sampled_from(_CLIENTS), _pr, max_size=3),
    st.dictionaries(st.sampled_from(_CLIENTS), st.text(max_size=30), max_size=2)), max_size=4))
def test_fuzz_failure_tally_invariants(rounds):
    totals: dict = {}
    asked = 0
    for routed, replies, failures in rounds:
        got = {q: {c: replies[c] for c in cs if c in replies} for q, cs in routed.items()}
        totals = with_answer_failures(totals, routed, got, failures)
        asked += sum(len(cs) for cs in routed.values())
    per_client = sum(n for per in totals.get("failed_by_client", {}).values()
                     for n in per.values())
    assert totals.get("answers", 0) == asked
    assert per_client == totals.get("answers_failed", 0) <= asked
    assert 0 <= totals.get("generation_failed", 0) <= totals.get("answers_failed", 0)
    gen = generation_summary(totals, 0.5)
    assert sum(gen["failed_by_code"].values()) == gen["failed"]
    assert run_status({"generation": gen}) == (
        GENERATION_FAILED if asked and gen["generation_failed"] / asked > 0.5 else "completed")
