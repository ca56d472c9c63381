"""The public equations module: each formula with numbers derived by hand."""

import numpy as np
import pytest

from pfedma_flwr import equations as eq


def test_support_and_promotion_by_hand():
    # Rows 0 and 1 identical, row 2 orthogonal: Supp = [1, 1, 0], |B|-1 = 2 -> zeta = [.5, .5, 0].
    e = np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float32)
    z = eq.support_proportions(e, threshold=0.9)
    np.testing.assert_allclose(z, [0.5, 0.5, 0.0])
    assert eq.promote(z) == [0, 1]  # ties kept
    assert eq.promote(np.array([0.7])) == [0]  # singleton passes
    assert eq.promote(np.zeros(3)) == []  # no support -> empty


def test_feedback_and_h_score_by_hand():
    # (3 valid - 1 conflict) / 4 triggers = 0.5
    assert eq.feedback_score(4, 3, 1) == pytest.approx(0.5)
    # H=0.2 over N=3, new scores 0.5 and -1: (0.6 + 0.5 - 1) / 5 = 0.02, N=5
    h, n = eq.update_h_score(0.2, 3, [0.5, -1.0])
    assert (h, n) == (pytest.approx(0.02), 5)
    assert eq.update_h_score(0.2, 3, []) == (0.2, 3)  # no feedback keeps H


def test_local_utility_anomaly_routing_by_hand():
    # 0.4 + (2 - 1) / max(1, 4) = 0.65 ; no triggers -> Rel only
    assert eq.local_utility(0.4, 4, 2, 1) == pytest.approx(0.65)
    assert eq.local_utility(0.3, 0, 0, 0) == pytest.approx(0.3)
    # 0.7 * [0.3 * 0.6 + 0.7 * 0.4] + 0.3 * 0.5 = 0.7 * 0.46 + 0.15 = 0.472
    assert eq.anomaly_score(0.2, 0.6, 0.5) == pytest.approx(0.472)
    # C: 0.8*0.5 + 0.2*0.9 = 0.58 ; S: 0.8*0.5 + 0.2*1 = 0.6
    c, s = eq.update_routing_state(0.5, 0.5, 0.9, True, eta=0.2)
    assert (c, s) == (pytest.approx(0.58), pytest.approx(0.6))
