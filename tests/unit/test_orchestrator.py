"""Orchestrators (DESIGN §3.12): scores, bounds, STOP, exploration, -IA/-RT, validation."""

import math

import numpy as np
import pytest

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.routing.orchestrator import (
    ORCHESTRATORS,
    CandidateState,
    HeuristicOrchestrator,
    Orchestrator,
    OrchestratorQuery,
    RandomOrchestrator,
    Selection,
    validate_selection,
)
from pfedma_flwr.routing.state import RoutingState

Q = OrchestratorQuery("q1", "ducks and eggs", "math", embedding=np.array([1.0, 0.0]))
# cos(q, profile): a 1, b 0, c .6
PROFILES = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [0.6, 0.8]}


def cand(cid, *, c=None, s=0.5, asked=0, asked_now=False, profile=None):
    st = RoutingState(capability={} if c is None else {"math": c}, reliability=s,
                      n_asked={"math": asked} if asked else {})
    emb = np.array(profile if profile is not None else PROFILES[cid])
    return CandidateState(cid, st, f"profile {cid}", emb, asked_now)


def orch(**kw):
    kw.setdefault("k_max", 2)
    return HeuristicOrchestrator(**kw)


def test_scores_round_one_top_k():
    cands = [cand("b"), cand("c"), cand("a")]
    # priors C=S=.5, n_total=0 → bonus 0:
    # a (.5+1)/2·.5=.375, b (.5+0)/2·.5=.125, c (.5+.6)/2·.5=.275
    assert orch().scores(Q, cands) == pytest.approx([0.125, 0.275, 0.375])
    assert orch().select(Q, None, cands, round=1).clients == ("a", "c")
    assert orch().select(Q, None, cands, round=1, k_max=1).clients == ("a",)
    # K larger than the pool: everyone, by score
    assert orch(k_max=5).select(Q, None, cands, round=1).clients == ("a", "c", "b")


def test_selection_says_why_with_the_score_parts_of_the_chosen_and_the_first_left_out():
    # the numbers of test_scores_round_one_top_k: a .375 and c .275 chosen, b .125 left out
    sel = orch().select(Q, None, [cand("b"), cand("c", asked_now=True), cand("a")], round=1)
    assert sel.clients == ("a", "c") and set(sel.why) == {"a", "b", "c"}
    assert sel.why["a"] == {"C": 0.5, "sim": 1.0, "S": 0.5, "bonus": 0.0, "cost": 0.0,
                            "score": 0.375, "filtered": 0.0, "off_domain": 0.0,
                            "asked_again": 0.0, "way": 0.0}
    assert sel.why["c"]["sim"] == pytest.approx(0.6) and sel.why["c"]["score"] == 0.275
    # round 2: c was asked for this query, so b (not asked) comes first although it scores less
    later = orch(k_max=1).select(Q, None, [cand("b"), cand("c", asked_now=True)], round=2)
    assert later.clients == ("b",)
    assert later.why["c"]["asked_again"] == 1.0 and later.why["b"]["asked_again"] == 0.0
    assert later.why["c"]["score"] > later.why["b"]["score"]
    # what a plug-in policy says is recorded as numbers only, for the chosen and one more
    odd = Selection(("a",), why={"a": {"score": "0.5", "note": "x", "inf": float("inf")},
                                 "b": {"score": 1}, "c": {"score": 2}, 7: "not a mapping"})
    assert odd.why_record() == {"a": {"score": 0.5}, "b": {"score": 1.0}}
    # a selection without reasons (a plug-in policy) compares and prints as before
    assert Selection(("a",)) == Selection(("a",), why={"a": {"score": 1.0}})
    assert "why" not in repr(Selection(("a",)))


def test_exploration_bonus():
    # asks for math: a 3, b 0, c 1 → n_total 4; with c=1 bonus = sqrt(ln 5/(1+n_i)):
    # a .375+sqrt(1.6094/4)=.375+.6343=1.0093; b .125+1.2686=1.3936; c .275+.8971=1.1721
    cands = [cand("a", asked=3), cand("b"), cand("c", asked=1)]
    got = orch(exploration_c=1.0).scores(Q, cands)
    assert got == pytest.approx([0.375 + math.sqrt(math.log(5) / 4), 0.125 + math.sqrt(math.log(5)),
                                 0.275 + math.sqrt(math.log(5) / 2)])
    assert orch(exploration_c=1.0).select(Q, None, cands, round=1, k_max=1).clients == ("b",)
    assert orch(exploration_c=0.0).select(Q, None, cands, round=1, k_max=1).clients == ("a",)


@pytest.mark.parametrize(
    ("kw", "cands", "first"),
    [
        # a: (.1+1)/2·.5=.275 < b: (.9+.6)/2·.5=.375
        ({}, [cand("a", c=0.1), cand("b", c=0.9, profile=[0.6, 0.8])], "b"),
        # -IA (C:=1): a (1+1)/2·.5=.5 > b (1+.6)/2·.5=.4
        ({"use_capability": False}, [cand("a", c=0.1), cand("b", c=0.9, profile=[0.6, 0.8])], "a"),
        # a: (.5+1)/2·.2=.15 < b: (.5+.6)/2·.9=.495
        ({}, [cand("a", s=0.2), cand("b", s=0.9, profile=[0.6, 0.8])], "b"),
        # -RT (S:=1): a .75 > b .55
        ({"use_reliability": False}, [cand("a", s=0.2), cand("b", s=0.9, profile=[0.6, 0.8])],
         "a"),
    ],
)
def test_ablations_ia_rt(kw, cands, first):
    assert orch(k_max=1, **kw).select(Q, None, cands, round=1).clients == (first,)


@pytest.mark.parametrize(
    ("rnd", "support", "n_agreeing", "stop"),
    [
        (2, 0.8, 2, True),
        (2, 0.7, 2, True),    # boundary: support ≥ stop_support
        (2, 0.69, 3, False),
        (2, 0.9, 1, False),   # a single agreeing response is not consensus
        (1, 1.0, 3, False),   # round 1 always selects
    ],
)
def test_stop_rule(rnd, support, n_agreeing, stop):
    z = CollabState(answer="18", canonical="18", support=support, round=rnd - 1,
                    n_agreeing=n_agreeing, n_retained=3)
    sel = orch().select(Q, z, [cand("a"), cand("b")], round=rnd)
    assert sel.stop is stop
    assert (sel.clients == ()) is stop
    # the engine asks the same rule before building any candidate list: both must agree
    assert (orch().stop_before_routing(z, round=rnd) is not None) is stop


def test_later_rounds_prefer_clients_not_yet_asked():
    cands = [cand("a", asked_now=True), cand("b"), cand("c")]
    # scores a .375 > c .275 > b .125, but a was asked: c, b first, then a
    assert orch(k_max=2).select(Q, None, cands, round=2).clients == ("c", "b")
    assert orch(k_max=3).select(Q, None, cands, round=2).clients == ("c", "b", "a")
    # round 1 ignores the flag
    assert orch(k_max=2).select(Q, None, cands, round=1).clients == ("a", "c")


def test_later_rounds_prefer_in_domain_clients_over_unasked_off_domain_ones():
    import dataclasses

    def dom(c, *domains):
        return dataclasses.replace(c, domains=domains)

    # a and c are math clients, a asked already; b (medicine) not asked
    cands = [dom(cand("a", asked_now=True), "math"), dom(cand("b"), "medicine"),
             dom(cand("c"), "physics", "math")]
    # tiers: c (in-domain, new), a (in-domain, again), b (off-domain)
    assert orch(k_max=3).select(Q, None, cands, round=2).clients == ("c", "a", "b")
    # with c asked too, both math clients come again before the physician
    cands[2] = dom(cand("c", asked_now=True), "physics", "math")
    assert orch(k_max=2).select(Q, None, cands, round=2).clients == ("a", "c")


def test_a_client_filtered_on_this_query_comes_after_every_other():
    import dataclasses

    def dom(c, *domains, filtered=False):
        return dataclasses.replace(c, domains=domains, filtered_for_this_query=filtered)

    # a and c are math clients asked in round 1; the filter removed c's answer; b is off-domain
    cands = [dom(cand("a", asked_now=True), "math"), dom(cand("b"), "medicine"),
             dom(cand("c", asked_now=True), "physics", "math", filtered=True)]
    # without the flag c (in-domain, again) would precede b (off-domain): a, c, b
    assert orch(k_max=2).select(Q, None, cands, round=2).clients == ("a", "b")
    # asked again only when no one else is left
    assert orch(k_max=3).select(Q, None, cands, round=2).clients == ("a", "b", "c")
    # both math answers filtered: the off-domain b (lowest score, .125) is asked first
    cands[0] = dom(cand("a", asked_now=True), "math", filtered=True)
    assert orch(k_max=1).select(Q, None, cands, round=2).clients == ("b",)


def test_mix_reasoning_programs_first_then_a_way_not_yet_heard():
    import dataclasses

    def way(c, reasoning, *domains):
        return dataclasses.replace(c, reasoning=reasoning, domains=domains or ("math",))

    # scores a .375 > c .275 > b .125 (test_scores_round_one_top_k); a reasons in text, b and c
    # compute with a program, d computes too but is off-domain (and scores as a)
    cands = [way(cand("a"), "cot"), way(cand("b"), "program"), way(cand("c"), "program"),
             way(cand("d", profile=[1.0, 0.0]), "program", "medicine")]
    assert orch().select(Q, None, cands, round=1).clients == ("a", "c")  # off: by score
    mixed = orch(mix_reasoning=True)
    assert mixed.select(Q, None, cands, round=1).clients == ("c", "b")
    assert mixed.select(Q, None, cands, round=1, k_max=3).clients == ("c", "b", "a")
    # round 2 after the two programs split: the text reasoner first although a third,
    # not yet asked program agent e scores higher (cos 1 like a, C .9)
    asked = [dataclasses.replace(c, asked_for_this_query=c.client_id in "bc") for c in cands]
    e = way(cand("e", c=0.9, profile=[1.0, 0.0]), "program")
    assert mixed.select(Q, None, [*asked, e], round=2, k_max=1).clients == ("a",)
    assert orch().select(Q, None, [*asked, e], round=2, k_max=1).clients == ("e",)
    # unknown ways ("", e.g. a plug-in's candidates) rank as not heard yet
    blank = [dataclasses.replace(c, reasoning="") for c in asked]
    assert mixed.select(Q, None, blank, round=2, k_max=1).clients == ("a",)


def test_round_one_prefers_in_domain_clients_whose_capability_fell_below_the_prior():
    import dataclasses

    from pfedma_flwr.routing.state import RoutingState

    # a and b are math clients whose C fell to 0.4 (they split on hard questions); c and d are
    # never-asked off-domain clients at the 0.5 prior and score higher (the exp41 run: from the
    # second batch on, GSM8K went to the physician and the lawyer)
    low = RoutingState(capability={"math": 0.4}, n_asked={"math": 10})
    cands = [dataclasses.replace(cand(x, profile=[1, 0]), domains=dom, state=st)
             for x, dom, st in (("a", ("math",), low), ("b", ("math", "economics"), low),
                                ("c", ("medicine",), RoutingState()),
                                ("d", ("law",), RoutingState()))]
    o = orch(k_max=2)
    s = o.scores(Q, cands)
    assert min(s[2], s[3]) > max(s[0], s[1])  # by score alone the off-domain pair would win
    assert o.select(Q, None, cands, round=1).clients == ("a", "b")
    # with no in-domain client left, off-domain ones still answer
    assert o.select(Q, None, cands[2:], round=1).clients == ("c", "d")


def test_ties_by_client_id_and_no_candidates():
    cands = [cand("b", profile=[1, 0]), cand("a", profile=[1, 0])]
    assert orch().select(Q, None, cands, round=1).clients == ("a", "b")
    assert orch().select(Q, None, [], round=1).stop


def test_embedder_fallback():
    emb = HashingEmbedder(dim=64)
    q = OrchestratorQuery("q", "solve the equation", "math")
    cands = [CandidateState("a", RoutingState(), "solve the equation"),
             CandidateState("b", RoutingState(), "clinical cardiology")]
    # identical text → cos 1 → (.5+1)/2·.5 = .375
    assert orch(embedder=emb).scores(q, cands)[0] == pytest.approx(0.375)
    assert orch(embedder=emb).select(q, None, cands, round=1, k_max=1).clients == ("a",)
    with pytest.raises(ValueError, match="embedding"):
        orch().select(q, None, cands, round=1)


@pytest.mark.parametrize(
    ("sel", "match"),
    [
        (Selection(()), "1..2"),
        (Selection(("a", "b", "c")), "1..2"),
        (Selection(("a", "a")), "repeats"),
        (Selection(("a", "zz")), "unknown"),
        (Selection(("a",), stop=True), "STOP"),
    ],
)
def test_validate_selection_rejects(sel, match):
    with pytest.raises(ValueError, match=match):
        validate_selection(sel, ["a", "b", "c"], 2)


def test_validate_selection_accepts():
    assert validate_selection(Selection(("b",)), ["a", "b"], 2).clients == ("b",)
    assert validate_selection(Selection.stop_now("done"), ["a"], 1).stop


def test_random_orchestrator():
    cands = [cand(x) for x in "abc"] + [cand("d", profile=[1, 0])]
    r = RandomOrchestrator(k_max=2, seed=7)
    picks = [r.select(OrchestratorQuery(f"q{i}", "t", "math"), None, cands, round=1)
             for i in range(20)]
    assert all(1 <= len(p.clients) <= 2 and len(set(p.clients)) == len(p.clients) for p in picks)
    # deterministic per (seed, query, round), independent of call order
    again = RandomOrchestrator(k_max=2, seed=7)
    assert again.select(OrchestratorQuery("q5", "t", "math"), None, cands, round=1) == picks[5]
    assert len({p.clients for p in picks}) > 1
    z = CollabState(answer="1", canonical="1", support=0.9, n_agreeing=2, n_retained=2)
    assert r.select(Q, z, cands, round=2).stop
    assert not RandomOrchestrator(k_max=2, stop_support=None).select(Q, z, cands, round=2).stop


def test_registry_and_validation():
    assert {"heuristic", "random"} <= set(ORCHESTRATORS.names())
    assert ORCHESTRATORS.get("heuristic") is HeuristicOrchestrator
    assert isinstance(orch(), Orchestrator) and isinstance(RandomOrchestrator(k_max=1),
                                                           Orchestrator)
    for kw, match in [({"k_max": 0}, "k_max"), ({"stop_support": 1.5}, "stop_support"),
                      ({"exploration_c": -1.0}, "exploration_c")]:
        with pytest.raises(ValueError, match=match):
            orch(**kw)
    with pytest.raises(ValueError, match="round"):
        orch().select(Q, None, [cand("a")], round=0)


@pytest.mark.parametrize("n_agreeing,n_retained,k_max,expected", [
    (1, 2, 3, ("c",)),          # split vote 1:1 -> one more agreeing vote makes 2 agreeing
    (0, 0, 3, ("c", "b")),      # nothing retained -> 2 votes needed
    (2, 4, 3, ("c",)),          # 2 agree but support < stop_support: one more vote
    (0, 0, 1, ("c",)),          # never more than K_max
])
def test_adaptive_k_asks_only_the_votes_still_needed(n_agreeing, n_retained, k_max, expected):
    z = CollabState(answer="18" if n_retained else "", canonical="18" if n_retained else "",
                    support=0.5 if n_retained else 0.0, round=1, n_agreeing=n_agreeing,
                    n_retained=n_retained)
    cands = [cand("a", asked_now=True), cand("b"), cand("c")]
    assert orch(k_max=k_max, adaptive_k=True).select(Q, z, cands, round=2).clients == expected
    # round 1 always takes K_max; without adaptive_k later rounds do too
    assert len(orch(k_max=k_max, adaptive_k=True).select(Q, None, cands, round=1).clients) \
        == k_max
    assert len(orch(k_max=k_max).select(Q, z, cands, round=2).clients) == k_max
