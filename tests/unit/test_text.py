"""The clipping helpers: lengths and markers by hand (their text is part of prompts)."""

from __future__ import annotations

from pfedma_flwr.text import clip, clip_line, clip_start


def test_clip_keeps_short_text_and_marks_a_cut_end():
    assert clip("abc", 3) == "abc"
    # 10 characters into 8: the first 5, trailing space dropped, then "..."
    assert clip("abcd efghi", 8) == "abcd..."
    assert len(clip("x" * 50, 20)) == 20


def test_clip_start_keeps_the_end():
    assert clip_start("abc", 3) == "abc"
    # the last 5 of "abcd efghi" are "efghi"; its start cut becomes "..."
    assert clip_start("abcd efghi", 8) == "...efghi"


def test_clip_line_joins_lines_before_cutting():
    assert clip_line("a\n  b\tc", 10) == "a b c"
    # "one two three" (13) into 8: the first 7 ("one two"), then the one-character "…"
    assert clip_line("one\ntwo three", 8) == "one two…"
    assert len(clip_line("y" * 30, 12)) == 12
