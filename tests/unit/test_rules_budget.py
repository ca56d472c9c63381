"""Matching budgets where the matching happens, and a slow rule pays for itself (issue 30 item 5).

Measured: the client's 1 s ``MatchBudget`` started in ``adapt()`` before generation and was
reused by ``process()``; with 1.2 s per generation every adopted global pattern rule was
skipped ("matching budget exhausted" 104 times), so ``P_resp`` enforced no pattern rule with a
real LLM, and a slow rule was cut by the shared budget instead of being quarantined.
"""

from __future__ import annotations

import json
import logging
import time

import pytest

from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client.agent import ClientAgent
from pfedma_flwr.data.profiles import get_profile
from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.protocol.schema import (
    Claim,
    GlobalRule,
    RespondInstruction,
    RoutedQuery,
    StructuredResponse,
)
from pfedma_flwr.rules import model, safety
from pfedma_flwr.rules.client.local_repo import LocalRuleRepository
from pfedma_flwr.rules.model import PrivacyRule
from pfedma_flwr.rules.pii import RegexPiiRecognizer
from pfedma_flwr.rules.safety import (
    BudgetExhaustedError,
    MatchBudget,
    PatternTimeoutError,
)
from pfedma_flwr.rules.spans import find_spans

MRN = GlobalRule(rule_id="g1", text="do not reveal medical record numbers in responses",
                 category="sensitive record", patterns=(r"\bMRN-\d{4}\b",))


class SlowBackend(MockBackend):
    """A scripted agent that takes ``delay`` seconds per generation, like a real LLM."""

    def __init__(self, delay: float) -> None:
        reply = json.dumps({"claims": [{"claim": "The chart of MRN-5678 says 7.",
                                        "evidence": ["Chart MRN-5678: 3 + 4 = 7"]}],
                            "final_answer": "7", "domain_fit": 0.9, "self_confidence": 0.9})
        super().__init__(lambda m: reply)
        self.delay = delay

    def _generate_batch(self, prompts, **kw):  # type: ignore[override]
        time.sleep(self.delay)
        return super()._generate_batch(prompts, **kw)


def test_pattern_rules_are_enforced_after_a_slow_generation(caplog):
    agent = ClientAgent(profile=get_profile("physician"), backend=SlowBackend(1.2),
                        private_data=[], embedder=HashingEmbedder(),
                        recognizer=RegexPiiRecognizer(), few_shot=0, response_format="json")
    state = agent.new_state()
    # X_i where the rule's pattern fires: Rel >= 0.5 > phi_default, so the copy is adopted
    state.experience = [f"Patient MRN-{1000 + k} was seen on ward 3." for k in range(8)]
    ins = RespondInstruction(server_round=1, global_rules=(MRN,), queries=(
        RoutedQuery("q1", "What is 3 + 4?", "math", 1, answer_kind="number"),))
    with caplog.at_level(logging.WARNING):
        reply = agent.respond(ins, state)
    assert state.rules.is_active("g:g1")
    (pr,) = reply.responses
    # the 1.2 s generation is not charged to the rules: the adopted pattern rule fired
    assert "MRN-5678" not in json.dumps(pr.to_dict())
    assert pr.response is not None and "[REDACTED:SENSITIVE_RECORD]" in pr.response.claims[0].claim
    assert pr.response.final_answer == "7"
    assert not any("budget exhausted" in r.getMessage() for r in caplog.records)


def test_a_slow_rule_is_quarantined_by_its_own_cost(monkeypatch):
    # each match of the slow rule stays inside the per-match cap, but all its matches of one
    # message together pass its own share (per_rule): it is at fault, not the message budget
    repo = LocalRuleRepository()
    slow = GlobalRule(rule_id="s1", text="do not reveal q codes in responses", category="c",
                      patterns=(r"\bQX\d{3}-\d{4}Z\b",))
    repo.adapt([slow], ["Q123Z"], HashingEmbedder(dim=64), phi_default=-1.0)
    repo.begin_message()
    repo._budget.per_rule = 1e-6  # its share is spent by its first match
    resp = StructuredResponse(final_answer="7", claims=tuple(Claim("Q12" * 2000)
                                                             for _ in range(3)))
    result, _ = repo.process(resp, [], None)
    assert result.errors == ("g:s1",) and result.skipped == ()
    assert repo.quarantined == {"g:s1": "timeout"}


def test_budget_bounds_name_who_is_at_fault():
    budget = MatchBudget(10.0, per_rule=0.2)
    assert budget.bound("r") == (pytest.approx(safety.MATCH_TIMEOUT_S), False)
    budget.charge("r", 0.19)
    t, shared = budget.bound("r")
    assert t == pytest.approx(0.01) and not shared  # its own share binds: its fault
    budget.charge("r", 0.02)
    with pytest.raises(PatternTimeoutError, match="spent its"):
        budget.timeout("r")
    assert budget.bound("other")[0] == pytest.approx(safety.MATCH_TIMEOUT_S)
    short = MatchBudget(0.001)
    t, shared = short.bound("r")
    assert shared and t <= 0.001  # the message's deadline binds: not the rule's fault
    short._deadline = time.perf_counter() - 1
    with pytest.raises(BudgetExhaustedError):
        short.timeout("r")
    with pytest.raises(ValueError, match="must be > 0"):
        MatchBudget(1.0, per_rule=0.0)


def test_find_spans_charges_the_rule_and_blames_the_deadline_only_when_it_binds(monkeypatch):
    rule = PrivacyRule(rule_id="r", text="t", category="c", patterns=(r"\bQX\d{3}-\d{4}Z\b",))
    budget = MatchBudget(10.0)
    find_spans(rule, "Q123Z and Q999Z", None, budget=budget)
    assert budget._spent["r"] > 0
    monkeypatch.setattr(model, "MATCH_TIMEOUT_S", 1e-9)
    monkeypatch.setattr(safety, "MATCH_TIMEOUT_S", 1e-9)
    with pytest.raises(PatternTimeoutError) as e:
        find_spans(rule, "Q12" * 100_000, None, budget=MatchBudget(10.0))
    assert not isinstance(e.value, BudgetExhaustedError)
