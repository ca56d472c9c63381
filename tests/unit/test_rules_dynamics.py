"""rule_dynamics (issue 12): the loop's counts read from rounds.jsonl records, by hand."""

from __future__ import annotations

from pathlib import Path

from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.experiments.analysis import RunData, rule_dynamics
from pfedma_flwr.experiments.tables import display_value


def test_rule_dynamics_counts_by_hand():
    rounds = [
        {"round": 1, "rules": {"promoted": 0, "feedback": {"n_rows": 2},
                               "h_scores": {"a": [0.0, 0, True], "b": [0.0, 0, True]}}},
        {"round": 2, "rules": {"promoted": 1, "feedback": {"n_rows": 1},
                               "update": {"twins": ["t"]},
                               "h_scores": {"a": [0.5, 2, True], "b": [0.0, 0, False],
                                            "c": [0.0, 0, True]}}},
        {"round": 3, "rules": {"mode": "NR", "promoted": 0}},  # no rules logged: no active@3
    ]
    run = RunData(out_dir=Path("."), cfg=PFedMAConfig(), summary={}, queries=[], rounds=rounds)
    m = rule_dynamics(run)
    # rows 2 + 1; only a's (H, N) moved from (0, 0); one promotion, one twin; active 2, 2
    assert m == {"global_rules/active@1": 2.0, "global_rules/active@2": 2.0,
                 "global_rules/feedback_rows": 3.0, "global_rules/h_moved": 1.0,
                 "global_rules/promoted": 1.0, "global_rules/twins": 1.0}
    assert display_value("global_rules/feedback_rows", 3.0) == 3.0  # a count, not a rate
