"""The evidence term's inputs: what counts as evidence, and what evidence is checked against.

Measured (issue 30): a claim that was its own evidence text got support cos(x, x) = 1, so
``a_evi = 0``; with benign wording ``a_int ≈ 0`` and ``A = 0.3·a_con ≤ 0.3``, below the
tolerance whatever the consensus. Two colluders of five with the same wrong answer took the
accuracy from 0.85 to 0.30 (0.40 in ``bench/bench_steering.py``). So:

- **no self-support**: an evidence item whose words are all words of its claim restates the
  claim and is dropped before any judge sees it (:func:`independent_evidence`); a claim left
  without evidence has support 0;
- **its own answer**: claims that state a different answer than the final one (a number or
  option task) do not support it: the evidence term is 1 (:func:`states_answer`);
- **grounding**: evidence is also checked against references outside the response, namely
  the query's own text and the other clients' claims and evidence for the same query, never
  the response's own text (:func:`references`). The embedding judge counts an evidence item
  as supporting a claim by the mean of how close it is to the claim and how close it is to the
  nearest reference; a judge without a ``references`` parameter (an LLM judge, a plug-in)
  gets the claims alone, as before.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any

from pfedma_flwr.answers import AnswerKind, Options, names_answer
from pfedma_flwr.protocol.schema import StructuredResponse
from pfedma_flwr.rules.normalize import text_key

_WORD = re.compile(r"\w+")
#: references per response (the query and up to this many texts of other responses)
MAX_REFERENCES = 32
#: the query's own lines beside the whole query, at most this many
MAX_QUERY_LINES = 16


def independent_evidence(claim: str, evidence: Sequence[str]) -> tuple[str, ...]:
    """The evidence items that say something beyond the claim itself (module docstring)."""
    own = set(_WORD.findall(text_key(claim)))
    return tuple(e for e in evidence if not set(_WORD.findall(text_key(e))) <= own)


def query_references(query: str) -> list[str]:
    """The query as references: the whole text, then its lines when it has several.

    An evidence item that quotes one line of a long query is far from the whole query's
    embedding; with the whole text alone, a response that answered alone in its round (a
    later round asks one client) lost the support that a partner's quotes of the same lines
    gave it in round 1, so its anomaly score rose with nothing else changed (Mind2Web-SC:
    ``a_evi`` 0.34 with a partner, 0.57 alone, for the same reply) and its vote lost to the
    round-1 answer it agreed with or contradicted (docs/threat_model.md).
    """
    if not query.strip():
        return []
    lines = [ln.strip() for ln in query.splitlines() if ln.strip()]
    return [query, *(lines[:MAX_QUERY_LINES] if len(lines) > 1 else ())]


def _texts(r: StructuredResponse) -> list[str]:
    return [t for c in r.claims for t in (c.claim, *c.evidence) if t.strip()]


def references(
    groups: Sequence[Sequence[StructuredResponse | None]], queries: Sequence[str] | None,
) -> list[list[str]]:
    """Per parsed response (group order), its references: the query, then other responses.

    ``queries[g]`` is the task text of group ``g`` (``None``: no query reference), with its
    lines (:func:`query_references`). Texts of other responses of the same group come in
    response order, at most :data:`MAX_REFERENCES` of them; the response's own texts are
    never among them.
    """
    out: list[list[str]] = []
    for g, grp in enumerate(groups):
        query = query_references(queries[g]) if queries is not None else []
        for k, r in enumerate(grp):
            if r is None:
                continue
            others: list[str] = []
            for j, other in enumerate(grp):
                if j != k and other is not None:
                    others.extend(_texts(other))
            out.append([*query, *others[:MAX_REFERENCES]])
    return out


def claim_supports(judge: Any, responses: Sequence[StructuredResponse],
                   refs: Sequence[Sequence[str]] | None) -> list[list[float]]:
    """The judge's support of every claim, restatements dropped, with references if it takes them.

    Raises ``RuntimeError`` when the judge returns a list per response of the wrong length.
    """
    claims = [[(c.claim, independent_evidence(c.claim, c.evidence)) for c in r.claims]
              for r in responses]
    takes = refs is not None and "references" in inspect.signature(
        judge.evidence_support).parameters
    supports = (judge.evidence_support(claims, references=refs) if takes
                else judge.evidence_support(claims))
    if len(supports) != len(responses):
        raise RuntimeError(f"judge returned {len(supports)} support lists for {len(responses)}")
    return list(supports)


def states_answer(r: StructuredResponse, kind: str, options: Options = None) -> bool:
    """Whether the response's own claims or evidence state its final answer.

    For numbers, some number of the texts equals the answer; for options, the letter stands
    alone or the option's text appears. Other kinds (math, free text), and a response
    without claims, are not checked (``True``). Issue 30: an unreliable client kept its honest
    reasoning and changed only the final answer; nothing else in ``A`` saw it.
    """
    texts = _texts(r)
    checked = kind in (AnswerKind.NUMBER, AnswerKind.OPTION)
    if not texts or not checked or not r.final_answer.strip():
        return True
    return names_answer("\n".join(texts), r.final_answer, kind, options=options)


__all__ = ["MAX_QUERY_LINES", "MAX_REFERENCES", "claim_supports", "independent_evidence",
           "query_references", "references", "states_answer"]
