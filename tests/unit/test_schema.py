"""Wire dataclasses: round trips and rejection of malformed/hostile payloads with a reason."""

import math

import pytest

from pfedma_flwr.protocol.schema import (
    Claim,
    ClientReply,
    GlobalRule,
    Limits,
    ProcessedResponse,
    RespondInstruction,
    RoutedQuery,
    RuleCandidate,
    RuleFeedback,
    SchemaError,
    StructuredResponse,
)

RESP = StructuredResponse("18", (Claim("16-3-4=9 eggs", ("16 eggs laid",)),), 0.8, 0.6)


def test_round_trips():
    reply = ClientReply(
        responses=(ProcessedResponse("q1", RESP, tokens=12), ProcessedResponse("q2", None, False, error="bad json")),
        candidates=(RuleCandidate("Redact EMAIL_ADDRESS in responses.", "contact", entity_types=("EMAIL_ADDRESS",)),),
        feedback=(RuleFeedback("g1", 3, 2, 1),),
        backend_calls=1, tokens=40, gen_seconds=1.5, extra={"x": 1.0},
    )
    assert ClientReply.from_dict(reply.to_dict()) == reply
    ins = RespondInstruction(2, (RoutedQuery("q1", "text", "math", 2, "verify 18"),), (GlobalRule(rule_id="g1", text="t", category="c"),))
    assert RespondInstruction.from_dict(ins.to_dict()) == ins


def test_numeric_final_answer_becomes_text():
    r = StructuredResponse.from_dict({"final_answer": 18, "claims": []})
    assert r.final_answer == "18"


@pytest.mark.parametrize(
    "payload, path_fragment",
    [
        ({"claims": []}, "final_answer"),  # missing required field
        ({"final_answer": ["x"]}, "final_answer"),  # wrong type
        ({"final_answer": "1", "domain_fit": 1.5}, "domain_fit"),  # outside [0,1]
        ({"final_answer": "1", "self_confidence": math.nan}, "self_confidence"),  # NaN
        ({"final_answer": "1", "self_confidence": math.inf}, "self_confidence"),  # inf
        ({"final_answer": "1", "domain_fit": True}, "domain_fit"),  # bool is not a number
        ({"final_answer": "1", "hack": 1}, "response"),  # extra field
        ({"final_answer": "x" * 9000}, "final_answer"),  # oversized string
        ({"final_answer": "1", "claims": [{"claim": "c"}] * 17}, "claims"),  # too many claims
        ({"final_answer": "1", "claims": [{"claim": "c", "evidence": ["e"] * 9}]}, "evidence"),
        ({"final_answer": "1", "claims": ["just text"]}, "claims[0]"),  # claim not an object
    ],
)
def test_response_rejections_name_the_field(payload, path_fragment):
    with pytest.raises(SchemaError) as e:
        StructuredResponse.from_dict(payload)
    assert path_fragment in e.value.path


def test_feedback_rejections():
    with pytest.raises(SchemaError, match="d_trigger"):
        RuleFeedback.from_dict({"rule_id": "g", "d_trigger": -1, "d_valid": 0, "d_conflict": 0})
    with pytest.raises(SchemaError, match="exceed"):
        RuleFeedback.from_dict({"rule_id": "g", "d_trigger": 1, "d_valid": 2, "d_conflict": 0})
    with pytest.raises(SchemaError, match="unexpected"):
        RuleFeedback.from_dict({"rule_id": "g", "d_trigger": 1, "d_valid": 1, "d_conflict": 0, "text": "leak"})


def test_reply_version_and_caps():
    good = ClientReply(responses=()).to_dict()
    with pytest.raises(SchemaError, match="schema_version"):
        ClientReply.from_dict({**good, "schema_version": 99})
    lim = Limits(max_items=2)
    with pytest.raises(SchemaError, match="cap 2"):
        ClientReply.from_dict({**good, "responses": [ProcessedResponse("q", RESP).to_dict()] * 3}, lim=lim)
    with pytest.raises(SchemaError, match="action"):
        RuleCandidate.from_dict({"text": "t", "category": "c", "action": "delete_everything"})


def test_limits_validation():
    with pytest.raises(ValueError, match="max_claims"):
        Limits(max_claims=0)


# --------------------------------------------------------------------------- issue 13


@pytest.mark.parametrize("payload, code, path_fragment", [
    ({"final_answer": "7\ud800"}, "bad_string", "final_answer"),        # lone surrogate
    ({"final_answer": "1", "domain_fit": 10**400}, "bad_float", "domain_fit"),  # float() overflows
    ({"final_answer": "1", "domain_fit": math.inf}, "bad_float", "domain_fit"),
    ({"final_answer": 10**400}, "bad_float", "final_answer"),            # numeric answer too
    ({"final_answer": "1", "domain_fit": "0.5"}, "schema:domain_fit", "domain_fit"),
    ({"text": "\x00\x1b\u2028", "category": "c"}, "schema:text", "text"),  # empty once stripped
])
def test_rejections_carry_a_fixed_code(payload, code, path_fragment):
    parse = RuleCandidate.from_dict if "text" in payload else StructuredResponse.from_dict
    with pytest.raises(SchemaError) as e:
        parse(payload)
    assert e.value.code == code and path_fragment in e.value.path


def test_control_characters_are_stripped_not_echoed():
    r = StructuredResponse.from_dict({"final_answer": "4\x002\x1b[2J\u2028", "claims": []})
    assert r.final_answer == "42[2J"  # ESC, NUL and the line separator are gone; tab/newline stay
    assert StructuredResponse.from_dict({"final_answer": "a\tb\nc"}).final_answer == "a\tb\nc"


def test_huge_values_are_never_echoed():
    big = "x" * 5_000_000
    cases = [
        lambda: RuleCandidate.from_dict({"text": "t", "category": "c", "action": big}),
        lambda: RuleCandidate.from_dict({"text": "t", "category": "c", big: 1}),
        lambda: ClientReply.from_dict({**ClientReply(responses=()).to_dict(), "schema_version": big}),
        lambda: RuleFeedback.from_dict({"rule_id": "g", "d_trigger": 10**5000, "d_valid": 0,
                                        "d_conflict": 0}),
    ]
    for case in cases:
        with pytest.raises(SchemaError) as e:
            case()
        assert len(str(e.value)) < 400 and len(e.value.coded()) < 500


def test_ids_have_their_own_cap():
    with pytest.raises(SchemaError, match="cap 128") as e:
        ProcessedResponse.from_dict({"query_id": "q" * 129, "response": None})
    assert e.value.code == "schema:query_id"
    assert ProcessedResponse.from_dict({"query_id": "q" * 128, "response": None}).query_id


def test_excerpt_is_short_escaped_and_total():
    from pfedma_flwr.protocol.validation import excerpt

    assert excerpt("abc") == "'abc'"
    assert excerpt("\ud800\x1b") == "'\\ud800\\x1b'"  # escaped: printable, UTF-8 safe
    assert len(excerpt("y" * 10**6)) == 80 and excerpt("y" * 10**6).endswith("...")
    assert excerpt(10**5000) == f"<{(10**5000).bit_length()}-bit integer>"
    assert excerpt(object()) == "<object>"


def test_every_rule_form_declares_the_detector_spec_once():
    # issue 31 item 6: a candidate, a global rule and a local rule share one spec declaration
    # and one serialization of it
    from dataclasses import fields

    from pfedma_flwr.protocol.rule_wire import RULE_SPEC_FIELDS, RuleSpec
    from pfedma_flwr.rules.model import PrivacyRule

    assert RULE_SPEC_FIELDS == ("text", "category", "scope", "action", "entity_types",
                                "patterns")
    spec = {"text": "Redact emails.", "category": "contact", "scope": "query",
            "action": "generalize", "entity_types": ("EMAIL_ADDRESS",), "patterns": ()}
    forms = (RuleCandidate(**spec), GlobalRule(rule_id="g1", **spec),
             PrivacyRule(rule_id="r1", **spec))
    for rule in forms:
        cls = type(rule)
        assert isinstance(rule, RuleSpec)
        assert not set(RULE_SPEC_FIELDS) & set(cls.__annotations__)
        assert tuple(f.name for f in fields(cls))[:6] == RULE_SPEC_FIELDS
        wire = rule.to_dict()
        assert {k: wire[k] for k in RULE_SPEC_FIELDS} == {**spec, "entity_types": ["EMAIL_ADDRESS"],
                                                          "patterns": []}
    with pytest.raises(TypeError, match="rule_id"):
        GlobalRule("g1", "t", "c")  # type: ignore[misc]
