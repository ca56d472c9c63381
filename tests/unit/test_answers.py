"""Canonical answers (number / option / math / text) and their equality."""

import threading

import pytest

from pfedma_flwr.answers import ANSWER_KINDS, answers_equal, canonical_answer, is_correct

MEDQA_OPTIONS = {"A": "Diabetes mellitus", "B": "Hypertension", "C": "Asthma", "D": "Gout"}


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        # GSM8K: thousands separator dropped
        ("1,000", "number", "1000"),
        # dollar sign and trailing .00 dropped
        ("$18.00", "number", "18"),
        # units and sentence punctuation dropped
        ("18 dollars.", "number", "18"),
        # prose: the last number wins; trailing zero of a decimal dropped
        ("She pays 3 times 4, so the total is 1,234.50 USD", "number", "1234.5"),
        # the GSM8K gold marker wins over earlier numbers
        ("16 - 3 - 4 = 9 eggs\n#### 18", "number", "18"),
        (r"\boxed{3.0}", "number", "3"),
        ("-5", "number", "-5"),
        # a minus right after a digit is subtraction, not a sign
        ("3-4", "number", "4"),
        (".5 kg", "number", "0.5"),
        # no number at all: normalized text, so equal prose still groups
        ("I don't know", "number", "i don t know"),
        ("", "number", ""),
        # MCQ letter in its usual wrappings
        ("(C)", "option", "C"),
        ("C. foo", "option", "C"),
        ("Answer: B", "option", "B"),
        ("The correct option is (E).", "option", "E"),
        ("b", "option", "B"),
        (r"\boxed{D}", "option", "D"),
        # a lower-case article after "answer is" is not an option letter
        ("the answer is a rash", "option", "the answer is a rash"),
        # LaTeX normalized by math-verify: fractions, \dfrac, \boxed
        (r"\frac{1}{2}", "math", "1/2"),
        ("0.5", "math", "1/2"),
        (r"The answer is $\boxed{\dfrac{3}{4}}$", "math", "3/4"),
        (r"\sqrt{2}", "math", "sqrt(2)"),
        # free text: casefold, punctuation and repeated whitespace dropped
        ("Hello,  World!", "text", "hello world"),
    ],
)
def test_canonical_answer_table(text, kind, expected):
    assert canonical_answer(text, kind) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # exact option text
        ("hypertension", "B"),
        # option text inside a sentence (exactly one option named)
        ("The most likely diagnosis is gout.", "D"),
        # two options named: ambiguous, no letter
        ("Either asthma or gout", "either asthma or gout"),
    ],
)
def test_option_text_matching(text, expected):
    assert canonical_answer(text, "option", options=MEDQA_OPTIONS) == expected
    # the same options as a sequence in letter order
    assert canonical_answer(text, "option", options=list(MEDQA_OPTIONS.values())) == expected


@pytest.mark.parametrize(
    ("a", "b", "kind", "equal"),
    [
        ("1,000", "1000", "number", True),
        ("$18.00", "18", "number", True),
        # float tolerance 1e-6 (relative)
        ("0.3333333", "0.33333331", "number", True),
        ("18", "19", "number", False),
        ("(C)", "C. foo", "option", True),
        ("(C)", "B", "option", False),
        (r"\frac{1}{2}", "0.5", "math", True),
        (r"2\sqrt{2}", r"\sqrt{8}", "math", True),
        (r"\frac{1}{3}", "0.5", "math", False),
        ("Paris.", "paris", "text", True),
        # blank answers agree with nothing, not even each other
        ("", "", "number", False),
        ("  ", "5", "number", False),
    ],
)
def test_answers_equal_table(a, b, kind, equal):
    assert answers_equal(a, b, kind) is equal
    assert answers_equal(b, a, kind) is equal


def test_is_correct_uses_gold_marker_and_options():
    assert is_correct("The answer is 72.", "#### 72", "number")
    assert is_correct("hypertension", "B", "option", options=MEDQA_OPTIONS)
    assert not is_correct("A", "B", "option", options=MEDQA_OPTIONS)


def test_math_works_off_the_main_thread():
    # math-verify's signal timeouts would raise in a worker thread; we disable them there.
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(answers_equal(r"\frac{2}{4}", "0.5", "math")))
    t.start()
    t.join(timeout=30)
    assert out == [True]


def test_unknown_kind_is_rejected():
    assert set(ANSWER_KINDS) == {"number", "option", "math", "text", "action", "response"}
    with pytest.raises(ValueError, match="unknown answer kind"):
        canonical_answer("1", "numeric")


def test_action_is_correct_when_it_names_the_gold_tool_and_response_is_judged():
    action = 'MessengerSendMessage\nAction Input: {"recipient_id": "a", "message": "hi"}'
    assert is_correct(action, "MessengerSendMessage", "action") is True
    assert is_correct(action, "GmailSendEmail", "action") is False
    assert is_correct("", "MessengerSendMessage", "action") is False
    # a response has no gold equality: a judge scores it (AlpacaEval)
    assert is_correct("The same text", "The same text", "response") is None


@pytest.mark.parametrize("digits", [28, 29, 40, 4000])
def test_a_runaway_integer_is_canonical_not_an_error(digits):
    """More digits than Decimal's 28-digit context: quantize raised InvalidOperation, which
    cost a client's whole reply in the server's round (found 2026-12-06)."""
    big = "9" * digits
    assert canonical_answer(f"The answer is {big}.", "number") == big
    assert canonical_answer(f"-{big}.000", "number") == f"-{big}"
    assert answers_equal(big, f"{big}.0", "number")
    assert not answers_equal(big, "9" * (digits + 1), "number")
    assert canonical_answer("1" * 40 + ".5", "number").startswith("1111")  # rounded, no error


def test_names_answer_one_convention_for_numbers_and_options():
    from pfedma_flwr.answers import names_answer

    # numbers as written in a claim, equal by value ("1,200" is 1200; 14 is not 15)
    assert names_answer("so the total is 1,200 dollars", "1200", "number")
    assert not names_answer("doubling gives 15", "14", "number")
    # a letter alone, never inside a word; the option's text when options are given
    assert names_answer("The answer is C. Celiac artery", "C", "option")
    assert not names_answer("Clearly the Celiac artery", "C", "option")
    assert names_answer("the celiac artery it is", "C", "option", options={"C": "Celiac artery"})
    assert names_answer("anything", "x + 1", "math")  # other kinds are not checked
