"""The scripted agents know only what their query shows (agents/backends/simulated.py, issue 12).

Before, a query that ``P_in`` changed was looked up by its first / last 80 characters; a
redacted e-mail in the first line broke the head key, the lookup fell through to another task,
and the agent answered nonsense ("The answer is 8563744"), which hid every rule effect. And
where the lookup still worked, the agent quoted names its query no longer held.
"""

from __future__ import annotations

import json

from pfedma_flwr.agents.backends.simulated import (
    SimulatedAgentBackend,
    find_task,
    find_task_redacted,
    hide,
)
from pfedma_flwr.data.benchmarks import load_benchmark
from pfedma_flwr.data.profiles import BUILTIN_PROFILES

TASK = "privacylens-main-0285"


def _task():
    return next(t for t in load_benchmark("privacylens") if t.task_id == TASK)


# how a refinement starts (pfedma_flwr.aggregation.refinement); the posed PrivacyLens prompt
# has blank lines of its own, so only a refinement's own opening ends the task's text
REFINEMENT = "\n\nPrevious collaboration round 1: candidate answer 'x' (support 0.50)."


def test_a_redacted_query_is_found_with_what_each_placeholder_hid():
    t = _task()
    assert "  - Name: John Doe\n  - Email: john.doe@gmail.com\n" in t.question
    text = t.question.replace("John Doe", "[REDACTED:PERSON_1]", 1).replace(
        "john.doe@gmail.com", "[REDACTED:EMAIL_ADDRESS_1]", 1)
    found = find_task_redacted(text + REFINEMENT)
    assert found is not None
    task, hidden = found
    assert task.task_id == TASK
    assert hidden == {"[REDACTED:PERSON_1]": "john doe",
                      "[REDACTED:EMAIL_ADDRESS_1]": "john.doe@gmail.com"}


def test_no_placeholder_or_no_match_is_none():
    assert find_task_redacted(_task().question) is None
    assert find_task_redacted("User: [REDACTED:PERSON_1] asks about nothing we know") is None
    # lower-case brackets are task text, not placeholders
    assert find_task_redacted("solve [x] for x") is None


def test_hide_replaces_whole_values_then_unseen_name_words():
    hidden = {"[REDACTED:PERSON_1]": "john doe", "[REDACTED:EMAIL_ADDRESS_1]": "john.doe@x.org"}
    shown = "User: [REDACTED:PERSON_1] ([REDACTED:EMAIL_ADDRESS_1]) wrote to Doe & Co."
    item = "John Doe applied. John was not selected. Mail john.doe@x.org. Doe & Co. knows."
    # whole values first; then "john" (never shown) goes too, "doe" stays (the query shows it);
    # an address's parts are not names: no word of the e-mail is hidden alone
    assert hide(item, hidden, shown) == (
        "[REDACTED:PERSON_1] applied. [REDACTED:PERSON_1] was not selected. Mail "
        "[REDACTED:EMAIL_ADDRESS_1]. Doe & Co. knows.")


def _leaky_claim(user: str) -> str:
    agent = SimulatedAgentBackend(skill=1.0, off_skill=1.0, leak=1.0)
    system = BUILTIN_PROFILES[0].prompt
    out = json.loads(agent._respond([{"role": "system", "content": system},
                                     {"role": "user", "content": user}]))
    return out["claims"][0]["claim"]


def test_a_leaky_agent_quotes_every_item_but_not_what_its_query_hid():
    t = _task()
    plain = _leaky_claim(t.question)
    assert plain == "I will include: " + " ".join(t.sensitive_items)
    redacted = t.question.replace("John Doe", "[REDACTED:PERSON_1]")
    assert find_task(redacted) is not None or find_task_redacted(redacted) is not None
    claim = _leaky_claim(redacted)
    assert "John Doe" not in claim and "[REDACTED:PERSON_1] was a candidate" in claim
    # what the query still shows is still quoted
    assert "Emily Carter" in claim


def test_every_privacylens_question_finds_its_own_task():
    # 61 of 493 share their first and last 80 characters with another task: the head / tail
    # keys alone made agents quote another task's items
    tasks = load_benchmark("privacylens")
    assert all(find_task(t.question).task_id == t.task_id for t in tasks)
    assert all(find_task(t.question + REFINEMENT).task_id == t.task_id for t in tasks[:20])
