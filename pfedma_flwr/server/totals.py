"""The engine's run counters, typed (issue 31 item 5), the failure accounting and run status.

One field per counter (:class:`EngineTotals`), so a misspelt key is an attribute error at the
line that made it rather than a new entry in ``summary.json``. The per-answer failure
accounting is :meth:`EngineTotals.count_answers` (:func:`with_answer_failures` for the mapping
form the checkpoint stores); :func:`generation_summary` and :func:`run_status` read it for
``summary.json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pfedma_flwr.protocol.schema import ProcessedResponse

#: ``summary.json`` status of a run in which more than ``max_failed_share`` of the answers
#: asked of agents were not produced (dead endpoint, wrong model, unparsable output...)
GENERATION_FAILED = "failed:generation"
#: queries finished but no agent was ever asked one (every selection refused or invalid)
NO_ANSWERS = "failed:no_answers"
#: Message-level failure codes (the strategy's ``failures``) in which the agent produced
#: nothing: no reply in time, or its app raised. A reply rejected at the seam for its content
#: (``malformed``, ``duplicate``...) is the defence against hostile clients doing its job:
#: counted per client, but it does not make the run ``failed:generation``.
NOT_PRODUCED_CODES = frozenset({"timeout", "error"})
MAX_CODES_PER_CLIENT = 16
_CODE_RE = re.compile(r"[A-Za-z0-9_.:-]{1,48}")
# "backend: connect: detail" (a code nested after "<prefix>: ") reads as "backend:connect"
_NESTED_RE = re.compile(r"([a-z][a-z0-9_]*):\s+([a-z][a-z0-9_]*):")


@dataclass
class EngineTotals:
    """Counters of a run, all starting at zero.

    Attributes
    ----------
    failures : int
        Client messages that failed (timeouts, errors, rejected replies).
    filtered, retained : int
        Answers the anomaly filter removed / kept.
    rejected_items : int
        Items of replies the server refused (wrong query, duplicates, over the caps).
    invalid_selections : int
        Orchestrator actions that failed validation (each ended its query).
    answers, answers_failed, generation_failed : int
        Answers asked of agents; of those, not usable; of those, never produced by the agent.
    failed_by_client : dict
        ``{client: {reason code: n}}`` of the failed answers.
    """

    failures: int = 0
    filtered: int = 0
    retained: int = 0
    rejected_items: int = 0
    invalid_selections: int = 0
    answers: int = 0
    answers_failed: int = 0
    generation_failed: int = 0
    failed_by_client: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint and summary form (a plain JSON object)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EngineTotals:
        """Read :meth:`to_dict`'s form; a counter it lacks (an older checkpoint) starts at 0."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"engine totals: unknown counters {unknown}")
        kw: dict[str, Any] = {k: int(v) for k, v in d.items() if k != "failed_by_client"}
        kw["failed_by_client"] = {str(c): {str(code): int(n) for code, n in dict(per).items()}
                                  for c, per in dict(d.get("failed_by_client", {})).items()}
        return cls(**kw)

    def count_answers(
        self, routed: Mapping[str, Sequence[str]],
        got: Mapping[str, Mapping[str, ProcessedResponse]], failures: Mapping[str, str],
    ) -> None:
        """Add one round's asked and failed answers, per client and reason code.

        Parameters
        ----------
        routed : Mapping[str, Sequence[str]]
            Query id → the clients it was sent to this round.
        got : Mapping[str, Mapping[str, ProcessedResponse]]
            Query id → client → the accepted processed response.
        failures : Mapping[str, str]
            Client → why its whole message failed (every answer asked of it fails with that
            code).

        An answer fails when its client's message failed, when the reply left the query out
        (``missing``), or when it carries no response and no privacy refusal (code of
        ``ProcessedResponse.error``, ``no_response`` if empty). It also counts as
        ``generation_failed`` when the agent produced nothing: its own error report, or a
        message failure in :data:`NOT_PRODUCED_CODES`.
        """
        for qid, clients in routed.items():
            for c in clients:
                self.answers += 1
                pr = got.get(qid, {}).get(c)
                if c in failures:
                    code = reason_code(failures[c])
                    self.generation_failed += code in NOT_PRODUCED_CODES
                elif pr is None:
                    code = "missing"
                elif pr.response is None and not pr.refused:
                    code = reason_code(pr.error) if pr.error.strip() else "no_response"
                    self.generation_failed += 1
                else:
                    continue
                self.answers_failed += 1
                per = self.failed_by_client.setdefault(c, {})
                if code not in per and len(per) >= MAX_CODES_PER_CLIENT:
                    code = "other"  # a client inventing a new code per answer cannot grow this
                per[code] = per.get(code, 0) + 1
        self.failed_by_client = dict(sorted(self.failed_by_client.items()))


def reason_code(error: str) -> str:
    """The short code of a failure reason: its text before the first space, without ``:``.

    ``"backend:connect refused"`` → ``backend:connect``; ``"timeout: no reply"`` →
    ``timeout``; ``"backend: connect: ..."`` → ``backend:connect``. Anything else a client
    wrote there is reduced to ``[A-Za-z0-9_.:-]`` (at most 48 characters), so a hostile error
    text cannot grow the summary's keys.
    """
    text = str(error).strip()
    nested = _NESTED_RE.match(text)
    if nested:
        return f"{nested[1]}:{nested[2]}"
    head = text.split(None, 1)[0].rstrip(":") if text else ""
    m = _CODE_RE.match(head)
    return m[0] if m else "unknown"


def with_answer_failures(
    totals: Mapping[str, Any], routed: Mapping[str, Sequence[str]],
    got: Mapping[str, Mapping[str, ProcessedResponse]], failures: Mapping[str, str],
) -> dict[str, Any]:
    """``totals`` (the mapping form) plus one round's answers: :meth:`EngineTotals.count_answers`.

    Missing keys of ``totals`` start at zero and its other keys are kept; a new dict.
    """
    t = EngineTotals(
        answers=int(totals.get("answers", 0)),
        answers_failed=int(totals.get("answers_failed", 0)),
        generation_failed=int(totals.get("generation_failed", 0)),
        failed_by_client={c: dict(v) for c, v in dict(totals.get("failed_by_client", {})).items()})
    t.count_answers(routed, got, failures)
    return {**totals, "answers": t.answers, "answers_failed": t.answers_failed,
            "generation_failed": t.generation_failed, "failed_by_client": t.failed_by_client}


def generation_summary(totals: Mapping[str, Any], max_failed_share: float) -> dict[str, Any]:
    """The ``generation`` block of ``summary.json``: how many answers failed, why and where.

    ``failed`` counts every answer asked that did not arrive usable; ``generation_failed``
    those the agents did not produce (see :func:`with_answer_failures`), whose share decides
    :func:`run_status`.
    """
    asked = int(totals.get("answers", 0))
    failed = int(totals.get("answers_failed", 0))
    not_produced = int(totals.get("generation_failed", 0))
    by_client = {c: dict(sorted(v.items()))
                 for c, v in sorted(dict(totals.get("failed_by_client", {})).items())}
    by_code: dict[str, int] = {}
    for per in by_client.values():
        for code, n in per.items():
            by_code[code] = by_code.get(code, 0) + int(n)
    return {"answers": asked, "failed": failed,
            "failed_share": failed / asked if asked else 0.0,
            "generation_failed": not_produced,
            "generation_failed_share": not_produced / asked if asked else 0.0,
            "max_failed_share": max_failed_share,
            "failed_by_code": dict(sorted(by_code.items())), "failed_by_client": by_client}


def run_status(summary: Mapping[str, Any]) -> str:
    """``failed:generation`` if more than ``max_failed_share`` of the answers were not produced.

    ``failed:no_answers`` when queries finished but no agent was asked a single one (accuracy 0
    there measures the routing's refusals, not the agents). Read from the summary's
    ``generation`` block; otherwise ``completed`` (also for a summary without the block,
    written by older code).
    """
    gen = summary.get("generation")
    if not isinstance(gen, Mapping):
        return "completed"
    if int(summary.get("num_queries") or 0) > 0 and gen.get("answers") == 0:
        return NO_ANSWERS
    try:
        over = float(gen["generation_failed_share"]) > float(gen["max_failed_share"])
    except (KeyError, TypeError, ValueError):
        return "completed"
    return GENERATION_FAILED if over else "completed"
