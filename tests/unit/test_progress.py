"""The launcher's live progress (tailing the run's JSONL files), run.log lines, log levels."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pfedma_flwr import logs
from pfedma_flwr.server import progress as pg
from pfedma_flwr.server import progress_lines as pl

ROUND_1 = {
    "round": 1,
    "failures": {"partition-2": "timeout"},
    # one answer came without a response; a query without errors and junk count nothing
    "queries": [{"client_errors": {"p1": "parse:response"}}, {"query_id": "q9"}, "junk"],
    "metrics": {
        "select/num_queries": 4,
        "anomaly/num_retained": 6,
        "anomaly/num_filtered": 2,
        "cost/tokens": 900,
        "cost/backend_calls": 6,
        "rules/num_global": 3,
    },
}
Q = [
    {
        "query_id": "q0",
        "benchmark": "gsm8k",
        "answer": "42",
        "gold": "42",
        "correct": True,
        "rounds": 2,
        "stop_reason": "t_max",
    },
    {
        "query_id": "q1",
        "benchmark": "medqa",
        "answer": "B",
        "gold": "C",
        "correct": False,
        "rounds": 1,
        "stop_reason": "orchestrator_stop",
    },
]


def _append(path: Path, *recs: dict, tail: str = "") -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs) + tail)


def test_query_and_round_lines_carry_the_running_accuracy():
    acc = pl.RunningAccuracy(total=6)
    acc.add(Q[0])
    assert pl.query_line(Q[0], acc) == (
        "[pfedma] query 1/6 gsm8k/q0: correct, answer '42' (gold '42'), 2 rounds, t_max | "
        "acc 1/1 (100.0 %)"
    )
    acc.add(Q[1])
    assert pl.query_line(Q[1], acc).endswith(
        "wrong, answer 'B' (gold 'C'), 1 rounds, orchestrator_stop | acc 1/2 (50.0 %)"
    )
    assert pl.round_line(ROUND_1, acc) == (
        "[pfedma] round 1: 4 queries, 6 retained / 2 filtered, 1 unusable, 1 node failed, 900 tokens, "
        "6 backend calls, 3 global rules | 2/6 queries done, acc 1/2 (50.0 %) "
        "(gsm8k 1/1, medqa 0/1)"
    )


def test_lines_survive_hostile_records():
    acc = pl.RunningAccuracy()
    rec = {"query_id": "x" * 500, "answer": "a\nb" * 100, "correct": "yes", "rounds": "2"}
    acc.add(rec)
    line = pl.query_line(rec, acc)
    assert "\n" not in line and len(line) < 250
    # a verdict that is no boolean is no gold verdict: neither right nor wrong, not scored
    assert "judged after the run" in line and line.endswith("acc -") and acc.done == 1
    acc.add({**rec, "correct": 1})  # a number is no verdict either
    assert acc.text() == "acc -" and acc.by_benchmark == {}
    bad = {"metrics": "nope", "failures": [1], "queries": {"client_errors": 3}}
    assert pl.round_line(bad, pl.RunningAccuracy()) == (
        "[pfedma] round 0: 0 queries, 0 retained / 0 filtered, 0 unusable, 0 nodes failed, 0 tokens, "
        "0 backend calls, 0 global rules | 0 queries done, acc -"
    )


def test_tail_returns_complete_lines_once_and_restarts_on_a_shrunk_file(tmp_path):
    path = tmp_path / "queries.jsonl"
    tail = pg.JsonlTail(path)
    assert tail.read() == []  # not there yet
    _append(path, Q[0], tail='{"query_id": "q1", "ben')  # second line mid-write
    assert tail.read() == [Q[0]]
    assert tail.read() == []
    _append(path, tail='chmark": "medqa"}\nnot json\n[1]\n')
    assert tail.read() == [{"query_id": "q1", "benchmark": "medqa"}]  # bad and non-objects skipped
    path.write_text(json.dumps(Q[1]) + "\n")  # overwritten: shorter than what was read
    assert tail.read() == [Q[1]]


def test_live_progress_prints_queries_then_rounds_and_feeds_the_tracker(tmp_path):
    lines: list[str] = []
    seen: list[tuple[int, int]] = []
    live = pg.LiveProgress(
        output_dir=tmp_path,
        total=2,
        emit=lines.append,
        on_round=lambda rec, acc: seen.append((rec["round"], acc.done)),
        interval=0.01,
    )
    with live:
        _append(tmp_path / "rounds.jsonl", ROUND_1)
        _append(tmp_path / "queries.jsonl", *Q)
    # the final poll on exit catches what the thread had not seen yet
    assert [ln.split(":")[0] for ln in lines if "round" in ln.split(":")[0]] == ["[pfedma] round 1"]
    assert sum(ln.startswith("[pfedma] query") for ln in lines) == 2
    assert seen and seen[0][0] == 1


def test_live_progress_drops_a_failing_tracker_once_and_keeps_printing(tmp_path):
    lines: list[str] = []

    def boom(rec, acc):
        raise RuntimeError("disk full")

    live = pg.LiveProgress(output_dir=tmp_path, emit=lines.append, on_round=boom)
    _append(tmp_path / "rounds.jsonl", ROUND_1, {**ROUND_1, "round": 2})
    live.poll()
    assert lines[1] == "[pfedma] tracking hook failed: RuntimeError: disk full"
    assert lines[2].startswith("[pfedma] round 2:") and len(lines) == 3


def test_resumed_run_counts_what_is_on_disk_without_printing_it(tmp_path):
    _append(tmp_path / "queries.jsonl", Q[0])
    _append(tmp_path / "rounds.jsonl", ROUND_1)
    lines: list[str] = []
    live = pg.LiveProgress(output_dir=tmp_path, total=2, emit=lines.append)
    live.skip_existing()
    _append(tmp_path / "queries.jsonl", Q[1])
    live.poll()
    assert lines == [pl.query_line(Q[1], live.acc)] and "query 2/2" in lines[0]


def test_interval_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="interval must be > 0"):
        pg.LiveProgress(output_dir=tmp_path, interval=0)


@pytest.mark.parametrize(
    "line,expected",
    [
        ("\x1b[92mINFO \x1b[0m: [ROUND 1]\n", "INFO : [ROUND 1]\n"),
        # a rich bar redrawn with carriage returns: the log keeps what the terminal showed last
        ("\x1b[?25lPFedMA 1/4\r\x1b[2KPFedMA 2/4\rPFedMA 4/4\n", "PFedMA 4/4\n"),
        ("no newline", "no newline"),
    ],
)
def test_plain_log_line(line, expected):
    assert logs.plain_log_line(line) == expected


@pytest.fixture
def restore_loggers():
    names = (*logs.PROJECT_LOGGERS, "flwr")
    saved = {n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers)) for n in names}
    from flwr.common.logger import console_handler

    flwr_level = console_handler.level
    yield
    for n, (level, handlers) in saved.items():
        lg = logging.getLogger(n)
        lg.setLevel(level)
        lg.handlers[:] = handlers
    console_handler.setLevel(flwr_level)


@pytest.mark.parametrize(
    "value,expected",
    [
        (None, logging.INFO),
        ("", logging.INFO),
        ("debug", logging.DEBUG),
        (" Warning ", logging.WARNING),
    ],
)
def test_parse_log_level(value, expected):
    assert logs.parse_log_level(value) == expected


def test_parse_log_level_names_the_bad_value_and_where():
    with pytest.raises(ValueError, match=r"--log-level: log level 'loud' is not one of DEBUG"):
        logs.parse_log_level("loud", where="--log-level")


def test_configure_logging_reads_the_env_and_sets_project_and_flower_levels(
    monkeypatch, restore_loggers
):
    from flwr.common.logger import console_handler

    monkeypatch.setenv(logs.LOG_LEVEL_ENV, "WARNING")
    assert logs.configure_logging() == logging.WARNING
    for n in logs.PROJECT_LOGGERS:
        assert logging.getLogger(n).level == logging.WARNING
    assert console_handler.level == logging.WARNING
    assert not logging.getLogger("pfedma_flwr.server.engine").isEnabledFor(logging.INFO)
    monkeypatch.setenv(logs.LOG_LEVEL_ENV, "chatty")  # a node's bad env: INFO, not a crash
    assert logs.configure_logging() == logging.INFO


def test_configure_logging_adds_its_handler_once_where_root_has_none(monkeypatch, restore_loggers):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    logs.configure_logging("DEBUG")
    logs.configure_logging("DEBUG")
    ours = [h for h in logging.getLogger("strategies").handlers if getattr(h, "_pfedma", False)]
    assert len(ours) == 1


def test_judged_queries_finish_but_stay_out_of_the_running_accuracy():
    # AlpacaEval's records carry correct None (judged after the run): 2 runs of 20 such queries
    # read "acc 0/20 (0.0 %)" before, as if every answer were wrong
    acc = pl.RunningAccuracy(total=3)
    alpaca = {
        "query_id": "a0",
        "benchmark": "alpacaeval",
        "answer": "Sure! ...",
        "gold": "Certainly! ...",
        "correct": None,
        "rounds": 2,
        "stop_reason": "t_max",
    }
    acc.add(alpaca)
    assert pl.query_line(alpaca, acc) == (
        "[pfedma] query 1/3 alpacaeval/a0: judged after the run, answer 'Sure! ...' "
        "(gold 'Certainly! ...'), 2 rounds, t_max | acc -"
    )
    acc.add(Q[0])
    acc.add(Q[1])
    assert (acc.done, acc.scored, acc.correct) == (3, 2, 1)
    assert pl.round_line(ROUND_1, acc).endswith(
        "| 3/3 queries done, acc 1/2 (50.0 %) (gsm8k 1/1, medqa 0/1)"
    )
