"""Promotion by support, feedback from holders, Resolve by credible raters (issue 30 items 1, 4).

Measured before: a one-candidate pool promoted an answer-redacting rule to every client (the
seed's singleton case); a twin of ``contact_query`` (its text plus zero-width spaces, a
pattern that matches nothing) was admitted as a new rule, and one −1 row for
``contact_query`` from a client that never held it made Resolve switch the server's rule off.
"""

from __future__ import annotations

import numpy as np
import pytest

from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import GlobalRule, RuleCandidate, RuleFeedback
from pfedma_flwr.rules.client.outgoing import holds_secret
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.normalize import normalized_with_map, original_span, text_key
from pfedma_flwr.rules.pii import PiiSpan
from pfedma_flwr.rules.policy import initial_global_rules
from pfedma_flwr.rules.probe import bare_answers, entity_problem, probe_corpus
from pfedma_flwr.rules.server.feedback import SERVER_RATER, Electorate, client_scores, credible
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.rules.server.promotion import (
    CandidatePool,
    build_candidate_pool,
    candidate_problem,
    owner_support,
    promote_supported,
)
from pfedma_flwr.rules.spans import find_spans

EMB = HashingEmbedder(dim=256)
RNG = np.random.default_rng(0)
SSN = RuleCandidate(text="do not reveal government identifier in responses",
                    category="government identifier", entity_types=("US_SSN",))


# --------------------------------------------------------------------------- support


def test_owner_support_counts_each_other_client_once():
    # rows 0, 1: client A's two paraphrases; row 2: client B; all mutually similar
    sims = np.ones((3, 3))
    assert owner_support(sims, [0, 0, 1]).tolist() == [1, 1, 2 - 1]
    # B is supported by A once, not twice; A's rows never support each other
    sims = np.array([[1, 0.2, 0.95], [0.2, 1, 0.95], [0.95, 0.95, 1]])
    assert owner_support(sims, [0, 0, 1]).tolist() == [1, 1, 1]


@pytest.mark.parametrize(("supporters", "n", "min_clients", "share", "expected"), [
    ([0], 1, 2, 0.5, []),      # a singleton pool promotes nothing by default ...
    ([0], 1, 1, 0.0, [0]),     # ... and promotes under the seed's setting
    ([1, 1], 2, 2, 0.5, [0, 1]),  # two clients agree: 2 >= max(2, ceil(.5 * 2))
    ([1, 1, 0, 0, 0], 5, 2, 0.5, []),  # 2 of 5 uploaders < ceil(.5 * 5) = 3
    ([2, 2, 2, 0, 0], 5, 2, 0.5, [0, 1, 2]),  # 3 of 5 agree
])
def test_promote_supported(supporters, n, min_clients, share, expected):
    s = np.asarray(supporters)
    zeta = s / max(1, n - 1)
    assert promote_supported(zeta, s, n, min_clients=min_clients, min_share=share) == expected


def test_one_client_cannot_promote_however_it_words_its_candidates():
    texts = [f"do not reveal government identifier in responses {w}" for w in "abcdefgh"]
    cands = [RuleCandidate(text=t, category="government identifier",
                           entity_types=("US_SSN",)) for t in texts]
    repo = GlobalRuleRepository(embedder=EMB)
    pool = build_candidate_pool({"evil": cands}, {"evil"}, EMB, rng=RNG)
    assert len(set(pool.owners)) == 1
    assert repo.update(1, pool).promoted == 0 and len(repo) == 0
    # two clients with the same canonical candidate: promoted once
    pool = build_candidate_pool({"a": [SSN], "b": [SSN]}, {"a", "b"}, EMB, rng=RNG)
    up = repo.update(2, pool)
    assert up.promoted == 2 and len(up.added) == 1


def test_zero_width_twin_is_the_same_text():
    twin = SSN.text.replace(" ", " \u200b")
    assert text_key(twin) == text_key(SSN.text) and twin != SSN.text
    pool = build_candidate_pool({"a": [RuleCandidate(text=twin, category="c")]}, {"a"}, EMB,
                                rng=RNG)
    assert pool.candidates[0].text == SSN.text  # stored in normal form


# --------------------------------------------------------------------------- safety


def test_candidate_problems_name_what_they_would_alter():
    redact_answers = RuleCandidate(text="t", category="c", patterns=(r"^(?:\d{1,12}|[A-E])$",))
    assert "too_broad" in candidate_problem(redact_answers)
    every_item = RuleCandidate(text="t", category="c", patterns=(r" => ",))
    assert "too_broad" in candidate_problem(every_item)
    assert candidate_problem(SSN) == ""


class NumberRecognizer:
    """A recognizer whose DATE_TIME fires on any 4-digit number and PERSON on 'Janet'."""

    supported_entities = ("DATE_TIME", "PERSON", "US_SSN")

    def analyze(self, text, entity_types=None):
        import re

        out = []
        if "DATE_TIME" in entity_types:
            out += [PiiSpan(m.start(), m.end(), "DATE_TIME", 1.0)
                    for m in re.finditer(r"\b\d{4}\b", text)]
        if "PERSON" in entity_types:
            out += [PiiSpan(m.start(), m.end(), "PERSON", 1.0)
                    for m in re.finditer(r"\bJanet\b", text)]
        return out


def test_entity_types_are_probed_with_the_servers_recognizer():
    rec = NumberRecognizer()
    # a response rule whose entity type fires on a bare answer ("2024") is refused
    assert "DATE_TIME alters a bare answer" in entity_problem(("DATE_TIME",), "response", rec)
    # PERSON never fires on a bare answer: fine in responses, not in queries (task text)
    assert entity_problem(("PERSON",), "response", rec) == ""
    assert "PERSON alters task text" in entity_problem(("PERSON",), "query", rec)
    # types the recognizer does not know cannot fire; no recognizer: nothing refused
    assert entity_problem(("US_SSN", "MADE_UP"), "query", rec) == ""
    assert entity_problem(("DATE_TIME",), "response", None) == ""
    cand = RuleCandidate(text="t", category="date", entity_types=("DATE_TIME",))
    pool = build_candidate_pool({"a": [cand], "b": [cand]}, {"a", "b"}, EMB, rng=RNG,
                                recognizer=rec)
    assert all(pool.problems) and pool.unsafe_by_client == {"a": 1, "b": 1}


def test_probe_corpus_holds_tasks_answers_and_items():
    c = probe_corpus()
    assert any("Which of the following" in t for t in c.tasks)  # MedQA / MedMCQA questions
    assert any("\nA. " in t for t in c.tasks)  # option lines
    assert not any("john.doe@gmail.com" in t for t in c.texts())  # privacy benchmarks out
    answers = set(c.answers)
    assert {"7", "1,250,000", "987654321012", "-3.5", "B", "(C)", "allow", "\\frac{1}{2}"} \
        <= answers
    assert all(" => " in x for x in c.items)
    assert len(bare_answers()) > 300


# --------------------------------------------------------------------------- normal form


def test_matching_sees_the_normal_form_and_maps_spans_back():
    rule = PrivacyRule(rule_id="r", text="t", category="c", patterns=(r"\bMRN-\d{4}\b",),
                       literals=("Ann Lee",))
    text = "Chart MRN-\uff11\uff12\uff13\uff14 of An\u200bn Lee."  # fullwidth digits, ZWSP
    spans = find_spans(rule, text, None)
    assert [text[s.start:s.end] for s in spans] == ["MRN-\uff11\uff12\uff13\uff14",
                                                     "An\u200bn Lee"]
    norm, starts = normalized_with_map("\ufb01le")  # the fi ligature is one source char
    assert norm == "file" and original_span(starts, 2, 0, 1) == (0, 1)
    assert original_span(starts, 2, 1, 2) == (0, 1)
    assert holds_secret({"claim": "the patient An\u200bn Lee"}, ["Ann Lee"])


# --------------------------------------------------------------------------- feedback


def _repo_with_policy() -> tuple[GlobalRuleRepository, dict[str, str]]:
    repo = GlobalRuleRepository(embedder=EMB, id_prefix="g")
    repo.seed(initial_global_rules(["contact_query", "contact_response"]))
    repo.electorate.population = 5
    ids = {r.scope: r.rule_id for r in repo.rules()}
    for c in ("a", "b", "c", "d", "e"):
        repo.electorate.note_sent(c, list(ids.values()))
    return repo, ids


def test_client_rows_count_only_for_held_fired_response_rules():
    repo, ids = _repo_with_policy()
    fb = {"a": [RuleFeedback(ids["query"], 1, 0, 1)],  # query rule: the server rates it
          "b": [RuleFeedback(ids["response"], 9, 0, 9)],  # 9 triggers in a 2-answer reply
          "z": [RuleFeedback(ids["response"], 1, 0, 1)],  # never sent to z
          "c": [RuleFeedback(ids["response"], 1, 1, 0)]}
    rep = repo.apply_feedback(fb, check_held=True, max_triggers={"a": 2, "b": 2, "c": 2,
                                                                  "z": 2})
    assert rep.ignored == {"query_scope": 1, "implausible": 1, "not_held": 1}
    assert rep.updated == (ids["response"],) and rep.n_scores == 1
    assert repo.electorate.raters[ids["response"]] == {"c"}
    assert {r.rule_id: r.h_score for r in repo.rules()} == {ids["query"]: 0.0,
                                                            ids["response"]: 1.0}


def test_one_client_cannot_switch_a_rule_off_and_the_server_rates_its_query_rules():
    repo, ids = _repo_with_policy()
    # a never-firing twin of the response rule: same text, another detector
    g = next(r for r in repo.rules() if r.scope == "response")
    twin = RuleCandidate(text=g.text.replace(" ", " \u200b"), category=g.category,
                         patterns=(r"(?i)\bzq-\d{5}-xv\b",))
    pool = build_candidate_pool({"x": [twin], "y": [twin]}, {"x", "y"}, EMB, rng=RNG)
    repo.update(1, pool)
    assert len(repo) == 3 and repo.electorate.credible(ids["response"]) is False
    for c in ("x", "y"):
        repo.electorate.note_sent(c, [r.rule_id for r in repo.rules()])
    # two colluders rate the server's rule −1: H = −1 but 2 raters < ceil(.5 · 7)
    repo.apply_feedback({c: [RuleFeedback(ids["response"], 1, 0, 1)] for c in ("x", "y")},
                        check_held=True)
    up = repo.update(2, CandidatePool.empty(EMB.dim))
    assert up.deactivated == () and ids["response"] in {r.rule_id for r in repo.active_rules()}
    # enough distinct raters of the federation (4 of 7 holders) do switch it
    repo.apply_feedback({c: [RuleFeedback(ids["response"], 1, 0, 1)] for c in ("a", "b")},
                        check_held=True)
    up = repo.update(3, CandidatePool.empty(EMB.dim))
    assert up.deactivated == (ids["response"],)
    # the server's own P_in enforcement rates the query rule (client rows never do)
    assert repo.apply_server_feedback({ids["query"]: 3, "unknown": 1}) == [ids["query"]]
    assert repo.electorate.raters[ids["query"]] == {SERVER_RATER}
    q = next(r for r in repo.rules() if r.rule_id == ids["query"])
    assert (q.h_score, q.n_evals) == (1.0, 1)


@pytest.mark.parametrize(("raters", "holders", "population", "expected"), [
    ({"a"}, {"a"}, 0, False),          # one client is never enough
    ({"a", "b"}, {"a", "b"}, 0, True),  # both holders, two clients
    ({"a", "b"}, {"a", "b"}, 5, False),  # ... of a federation of five: 2 < 3
    ({"a", "b", "c"}, {"a"}, 5, True),
    ({SERVER_RATER}, set(), 5, True),   # the server's own enforcement
])
def test_credible(raters, holders, population, expected):
    assert credible(raters, holders, min_clients=2, min_share=0.5,
                    population=population) is expected


def test_client_scores_sum_rows_per_rule_and_report_unknown_ids():
    tally = client_scores({"a": [RuleFeedback("g1", 1, 1, 0), RuleFeedback("g1", 1, 0, 1),
                                 RuleFeedback("gx", 1, 1, 0)]},
                          resolve_id=lambda r: r if r == "g1" else None,
                          scope_of=lambda r: "response")
    assert tally.scores == {"g1": [("a", 0.0)]} and tally.unknown == {"gx"}


def test_electorate_round_trip_and_validation():
    e = Electorate(min_clients=3, min_share=0.25)
    e.note_sent("a", ["g1"])
    e.rated("g1", ["a"])
    e.population = 7
    back = Electorate.from_dict(e.to_dict())
    assert back.to_dict() == e.to_dict() and back.holds("a", "g1")
    with pytest.raises(ValueError, match="min_support_clients"):
        Electorate(min_clients=0)
    with pytest.raises(ValueError, match="min_support_share"):
        GlobalRuleRepository(embedder=EMB, min_support_share=1.5)


def test_seeded_policy_keys_its_texts_by_normal_form():
    repo = GlobalRuleRepository(embedder=EMB)
    rules = initial_global_rules(["contact_query"])
    zw = [GlobalRule(rule_id="x", text=rules[0].text.replace(" ", "\u200b "),
                     category=rules[0].category, scope="query",
                     entity_types=rules[0].entity_types)]
    assert len(repo.seed(rules)) == 1 and repo.seed(zw) == []
