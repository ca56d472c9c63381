"""Fuzz the rule safety check: no accepted pattern alters a task sample it never saw (issue 30).

Patterns are generated from a grammar of regex pieces (digit classes, letter classes, anchors,
alternations, ``(?i)``, unicode lookalikes, literal words and punctuation, quantifiers). Each
one the checker accepts is run, as enforcement runs it (on the normal form of the text), over
the held-out half of the benchmark sample (:func:`~pfedma_flwr.rules.probe.task_sample`
``part="heldout"``): its questions with option lines, its gold answers as whole fields, and
its ``X_i``-shaped items. None may match.
"""

from __future__ import annotations

from functools import cache

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pfedma_flwr.rules.normalize import normalize_text
from pfedma_flwr.rules.probe import probe_corpus, task_sample, xi_item
from pfedma_flwr.rules.safety import UnsafePatternError, check_pattern

_DIGITS = [r"\d", "[0-9]", r"[1-9]\d", r"\d{1,3}", r"\d{2,4}", r"\d{4}", "[0-5]", r"\d\d",
           r"\d+(?:\.\d+)?", r"\d{1,3}(?:,\d{3})?"]
_LETTERS = ["[a-z]", "[A-Z]", "[a-zA-Z]", r"\w", "[aeiou]", "[A-Z][a-z]", r"\S", "[^ ]",
            "[b-df-hj-np-tv-z]"]
_LITERALS = ["the", "is", "mg", "John", "Mr", "of", "a", "e", "x", "A", "B", "C", "E", "@",
             "-", ":", " ", "=>", "%", r"\$", r"\.", ",", "/", r"\(", r"\)", "=", "'", "\u017f",
             "\uff53", "\u212a", "\u200b", "\u00e9", "\u00b0C", "mm Hg", "year", "old"]
_ANCHORS = ["^", "$", r"\b", r"\B"]
_QUANT = ["", "", "", "?", "+", "*", "{1,3}", "{2}"]

_atom = st.one_of(st.sampled_from(_DIGITS), st.sampled_from(_LETTERS),
                  st.sampled_from(_LITERALS))
_piece = st.one_of(
    st.tuples(_atom, st.sampled_from(_QUANT)).map(
        lambda t: t[0] + t[1] if len(t[0]) <= 2 or t[0].startswith("\\") else t[0]),
    st.sampled_from(_ANCHORS),
)
_seq = st.lists(_piece, min_size=1, max_size=5).map("".join)
_alt = st.lists(_seq, min_size=1, max_size=3).map(lambda bs: "|".join(bs))
patterns = st.one_of(
    _seq,
    _alt,
    _alt.map(lambda p: f"(?:{p})"),
    st.tuples(_seq, _alt).map(lambda t: f"{t[0]}(?:{t[1]})"),
).flatmap(lambda p: st.sampled_from([p, "(?i)" + p]))


@cache
def heldout() -> tuple[str, ...]:
    """The held-out texts, as enforcement matches them (normal form), each a whole field."""
    tasks = task_sample("heldout")
    seen = set(probe_corpus().texts())
    texts = [t.question for t in tasks] + [t.gold for t in tasks if len(t.gold) <= 40] + \
        [xi_item(t) for t in tasks]
    out = tuple(normalize_text(t) for t in dict.fromkeys(texts))
    return tuple(t for t in out if t not in seen)  # only what the checker did not see


def test_heldout_sample_is_disjoint_from_the_probe_and_covers_the_benchmarks():
    probe = {t.task_id for t in task_sample("probe")}
    held = task_sample("heldout")
    assert held and not probe & {t.task_id for t in held}
    assert {t.benchmark for t in held} >= {"gsm8k", "medqa", "medmcqa", "math", "mind2web_sc"}
    assert not {t.benchmark for t in held} & {"privacylens", "privacylens_confaide"}
    assert len(heldout()) > 500


@settings(max_examples=600, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(patterns)
@example(r"°C?\B")  # found by this test: a symbol outside the probe's alphabet was not widened
def test_no_accepted_pattern_alters_a_heldout_task(pattern):
    try:
        checked = check_pattern(pattern)
    except UnsafePatternError:
        return
    for text in heldout():
        for m in checked.compiled.finditer(text, timeout=1.0):
            assert m.end() == m.start(), (pattern, m.group(0), text[:120])
