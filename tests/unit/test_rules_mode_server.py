"""The server side of the mode table (docs/rules.md), derived by hand (issue 12).

One round-2 query, ``"Ann Lee (ann@example.org) asks about the visit"``, goes through ``P_in``
after a round 1 that differs only in the mode:

- NR: the server holds no rules, so nothing fires and the query is unchanged;
- SR (and every mode but NR): ``contact_query`` redacts the e-mail;
- L2G: in round 1 a client met "Ann Lee" uncovered and uploaded the PERSON candidate; it is
  promoted (a one-candidate pool, ``G = B``) and its query twin redacts the name in round 2;
- LE: the same client creates the same local rule but uploads nothing: no twin;
- full: the client adopted ``names_response``, so nothing was uncovered and nothing uploaded;
  two clients' Δ-count feedback on it (Δt = 1, Δv = 1: s = 1 each, so H = 1, N = 2) confirms
  it, and the twin comes from the confirmation (the L2G candidates merge into
  ``names_response``: the same text and detectors);
- G2L: the same feedback moves H, but G2L does not run promotion: no twin.

The engine's switches (``PROMOTE_MODES``, ``REDISTRIBUTE_MODES``) decide which calls run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pytest

from pfedma_flwr.client.agent import parse_rule_mode
from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import Claim, GlobalRule, RuleFeedback, StructuredResponse
from pfedma_flwr.rules.client.local_repo import LocalRuleRepository
from pfedma_flwr.rules.pii import PiiSpan, RegexPiiRecognizer
from pfedma_flwr.rules.policy import initial_global_rules
from pfedma_flwr.rules.query_rules import apply_query_rules
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.rules.server.global_update import TWIN_MIN_EVALS, confirmed, new_twins
from pfedma_flwr.rules.server.promotion import build_candidate_pool
from pfedma_flwr.rules.server.server_flow import PROMOTE_MODES, REDISTRIBUTE_MODES

QUERY = "Ann Lee (ann@example.org) asks about the visit"
NAME = "Ann Lee"


class NamesAndRegex:
    """Regex PII plus PERSON for the literal name "Ann Lee" (a stand-in for Presidio)."""

    supported_entities = ("PERSON", *RegexPiiRecognizer().supported_entities)

    def analyze(self, text: str, entity_types: Sequence[str] | None = None) -> list[PiiSpan]:
        out = RegexPiiRecognizer().analyze(text, entity_types)
        if entity_types is None or "PERSON" in entity_types:
            out += [PiiSpan(m.start(), m.end(), "PERSON", 0.9)
                    for m in re.finditer(NAME, text)]
        return sorted(out)


REC = NamesAndRegex()
RNG = np.random.default_rng(0)
POLICY = ["contact_query", "identifiers_query", "contact_response", "names_response"]


def _server(mode: str) -> GlobalRuleRepository:
    repo = GlobalRuleRepository(embedder=HashingEmbedder(), id_prefix="g", twins=True)
    if mode != "NR":
        repo.seed(initial_global_rules(POLICY))
    return repo


def _names_id(repo: GlobalRuleRepository) -> str:
    return next(r.rule_id for r in repo.rules() if r.entity_types == ("PERSON",))


def _round_1(mode: str, repo: GlobalRuleRepository) -> None:
    """Two clients answer with the name; the server runs what the engine runs in ``mode``."""
    candidates, feedback = {}, {}
    for c in ("c1", "c2"):
        client = LocalRuleRepository(mode=parse_rule_mode(mode))
        if mode in REDISTRIBUTE_MODES:
            # the name is in the client's experience: Rel = 1 * (0.5 + 0.5 S) > 0.3, adopted
            client.adapt(repo.snapshot(), [f"{NAME} called"], HashingEmbedder(), recognizer=REC)
        resp = StructuredResponse(final_answer="ok", claims=(Claim(f"{NAME} called", ()),))
        _, candidates[c] = client.process(resp, [], REC)
        # triggered once, valid (the name is gone, "ok" is left), no conflict: s = 1
        feedback[c] = client.round_feedback()
    if mode in PROMOTE_MODES or mode in REDISTRIBUTE_MODES:
        repo.apply_feedback(feedback)
    if mode in PROMOTE_MODES:
        repo.update(1, build_candidate_pool(candidates, set(candidates), HashingEmbedder(), rng=RNG))


#          mode   fired in round 2              name hidden  e-mail hidden
TABLE = [("NR", set(), False, False),
         ("SR", {"contact_query"}, False, True),
         ("LE", {"contact_query"}, False, True),
         ("G2L", {"contact_query"}, False, True),
         ("L2G", {"contact_query", "twin"}, True, True),
         ("full", {"contact_query", "twin"}, True, True)]


@pytest.mark.parametrize(("mode", "fired", "name_hidden", "mail_hidden"), TABLE)
def test_round_two_query_is_what_the_table_says(mode, fired, name_hidden, mail_hidden):
    repo = _server(mode)
    _round_1(mode, repo)
    text, ids = apply_query_rules(QUERY, [r for r in repo.rules() if r.active], REC)
    names = {"g1": "contact_query"}
    kinds = {names.get(i, "twin" if repo.rules()[-1].rule_id == i else i) for i in ids}
    assert kinds == fired
    assert (NAME not in text) is name_hidden
    assert ("ann@example.org" not in text) is mail_hidden
    if name_hidden:
        assert text.startswith("[REDACTED:PERSON_1] ([REDACTED:EMAIL_ADDRESS_1])")


def test_every_pair_of_modes_differs_or_differs_on_the_client():
    # LE, G2L and SR give the same round-2 query: they differ on the client (test_rules_modes)
    queries = {}
    for mode, *_ in TABLE:
        repo = _server(mode)
        _round_1(mode, repo)
        queries[mode] = apply_query_rules(QUERY, [r for r in repo.rules() if r.active], REC)[0]
    assert queries["NR"] != queries["SR"] == queries["LE"] == queries["G2L"]
    assert queries["L2G"] == queries["full"] != queries["LE"]


def test_g2l_moves_h_without_a_twin_and_full_adds_the_twin_once():
    g2l, full = _server("G2L"), _server("full")
    _round_1("G2L", g2l)
    _round_1("full", full)
    h_g2l = {r.rule_id: (r.h_score, r.n_evals) for r in g2l.rules()}
    assert h_g2l[_names_id(g2l)] == (1.0, 2)
    assert len(g2l) == 4 and len(full) == 5
    twin = full.rules()[-1]
    assert (twin.scope, twin.entity_types, twin.text) == (
        "query", ("PERSON",), "do not reveal person in queries")
    # covered from now on: a later round adds no second twin
    pool = build_candidate_pool({}, set(), HashingEmbedder(), rng=RNG)
    assert full.update(2, pool).twins == ()
    assert len(full) == 5


def _rule(rid: str, *, scope: str = "response", types: tuple[str, ...] = ("PERSON",),
          h: float = 1.0, n: int = 2, active: bool = True) -> GlobalRule:
    return GlobalRule(rule_id=rid, text=f"t {rid}", category="c", scope=scope,
                      entity_types=types, h_score=h, n_evals=n, active=active)


def test_confirmed_needs_two_evaluations_a_positive_h_and_an_active_response_rule():
    rules = [_rule("a"),                       # N = 2, H = 1: confirmed
             _rule("b", n=1),                  # one evaluation
             _rule("c", h=0.0),                # H = 0: conflicts as often as valid
             _rule("d", h=-0.5, n=4),          # H < 0
             _rule("e", active=False),         # an inactive alternative
             _rule("f", scope="query")]        # already a query rule
    assert TWIN_MIN_EVALS == 2
    assert [r.rule_id for r in confirmed(rules)] == ["a"]


def test_new_twins_one_per_type_set_and_none_where_a_query_rule_covers():
    person, person2 = _rule("a"), _rule("b")
    contact = _rule("c", types=("EMAIL_ADDRESS",))
    query_contact = _rule("q", scope="query", types=("EMAIL_ADDRESS", "PHONE_NUMBER"))
    twins = new_twins([person, person2, contact], [query_contact])
    # one PERSON twin for two PERSON rules; EMAIL is covered by the query rule's superset
    assert [(t.scope, t.entity_types) for t in twins] == [("query", ("PERSON",))]
    # an inactive query rule covers nothing
    off = _rule("q", scope="query", types=("EMAIL_ADDRESS",), active=False)
    assert [t.entity_types for t in new_twins([contact], [off])] == [("EMAIL_ADDRESS",)]


def test_no_twin_without_the_option():
    repo = GlobalRuleRepository(embedder=HashingEmbedder(), id_prefix="g", twins=False)
    repo.seed(initial_global_rules(POLICY))
    repo.apply_feedback({"c1": [RuleFeedback(_names_id(repo), 1, 1, 0)],
                         "c2": [RuleFeedback(_names_id(repo), 1, 1, 0)]})
    assert repo.update(1, build_candidate_pool({}, set(), HashingEmbedder(), rng=RNG)).twins == ()
    assert len(repo) == 4
