"""Weighted vote into z (DESIGN §3.9): weights, support, ties, ablations, empty cases."""

import pytest

from pfedma_flwr.aggregation.consensus import CollabState, RoundResponse, aggregate, response_weight
from pfedma_flwr.protocol.schema import Claim, StructuredResponse
from pfedma_flwr.routing.state import RoutingState


def rr(cid, answer, *, rnd=1, retained=True, claims=()):
    resp = None if answer is None else StructuredResponse(answer, tuple(Claim(c) for c in claims))
    return RoundResponse(client_id=cid, round=rnd, response=resp, retained=retained)


# a: S=.8, C_math=.5 → w=.4;  b: S=.5, C_math=.6 → w=.3;  c: priors → w=.25
STATES = {
    "a": RoutingState(capability={"math": 0.5}, reliability=0.8),
    "b": RoutingState(capability={"math": 0.6}, reliability=0.5),
}
HISTORY = [
    rr("a", "The answer is 18.", claims=["9 eggs", "2 dollars each"]),
    rr("b", "18.00", claims=["9 eggs", "9·2 = 18"]),
    rr("c", "20", claims=["10 eggs"]),
]


def test_response_weight_and_ablations():
    st = STATES["a"]
    assert response_weight(st, "math") == pytest.approx(0.4)
    assert response_weight(st, "math", use_capability=False) == pytest.approx(0.8)   # -IA
    assert response_weight(st, "math", use_reliability=False) == pytest.approx(0.5)  # -RT
    assert response_weight(st, "medicine") == pytest.approx(0.4)  # prior C .5 · S .8


def test_weighted_vote():
    z = aggregate(HISTORY, kind="number", domain="math", routing=STATES, round=1)
    # groups: 18 ← a(.4)+b(.3)=.7;  20 ← c(.25);  total .95
    assert z.canonical == "18"
    assert z.answer == "The answer is 18."  # heaviest member's text
    assert z.support == pytest.approx(0.7 / 0.95)
    assert z.n_agreeing == 2 and z.n_retained == 3 and z.round == 1
    assert z.dissent == (("20", pytest.approx(0.25 / 0.95)),)
    # claims of the agreeing responses, heaviest first, de-duplicated
    assert z.claims == ("9 eggs", "2 dollars each", "9·2 = 18")
    assert z.disputed_claims == ("10 eggs",)


@pytest.mark.parametrize(
    ("use_c", "use_s", "support"),
    [
        # -RT (S := 1): w = C → 18: .5+.6=1.1, 20: .5 → 1.1/1.6
        (True, False, 1.1 / 1.6),
        # -IA (C := 1): w = S → 18: .8+.5=1.3, 20: .5 → 1.3/1.8
        (False, True, 1.3 / 1.8),
        # both: plain majority 2/3
        (False, False, 2 / 3),
    ],
)
def test_vote_ablations(use_c, use_s, support):
    z = aggregate(HISTORY, kind="number", domain="math", routing=STATES,
                  use_capability=use_c, use_reliability=use_s)
    assert z.support == pytest.approx(support)


def test_weight_tie_goes_to_more_votes_then_smallest_answer():
    # x: S=1, C=.5 → .5 for "7";  y, z priors .25 + .25 = .5 for "9" → tie, "9" has more votes
    states = {"x": RoutingState(capability={"math": 0.5}, reliability=1.0)}
    hist = [rr("x", "7"), rr("y", "9"), rr("z", "9")]
    z = aggregate(hist, kind="number", domain="math", routing=states)
    assert (z.canonical, z.support, z.n_agreeing) == ("9", 0.5, 2)
    # equal weights and counts: the smaller canonical answer, whatever the history order
    for hist in ([rr("c", "20"), rr("d", "18")], [rr("d", "18"), rr("c", "20")]):
        assert aggregate(hist, kind="number", domain="math", routing={}).canonical == "18"


def test_filtered_unparsed_and_empty():
    hist = [rr("a", "18", retained=False), rr("b", None, retained=False), rr("c", None)]
    z = aggregate(hist, kind="number", domain="math", routing=STATES, round=2)
    assert z == CollabState(round=2)
    assert z.answer == "" and z.support == 0.0 and z.empty
    assert aggregate([], kind="number", domain="math", routing=STATES).round == 0


def test_a_client_votes_once_with_its_latest_answer_and_round_defaults_to_latest():
    # issue 30: c answered 20 in rounds 1 and 2 and used to vote twice (.25 + .25 = .5 beat
    # a's .4); one vote per client: a 18 (.4) beats c 20 (.25) → .4/.65
    hist = [rr("a", "18"), rr("c", "20"), rr("c", "20", rnd=2)]
    z = aggregate(hist, kind="number", domain="math", routing=STATES)
    assert (z.canonical, z.round, z.n_agreeing, z.n_retained) == ("18", 2, 1, 2)
    assert z.support == pytest.approx(0.4 / 0.65)
    # its later answer is the one that counts: c changes to 18 → one group .65, support 1
    z = aggregate([rr("a", "18"), rr("c", "20"), rr("c", "18", rnd=2)], kind="number",
                  domain="math", routing=STATES)
    assert (z.canonical, z.n_agreeing, z.support) == ("18", 2, 1.0)
    # a filtered later answer does not replace a retained earlier one
    z = aggregate([rr("c", "20"), rr("c", "18", rnd=2, retained=False)], kind="number",
                  domain="math", routing=STATES)
    assert z.canonical == "20"


def test_vote_weighs_one_minus_anomaly():
    # a (.4) with A = .5 → .2; b (.3) with A = 0 → .3: b's answer wins .3/.5 (it lost .3/.7)
    hist = [RoundResponse("a", 1, StructuredResponse("18"), True, anomaly=0.5),
            RoundResponse("b", 1, StructuredResponse("20"), True, anomaly=0.0)]
    z = aggregate(hist, kind="number", domain="math", routing=STATES)
    assert (z.canonical, z.support) == ("20", pytest.approx(0.3 / 0.5))


def test_zero_weights_fall_back_to_equal_weights():
    states = {k: RoutingState(capability={"math": 0.0}) for k in "abc"}
    hist = [rr("a", "1"), rr("b", "1"), rr("c", "2")]
    z = aggregate(hist, kind="number", domain="math", routing=states)
    assert (z.canonical, z.support) == ("1", pytest.approx(2 / 3))


def test_math_answers_group_by_equivalence():
    hist = [rr("a", r"\frac{1}{2}"), rr("b", "0.5"), rr("c", "1/3")]
    z = aggregate(hist, kind="math", domain="math", routing={})
    assert (z.canonical, z.n_agreeing) == ("1/2", 2)


def test_collab_state_round_trip_and_claim_limit():
    z = aggregate(HISTORY, kind="number", domain="math", routing=STATES, max_claims=1)
    assert z.claims == ("9 eggs",)
    assert CollabState.from_dict(z.to_dict()) == z
    with pytest.raises(ValueError, match="max_claims"):
        aggregate(HISTORY, kind="number", domain="math", routing=STATES, max_claims=-1)
