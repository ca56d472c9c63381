"""Every view of a run dir: accuracy per round, selections, capability, rule coverage, frames.

The run dir is written by hand (no Flower): two Flower rounds, three queries.
- round 1: q0 (gsm8k) asks p0, p1; q1 (medqa) asks p1, p2; 2 global rules, g1 active; 1 promoted
- round 2: q1 again, asks p0, p2; both rules active
- q0 finishes in round 1 (correct), q1 in round 2 (wrong), q2 (gsm8k, correct) never ran a
  round (ended after the last one), so it counts from round 2 on.
Accuracy after round 1: 1/1; after round 2: 2/3 (gsm8k 2/2, medqa 0/1).
Selections: p0 1+1, p1 2+0, p2 1+1.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pfedma_flwr.server import report

ROUNDS = [
    {
        "round": 1,
        "queries": [
            {
                "query_id": "q0",
                "t": 1,
                "selected": ["p0", "p1"],
                "anomaly": {
                    "p0": {"A": 0.1, "retained": True},
                    "p1": {"A": 0.9, "retained": False},
                },
            },
            {"query_id": "q1", "t": 1, "selected": ["p1", "p2"], "anomaly": {}},
        ],
        "rules": {"promoted": 1, "h_scores": {"g1": [0.5, 2, True], "g2": [0.1, 1, False]}},
        "clients": {"p0": {"tokens": 10}, "p1": {"tokens": 20}, "p2": {"tokens": 5}},
        "metrics": {
            "select/num_queries": 2,
            "anomaly/num_retained": 3,
            "anomaly/num_filtered": 1,
            "cost/tokens": 35,
            "rules/num_global": 2,
        },
    },
    {
        "round": 2,
        "queries": [{"query_id": "q1", "t": 2, "selected": ["p0", "p2"]}],
        "rules": {"promoted": 0, "h_scores": {"g1": [0.6, 3, True], "g2": [0.2, 2, True]}},
        "metrics": {
            "select/num_queries": 1,
            "anomaly/num_retained": 2,
            "cost/tokens": 12,
            "rules/num_global": 2,
        },
    },
]
QUERIES = [
    {"query_id": "q0", "benchmark": "gsm8k", "correct": True, "rounds": 1},
    {"query_id": "q1", "benchmark": "medqa", "correct": False, "rounds": 2},
    {"query_id": "q2", "benchmark": "gsm8k", "correct": True, "rounds": 0},
]
SUMMARY = {
    "status": "completed",
    "accuracy": 2 / 3,
    "accuracy_by_benchmark": {"gsm8k": 1.0, "medqa": 0.0},
    "routing": {
        "clients": {
            "p0": {"capability": {"math": 0.6, "medicine": 0.4}, "reliability": 0.7},
            "p1": {"capability": {"math": 0.2}, "reliability": 0.3},
        }
    },
}


def _run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(SUMMARY))
    (out / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROUNDS))
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    return out


def test_accuracy_by_round_counts_each_query_from_the_round_it_finished(tmp_path):
    acc = report.accuracy_by_round(report.load_run_dir(_run_dir(tmp_path)))
    assert [(a.round, a.done, a.correct) for a in acc] == [(1, 1, 1), (2, 3, 2)]
    assert acc[0].by_benchmark == {"gsm8k": [1, 1]}
    assert acc[1].by_benchmark == {"gsm8k": [2, 2], "medqa": [0, 1]}
    assert [a.scored for a in acc] == [1, 3]


def test_a_judged_query_counts_as_finished_but_not_in_the_accuracy(tmp_path):
    out = _run_dir(tmp_path)
    judged = {"query_id": "a0", "benchmark": "alpacaeval", "correct": None, "answer": "x"}
    with open(out / "queries.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(judged) + "\n")
    acc = report.accuracy_by_round(report.load_run_dir(out))
    # a0 is in no round record: it counts from the last round on, as finished only
    assert [(a.round, a.done, a.scored, a.correct) for a in acc] == [(1, 1, 1, 1), (2, 4, 3, 2)]
    assert "alpacaeval" not in acc[1].by_benchmark


def test_selection_capability_and_rule_tables():
    sel = report.selection_table(ROUNDS)
    counts = {}
    for s in sel:
        counts[(s["client"], s["round"])] = counts.get((s["client"], s["round"]), 0) + 1
    assert counts == {("p0", 1): 1, ("p1", 1): 2, ("p2", 1): 1, ("p0", 2): 1, ("p2", 2): 1}
    assert sel[1] == {
        "round": 1,
        "query_id": "q0",
        "t": 1,
        "client": "p1",
        "A": 0.9,
        "retained": False,
    }
    assert report.capability_table(SUMMARY) == [
        {"client": "p0", "profile": "", "S": 0.7, "C math": 0.6, "C medicine": 0.4},
        {"client": "p1", "profile": "", "S": 0.3, "C math": 0.2, "C medicine": None},
    ]
    assert report.rule_coverage(ROUNDS) == [
        {"round": 1, "global": 2, "active": 1, "promoted": 1},
        {"round": 2, "global": 2, "active": 2, "promoted": 0},
    ]


def test_every_plot_the_issue_lists_is_written_and_linked(tmp_path):
    out = _run_dir(tmp_path)
    text = report.write_report(out).read_text()
    for png in report.PLOTS:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert (out / png).stat().st_mode & 0o777 == 0o600
        assert f"]({png})" in text
    # the per-round table: answers, cost, queries finished, accuracy so far, per benchmark,
    # rule coverage
    assert "| 1 | 2 | 3 | 1 | 35 | 0 | 1 | 0 | 100.0 % | 100.0 % | - | 2 | 1 |" in text
    assert "| 2 | 1 | 2 | 0 | 12 | 0 | 3 | 0 | 66.7 % | 100.0 % | 0.0 % | 2 | 2 |" in text
    assert text.count("## Flower rounds") == 1 and "| round | finished | accuracy" not in text


def test_a_plot_whose_data_is_gone_is_removed_with_its_link(tmp_path):
    out = _run_dir(tmp_path)
    report.write_report(out)
    (out / "rounds.jsonl").write_text("")
    text = report.write_report(out).read_text()
    for png in (report.SELECTION_PNG, report.RULES_PNG, report.ACCURACY_ROUNDS_PNG):
        assert not (out / png).exists() and f"]({png})" not in text
    assert (out / report.CAPABILITY_PNG).exists()  # from summary.json, still there


def test_load_run_gives_every_table_as_a_frame(tmp_path):
    pytest.importorskip("pandas")
    f = report.load_run(_run_dir(tmp_path))
    assert set(f) == {"queries", "rounds", "accuracy", "selections", "capability", "rules"}
    assert f["accuracy"].set_index("round")["accuracy"].round(4).to_dict() == {1: 1.0, 2: 0.6667}
    assert f["accuracy"]["acc/medqa"].tolist()[1] == 0.0
    assert f["selections"].groupby("client").size().to_dict() == {"p0": 2, "p1": 2, "p2": 2}
    assert f["capability"].set_index("client")["S"].to_dict() == {"p0": 0.7, "p1": 0.3}
    assert f["rules"]["active"].tolist() == [1, 2]
    assert f["rounds"]["tokens"].sum() == 47


def test_load_run_of_an_empty_dir_gives_empty_frames(tmp_path):
    pytest.importorskip("pandas")
    f = report.load_run(tmp_path)
    assert all(len(df) == 0 for df in f.values())


def test_tracking_replay_writes_the_rounds_with_their_accuracy(tmp_path):
    from pfedma_flwr.experiments import tracking

    out = _run_dir(tmp_path)
    scalars = []

    class Recorder(tracking.Tracker):
        def _open(self):
            return self

        def add_scalar(self, k, v, global_step):
            scalars.append((global_step, k, v))

        def flush(self):
            pass

        def close(self):  # noqa: D401
            pass

    assert tracking.replay(out, Recorder(backend="tensorboard", target=tmp_path / "tb")) == 2
    got = {(s, k): v for s, k, v in scalars}
    assert got[(1, "queries/accuracy")] == 1.0 and got[(2, "queries/accuracy")] == 2 / 3
    assert got[(2, "queries/accuracy/medqa")] == 0.0
    assert got[(1, "rules/num_active")] == 1 and got[(2, "rules/num_active")] == 2
    assert got[(1, "clients/p1/tokens")] == 20 and got[(2, "cost/tokens")] == 12


def test_tracking_real_tensorboard_events(tmp_path):
    pytest.importorskip("tensorboard")
    from pfedma_flwr.experiments import tracking

    t = tracking.make_tracker("TensorBoard", tmp_path / "tb")
    assert tracking.replay(_run_dir(tmp_path), t) == 2
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(tmp_path / "tb"))
    ea.Reload()
    assert [(e.step, round(e.value, 4)) for e in ea.Scalars("queries/accuracy")] == [
        (1, 1.0),
        (2, 0.6667),
    ]


def test_unknown_tracking_backend_is_named():
    from pfedma_flwr.experiments import tracking

    assert tracking.make_tracker("none", "x") is None
    with pytest.raises(tracking.TrackingError, match="'wandb' is not one of none, tensorboard"):
        tracking.make_tracker("wandb", "x")


def test_pfedma_report_with_tracking_replays_the_run(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from pfedma_flwr import cli

    out = _run_dir(tmp_path)
    assert cli.main(["report", str(out), "--tracking", "tensorboard"]) == 0
    assert "[pfedma] 2 rounds -> " in capsys.readouterr().out
    assert list((out / "tracking").glob("events.out.tfevents.*"))
    assert cli.main(["report", str(tmp_path / "nope")]) == 1


def test_model_info_hashes_a_small_embedded_model_without_a_recorded_digest():
    from pfedma_flwr.agents.backends.embedded import (
        MissingModelError,
        embedded_model_path,
        file_sha256,
    )
    from pfedma_flwr.server.provenance import model_info

    try:
        path = embedded_model_path("smollm2-135m")
    except MissingModelError:
        pytest.skip("smollm2 not installed")

    class Backend:
        name, model, base_url = "embedded", "smollm2-135m", ""

    info = model_info(Backend())
    assert info["file"] == path.name and info["sha256"] == file_sha256(path)


def test_docs_list_every_plot_and_frame():
    text = (Path(__file__).resolve().parents[2] / "docs" / "reporting.md").read_text()
    for png in report.PLOTS:
        assert f"`{png}`" in text, png
    for frame in ("queries", "rounds", "accuracy", "selections", "capability", "rules"):
        assert f'f["{frame}"]' in text, frame


def test_the_round_table_and_the_accuracy_count_the_same_finished_queries(tmp_path):
    # a query the orchestrator stops after round 1 is settled in round 1 in both (the engine's
    # own queries/num_finished metric counts it in round 2: it said 0 where accuracy said 18)
    run = report.load_run_dir(_run_dir(tmp_path))
    rows = report.round_table(run.rounds, run.queries)
    assert (
        [r["finished"] for r in rows]
        == [a.done for a in report.accuracy_by_round(run)]
        == [
            1,
            3,
        ]
    )


def test_selections_read_the_anomaly_score_the_round_records_keep():
    rounds = [
        {
            "round": 1,
            "queries": [
                {
                    "query_id": "q",
                    "t": 1,
                    "selected": ["p0"],
                    "anomaly": {"p0": {"score": 0.25, "retained": True}},
                }
            ],
        }
    ]
    assert report.selection_table(rounds)[0]["A"] == 0.25


def test_clients_carry_their_profile_in_the_report_and_the_frames(tmp_path):
    out = _run_dir(tmp_path)
    summary = {
        **SUMMARY,
        "clients": {"p0": {"profile_name": "mathematician"}, "p1": {"profile_name": "physician"}},
    }
    (out / "summary.json").write_text(json.dumps(summary))
    text = report.write_report(out).read_text()
    assert "| p0 | mathematician | 0.7 | 0.6 | 0.4 |" in text
    assert "| p1 | physician | 0.3 | 0.2 | - |" in text  # never asked about medicine: undefined
    assert report.client_label("p0", report.client_profiles(summary)) == "p0 (mathematician)"


def test_plots_without_data_are_left_out(tmp_path):
    from pfedma_flwr.server import report_plots

    out = _run_dir(tmp_path)
    rounds = [
        {**r, "rules": {}, "metrics": {**r["metrics"], "rules/num_global": 0}} for r in ROUNDS
    ]
    (out / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    summary = {**SUMMARY, "routing": {"clients": {"p0": {"capability": {}}}}}
    (out / "summary.json").write_text(json.dumps(summary))
    text = report.write_report(out).read_text()
    for png in (report.RULES_PNG, report.CAPABILITY_PNG):  # no rule, no defined C or S
        assert not (out / png).exists() and f"]({png})" not in text
    assert (out / report.SELECTION_PNG).exists()
    assert math.isnan(report_plots._value(None)) and report_plots._value(0.0) == 0.0
