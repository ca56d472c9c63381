"""Text clipping shared by prompts, structured responses and digests.

Two forms exist on purpose and each is part of a prompt's exact text (the generation cache keys
on it, issue 29): :func:`clip` / :func:`clip_start` keep the text as written and mark a cut with
``"..."``; :func:`clip_line` first joins the text onto one line and marks a cut with ``"…"``,
for the one-line items of a digest or a collaboration summary.
"""

from __future__ import annotations

__all__ = ["clip", "clip_line", "clip_start"]


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, its end replaced by ``"..."`` when cut."""
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def clip_start(text: str, limit: int) -> str:
    """``text`` cut to its last ``limit`` characters, its start replaced by ``"..."`` when cut."""
    return text if len(text) <= limit else "..." + text[len(text) - limit + 3 :].lstrip()


def clip_line(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs joined by one space), cut to ``limit`` with ``"…"``."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
