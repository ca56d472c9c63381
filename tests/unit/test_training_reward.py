"""§3.11 orchestrator reward: hand-derived cases, optional cost term, strict validation."""

import numpy as np
import pytest

from pfedma_flwr.training.reward import compute_score, trajectory_reward

BASE = {"format_ok": True, "correct": True, "step_correct": [0, 1], "num_selected": [2, 1]}


def score(extra, **kw):
    return compute_score("pfedma/math", "<select>a</select>", "4", extra, **kw)["score"]


def test_issue_hand_cases():
    # 0 + 1 + [0.2(0-0) - 0.01*2] + [0.2(1-0) - 0.01*1] = 1 - 0.02 + 0.19 = 1.17
    assert score(BASE) == pytest.approx(1.17)
    # the same with a malformed action: R_fmt = -1
    assert score({**BASE, "format_ok": False}) == pytest.approx(0.17)


def test_parts_and_wrong_answer():
    # z right after round 1, wrong after round 2 (a bad merge), final wrong:
    # 0 + 0 + [0.2(1-0) - 0.01*3] + [0.2(0-1) - 0.01*2] = 0.17 - 0.22 = -0.05
    got = trajectory_reward({"format_ok": True, "correct": False, "step_correct": [1, 0],
                             "num_selected": [3, 2]})
    assert got == pytest.approx({"score": -0.05, "r_fmt": 0.0, "r_ans": 0.0, "r_step": -0.05,
                                 "r_cost": 0.0})


def test_stop_at_once_and_custom_weights():
    # no round at all: only the terminal terms
    assert score({**BASE, "step_correct": [], "num_selected": []}) == pytest.approx(1.0)
    # beta 1, kappa 0.1: 1 + [1*(0.5-0) - 0.2] + [1*(1-0.5) - 0.1] = 1.7
    assert score({**BASE, "step_correct": [0.5, 1.0]}, beta=1.0, kappa=0.1) == pytest.approx(1.7)


def test_token_cost_term():
    # 1.17 - 1e-4 * 1500 = 1.02
    assert score({**BASE, "tokens": 1500}, cost_coe=1e-4) == pytest.approx(1.02)
    # tokens without a coefficient cost nothing
    assert score({**BASE, "tokens": 1500}) == pytest.approx(1.17)


def test_numpy_values_from_verl_batches():
    extra = {"format_ok": np.bool_(True), "correct": np.bool_(True),
             "step_correct": np.array([0.0, 1.0]), "num_selected": [np.int64(2), np.int64(1)],
             "split": "train", "index": 3, "num_turns": 5}
    assert score(extra) == pytest.approx(1.17)


def test_unrelated_kwargs_are_ignored():
    assert score(BASE, tokenizer=object()) == pytest.approx(1.17)


@pytest.mark.parametrize(("extra", "match"), [
    (None, "extra_info must be a mapping"),
    ({"format_ok": True}, r"lacks the trajectory key\(s\) \['correct'"),
    ({**BASE, "format_ok": "yes"}, r"extra_info\['format_ok'\] must be a bool"),
    ({**BASE, "correct": 1}, r"extra_info\['correct'\] must be a bool"),
    ({**BASE, "step_correct": "01"}, r"extra_info\['step_correct'\] must be a list"),
    ({**BASE, "step_correct": [0, 1.5]}, r"extra_info\['step_correct'\]\[1\] must be in"),
    ({**BASE, "step_correct": [0, float("nan")]}, r"\['step_correct'\]\[1\] must be in"),
    ({**BASE, "num_selected": [2, -1]}, r"extra_info\['num_selected'\]\[1\] must be in"),
    ({**BASE, "num_selected": [2, 1.5]}, r"num_selected'\] must hold integers"),
    ({**BASE, "num_selected": [2]}, "has 2 rounds but"),
    ({**BASE, "tokens": -3}, r"extra_info\['tokens'\] must be in"),
    ({**BASE, "tokens": "many"}, r"extra_info\['tokens'\] must be a number"),
])
def test_malformed_summaries_name_the_key(extra, match):
    with pytest.raises(ValueError, match=match):
        score(extra)


def test_bad_coefficient():
    with pytest.raises(ValueError, match="cost_coe"):
        score(BASE, cost_coe=-1.0)
