"""P_in over the real Presidio recognizer and real GSM8K / MedQA questions (issue 11 item 6).

The MedQA rows are questions the old P_in damaged (measured with
``bench/bench_pin_alteration.py``: option blocks tagged as one PERSON, lab labels such as
"Bilirubin, total:", eponyms such as "Graves' disease", numbers lost, different people merged).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from pfedma_flwr.data.benchmarks import Task, load_benchmark
from pfedma_flwr.protocol.schema import GlobalRule
from pfedma_flwr.rules.enforcement import apply_query_rules
from pfedma_flwr.rules.pii import get_recognizer
from pfedma_flwr.rules.pin_audit import task_damage

pytestmark = pytest.mark.skipif(os.environ.get("PFEDMA_SKIP_PRESIDIO") == "1", reason="opt-out")
DATA = Path(__file__).resolve().parents[2] / "data"
IDENTIFIERS = ("EMAIL_ADDRESS", "PHONE_NUMBER", "US_SSN", "CREDIT_CARD", "IBAN_CODE",
               "IP_ADDRESS", "US_PASSPORT")
WITH_PERSON = GlobalRule(rule_id="g1", text="do not reveal person in queries",
                         category="personal name", scope="query",
                         entity_types=(*IDENTIFIERS, "PERSON"))
IDS_ONLY = GlobalRule(rule_id="g2", text="do not reveal identifiers in queries",
                      category="contact information", scope="query", entity_types=IDENTIFIERS)
LEARNED = GlobalRule(rule_id="g3", text="do not reveal person in responses",
                     category="personal name", entity_types=("PERSON",))


@functools.cache
def _tasks() -> dict[str, Task]:
    return {t.task_id: t for name in ("gsm8k", "medqa") for t in load_benchmark(name, DATA)}


@functools.cache
def _rec():
    return get_recognizer("presidio")


# old damage in brackets (bench_pin_alteration.py, raw spaCy PERSON spans)
MEDQA_UNCHANGED = [
    "medqa-test-0003",  # option_changed, people_merged
    "medqa-test-0006",  # option_changed
    "medqa-test-0018",  # number_lost, option_changed, people_merged
    "medqa-test-0091",  # number_lost, option_changed, people_merged
    "medqa-test-0296",  # number_lost, option_changed, people_merged
    "medqa-test-0338",  # number_lost, option_changed, people_merged
    "medqa-test-0480",  # number_lost, option_changed, people_merged
    "medqa-test-0703",  # number_lost, people_merged
    "medqa-test-0765",  # number_lost
    "medqa-test-1043",  # people_merged
]
GSM8K = ["gsm8k-test-0000", "gsm8k-test-0003", "gsm8k-test-0033", "gsm8k-test-0305",
         "gsm8k-test-0582", "gsm8k-test-0627", "gsm8k-test-1081"]


@pytest.mark.parametrize("task_id", MEDQA_UNCHANGED)
def test_medqa_unchanged_even_with_a_person_rule(task_id):
    q = _tasks()[task_id].question
    assert apply_query_rules(q, [WITH_PERSON, LEARNED], _rec()) == (q, [])


@pytest.mark.parametrize("task_id", MEDQA_UNCHANGED + GSM8K)
def test_unchanged_by_identifier_rules_and_learned_response_rules(task_id):
    q = _tasks()[task_id].question
    assert apply_query_rules(q, [IDS_ONLY, LEARNED], _rec()) == (q, [])


@pytest.mark.parametrize(
    ("task_id", "names"),
    [
        ("gsm8k-test-0582", {"Alisa": 1, "Stanley": 2}),
        ("gsm8k-test-0627", {"Adam": 1, "Martha": 2, "Betty": 3, "Tom": 4}),
        ("gsm8k-test-0305", {"Richard": 1, "Jason": 2}),
    ],
)
def test_word_problem_people_get_distinct_placeholders(task_id, names):
    task = _tasks()[task_id]
    text, fired = apply_query_rules(task.question, [WITH_PERSON], _rec())
    assert fired == ["g1"] and task_damage(task, text) == ()
    expected = task.question
    for name, k in names.items():
        expected = expected.replace(name, f"[REDACTED:PERSON_{k}]")
    assert text == expected


def test_privacylens_names_and_email_removed():
    task = next(t for t in load_benchmark("privacylens", DATA)
                if t.task_id == "privacylens-main-0000")
    rule = GlobalRule(rule_id="g1", text="t", category="personal name", scope="query",
                      entity_types=(*IDENTIFIERS, "PERSON"))
    text, _ = apply_query_rules(task.question, [rule], _rec())
    assert "Smithson" not in text and "john.doe@gmail.com" not in text
    assert "[REDACTED:EMAIL_ADDRESS_1]" in text


def test_privacylens_keeps_what_the_task_needs_and_redacts_the_third_party():
    # main2: "Update Susan on the team's latest developments via email
    # (susan@apexmarketing.com)"; the trajectory's Dave Thompson is going through a divorce
    task = load_benchmark("privacylens", DATA)[1]
    q = task.question
    bare, _ = apply_query_rules(q, [WITH_PERSON], _rec())
    # measured before the fix: the addressee's address, her name and the format's own
    # "Action Input" label (tagged PERSON) were replaced
    assert "susan@apexmarketing.com" not in bare and "Action Input:" not in bare
    out, fired = apply_query_rules(q, [WITH_PERSON], _rec(), keep=task.task_needed)
    assert fired == ["g1"]
    assert "Update Susan on the team's latest developments via email (susan@apexmarketing.com)" \
        in out
    assert "  - Name: John Doe\n  - Email: john.doe@gmail.com\n" in out
    assert out.count("Action Input:") == q.count("Action Input:")
    assert "Dave Thompson" not in out and "[REDACTED:PERSON_2]" in out
    # nothing else changed: the text is the original with Dave's names replaced
    assert out == q.replace("Dave Thompson", "[REDACTED:PERSON_2]").replace(
        "Dave", "[REDACTED:PERSON_1]")
