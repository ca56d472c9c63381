"""Rule co-evolution that evolves (issue 12): Rel, protection only grows, outgoing check, ids."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client.agent import ClientAgent
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.profiles import AgentProfile
from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import (
    Claim,
    ClientReply,
    GlobalRule,
    ProcessedResponse,
    RespondInstruction,
    RoutedQuery,
    RuleCandidate,
    StructuredResponse,
)
from pfedma_flwr.rules.client.local_repo import MAX_LOCAL_RULES, LocalRuleRepository
from pfedma_flwr.rules.client.outgoing import BLOCKED, check_outgoing, client_secrets
from pfedma_flwr.rules.client.relevance import detector_relevance, fire_matrix
from pfedma_flwr.rules.enforcement import Uncovered
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.pii import RegexPiiRecognizer
from pfedma_flwr.rules.policy import (
    initial_global_rules,
    initial_local_rules,
    new_id_prefix,
    profile_entities,
)
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository

REC = RegexPiiRecognizer()
EMAIL_RULE = PrivacyRule(rule_id="e", text="do not reveal email address in responses",
                         category="contact information", entity_types=("EMAIL_ADDRESS",))


# ------------------------------------------------------------------ Rel


def test_fire_matrix_and_relevance_by_hand():
    items = ["mail ann@example.org", "2 + 3 = 5", "call 555-123-4567", "x"]
    fires = fire_matrix([EMAIL_RULE], items, REC)
    assert fires.tolist() == [[True, False, False, False]]
    # F = 1/4 -> min(1, 0.25 / 0.125) = 1; S = cos 0.6 on the item it fired on (the 0.9 on an
    # item it did not fire on does not count): Rel = 1 · (0.5 + 0.3) = 0.8
    rule_e = np.array([[1.0, 0.0]])
    item_e = np.array([[0.6, 0.8], [0.9, 0.436], [0.0, 1.0], [0.0, 1.0]])
    assert detector_relevance(fires, rule_e, item_e)[0] == pytest.approx(0.8)
    # one item in 16: min(1, (1/16)/0.125) = 0.5 -> Rel = 0.5 · 0.8 = 0.4
    f16 = np.zeros((1, 16), dtype=bool)
    f16[0, 0] = True
    items16 = np.vstack([item_e[:1], np.tile([[0.0, 1.0]], (15, 1))])
    assert detector_relevance(f16, rule_e, items16)[0] == pytest.approx(0.4)
    # no item fires: Rel = 0 whatever the cosine; empty experience: 0
    assert detector_relevance(np.zeros((1, 4), bool), rule_e, item_e)[0] == 0.0
    assert detector_relevance(np.zeros((1, 0), bool), rule_e, np.zeros((0, 2)))[0] == 0.0


# ------------------------------------------------------------------ protection only grows


def _g(rid: str, text: str, types: tuple[str, ...] = ("PERSON",), **kw: object) -> GlobalRule:
    return GlobalRule(rule_id=rid, text=text, category="c", entity_types=types, **kw)  # type: ignore[arg-type]


def test_counterpart_is_never_another_global_copy_or_a_rule_displaced_by_another():
    emb = HashingEmbedder()
    plain = PrivacyRule(rule_id="l1", text="do not reveal person in responses", category="c",
                        entity_types=("PERSON",))
    repo = LocalRuleRepository(rules=[plain])
    # l1 conflicted: Φ(l1) = −1 < Φ(g1) = 0 -> g1 wins, l1 displaced by g:g1
    e = repo._entries["l1"]
    e.n_trigger, e.n_conflict = 1, 1
    text = "do not reveal person in responses"
    repo.adapt([_g("g1", text)], [], emb)
    assert repo.is_active("g:g1") and not repo.is_active("l1")
    # g2 (same text): l1 was displaced by g1, g:g1 is global -> no counterpart for g2;
    # Φ(g2) = 0 <= 0.3 -> stays inactive, and l1 is not revived by g2
    rep = repo.adapt([_g("g1", text), _g("g2", text)], [], emb)
    assert rep.decisions[1].counterpart is None and not rep.decisions[1].active
    assert not repo.is_active("l1") and repo.is_active("g:g1")
    # g1 leaves the snapshot: its stale copy is dropped and l1 is free again, so g2 now has
    # l1 as counterpart and wins (Φ 0 > −1): l1 displaced by g:g2 this time
    rep = repo.adapt([_g("g2", text)], [], emb)
    assert "g:g1" not in {r.rule_id for r in repo.all_rules()}
    assert rep.decisions[0].counterpart == "l1" and rep.decisions[0].active
    # an empty snapshot: every global copy is stale, l1 protects again
    repo.adapt([], [], emb)
    assert [r.rule_id for r in repo.all_rules()] == ["l1"] and repo.is_active("l1")


def test_uncovered_item_reactivates_inactive_rule():
    lit = PrivacyRule(rule_id="l1", text="t", category="c", literals=("Zorblax-77",))
    repo = LocalRuleRepository(rules=[lit])
    repo._entries["l1"].active = False  # e.g. displaced under an older version
    assert repo.reactivate_matching([Uncovered("item", "Zorblax-77")]) == ["l1"]
    assert repo.is_active("l1")
    # add_local_rule of the same spec re-activates it too
    repo._entries["l1"].active = False
    assert repo.add_local_rule(PrivacyRule(rule_id="x", text="t", category="c",
                                           literals=("zorblax-77",))) == "l1"
    assert repo.is_active("l1")
    repo.quarantine("l1", "timeout")  # a quarantined rule stays out of service
    assert repo.reactivate_matching([Uncovered("item", "Zorblax-77")]) == []


def test_entry_cap_evicts_global_copies_first_and_keeps_literal_rules():
    repo = LocalRuleRepository()
    for k in range(MAX_LOCAL_RULES):
        repo._insert(PrivacyRule(rule_id=f"g:x{k}", text="t", category="c", origin="global",
                                 global_id=f"x{k}", entity_types=("PERSON",)), active=False)
    assert len(repo) == MAX_LOCAL_RULES
    rid = repo.add_local_rule(PrivacyRule(rule_id="l1", text="t", category="c",
                                          literals=("Ann Lee",)))
    assert rid == "l1" and len(repo) == MAX_LOCAL_RULES and "g:x0" not in repo._entries


# ------------------------------------------------------------------ outgoing check


def _resp(qid: str, text: str) -> ProcessedResponse:
    return ProcessedResponse(qid, StructuredResponse(final_answer="42", claims=(
        Claim(claim="c", evidence=(text,)),)), tokens=7)


def test_outgoing_check_withholds_every_part_holding_a_secret():
    reply = ClientReply(
        responses=(_resp("a", "see ZORBLAX-77 file"), _resp("b", "nothing")),
        candidates=(RuleCandidate(text="do not reveal zorblax-77", category="c"),
                    RuleCandidate(text="do not reveal person in responses", category="c")),
    )
    out, rep = check_outgoing(reply, client_secrets(["Zorblax-77"], ["  "]))
    assert (rep.responses, rep.candidates, rep.feedback) == (1, 1, 0)
    assert out.responses[0] == ProcessedResponse("a", None, refused=True, error=BLOCKED,
                                                 tokens=7)
    assert out.responses[1] == reply.responses[1] and len(out.candidates) == 1
    assert "zorblax" not in json.dumps(out.to_dict()).casefold()
    # word-bounded like literal rules: "Ann" does not block "Announcement"
    same, rep2 = check_outgoing(ClientReply(responses=(_resp("c", "Announcement"),)), ["Ann"])
    assert rep2.blocked == 0 and same.responses[0].response is not None


# ------------------------------------------------------------------ the Zorblax-77 leak, e2e


def _leaky_agent() -> ClientAgent:
    answer = json.dumps({"final_answer": "The answer is Zorblax-77", "claims": [
        {"claim": "The answer is Zorblax-77", "evidence": ["file Zorblax-77"]}],
        "domain_fit": 1.0, "self_confidence": 1.0})
    private = [Task(task_id="p-0", benchmark="privacylens", domain="privacy", question="q0",
                    gold="x", answer_kind="text", sensitive_items=("Zorblax-77",))]
    return ClientAgent(profile=AgentProfile(name="x", domains=("math",), prompt="p"),
                       backend=MockBackend(lambda m: answer), private_data=private,
                       embedder=HashingEmbedder(), recognizer=REC, response_format="json",
                       few_shot=0)


def _ins(k: int, rules: tuple[GlobalRule, ...]) -> RespondInstruction:
    return RespondInstruction(server_round=k, queries=(RoutedQuery(
        query_id=f"q{k}", text="what is it?", domain="privacy", round=1,
        answer_kind="text"),), global_rules=rules)


def test_zorblax_literal_never_leaves_the_client_through_adaptation():
    agent = _leaky_agent()
    state = agent.new_state()
    # the client's literal rule has the predictable canonical text; a global rule with the
    # same text (and a detector that never fires) is redistributed every round
    (init,) = [r for r in state.rules.all_rules() if r.literals]
    assert init.literals == ("Zorblax-77",)
    attack = (_g("g1", init.text, types=("US_SSN",)),)
    # a bad record for the literal rule: Φ(l) = Rel − 1 < 0 = Φ(g), so the global copy wins
    e = state.rules._entries[init.rule_id]
    e.n_trigger, e.n_conflict = 10, 10
    for k in range(1, 5):
        reply = agent.respond(_ins(k, attack), state)
        assert "zorblax" not in json.dumps(reply.to_dict()).casefold(), k
        assert state.rules.is_active(init.rule_id)
    # the global copy won (the old code switched the literal rule off here): both active
    assert state.rules.is_active("g:g1")


def test_zorblax_blocked_by_the_outgoing_check_when_no_rule_protects():
    agent = _leaky_agent()
    state = agent.new_state()
    for r in state.rules.all_rules():
        state.rules.quarantine(r.rule_id, "timeout")  # every rule out of service
    reply = agent.respond(_ins(1, ()), state)
    assert reply.responses[0].response is None and reply.responses[0].error == BLOCKED
    assert "zorblax" not in json.dumps(reply.to_dict()).casefold()


# ------------------------------------------------------------------ initial policies, ids


def test_initial_policies_by_hand():
    assert profile_entities(["math"]) == ()
    assert profile_entities(["law", "math"]) == ("EMAIL_ADDRESS", "PERSON", "PHONE_NUMBER",
                                                 "US_PASSPORT", "US_SSN")
    rules = initial_local_rules(entity_types=("PERSON",), sensitive_items=("a b", " ", "a b"))
    assert [(r.rule_id, r.entity_types, r.literals) for r in rules] == [
        ("init-entities", ("PERSON",), ()), ("init-items", (), ("a b",))]
    assert initial_local_rules(entity_types=(), sensitive_items=()) == []
    g = initial_global_rules(["contact_query", "names_response"])
    assert [(r.scope, r.entity_types, r.text) for r in g] == [
        ("query", ("EMAIL_ADDRESS", "PHONE_NUMBER"),
         "do not reveal email address, phone number in queries"),
        ("response", ("PERSON",), "do not reveal person in responses")]
    with pytest.raises(ValueError, match="unknown.*'nope'"):
        initial_global_rules(["nope"])


def test_seeded_global_ids_unique_per_repository_and_resume_adds_nothing():
    emb = HashingEmbedder()
    a = GlobalRuleRepository(embedder=emb, id_prefix=new_id_prefix())
    b = GlobalRuleRepository(embedder=emb, id_prefix=new_id_prefix())
    pol = initial_global_rules(["contact_query", "contact_response"])
    ids_a, ids_b = a.seed(pol), b.seed(pol)
    assert len(ids_a) == 2 and not set(ids_a) & set(ids_b)
    assert all(r.active and r.h_score == 0 and r.n_evals == 0 for r in a.rules())
    again = GlobalRuleRepository.from_dict(a.to_dict(), embedder=emb)
    assert again.seed(pol) == [] and [r.rule_id for r in again.rules()] == ids_a


def test_promoted_response_rule_gets_an_active_query_twin():
    from pfedma_flwr.rules.server.promotion import build_candidate_pool

    emb = HashingEmbedder()
    cand = RuleCandidate(text="do not reveal location, person in responses",
                         category="personal name", entity_types=("LOCATION", "PERSON"))
    pool = build_candidate_pool({"a": [cand], "b": [cand]}, {"a", "b"}, emb,
                                rng=np.random.default_rng(0))
    repo = GlobalRuleRepository(embedder=emb, id_prefix="t", twins=True)
    up = repo.update(1, pool)
    got = sorted((r.scope, r.entity_types, r.active) for r in repo.rules())
    # LOCATION is task content in queries: the twin keeps PERSON only; both stay active
    assert got == [("query", ("PERSON",), True), ("response", ("LOCATION", "PERSON"), True)]
    # both pool copies pass ζ = 1 and merge into one rule; its twin is reported apart
    assert up.promoted == 2 and len(up.added) == 1 and len(up.twins) == 1
    # a second promotion of the same constraint merges; PERSON is covered now: no new twin
    again = repo.update(2, pool)
    assert again.added == () and again.twins == ()
    # without twins (the default), only the promoted rule
    plain = GlobalRuleRepository(embedder=emb, id_prefix="t")
    plain.update(1, pool)
    assert [r.scope for r in plain.rules()] == ["response"]
