"""How much ``P_in`` changes real task text, beside how much sensitive text it removes.

Issue 11 item 6: the share of GSM8K / MedQA questions a P_in policy alters (target 0 %) and
whether an alteration damages the task (a number lost, an option's text changed, two people
merged into one placeholder), next to the share of PrivacyLens sensitive items it removes. Used
by ``bench/bench_pin_alteration.py`` and the unit tests.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.rules.pii import PiiRecognizer
from pfedma_flwr.rules.query_rules import QUERY_ENTITIES, plausible_person

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_PLACEHOLDER = re.compile(r"\[(?:REDACTED:)?[A-Z0-9_]+\]")

#: ``text -> processed text``: a P_in policy under audit.
Pin = Callable[[str], str]


@dataclass(frozen=True)
class Alteration:
    """What a policy did to one task text; ``damage`` lists fixed reason codes."""

    task_id: str
    altered: bool
    damage: tuple[str, ...]


def task_damage(task: Task, processed: str) -> tuple[str, ...]:
    """Reasons the processed text no longer carries the task (empty: the task is intact).

    ``number_lost``: a number of the question is missing (multiset of digit runs);
    ``option_changed``: an option's text is no longer in the text; ``people_merged``: fewer
    distinct placeholders than distinct replaced spans (two people became one).
    """
    out: list[str] = []
    before, after = Counter(_NUMBER.findall(task.question)), Counter(_NUMBER.findall(processed))
    if before - after:
        out.append("number_lost")
    if any(f"{k}. {v}" not in processed for k, v in task.options.items()):
        out.append("option_changed")
    if _merged_people(task.question, processed):
        out.append("people_merged")
    return tuple(out)


def _merged_people(original: str, processed: str) -> bool:
    # Align on the unchanged text between placeholders: each placeholder replaced one span.
    pieces = _PLACEHOLDER.split(processed)
    holders = _PLACEHOLDER.findall(processed)
    if not holders:
        return False
    pattern = "(.+?)".join(re.escape(p) for p in pieces)
    m = re.fullmatch(pattern, original, flags=re.DOTALL)
    if m is None:
        return False
    spans = [" ".join(g.casefold().split()) for g in m.groups()]
    by_holder: dict[str, set[str]] = {}
    for h, s in zip(holders, spans, strict=True):
        by_holder.setdefault(h, set()).add(s)
    return any(len(v) > 1 for v in by_holder.values())


def audit_alteration(tasks: Sequence[Task], pin: Pin) -> list[Alteration]:
    """Run ``pin`` over every task's question and record alteration and damage."""
    out = []
    for t in tasks:
        processed = pin(t.question)
        out.append(Alteration(t.task_id, processed != t.question,
                              task_damage(t, processed) if processed != t.question else ()))
    return out


def item_identifiers(item: str, recognizer: PiiRecognizer,
                     entity_types: Sequence[str] = QUERY_ENTITIES) -> list[str]:
    """Names and identifiers inside a sensitive item (PERSON spans must look like names)."""
    spans = recognizer.analyze(item, list(entity_types))
    return [item[s.start : s.end] for s in spans
            if s.entity_type != "PERSON" or plausible_person(item[s.start : s.end])]


@dataclass(frozen=True)
class Removal:
    """Sensitive-item removal over a privacy benchmark (shares in [0, 1], counts beside)."""

    n_verbatim: int
    verbatim_removed: float
    n_identifiers: int
    identifiers_removed: float


def audit_removal(tasks: Sequence[Task], pin: Pin, recognizer: PiiRecognizer) -> Removal:
    """Share of sensitive items ``pin`` removes from the task text.

    ``verbatim_removed``: of the items that occur verbatim in the question, the share no longer
    intact afterwards. ``identifiers_removed``: of the names and identifiers found inside the
    items (:func:`item_identifiers`) that occur in the question, the share no longer in it.
    """
    n_verb = rem_verb = n_ids = rem_ids = 0
    for t in tasks:
        processed = pin(t.question)
        for item in t.sensitive_items:
            if item in t.question:
                n_verb += 1
                rem_verb += item not in processed
            for ident in dict.fromkeys(item_identifiers(item, recognizer)):
                if ident in t.question:
                    n_ids += 1
                    rem_ids += ident not in processed
    return Removal(n_verb, rem_verb / max(1, n_verb), n_ids, rem_ids / max(1, n_ids))
