"""report.md, plots and run_info.json of a run dir.

The run dir below is written by hand: 4 queries (gsm8k 1/2 correct, medqa 2/2), two rounds
(round 1: 6 retained + 2 filtered answers, 900 tokens; round 2: 3 + 1, 400 tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pfedma_flwr import cli
from pfedma_flwr.experiments.launch import _ANSI
from pfedma_flwr.server import report

SUMMARY = {
    "status": "completed",
    "accuracy": 0.75,
    "num_queries": 4,
    "num_clients": 3,
    "accuracy_by_benchmark": {"gsm8k": 0.5, "medqa": 1.0},
    "rounds_per_query": 1.5,
    "tokens_per_query": 325.0,
    "backend_calls_per_query": 2.0,
    "generation": {
        "answers": 12,
        "failed": 3,
        "generation_failed": 2,
        "max_failed_share": 0.5,
        "failed_by_code": {"timeout": 2, "malformed": 1},
        "failed_by_client": {"partition-1": {"timeout": 2}},
    },
    "stop_reasons": {"orchestrator_stop": 3, "t_max": 1},
    "global_rules": [
        {
            "rule_id": "g1",
            "text": "redact a | b names",
            "action": "redact",
            "h_score": 0.25,
            "n_evals": 4,
            "active": True,
        }
    ],
    "routing": {
        "clients": {
            "partition-0": {"capability": {"math": 0.6, "medicine": 0.4}, "reliability": 0.7}
        }
    },
}
ROUNDS = [
    {
        "round": 1,
        "metrics": {
            "select/num_queries": 4,
            "anomaly/num_retained": 6,
            "anomaly/num_filtered": 2,
            "cost/tokens": 900,
            "cost/backend_calls": 6,
            "queries/num_finished": 2,
            "rules/num_promoted": 1,
        },
    },
    {
        "round": 2,
        "metrics": {
            "select/num_queries": 2,
            "anomaly/num_retained": 3,
            "anomaly/num_filtered": 1,
            "cost/tokens": 400,
            "cost/backend_calls": 2,
            "queries/num_finished": 2,
        },
    },
]
QUERIES = [
    {"query_id": f"q{k}", "benchmark": b, "correct": c}
    for k, (b, c) in enumerate(
        [("gsm8k", True), ("gsm8k", False), ("medqa", True), ("medqa", True)]
    )
]


def _run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(SUMMARY))
    (out / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROUNDS))
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    return out


def test_round_table_reads_the_round_metrics():
    rows = report.round_table(ROUNDS)
    assert [(r["round"], r["retained"], r["filtered"], r["tokens"]) for r in rows] == [
        (1, 6, 2, 900),
        (2, 3, 1, 400),
    ]
    assert rows[1]["promoted"] == 0  # absent metric reads as 0, not an error


def test_report_has_headline_numbers_failures_rules_routing_and_plots(tmp_path):
    out = _run_dir(tmp_path)
    path = report.write_report(out)
    text = path.read_text()
    assert "| status | completed |" in text
    assert "| accuracy | 75.0 % |" in text
    assert "| gsm8k | 50.0 % |" in text and "| medqa | 100.0 % |" in text
    assert "| tokens per query | 325 |" in text
    assert "3 of 12 agent answers failed (2 not produced" in text
    # reason codes commonest first
    assert text.index("| timeout | 2 |") < text.index("| malformed | 1 |")
    assert "redact a \\| b names" in text  # a pipe in a rule's text cannot break the table
    assert "| partition-0 | - | 0.7 | 0.6 | 0.4 |" in text  # no handshake profile recorded
    # one table per round; these rounds name no query, so all 4 count from the last round
    assert "| 1 | 4 | 6 | 2 | 900 | 6 | 0 | 1 | - | - | - | 0 | 0 |" in text
    assert "| 2 | 2 | 3 | 1 | 400 | 2 | 4 | 0 | 75.0 % | 50.0 % | 100.0 % | 0 | 0 |" in text
    for png in (report.ACCURACY_PNG, report.ROUNDS_PNG):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / png).stat().st_mode & 0o777 == 0o600
        assert f"]({png})" in text


def test_a_damaged_run_dir_still_gets_a_report_naming_what_is_missing(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("{not json")
    text = report.write_report(out).read_text()
    assert "unknown (no summary.json)" in text
    assert "summary.json cannot be read" in text and "rounds.jsonl is missing" in text
    assert not (out / report.ACCURACY_PNG).exists()  # no data, no plot


def test_report_of_a_missing_dir_is_a_clear_error(tmp_path):
    with pytest.raises(NotADirectoryError, match="does not exist"):
        report.write_report(tmp_path / "nope")
    assert cli.main(["report", str(tmp_path / "nope")]) == 1


def test_run_info_merges_and_keeps_what_a_later_writer_does_not_know(tmp_path):
    report.update_run_info(tmp_path, {"command": ["pfedma", "run"], "started_at": "t0"})
    info = report.update_run_info(
        tmp_path, {"flower_run_id": 7, "command": None, "git_commit": None}
    )
    # None keeps what another writer knew, and marks as unknown what nobody did
    assert info == {
        "command": ["pfedma", "run"],
        "started_at": "t0",
        "flower_run_id": 7,
        "git_commit": None,
    }
    assert json.loads((tmp_path / report.RUN_INFO).read_text()) == info


def test_base_run_info_records_versions_commit_and_the_embedded_models_digest():
    from pfedma_flwr.agents.backends.embedded import EMBEDDED_MODELS
    from pfedma_flwr.config import load_config

    info = report.base_run_info(load_config({"config-name": "pfedma"}))
    assert info["packages"]["flwr"] == "1.42.0"
    assert set(report.VERSIONED) == set(info["packages"])
    spec = EMBEDDED_MODELS[info["model"]["model"]]
    assert info["model"]["file"] == spec.filename and info["model"]["sha256"] == spec.sha256
    commit = info["git_commit"]
    assert commit is None or len(commit.split("+")[0]) == 40


# `pfedma run`'s refusal, --overwrite and --resume: tests/unit/test_launch.py


def test_run_log_lines_lose_their_ansi_codes():
    line = "\x1b[92mINFO \x1b[0m:      [ROUND 1]\x1b[2K\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n"
    assert _ANSI.sub("", line) == "INFO :      [ROUND 1]link\n"


def test_load_frames_gives_pandas_tables(tmp_path):
    pd = pytest.importorskip("pandas")
    frames = report.load_frames(_run_dir(tmp_path))
    assert isinstance(frames["queries"], pd.DataFrame)
    assert frames["queries"].groupby("benchmark")["correct"].mean().to_dict() == {
        "gsm8k": 0.5,
        "medqa": 1.0,
    }
    assert frames["rounds"]["tokens"].sum() == 1300


@pytest.mark.parametrize("given,expected", [(None, "1"), ("0", "0"), ("1", "1")])
def test_launcher_keeps_the_users_hf_hub_offline(monkeypatch, tmp_path, given, expected):
    from pfedma_flwr.experiments.launch import _env

    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    if given is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", given)
    env = _env(tmp_path, 39999)
    assert env["HF_HUB_OFFLINE"] == expected and env["TRANSFORMERS_OFFLINE"] == expected


def test_server_hook_records_the_flower_run_and_never_raises(tmp_path, monkeypatch, caplog):
    from pfedma_flwr.config import load_config

    cfg = load_config({"config-name": "tiny"})
    out = _run_dir(tmp_path)
    report.update_run_info(out, {"command": ["pfedma", "run"], "git_commit": "abc"})
    report.finish_server_run(out, cfg, flower_run_id=42, started_at="2026-12-01T00:00:00Z")
    info = json.loads((out / report.RUN_INFO).read_text())
    assert info["flower_run_id"] == 42 and info["seed"] == cfg.seed
    assert info["command"] == ["pfedma", "run"]  # the launcher's fields survive
    if info["git_commit"] != "abc":  # a clone's ServerApp knows the commit itself
        assert len(info["git_commit"].split("+")[0]) == 40
    assert (out / report.REPORT).is_file()
    # a report that cannot be written is a warning, not a failed run
    monkeypatch.setattr(report, "write_report", lambda p: (_ for _ in ()).throw(OSError("full")))
    report.finish_server_run(out, cfg, flower_run_id=42, started_at="t")
    assert "report for" in caplog.text and "OSError: full" in caplog.text
