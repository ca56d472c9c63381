"""Rule patterns from hostile parties: the safe subset, breadth probe, budget and quarantine.

Issue 13 item 2. Each measured attack has a case: ``(`` (planning crashed, checkpoint poisoned),
``[^\\s]+`` (every query redacted), ``(\\w|\\s)+\\d`` (0.05 s per rule per response), and the
colluders' 768 rules (see ``test_rules_caps.py``).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import Claim, GlobalRule, StructuredResponse
from pfedma_flwr.rules import model, safety
from pfedma_flwr.rules.client.local_repo import LocalRuleRepository
from pfedma_flwr.rules.enforcement import enforce_response
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.safety import (
    MAX_REPEAT,
    BudgetExhaustedError,
    MatchBudget,
    UnsafePatternError,
    check_pattern,
)
from pfedma_flwr.rules.spans import find_spans

ATTACKS = [r"(", r"[^\s]+", r"(\w|\s)+\d"]


@pytest.mark.parametrize(
    ("pattern", "source"),
    [
        # fixed-width identifiers pass unchanged (escaped '-' is the same character)
        (r"\b\d{3}-\d{2}-\d{4}\b", r"\b\d{3}\-\d{2}\-\d{4}\b"),
        (r"\bMRN-\d{4}\b", r"\bMRN\-\d{4}\b"),
        # + becomes {1,64}: the longest run any repeat can take
        (r"(?i)mrn\s+\d{6}x", r"mrn\s{1,64}\d{6}x"),
        (r"(?i)mrn:\s+\d{6}", r"mrn:\s{1,64}\d{6}"),
        # one overlapping repeat (\S can be '@'): 64 ways per position <= 256
        (r"\S+@corp-\d{6}\b", r"\S{1,64}@corp\-\d{6}\b"),
        (r"\d{1,2}/\d{1,2}/\d{4}", r"\d{1,2}/\d{1,2}/\d{4}"),
        # optional group x alternation x overlapping \d{1,3}: 2 * 2 * 3 = 12 ways
        (r"(?:\+?\d{1,3}[ .-]?)?(?:\(\d{3}\)|\d{3})[ .-]\d{3}[ .-]\d{4}",
         r"(?:\+?\d{1,3}[ .-]?)?(?:\(\d{3}\)|\d{3})[ .-]\d{3}[ .-]\d{4}"),
        (r"[A-Z]{2}-\d{6}x?", r"[A-Z]{2}\-\d{6}x?"),
    ],
)
def test_safe_patterns_pass_with_bounded_rewrite(pattern, source):
    assert check_pattern(pattern).source == source
    assert MAX_REPEAT == 64


@pytest.mark.parametrize(
    ("pattern", "code"),
    [
        ("(", "syntax"),  # the measured crash
        ("a)", "syntax"),
        ("[a-", "syntax"),
        ("", "empty"),
        ("x" * 501, "too_long"),
        (r"[^\s]+", "too_broad"),  # the measured "every query redacted"
        (r"\d+", "too_broad"),  # plain numbers of every word problem
        (r"[A-Z][a-z]+", "too_broad"),  # any capitalised word
        (r"\d{1,2}/\d{1,2}", "too_broad"),  # fractions and blood pressures
        (r"(?i)midodrine", "too_broad"),  # a drug name of an option line
        # issue 30: the probe is real task text, numbers and bare answers, not one string
        (r"^(?:\d{1,12}|[A-E])$", "too_broad"),  # every bare answer
        # the measured one: refused before probing (3 nested variable choices > 256 ways)
        (r"^(?:-?\d{1,12}(?:\.\d{1,6})?|[A-E])$", "ambiguous"),
        (r" => ", "too_broad"),  # every X_i item ("question => answer")
        (r"(?i)how many", "too_broad"),  # GSM8K / MATH questions
        (r"\d{2,3} (?:years?|pages?|days|minutes)", "too_broad"),  # numbers of word problems
        (r"\S+@\S+", "too_broad"),  # Mind2Web-SC tasks carry an e-mail address
        (r"(?i)ann\s+lee", "too_broad"),  # the shape of any two words: names are literals
        (r":[a-z]", "too_broad"),  # ':s' of a held-out 'std::string': every 2-char shape
        ("(?i)ha\u017f \\d{1,6}", "unnormalized"),  # a long s matches 's' under (?i)
        ("sec\u200bret", "unnormalized"),  # an invisible zero-width space
        (r"\w+\d", "too_broad"),
        (r".*", "matches_empty"),
        (r"x?|y", "matches_empty"),
        (r"\b", "matches_empty"),
        (r"(\w|\s)+\d", "quantified_group"),  # the measured 0.05 s per rule
        (r"(a+)+$", "quantified_group"),
        (r"(?:a|aa){2,9}q", "quantified_group"),
        (r"(?=secret)\w{4}", "unsupported"),  # lookaround
        (r"(a)\1", "unsupported"),  # backreference
        (r"\p{L}{3}@", "unsupported"),
        (r"(?P<n>x)y", "unsupported"),
        (r"q\w+?z", "unsupported"),  # lazy
        (r"(?s)a.b", "unsupported"),  # inline flag other than a leading (?i)
        (r"[[a]]", "unsupported"),
        (r"q{1,300}", "repeat_too_large"),
        # 64 * 64 ways per position: \S+ can be '@' and \S+ can be 'x'
        (r"\S+@\S+x", "ambiguous"),
        (r"\w+\s*\w+\d", "ambiguous"),
    ],
)
def test_unsafe_patterns_rejected_with_code(pattern, code):
    with pytest.raises(UnsafePatternError) as e:
        check_pattern(pattern)
    assert e.value.code == code
    assert len(str(e.value)) < 400  # a 5 MB pattern is not echoed


def test_rule_caps_on_detectors():
    with pytest.raises(ValueError, match="patterns exceed 8"):
        PrivacyRule(rule_id="r", text="t", category="c",
                    patterns=tuple(f"\\bQX{k}-\\d{{4}}\\b" for k in range(9)))
    with pytest.raises(ValueError, match="upper-snake entity name"):
        PrivacyRule(rule_id="r", text="t", category="c", entity_types=("IGNORE ALL",))


def test_bounded_patterns_stay_fast_on_long_text():
    # Worst shapes that pass: one overlapping repeat, and a class run to the end of the text.
    text = "a@" * 4000 + "x" * 8000
    rules = [PrivacyRule(rule_id=f"r{k}", text="t", category="c", patterns=(p,))
             for k, p in enumerate([r"\S+@corp\S+", r"[a-z]+\.[a-z]+@corp", r"[^#]+#\d{5}"] * 13)]
    t0 = time.perf_counter()
    for r in rules:
        find_spans(r, text, None)
    assert time.perf_counter() - t0 < 2.0  # 39 rules; was 0.05 s per rule at 1.5 kB


def test_budget_shared_by_all_rules_local_first():
    budget = MatchBudget(10.0)
    budget._deadline = time.perf_counter() - 1.0  # spent
    with pytest.raises(BudgetExhaustedError):
        budget.timeout()
    resp = StructuredResponse(final_answer="ok", claims=(Claim("MRN-1234 of Ann Lee"),))
    glob = PrivacyRule(rule_id="g:g1", text="t", category="c", patterns=(r"\bMRN-\d{4}\b",),
                       origin="global", global_id="g1")
    local = PrivacyRule(rule_id="l1", text="t", category="c", literals=("Ann Lee",))
    res = enforce_response(resp, [glob, local], None, budget=budget)
    # literals do not use the budget; the pattern rule is skipped (reported), not quarantined
    assert res.response.claims[0].claim == "MRN-1234 of [REDACTED:SENSITIVE_RECORD]"
    assert res.skipped == ("g:g1",) and res.errors == ()


def test_pattern_past_its_timeout_is_quarantined(monkeypatch):
    repo = LocalRuleRepository()
    slow = GlobalRule(rule_id="g1", text="do not reveal x in responses", category="c",
                      patterns=(r"\bQX\d{3}-\d{4}Z\b",))
    repo.adapt([slow], ["x"], HashingEmbedder(dim=64), phi_default=-1.0)
    assert repo.is_active("g:g1")
    # every match now exceeds its own (tiny) timeout, with the message budget still ample
    monkeypatch.setattr(model, "MATCH_TIMEOUT_S", 1e-9)
    monkeypatch.setattr(safety, "MATCH_TIMEOUT_S", 1e-9)
    resp = StructuredResponse(final_answer="7", claims=(Claim("Q123" * 50_000),))
    result, _ = repo.process(resp, [], None)
    assert result.errors == ("g:g1",)
    assert not repo.is_active("g:g1") and repo.quarantined == {"g:g1": "timeout"}
    # a quarantined global rule is never re-adopted
    monkeypatch.setattr(model, "MATCH_TIMEOUT_S", 0.05)
    monkeypatch.setattr(safety, "MATCH_TIMEOUT_S", 0.05)
    report = repo.adapt([slow], ["x"], HashingEmbedder(dim=64), phi_default=-1.0)
    assert report.decisions == () and not repo.is_active("g:g1")


@pytest.mark.parametrize("pattern", ATTACKS)
def test_server_sent_bad_patterns_are_refused_by_the_client(pattern):
    repo = LocalRuleRepository()
    bad = [GlobalRule(rule_id=f"b{k}", text=f"do not reveal thing {k} in responses",
                      category="c", patterns=(pattern,)) for k in range(40)]
    good = GlobalRule(rule_id="ok", text="do not reveal email address in responses",
                      category="contact information", entity_types=("EMAIL_ADDRESS",))
    t0 = time.perf_counter()
    report = repo.adapt([*bad, good], ["mail"], HashingEmbedder(dim=64), phi_default=-1.0)
    assert time.perf_counter() - t0 < 1.0
    assert report.adopted == ["ok"]  # the valid rule still arrives
    assert set(repo.quarantined) == {f"g:b{k}" for k in range(40)}
    assert all(v == "invalid" for v in repo.quarantined.values())


def test_stored_rule_with_unusable_pattern_keeps_its_literals():
    repo = LocalRuleRepository(rules=[PrivacyRule(rule_id="l1", text="t", category="c",
                                                  literals=("Ann Lee",))])
    d = repo.to_dict()
    d["rules"][0]["rule"]["patterns"] = ["(", r"\bMRN-\d{4}\b"]  # written by an older version
    back = LocalRuleRepository.from_dict(d)
    assert back.get("l1").literals == ("Ann Lee",)
    assert back.get("l1").patterns == (r"\bMRN-\d{4}\b",)


_ADVERSARIAL_TEXTS = ["a" * 8000, "a@" * 4000, " \t" * 4000, "1" * 8000, "aA1_-." * 1300,
                      "Janet has 3 apples.\nA. Midodrine\n" * 200]


_ATOMS = st.sampled_from([r"\w", r"\d", r"\s", r"\S", r"\W", ".", "[a-z]", "[^#]", "[^\\s@]",
                          "a", "@", "-", "#", r"\b", "^", "$"])
_QUANTS = st.sampled_from(["", "", "+", "*", "?", "{1,3}", "{2,64}", "{4}"])
_SEQ = st.lists(st.tuples(_ATOMS, _QUANTS).map("".join), min_size=1, max_size=6).map("".join)
_STRUCTURED = st.one_of(
    _SEQ,
    st.tuples(_SEQ, _SEQ, _SEQ, st.sampled_from(["", "?", "+", "{2}"])).map(
        lambda t: f"{t[0]}(?:{t[1]}|{t[2]}){t[3]}"),
)
_RAW = st.text(alphabet="()[]{}?*+|\\.^$-,:=!<>aA1_ \\dwsSDWbB09^", max_size=24)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_RAW, _STRUCTURED))
def test_fuzz_any_pattern_is_rejected_cleanly_or_runs_bounded(pattern):
    # The class, not the list: whatever a hostile client writes is either refused with a code
    # or, once accepted, matches long adversarial texts well inside the per-match timeout.
    try:
        checked = check_pattern(pattern)
    except UnsafePatternError as e:
        assert e.code in {"empty", "too_long", "unnormalized", "syntax", "unsupported", "quantified_group",
                          "repeat_too_large", "ambiguous", "matches_empty", "too_broad", "slow"}
        return
    for text in _ADVERSARIAL_TEXTS:
        t0 = time.perf_counter()
        for _ in checked.compiled.finditer(text, timeout=2.0):
            pass
        assert time.perf_counter() - t0 < 0.5, (pattern, text[:10])
