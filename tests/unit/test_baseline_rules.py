"""Selection and aggregation rules of the baselines, by hand (pfedma_flwr/baselines)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pfedma_flwr.aggregation.consensus import CollabState, RoundResponse
from pfedma_flwr.baselines import debate, epe, fedicl, kabb, moa, router, scoring, single, voting
from pfedma_flwr.baselines.base import agreement, digest, same_team
from pfedma_flwr.baselines.hooks import AgentView, QueryOutcome
from pfedma_flwr.protocol.schema import Claim, StructuredResponse
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery
from pfedma_flwr.routing.state import RoutingState
from pfedma_flwr.rules.pii import PiiSpan, RegexPiiRecognizer


def rr(client: str, rnd: int, answer: str | None, retained: bool = True,
       claim: str = "") -> RoundResponse:
    resp = None if answer is None else StructuredResponse(
        final_answer=answer, claims=(Claim(claim or f"it is {answer}"),))
    return RoundResponse(client_id=client, round=rnd, response=resp, retained=retained)


def cand(cid: str, domains: tuple[str, ...] = (), *, asked: bool = False, emb=None,
         c_math: float | None = None) -> CandidateState:
    st = RoutingState(capability={} if c_math is None else {"math": c_math})
    return CandidateState(client_id=cid, state=st, domains=domains, asked_for_this_query=asked,
                          profile_embedding=None if emb is None else np.asarray(emb, np.float32))


Q = OrchestratorQuery(query_id="q1", text="2+2?", domain="math")


def view(client: str, rnd: int, history=(), z=None, domains=("math",), text="2+2?") -> AgentView:
    return AgentView(client_id=client, client_domains=tuple(domains), query_id="q1", text=text,
                     refinement="", domain="math", round=rnd, answer_kind="number",
                     selected=(client,), history=tuple(history), z=z)


# ----------------------------------------------------------------------------- votes

def test_vote_latest_counts_only_the_last_answered_round_with_equal_weights():
    h = [rr("a", 1, "3"), rr("b", 1, "3"), rr("c", 1, "3"), rr("a", 2, "4"), rr("b", 2, "4"),
         rr("c", 2, "5")]
    z = voting.vote_latest(h, kind="number", routing={"a": RoutingState(reliability=0.0)})
    # round 2 only: 4 (a, b) beats 5 (c) 2:1, a's zero reliability is ignored
    assert (z.answer, z.n_agreeing, z.n_retained, round(z.support, 6), z.round) == (
        "4", 2, 3, round(2 / 3, 6), 2)
    # every round: 3 has three votes, 4 two, 5 one
    z_all = voting.vote_all(h, kind="number")
    assert (z_all.answer, z_all.n_agreeing, z_all.n_retained) == ("3", 3, 6)


def test_vote_latest_falls_back_to_the_last_round_with_an_answer():
    h = [rr("a", 1, "7"), rr("b", 1, "8"), rr("b", 2, "8"), rr("c", 3, None),
         rr("d", 3, "9", retained=False)]
    assert voting.latest_voted_round(h) == 2
    z = voting.vote_latest(h, kind="number")
    assert (z.answer, z.n_retained, z.round) == ("8", 1, 3)
    assert voting.vote_latest([rr("a", 1, None)], kind="number").empty


def test_agreement_scores_each_clients_latest_answer_against_z():
    h = [rr("a", 1, "4"), rr("b", 1, "5"), rr("b", 2, "4.0"), rr("c", 1, "4", retained=False),
         rr("d", 1, None)]
    z = CollabState(answer="4", canonical="4", support=1.0, n_agreeing=2, n_retained=2)
    assert agreement(h, z, "number") == {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0}
    assert agreement(h, None, "number") == {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0}


def test_digest_numbers_agents_skips_failures_and_stays_bounded():
    h = [rr("zed", 1, "4", claim="two and two"), rr("amy", 1, None), rr("bob", 1, "5")]
    text = digest(h, header="H:", ask="Ask.")
    assert text == "H:\n- Agent 1: '4' (because: two and two)\n- Agent 2: '5' (because: it is 5)\nAsk."
    assert "zed" not in text and digest([rr("a", 1, None)], header="H", ask="A") == ""
    many = [rr(f"c{i}", 1, "x" * 150, claim="y" * 190) for i in range(40)]
    assert len(digest(many, header="H:", ask="Ask.", max_chars=1000)) <= 1000


# ----------------------------------------------------------------------------- scoring

def test_expertise_is_domain_match_plus_profile_cosine():
    q = OrchestratorQuery(query_id="q", text="t", domain="math", embedding=np.array([1.0, 0.0]))
    cs = [cand("m", ("math",), emb=[0.6, 0.8]), cand("p", ("medicine",), emb=[1.0, 0.0]),
          cand("g", (), emb=[0.0, 1.0])]
    # m: 1 + 0.6; p: 0 + 1.0; g: 0.5 + 0
    assert [round(scoring.expertise(q, c), 6) for c in cs] == [1.6, 1.0, 0.5]
    assert scoring.ranked(q, cs) == ["m", "p", "g"]
    assert scoring.ranked(q, cs, [1.0, 1.0, 2.0]) == ["g", "m", "p"]  # ties by id
    with pytest.raises(ValueError, match="2 scores for 3 candidates"):
        scoring.ranked(q, cs, [1.0, 2.0])


def test_single_agent_asks_the_best_match_once():
    o = single.SingleAgentOrchestrator(k_max=3)
    cs = [cand("b", ("medicine",)), cand("a", ("math",)), cand("c", ("math",))]
    assert o.select(Q, None, cs, round=1).clients == ("a",)
    assert o.select(Q, None, cs, round=2).stop


# ----------------------------------------------------------------------------- Fed-ICL

def test_fedicl_keeps_its_seeded_team_and_stops_when_unanimous():
    o = fedicl.FedICLOrchestrator(k_max=2, seed=3)
    cs = [cand(c) for c in "abcd"]
    team = o.select(Q, None, cs, round=1).clients
    assert len(team) == 2 and o.select(Q, None, cs, round=1).clients == team
    again = [cand(c, asked=c in team) for c in "abcd"]
    split = CollabState(answer="4", support=0.5, n_agreeing=1, n_retained=2)
    assert set(o.select(Q, split, again, round=2).clients) == set(team)
    agree = CollabState(answer="4", support=1.0, n_agreeing=2, n_retained=2)
    assert o.select(Q, agree, again, round=2).stop


def test_fedicl_broadcasts_the_vote_from_round_two():
    z = CollabState(answer="4", support=2 / 3, n_agreeing=2, n_retained=3,
                    dissent=(("5", 1 / 3),))
    text = fedicl.broadcast_text(z)
    assert text.startswith("Federated vote of the previous round: '4' (2 of 3 agents). "
                           "Other answers: '5' (33%).")
    o = fedicl.FedICLOrchestrator(k_max=2)
    assert o.compose(view("a", 1, z=z)) == ("2+2?", "")
    assert o.compose(view("a", 2, z=z)) == ("2+2?", text)
    assert fedicl.broadcast_text(None) == fedicl.broadcast_text(CollabState()) == ""


# ----------------------------------------------------------------------------- EPEAgents

def test_epe_authorizes_a_domains_entities_only_on_its_own_domain():
    assert epe.authorized_entities("medicine", ("medicine",)) == frozenset(
        {"PERSON", "PHONE_NUMBER", "EMAIL_ADDRESS", "US_SSN", "MEDICAL_LICENSE"})
    assert epe.authorized_entities("math", ("medicine",)) == frozenset()
    assert epe.authorized_entities("math", ("math",)) == frozenset()  # math protects none


def test_epe_filters_unauthorized_fields_and_merges_overlaps():
    text = "Call Ann at 555-123-4567 or ann@x.org."
    spans = [PiiSpan(5, 8, "PERSON", 1.0), PiiSpan(12, 24, "PHONE_NUMBER", 1.0),
             PiiSpan(28, 37, "EMAIL_ADDRESS", 1.0), PiiSpan(32, 37, "URL", 1.0)]
    assert epe.filter_fields(text, spans, frozenset()) == \
        "Call [PERSON] at [PHONE_NUMBER] or [EMAIL_ADDRESS]."
    assert epe.filter_fields(text, spans, frozenset({"PERSON", "EMAIL_ADDRESS"})) == \
        "Call Ann at [PHONE_NUMBER] or ann@[URL]."


def test_epe_sends_each_agent_its_own_view_once():
    o = epe.EPEOrchestrator(k_max=2, recognizer=RegexPiiRecognizer())
    text = "Patient phone 555-123-4567, on 2024-01-02: dose?"
    med = AgentView(client_id="p", client_domains=("medicine",), query_id="q", text=text,
                    refinement="", domain="medicine", round=1, answer_kind="option",
                    selected=("p", "m"), history=(), z=None)
    math_ = AgentView(**{**med.__dict__, "client_id": "m", "client_domains": ("math",)})
    assert o.compose(med) == (text, "")
    # the date is task content, not a field
    assert o.compose(math_) == ("Patient phone [PHONE_NUMBER], on 2024-01-02: dose?", "")
    cs = [cand("m", ("math",)), cand("p", ("medicine",)), cand("x", ("law",))]
    assert o.select(Q, None, cs, round=1).clients == ("m", "p")  # 1.0, then 0.0 by id
    assert o.select(Q, None, cs, round=2).stop


# ----------------------------------------------------------------------------- Router-R1

def test_router_scores_add_capability_and_pick_the_best_unconsulted():
    cs = [cand("a", ("math",), c_math=0.2), cand("b", ("math",), c_math=0.9),
          cand("c", ("medicine",), c_math=0.95)]
    # a: 1 + 0.2, b: 1 + 0.9, c: 0 + 0.95
    assert [round(x, 6) for x in router.router_scores(Q, cs)] == [1.2, 1.9, 0.95]
    assert [round(x, 6) for x in router.router_scores(Q, cs, use_capability=False)] == [1, 1, 0]
    assert router.next_expert(["b", "a", "c"], ["b"]) == "a"
    assert router.next_expert(["b"], ["b"]) is None
    assert router.repeated({1: "4", 2: "5", 3: "5"}) and not router.repeated({1: "4", 2: "5"})
    assert not router.repeated({1: "", 2: ""}) and not router.repeated({1: "4"})


def test_router_turns_stop_on_a_repeat_and_keep_their_memory_in_the_checkpoint():
    o = router.RouterR1Orchestrator(k_max=2)
    cs = [cand("a", ("math",), c_math=0.2), cand("b", ("math",), c_math=0.9)]
    assert o.select(Q, None, cs, round=1).clients == ("b",)
    z4 = CollabState(answer="4", canonical="4", support=1.0, n_agreeing=1, n_retained=1)
    asked_b = [cand("a", ("math",), c_math=0.2), cand("b", ("math",), c_math=0.9, asked=True)]
    assert o.select(Q, z4, asked_b, round=2).clients == ("a",)
    state = o.state_dict()
    assert state == {"answers": {"q1": {"1": "4"}}}
    fresh = router.RouterR1Orchestrator(k_max=2)
    fresh.load_state_dict(state)
    both = [cand("a", ("math",), c_math=0.2, asked=True),
            cand("b", ("math",), c_math=0.9, asked=True)]
    assert fresh.select(Q, z4, both, round=3).stop  # turn 2 answered 4 again
    z5 = CollabState(answer="5", canonical="5", support=1.0, n_agreeing=1, n_retained=1)
    assert o.select(Q, z5, both, round=3).clients == ("b",)  # all consulted: the best again
    o.observe(QueryOutcome("q1", "math", "number", {}, (), z5))
    assert o.state_dict() == {"answers": {}}


def test_router_shows_the_earlier_turns_in_order():
    h = [rr("b", 1, "4"), rr("a", 2, "5")]
    _, ref = router.RouterR1Orchestrator(k_max=1).compose(view("c", 3, h))
    assert ref.splitlines()[1:3] == ["- Agent 1: '4' (because: it is 4)",
                                     "- Agent 2: '5' (because: it is 5)"]


# ----------------------------------------------------------------------------- KABB

def test_kabb_posterior_decays_with_time_and_is_per_domain():
    outs = [("q1", "math", {"A": 1.0, "B": 0.0}), ("q2", "math", {"A": 1.0}),
            ("q3", "medicine", {"B": 1.0})]
    # n = 3, gamma = 0.5: ages 2, 1, 0
    assert kabb.posterior(outs, "A", "math", decay=0.5) == (1.0 + 0.25 + 0.5, 1.0)
    assert kabb.posterior(outs, "B", "math", decay=0.5) == (1.0, 1.25)
    assert kabb.posterior(outs, "B", "medicine", decay=0.5) == (2.0, 1.0)
    assert kabb.posterior(outs, "C", "math", decay=0.5, alpha0=2, beta0=3) == (2, 3)


def test_kabb_samples_beta_with_the_knowledge_distance():
    assert kabb.knowledge_distance("math", ("math",)) == 0.0
    assert kabb.knowledge_distance("math", ("law",)) == 1.0
    assert kabb.knowledge_distance("math", ()) == 0.5
    a, b = kabb.beta_params(2.0, 3.0, 1.0)
    assert (round(a, 9), b) == (round(2.0 / math.e, 9), 3.0)
    rng = np.random.default_rng(0)
    sure = {"hi": (1e6, 1.0), "lo": (1.0, 1e6), "mid": (50.0, 50.0)}
    assert kabb.thompson_top_k(sure, 2, rng) == ["hi", "mid"]


def test_kabb_learns_from_agreement_replaces_repeats_and_restores_its_state():
    o = kabb.KABBOrchestrator(k_max=1, seed=0, decay=1.0)
    z = CollabState(answer="4", canonical="4", support=0.5, n_agreeing=1, n_retained=2)
    o.observe(QueryOutcome("q0", "math", "number", {}, (rr("A", 1, "4"), rr("B", 1, "5")), z))
    o.observe(QueryOutcome("q0", "math", "number", {}, (rr("A", 1, "4"), rr("B", 1, "4")), z))
    assert o.outcomes() == [("q0", "math", {"A": 1.0, "B": 1.0})]  # the last observe wins
    for k in range(1, 30):
        o.observe(QueryOutcome(f"q{k}", "math", "number", {},
                               (rr("A", 1, "4"), rr("B", 1, "5")), z))
    # A agreed 30 times: Beta(31, 1); B 1 time in 30: Beta(2, 30)
    cs = [cand("A", ("math",)), cand("B", ("math",))]
    assert o.params(Q, cs) == {"A": (31.0, 1.0), "B": (2.0, 30.0)}
    assert o.select(Q, None, cs, round=1).clients == ("A",)
    assert o.select(Q, None, cs, round=2).stop
    fresh = kabb.KABBOrchestrator(k_max=1, seed=0, decay=1.0)
    fresh.load_state_dict(o.state_dict())
    assert fresh.outcomes() == o.outcomes()
    with pytest.raises(ValueError, match="decay"):
        kabb.KABBOrchestrator(k_max=1, decay=0.0)


# ----------------------------------------------------------------------------- OPTAGENT

def test_debate_edges_follow_the_quality_scores():
    w = debate.edge_weights([{"A": 1.0, "B": 0.0}], eta=0.5)
    # w_AB = 0.5 * 1 + 0.5 * 0 (B was wrong); w_BA = 0.5 * 1 + 0.5 * 1 (A was right)
    assert w == {("A", "B"): 0.5, ("B", "A"): 1.0}
    w2 = debate.edge_weights([{"A": 1.0, "B": 0.0}, {"A": 1.0, "B": 0.0, "C": 1.0}], eta=0.5)
    assert (w2[("A", "B")], w2[("C", "B")], w2[("B", "C")]) == (0.25, 0.5, 1.0)
    assert debate.neighbours("A", ["A", "B", "C"], w2, threshold=0.5) == ["C"]
    assert debate.neighbours("C", ["A", "B", "C"], w2, threshold=0.5) == ["A", "B"]
    # none passes: the heaviest alone
    assert debate.neighbours("A", ["A", "B"], {("A", "B"): 0.1}, threshold=0.5) == ["B"]


def test_debate_shows_only_neighbours_and_learns_across_queries():
    o = debate.OptAgentOrchestrator(k_max=3, eta=0.5, threshold=0.6)
    z = CollabState(answer="4", canonical="4", support=2 / 3, n_agreeing=2, n_retained=3)
    hist = (rr("A", 1, "4"), rr("B", 1, "5"), rr("C", 1, "4"))
    o.observe(QueryOutcome("q0", "math", "number", {}, hist, z))
    # scores A 1, B 0, C 1: w_AB = 0.5 < 0.6, w_AC = 1.0
    _, ref = o.compose(view("A", 2, hist))
    assert "'4'" in ref and "'5'" not in ref and ref.count("- Agent ") == 1
    assert o.compose(view("A", 1, hist)) == ("2+2?", "")
    cs = [cand(c, ("math",)) for c in "ABCD"]
    assert o.select(Q, None, cs, round=1).clients == ("A", "B", "C")
    assert o.select(Q, z, cs, round=2).clients == ("A", "B", "C")
    unan = CollabState(answer="4", support=1.0, n_agreeing=3, n_retained=3)
    assert o.select(Q, unan, cs, round=2).stop
    fresh = debate.OptAgentOrchestrator(k_max=3, eta=0.5, threshold=0.6)
    fresh.load_state_dict(o.state_dict())
    assert fresh.weights() == o.weights() == {("A", "B"): 0.5, ("A", "C"): 1.0,
                                              ("B", "A"): 1.0, ("B", "C"): 1.0,
                                              ("C", "A"): 1.0, ("C", "B"): 0.5}


def test_same_team_keeps_earlier_agents_then_fills_by_rank():
    cs = [cand("a", asked=True), cand("b"), cand("c", asked=True)]
    assert same_team(cs, ["b", "c", "a"], 3) == ["c", "a", "b"]
    assert same_team(cs, ["b", "c", "a"], 1) == ["c"]


# ----------------------------------------------------------------------------- MoA

def test_moa_layers_proposers_then_one_aggregator():
    assert [moa.moa_role(t, 3) for t in (1, 2, 3)] == ["proposer", "proposer", "aggregator"]
    assert moa.moa_role(1, 1) == "proposer"
    o = moa.MoAOrchestrator(k_max=2, t_max=2)
    cs = [cand("a", ("math",)), cand("b", ("law",)), cand("c", ("math",))]
    assert o.select(Q, None, cs, round=1).clients == ("a", "c")
    assert o.select(Q, None, cs, round=2).clients == ("a",)
    assert o.select(Q, None, cs, round=3).stop
    h = [rr("a", 1, "4"), rr("c", 1, "5")]
    _, ref = o.compose(view("a", 2, h))
    assert ref.startswith("Proposals of other agents for this task:\n- Agent 1: '4'")
    assert ref.endswith(moa._SYNTHESIZE)
    _, mid = moa.MoAOrchestrator(k_max=2, t_max=3).compose(view("a", 2, h))
    assert mid.endswith(moa._IMPROVE)
    # the aggregator's answer is final; a failed aggregator leaves the proposals' vote
    z = voting.vote_latest([*h, rr("a", 2, "5")], kind="number")
    assert (z.answer, z.n_retained) == ("5", 1)
    assert voting.vote_latest([*h, rr("a", 2, None)], kind="number").n_retained == 2
