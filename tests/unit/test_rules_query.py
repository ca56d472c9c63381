"""P_in never damages the task (issue 11 item 6), with a scripted recognizer.

The scripted recognizer reproduces what the small spaCy model was measured to do: tag a whole
option block as one PERSON, tag drug names as PERSON, and tag the people of a word problem.
The same checks over the real Presidio recognizer and real questions are in
``test_rules_query_presidio.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.protocol.schema import GlobalRule
from pfedma_flwr.rules.enforcement import apply_query_rules
from pfedma_flwr.rules.pii import PiiSpan
from pfedma_flwr.rules.pin_audit import audit_alteration, task_damage
from pfedma_flwr.rules.query_rules import option_line_spans, plausible_person


class ScriptedRecognizer:
    """Tags each listed string wherever it occurs (PERSON unless ``kind:text``)."""

    def __init__(self, tags: Sequence[str]) -> None:
        self.tags = [t.split(":", 1) if ":" in t else ("PERSON", t) for t in tags]

    @property
    def supported_entities(self) -> tuple[str, ...]:
        return ("PERSON", "EMAIL_ADDRESS", "DATE_TIME", "LOCATION")

    def analyze(self, text: str, entity_types: Sequence[str] | None = None) -> list[PiiSpan]:
        out = []
        for kind, tag in self.tags:
            if entity_types is None or kind in entity_types:
                out += [PiiSpan(m.start(), m.end(), kind, 0.85)
                        for m in re.finditer(re.escape(tag), text)]
        return sorted(out)


def _rule(scope: str = "query", ents: tuple[str, ...] = ("PERSON",), rid: str = "g1",
          action: str = "redact") -> GlobalRule:
    return GlobalRule(rule_id=rid, text=f"do not reveal person in {scope}s", category="c",
                      scope=scope, action=action, entity_types=ents)


MEDQA = ("A 72-year-old man has orthostatic hypotension. Which drug is most appropriate?\n"
         "A. Midodrine\nB. Rivastigmine\nC. Mirtazapine\nD. Fludrocortisone")
MEDQA_TASK = Task(task_id="m", benchmark="medqa", domain="medicine", question=MEDQA, gold="A",
                  answer_kind="option", options={"A": "Midodrine", "B": "Rivastigmine",
                                                 "C": "Mirtazapine", "D": "Fludrocortisone"})
GSM = ("Ann has 3 apples and Bob has 5. Ann gives Bob 2 apples. How many apples does Bob have? "
       "Ann Lee's friend Bob counts again.")
GSM_TASK = Task(task_id="g", benchmark="gsm8k", domain="math", question=GSM, gold="7",
                answer_kind="number")


def test_response_scope_rules_never_touch_queries():
    rec = ScriptedRecognizer(["Ann", "Bob"])
    text, fired = apply_query_rules(GSM, [_rule(scope="response")], rec)
    assert (text, fired) == (GSM, [])


def test_option_block_tagged_as_person_is_left_alone():
    # the measured failure: the whole option block as one PERSON span, and single drug names
    rec = ScriptedRecognizer(["A. Midodrine\nB. Rivastigmine\nC. Mirtazapine", "Midodrine",
                              "Mirtazapine"])
    text, fired = apply_query_rules(MEDQA, [_rule()], rec)
    assert (text, fired) == (MEDQA, [])


def test_option_lines_protected_even_for_real_names():
    q = "Who wrote it?\nA. Jane Austen\nB) Leo Tolstoy\n(C) Mark Twain\nD. None"
    text, _ = apply_query_rules(q, [_rule()], ScriptedRecognizer(["Jane Austen", "Mark Twain"]))
    assert text == q
    assert [q[a:b] for a, b in option_line_spans(q)] == [
        "A. Jane Austen", "B) Leo Tolstoy", "(C) Mark Twain", "D. None"]


def test_distinct_people_get_distinct_placeholders():
    rec = ScriptedRecognizer(["Ann Lee", "Ann", "Bob"])
    text, fired = apply_query_rules(GSM, [_rule(action="generalize")], rec)
    # same name -> same number; "Ann Lee" is another span text than "Ann" -> its own number
    assert text == ("[PERSON_1] has 3 apples and [PERSON_2] has 5. [PERSON_1] gives [PERSON_2] 2 "
                    "apples. How many apples does [PERSON_2] have? [PERSON_3]'s friend "
                    "[PERSON_2] counts again.")
    assert fired == ["g1"] and task_damage(GSM_TASK, text) == ()


def test_dates_places_and_urls_are_task_content():
    rec = ScriptedRecognizer(["DATE_TIME:3 days", "LOCATION:Seattle"])
    q = "Seattle gets rain for 3 days. How many days?"
    rule = _rule(ents=("DATE_TIME", "LOCATION", "URL"))
    assert apply_query_rules(q, [rule], rec) == (q, [])


def test_refuse_and_quarantined_rules_skipped():
    class Q:
        def __init__(self) -> None:
            self.got: dict[str, str] = {}

        def quarantine(self, rule_id: str, reason: str) -> None:
            self.got[rule_id] = reason

        def is_quarantined(self, rule_id: str) -> bool:
            return rule_id in self.got

    q = Q()
    bad = GlobalRule(rule_id="g9", text="t", category="c", scope="query", patterns=("(",))
    rec = ScriptedRecognizer(["Ann"])
    text, fired = apply_query_rules(GSM, [_rule(action="refuse"), bad], rec, quarantine=q)
    assert (text, fired, q.got) == (GSM, [], {"g9": "invalid"})


@pytest.mark.parametrize(
    ("span", "person"),
    [
        ("Janet", True),
        ("Mr. Smithson", True),
        ("John F. Kennedy", True),
        ("O'Brien", True),
        ("Janet’s", True),
        ("McDonald", True),
        ("Midodrine", False),  # drug-name stems
        ("Rivastigmine", False),
        ("Lisinopril", False),
        ("Atorvastatin", False),
        ("A. Midodrine\nB. Rivastigmine", False),  # a line break: an option block
        ("Patient 12", False),  # digits
        ("NSAID", False),  # all caps
        ("the resident", False),  # lower case
        ("A B C D E", False),  # five tokens
    ],
)
def test_plausible_person(span, person):
    assert plausible_person(span) is person


def test_damage_codes():
    merged = MEDQA.replace("Midodrine", "[X]").replace("72", "")
    assert task_damage(MEDQA_TASK, merged) == ("number_lost", "option_changed")
    one_for_two = GSM.replace("Ann Lee", "[P]").replace("Ann", "[P]").replace("Bob", "[P]")
    assert task_damage(GSM_TASK, one_for_two) == ("people_merged",)
    report = audit_alteration([GSM_TASK, MEDQA_TASK], lambda s: s.replace("Bob", "[P]"))
    assert [(a.altered, a.damage) for a in report] == [(True, ()), (False, ())]


def test_task_needed_identifiers_stay_readable():
    # PrivacyLens-like: the instruction names the addressee and her address; the user's own
    # identity is in the environment; a third party of the trajectory is not needed
    text = ("User: Jane Doe (jane.doe@gmail.com)\nUser Input: Please send Sarah an update "
            "using Messenger (sarah@messenger.com).\nObservation: Tom's therapist "
            "Dr. Kim Lee (kim.lee@clinic.org) wrote that Tom relapsed. Sarah knows.")
    rec = ScriptedRecognizer(["Jane Doe", "Sarah", "Tom", "Kim Lee", "EMAIL_ADDRESS:jane.doe@gmail.com",
                              "EMAIL_ADDRESS:sarah@messenger.com", "EMAIL_ADDRESS:kim.lee@clinic.org"])
    rules = [_rule(ents=("PERSON", "EMAIL_ADDRESS"))]
    keep = ("Jane Doe", "jane.doe@gmail.com",
            "Please send Sarah an update using Messenger (sarah@messenger.com).")
    out, fired = apply_query_rules(text, rules, rec, keep=keep)
    assert fired == ["g1"]
    # the addressee (both occurrences of her name) and the user stay; the others go
    for needed in ("Jane Doe", "jane.doe@gmail.com", "sarah@messenger.com"):
        assert needed in out
    assert out.count("Sarah") == 2
    assert "Kim Lee" not in out and "kim.lee@clinic.org" not in out and "Tom" not in out
    # without the task's keep list the addressee's address is gone (the measured failure)
    assert "sarah@messenger.com" not in apply_query_rules(text, rules, rec)[0]
