"""Routing state (DESIGN §3.8): EMA updates, quality signal, table, failures, checkpoints."""

import math

import pytest

from pfedma_flwr.routing.state import (
    RoutingState,
    RoutingTable,
    quality_signal,
    update_routing_state,
)


def test_update_routing_state_three_steps():
    # step 1: C = .8·.5 + .2·1 = .6;      S = .8·.5 + .2·1 = .6
    c, s = update_routing_state(0.5, 0.5, 1.0, True, 0.2)
    assert (c, s) == pytest.approx((0.6, 0.6))
    # step 2: C = .8·.6 + .2·.5 = .58;    S = .8·.6 + .2 = .68
    c, s = update_routing_state(c, s, 0.5, True, 0.2)
    assert (c, s) == pytest.approx((0.58, 0.68))
    # step 3 (filtered, g=0): C = .8·.58 = .464; S = .8·.68 = .544
    c, s = update_routing_state(c, s, 0.0, False, 0.2)
    assert (c, s) == pytest.approx((0.464, 0.544))


def test_update_with_eta_one_replaces_the_state():
    assert update_routing_state(0.1, 0.9, 0.7, False, eta=1.0) == (0.7, 0.0)


@pytest.mark.parametrize(
    ("args", "match"),
    [((0.5, 0.5, 0.5, True, 0.0), "eta"), ((0.5, 0.5, 0.5, True, 1.1), "eta"),
     ((1.5, 0.5, 0.5, True, 0.2), "c must"), ((0.5, 0.5, math.nan, True, 0.2), "quality")],
)
def test_update_validation(args, match):
    with pytest.raises(ValueError, match=match):
        update_routing_state(*args)


@pytest.mark.parametrize(
    ("anomaly", "sim", "retained", "expected"),
    [(0.25, 0.8, True, 0.6),   # (1 − .25)·.8
     (0.25, 0.8, False, 0.0),  # filtered → 0
     (0.0, 1.0, True, 1.0),
     (1.0, 1.0, True, 0.0)],
)
def test_quality_signal(anomaly, sim, retained, expected):
    assert quality_signal(anomaly, sim, retained) == pytest.approx(expected)


def test_table_records_and_failures():
    t = RoutingTable(eta=0.2)
    # retained, A=.2, sim 1 → g=.8: C = .4 + .16 = .56; S = .6
    st = t.record("a", "math", anomaly=0.2, sim_to_z=1.0, retained=True)
    assert (st.c("math"), st.reliability) == pytest.approx((0.56, 0.6))
    # filtered → g=0: C = .8·.56 = .448; S = .8·.6 = .48
    t.record("a", "math", anomaly=0.6, sim_to_z=1.0, retained=False)
    # failure/timeout: C unchanged .448; S = .8·.48 = .384
    st = t.record_failure("a", "math")
    assert (st.c("math"), st.reliability) == pytest.approx((0.448, 0.384))
    assert st.asked("math") == 3
    # other domains and other clients keep the priors
    assert st.c("medicine") == 0.5 and st.asked("medicine") == 0
    assert (t.get("b").c("math"), t.get("b").reliability) == (0.5, 0.5)
    assert list(t) == ["a", "b"] and "a" in t and len(t) == 2


def test_table_checkpoint_round_trip():
    t = RoutingTable(eta=0.3)
    t.record("a", "math", anomaly=0.0, sim_to_z=1.0, retained=True)
    t.record_failure("b", "medicine")
    d = t.to_dict()
    u = RoutingTable.from_dict(d)
    assert u.to_dict() == d and u.eta == 0.3
    assert u.get("a").c("math") == pytest.approx(0.65)  # .7·.5 + .3·1


@pytest.mark.parametrize(
    "bad",
    [{"reliability": 2.0}, {"capability": {"math": -0.1}}, {"n_asked": {"math": -1}},
     {"capability": [0.5]}],
)
def test_state_from_dict_validation(bad):
    with pytest.raises(ValueError):
        RoutingState.from_dict(bad)


def test_table_validation():
    with pytest.raises(ValueError, match="eta"):
        RoutingTable(eta=0.0)
    with pytest.raises(ValueError, match="client_id"):
        RoutingTable().get("")


def test_record_round_is_one_step_whatever_the_batch_size():
    # 10 answers of one Flower round move C and S exactly one EMA step (eta .2):
    # C = .8*.5 + .2*mean(g) = .4 + .2*.6 = .52; S = .8*.5 + .2*(7/10) = .54
    t = RoutingTable(eta=0.2)
    st = t.record_round("a", "math", qualities=[0.6] * 10, retained=[True] * 7 + [False] * 3)
    assert st.c("math") == pytest.approx(0.52) and st.reliability == pytest.approx(0.54)
    assert st.asked("math") == 10
    # one answer of the same quality gives the same C step
    one = RoutingTable(eta=0.2).record_round("b", "math", qualities=[0.6], retained=[True])
    assert one.c("math") == pytest.approx(0.52) and one.reliability == pytest.approx(0.6)


def test_record_round_without_reference_keeps_capability():
    # no other retained answer to compare with (leave-one-out z empty): C stays at the prior
    st = RoutingTable(eta=0.2).record_round("a", "math", qualities=[], retained=[True, True])
    assert "math" not in st.capability and st.c("math") == 0.5
    assert st.reliability == pytest.approx(0.6)
