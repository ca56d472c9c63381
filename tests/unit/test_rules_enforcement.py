"""Rule model, detectors, P_resp / P_in, uncovered detection and P_gen (DESIGN §3.1, §4)."""

from __future__ import annotations

import json
import time

import pytest

from pfedma_flwr.protocol.schema import Claim, GlobalRule, StructuredResponse
from pfedma_flwr.rules.enforcement import (
    apply_query_rules,
    enforce_response,
    find_uncovered,
)
from pfedma_flwr.rules.generalize import (
    canonical_text,
    generalize,
    is_generic_pattern,
    rule_from_uncovered,
)
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.pii import RegexPiiRecognizer
from pfedma_flwr.rules.spans import find_spans

REC = RegexPiiRecognizer()


def rule(rid: str = "r", **kw) -> PrivacyRule:
    kw.setdefault("text", "t")
    kw.setdefault("category", "contact information")
    return PrivacyRule(rule_id=rid, **kw)


# --------------------------------------------------------------------------- model


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"patterns": ("(unclosed",)}, "invalid rule pattern"),
        ({"patterns": ("(a+)+$",)}, "nests quantifiers"),
        ({"patterns": (r"(\w*\s?)*x",)}, "nests quantifiers"),
        ({"patterns": ("x" * 501,)}, "exceeds"),
        ({"action": "delete"}, "action"),
        ({"scope": "both"}, "scope"),
        ({"origin": "global"}, "global_id"),
        ({"origin": "global", "global_id": "g1", "literals": ("x",)}, "cannot hold literals"),
    ],
)
def test_rule_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rule(**kwargs)


def test_find_spans_detectors():
    r = rule(entity_types=("EMAIL_ADDRESS",), patterns=(r"\bMRN-\d{4}\b",), literals=("ann lee",))
    text = "Ann Lee (MRN-1234) wrote ann@x.org; Announcement stays."
    spans = find_spans(r, text, REC)
    # literal: case-insensitive, word-bounded ("Announcement" does not match "Ann Lee")
    assert [(text[s.start : s.end], s.kind) for s in spans] == [
        ("Ann Lee", "CONTACT_INFORMATION"),
        ("MRN-1234", "CONTACT_INFORMATION"),
        ("ann@x.org", "EMAIL_ADDRESS"),
    ]


def test_regex_recognizer():
    text = (
        "mail a.b@ex.com, call (212) 555-0199, ssn 123-45-6789, card 4111 1111 1111 1111, "
        "bad card 4111 1111 1111 1112, ip 10.0.0.1, bad ip 999.1.1.1, born 1990-03-04, "
        "see https://ex.com/x"
    )
    got = {(s.entity_type, text[s.start : s.end]) for s in REC.analyze(text)}
    assert got == {
        ("EMAIL_ADDRESS", "a.b@ex.com"),
        ("PHONE_NUMBER", "(212) 555-0199"),
        ("US_SSN", "123-45-6789"),
        ("CREDIT_CARD", "4111 1111 1111 1111"),  # Luhn-valid only
        ("IP_ADDRESS", "10.0.0.1"),  # octets ≤ 255 only
        ("DATE_TIME", "1990-03-04"),
        ("URL", "https://ex.com/x"),
    }
    assert REC.analyze("It took 3 days and 45 minutes.") == []


def test_backtracking_shapes_rejected_and_matching_bounded():
    # A repeated group is the shape behind catastrophic backtracking: rejected up front.
    with pytest.raises(ValueError, match="quantified_group"):
        rule(patterns=(r"(?:a|aa)+$",))
    # What passes is bounded: a safe pattern over a long text stays far below the timeout.
    r = rule(patterns=(r"\bMRN-\d{4}\b",))
    t0 = time.perf_counter()
    assert find_spans(r, "a" * 5000 + "b", None) == []
    assert time.perf_counter() - t0 < 0.5


# --------------------------------------------------------------------------- P_resp


RESP = StructuredResponse(
    final_answer="Answer: 42. Contact ann@x.org",
    claims=(Claim("Dr. Zed treated the patient", ("Record of Dr. Zed, 10.0.0.1",)),),
)


def test_enforce_redact_generalize_and_outcomes():
    mail = rule("mail", entity_types=("EMAIL_ADDRESS",))
    name = rule("name", category="personal name", action="generalize", literals=("Dr. Zed",))
    ip = rule("ip", entity_types=("IP_ADDRESS",), scope="query")  # query scope: not applied
    res = enforce_response(RESP, [mail, name, ip], REC)
    assert not res.refused and res.response is not None
    assert res.response.final_answer == "Answer: 42. Contact [REDACTED:EMAIL_ADDRESS]"
    assert res.response.claims[0].claim == "[PERSONAL_NAME] treated the patient"
    assert res.response.claims[0].evidence == ("Record of [PERSONAL_NAME], 10.0.0.1",)
    out = {o.rule_id: (o.valid, o.conflict, o.n_spans) for o in res.outcomes}
    # mail: item gone, answer still extractable -> valid; final answer changed -> conflict
    # name: only claims touched -> valid, no conflict (2 spans: claim + evidence)
    assert out == {"mail": (True, True, 1), "name": (True, False, 2)}
    assert res.triggered_ids == ("mail", "name")


def test_enforce_refuse_and_extractability():
    refuse = rule("ref", entity_types=("IP_ADDRESS",), action="refuse")
    mail = rule("mail", entity_types=("EMAIL_ADDRESS",))
    res = enforce_response(RESP, [refuse, mail], REC)
    assert res.refused and res.response is None
    out = {o.rule_id: (o.valid, o.conflict) for o in res.outcomes}
    # refusal withholds the answer: not extractable -> invalid, final answer changed -> conflict;
    # mail is judged on its own application, unaffected by the refusal.
    assert out == {"ref": (False, True), "mail": (True, True)}
    # an answer that is nothing but the sensitive item is no longer extractable -> invalid
    only = StructuredResponse(final_answer="ann@x.org")
    (o,) = enforce_response(only, [mail], REC).outcomes
    assert (o.valid, o.conflict) == (False, True)
    # custom extractor and the client's own requirement
    (o,) = enforce_response(only, [mail], REC, answer_extractable=lambda r: True,
                            requirement_ok=lambda rl, r: False).outcomes
    assert (o.valid, o.conflict) == (True, True)


def test_enforce_overlap_redact_beats_generalize():
    a = rule("a", action="generalize", literals=("ann lee",))
    b = rule("b", category="personal name", literals=("lee",))
    res = enforce_response(StructuredResponse(final_answer="x Ann Lee y"), [a, b], None)
    # spans [2,9) and [6,9) merge; redact wins, the longest span names it
    assert res.response is not None
    assert res.response.final_answer == "x [REDACTED:CONTACT_INFORMATION] y"


def test_no_trigger_leaves_response_untouched():
    res = enforce_response(RESP, [rule("x", literals=("nothing here",))], REC)
    assert res.response == RESP and res.outcomes == ()


# --------------------------------------------------------------------------- P_in


def test_apply_query_rules():
    g_mail = GlobalRule(rule_id="g1", text="t", category="c", scope="query",
                        entity_types=("EMAIL_ADDRESS",))
    g_ref = GlobalRule(rule_id="g2", text="t", category="c", action="refuse", scope="query",
                       entity_types=("PHONE_NUMBER",))
    g_off = GlobalRule(rule_id="g3", text="t", category="c", entity_types=("IP_ADDRESS",),
                       scope="query", active=False)
    g_resp = GlobalRule(rule_id="g4", text="t", category="c", entity_types=("PHONE_NUMBER",))
    q = "Email ann@x.org or b@y.org or ann@x.org; call 212-555-0199 from 10.0.0.1"
    text, fired = apply_query_rules(q, [g_mail, g_ref, g_off, g_resp], REC)
    # refuse is not applied to queries; inactive and response-scope rules are skipped;
    # distinct addresses get distinct numbers, the same address the same one
    assert text == ("Email [REDACTED:EMAIL_ADDRESS_1] or [REDACTED:EMAIL_ADDRESS_2] or "
                    "[REDACTED:EMAIL_ADDRESS_1]; call 212-555-0199 from 10.0.0.1")
    assert fired == ["g1"]


# --------------------------------------------------------------------------- uncovered


def test_find_uncovered():
    resp = StructuredResponse(
        final_answer="Patient Nightjar Q, mail n@q.org, call 212-555-0199",
        claims=(Claim("project nightjar q again"),),
    )
    phone = rule("p", entity_types=("PHONE_NUMBER",))
    got = find_uncovered(resp, ["Nightjar Q", "absent item", ""], [phone], REC)
    # item found (case-insensitive, two occurrences -> one entry); email span uncovered;
    # phone covered by an active rule; absent items ignored
    assert sorted((u.kind, u.value, u.entity_types) for u in got) == [
        ("item", "Nightjar Q", ()),
        ("pii", "n@q.org", ("EMAIL_ADDRESS",)),
    ]
    # a rule covering the item makes it covered
    lit = rule("l", literals=("nightjar q",))
    mail = rule("m", entity_types=("EMAIL_ADDRESS",))
    assert find_uncovered(resp, ["Nightjar Q"], [phone, lit, mail], REC) == []


def test_uncovered_item_carries_entity_types():
    resp = StructuredResponse(final_answer="write to zed@q.org")
    (u,) = find_uncovered(resp, ["zed@q.org"], [], REC)
    assert (u.kind, u.entity_types) == ("item", ("EMAIL_ADDRESS",))
    r = rule_from_uncovered(u, rule_id="local-1")
    assert r.literals == ("zed@q.org",) and r.category == "contact information"


# --------------------------------------------------------------------------- P_gen


def test_generalize_canonical_and_drops_secrets():
    a = rule("a", text="Never leak Ann Lee's mail!", category="Contact_Information ",
             entity_types=("PHONE_NUMBER", "EMAIL_ADDRESS"), literals=("Ann Lee",),
             patterns=(r"\b\d{3}-\d{2}-\d{4}\b", r"(?i)ann\s+lee", r"(?i)nightjar\s+\w+"))
    b = rule("b", text="other wording", category="contact information",
             entity_types=("EMAIL_ADDRESS", "PHONE_NUMBER"), patterns=(r"\b\d{3}-\d{2}-\d{4}\b",))
    ga, gb = generalize(a), generalize(b)
    assert ga == gb  # two clients, same constraint -> identical candidate
    assert ga.text == "do not reveal email address, phone number in responses"
    assert ga.category == "contact information"
    assert ga.patterns == (r"\b\d{3}-\d{2}-\d{4}\b",)  # literal-bearing patterns dropped
    assert "ann" not in json.dumps(ga.to_dict()).lower()


@pytest.mark.parametrize(
    ("pattern", "generic"),
    [
        (r"\b\d{3}-\d{2}-\d{4}\b", True),
        (r"(?:Mr|Mrs|Ms)\.?\s[A-Z]\w+", True),  # literal runs ≤ 3 chars
        (r"[A-Z]{2}\d{6}", True),
        (r"(?P<id>\d+)", True),  # group name is not literal text
        (r"(?i)acme\s+corp", False),
        (r"Ward7", False),
    ],
)
def test_is_generic_pattern(pattern, generic):
    assert is_generic_pattern(pattern) is generic


def test_canonical_text_order_insensitive():
    t1 = canonical_text(entity_types=["US_SSN", "PERSON"], category="x")
    t2 = canonical_text(entity_types=["PERSON", "US_SSN", "PERSON"], category="y")
    assert t1 == t2 == "do not reveal person, us ssn in responses"
    assert canonical_text(entity_types=[], category="Sensitive  Record") == (
        "do not reveal sensitive record in responses"
    )


def test_canonical_text_query_scope_plural():
    assert canonical_text(entity_types=["PERSON"], category="x", scope="query") == (
        "do not reveal person in queries")
