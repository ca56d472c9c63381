"""Query refinement q^{t+1} from z^t (DESIGN §3.10) and the -RQ ablation."""

import pytest

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.aggregation.refinement import refinement_text

Z = CollabState(
    answer="18", canonical="18", support=0.74, claims=("9 eggs are sold", "2 dollars each"),
    dissent=(("20", 0.26),), disputed_claims=("10 eggs are sold",), round=1, n_agreeing=2,
    n_retained=3,
)


def test_refinement_summarizes_z():
    q = refinement_text(Z, style="verify")
    for part in ("candidate answer '18'", "support 74%", "2 of 3", "- 9 eggs are sold",
                 "'20' (26%)", "- 10 eggs are sold", "Verify the candidate answer"):
        assert part in q


@pytest.mark.parametrize(
    "z",
    [None,                  # first round: no z
     CollabState(round=1)],  # everything filtered: nothing to verify
)
def test_no_refinement_without_an_answer(z):
    assert refinement_text(z) == "" and refinement_text(z, style="verify") == ""


def test_summary_is_bounded():
    huge = CollabState(
        answer="x" * 5000, canonical="x", support=0.5, claims=tuple("c" * 900 for _ in range(9)),
        dissent=tuple(("y" * 900, 0.1) for _ in range(9)),
        disputed_claims=tuple("d" * 900 for _ in range(9)), round=3, n_agreeing=1, n_retained=9,
    )
    for cap in (500, 800, 1200):
        text = refinement_text(huge, max_chars=cap, style="verify")
        assert len(text) <= cap
        assert "candidate answer" in text and text.endswith("required format.")
        text = refinement_text(huge, max_chars=cap)
        assert len(text) <= cap and text.endswith("state your own final answer.")
    with pytest.raises(ValueError, match="max_chars"):
        refinement_text(Z, max_chars=100)


def test_independent_style_lists_answers_without_the_candidates_reasoning():
    text = refinement_text(Z)
    # the earlier answers and their weight shares, the top one first
    assert "answers given: '18' (74%), '20' (26%)." in text
    # no claims of the candidate, no request to confirm it: a fresh solution is asked for
    assert "9 eggs are sold" not in text and "10 eggs" not in text
    assert "Verify" not in text and "from scratch" in text
    with pytest.raises(ValueError, match="style"):
        refinement_text(Z, style="anchor")


def test_the_registered_refiners_are_the_two_styles():
    from pfedma_flwr.aggregation.refinement import REFINERS

    assert REFINERS.names() == ["independent", "verify"]
    for style in REFINERS.names():
        assert REFINERS.get(style)(Z) == refinement_text(Z, style=style)
        assert REFINERS.get(style)(None) == ""
