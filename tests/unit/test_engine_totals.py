"""The engine's typed counters (server/totals.py) and their checkpoint form."""

from __future__ import annotations

import pytest

from pfedma_flwr.server.totals import EngineTotals, generation_summary, with_answer_failures


def test_round_trip_and_an_older_checkpoint_without_some_counters():
    t = EngineTotals(failures=1, retained=3, answers=4, answers_failed=1,
                     failed_by_client={"c1": {"timeout": 1}})
    assert EngineTotals.from_dict(t.to_dict()) == t
    old = EngineTotals.from_dict({"failures": 2, "answers": 5})  # written before a counter
    assert (old.failures, old.answers, old.invalid_selections, old.failed_by_client) == \
        (2, 5, 0, {})


def test_a_misspelt_counter_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown counters \['retaind'\]"):
        EngineTotals.from_dict({"retaind": 1})


def test_answer_failures_accumulate_on_the_typed_counters():
    # two queries routed to a and b; b's whole message failed (a timeout: not produced)
    t = EngineTotals(retained=7)
    t = EngineTotals.from_dict(with_answer_failures(
        t.to_dict(), {"q1": ["a", "b"], "q2": ["b"]}, {}, {"b": "timeout: no reply"}))
    assert (t.retained, t.answers, t.answers_failed) == (7, 3, 3)
    assert t.failed_by_client == {"a": {"missing": 1}, "b": {"timeout": 2}}
    gen = generation_summary(t.to_dict(), 0.5)
    assert gen["answers"] == 3 and gen["failed_share"] == 1.0


def test_count_answers_in_place_equals_the_mapping_form():
    """The engine counts on its typed totals; the checkpoint's mapping form agrees."""
    from pfedma_flwr.protocol.schema import ProcessedResponse, StructuredResponse

    got = {"q1": {"a": ProcessedResponse("q1", StructuredResponse("4"), tokens=3),
                  "c": ProcessedResponse("q1", None, error="parse:json oops")},
           "q2": {"c": ProcessedResponse("q2", None, refused=True)}}
    routed = {"q1": ["a", "b", "c"], "q2": ["c"]}
    t = EngineTotals(answers=2, failed_by_client={"z": {"timeout": 1}})
    mapping = with_answer_failures(t.to_dict(), routed, got, {})
    t.count_answers(routed, got, {})
    assert t.to_dict() == {k: mapping[k] for k in t.to_dict()}
    # by hand: 4 asked (6 in all); b missing, c's parse failure produced nothing usable
    # (generation_failed), c's refusal is an answer, a's response is one
    assert (t.answers, t.answers_failed, t.generation_failed) == (6, 2, 1)
    assert t.failed_by_client == {"b": {"missing": 1}, "c": {"parse:json": 1},
                                  "z": {"timeout": 1}}
