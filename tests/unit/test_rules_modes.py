"""The mode table of docs/rules.md, client side and server seeding, derived by hand (issue 12).

One law-profile client (initial entity rule: EMAIL, PERSON, PHONE, US_PASSPORT, US_SSN; its D_i
item ``Zorblax-77`` as a literal) answers one query whose claim holds an e-mail, a phone number,
an IP address and a calendar date; the server sends ``contact_response`` and
``dates_places_response``. What each mode adds:

- NR: nothing redacted (rules held, never applied);
- SR: e-mail and phone redacted by the initial rule; the IP stays (no new rules);
- LE: + the IP (uncovered -> a new local rule); no candidate, no adoption;
- G2L: + the date (the adopted global dates rule; its detector fires on the client's D_i
  question, Rel = 1 · (0.5 + 0.5 S) > 0.3); no candidate;
- L2G: LE's response + the IP rule's generalized candidate; nothing adopted;
- full: G2L's response + the candidate + Δ-count feedback on the adopted global rules.
"""

from __future__ import annotations

import json

import pytest

from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client.agent import ClientAgent
from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.profiles import AgentProfile
from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import ClientReply, RespondInstruction, RoutedQuery
from pfedma_flwr.rules.pii import RegexPiiRecognizer
from pfedma_flwr.rules.policy import DEFAULT_GLOBAL_POLICY, initial_global_rules

CLAIM = "mail bob@example.org or 555-123-4567 from 10.1.2.3 on 2024-01-05"
EMAIL, PHONE, IP, DATE = "bob@example.org", "555-123-4567", "10.1.2.3", "2024-01-05"


def _reply(mode: str) -> ClientReply:
    answer = json.dumps({"final_answer": "done", "claims": [{"claim": CLAIM, "evidence": []}],
                         "domain_fit": 1.0, "self_confidence": 1.0})
    private = [Task(task_id="p-0", benchmark="privacylens", domain="privacy",
                    question="write to ann@example.org about the visit on 2023-03-04",
                    gold="x", answer_kind="text", sensitive_items=("Zorblax-77",))]
    agent = ClientAgent(profile=AgentProfile(name="l", domains=("law",), prompt="p"),
                        backend=MockBackend(lambda m: answer), private_data=private,
                        embedder=HashingEmbedder(), recognizer=RegexPiiRecognizer(),
                        rule_mode=mode, response_format="json", few_shot=0)
    snapshot = tuple(initial_global_rules(["contact_response", "dates_places_response"]))
    ins = RespondInstruction(server_round=1, queries=(RoutedQuery(
        query_id="q", text="reply to bob", domain="privacy", round=1, answer_kind="text"),),
        global_rules=snapshot if mode in ("G2L", "full") else ())
    return agent.respond(ins, agent.new_state())


#                 mode    kept in the uploaded claim     candidates  feedback
TABLE = [
    ("NR", {EMAIL, PHONE, IP, DATE}, False, False),
    ("SR", {IP, DATE}, False, False),
    ("LE", {DATE}, False, False),
    ("G2L", set(), False, True),
    ("L2G", {DATE}, True, False),
    ("full", set(), True, True),
]


@pytest.mark.parametrize(("mode", "kept", "candidates", "feedback"), TABLE)
def test_each_mode_does_what_the_table_says(mode, kept, candidates, feedback):
    reply = _reply(mode)
    claim = reply.responses[0].response.claims[0].claim
    assert {s for s in (EMAIL, PHONE, IP, DATE) if s in claim} == kept, claim
    assert bool(reply.candidates) is candidates
    assert bool(reply.feedback) is feedback
    if candidates:  # the new IP rule, generalized: no literal, canonical text
        assert [c.entity_types for c in reply.candidates] == [("IP_ADDRESS",)]
    assert "zorblax" not in json.dumps(reply.to_dict()).casefold()


def test_every_pair_of_modes_differs_on_the_client():
    seen = {}
    for mode, *_ in TABLE:
        r = _reply(mode)
        seen[mode] = (r.responses[0].response.claims[0].claim, len(r.candidates),
                      len(r.feedback))
    assert len(set(seen.values())) == len(TABLE), seen


@pytest.mark.parametrize(("mode", "n_seeded"), [("NR", 0), ("SR", 4), ("full", 4)])
def test_server_seeds_its_policy_except_under_nr(mode, n_seeded):
    from pfedma_flwr.server.components import build_global_rules

    cfg = PFedMAConfig()
    assert build_global_rules(cfg, HashingEmbedder()).rules() == []  # default: no policy
    cfg.rules.mode, cfg.rules.global_policy = mode, list(DEFAULT_GLOBAL_POLICY)
    repo = build_global_rules(cfg, HashingEmbedder())
    assert len(repo) == n_seeded
    assert {r.scope for r in repo.rules()} == ({"query", "response"} if n_seeded else set())
