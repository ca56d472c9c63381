"""EPEAgents: a server-side privacy-enhancing agent forwards each agent only what it may see.

Before a query reaches an agent, the privacy agent finds the personal fields of the
(``P_in``-processed) task — names, contacts and identifiers, :data:`EPE_FIELDS` — and replaces
every field the agent is not authorized for by its type (``[PHONE_NUMBER]``). An agent is
authorized for the entity types its own profile domains handle
(:data:`pfedma_flwr.rules.policy.DOMAIN_ENTITIES`) and only on a query of one of those domains:
a physician sees the patient's name in a medical question, a mathematician never does. The
experts answer once; the answer is their majority vote.
"""

from __future__ import annotations

from collections.abc import Sequence

from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.baselines.base import BaselineOrchestrator
from pfedma_flwr.baselines.hooks import AgentView
from pfedma_flwr.baselines.scoring import ranked
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery, Selection
from pfedma_flwr.rules.pii import PiiRecognizer, PiiSpan
from pfedma_flwr.rules.policy import profile_entities

#: Fields the privacy agent filters. Dates, places and URLs are task content (a date in a word
#: problem), not fields an agent needs authorization for.
EPE_FIELDS: tuple[str, ...] = (
    "PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "US_SSN", "CREDIT_CARD", "IBAN_CODE",
    "IP_ADDRESS", "US_PASSPORT", "US_DRIVER_LICENSE", "MEDICAL_LICENSE", "US_BANK_NUMBER",
)


def authorized_entities(query_domain: str, agent_domains: Sequence[str]) -> frozenset[str]:
    """Entity types an agent may see in a query: its domains' types, on an in-domain query."""
    if query_domain not in agent_domains:
        return frozenset()
    return frozenset(profile_entities(agent_domains))


def filter_fields(text: str, spans: Sequence[PiiSpan], authorized: frozenset[str]) -> str:
    """``text`` with every span of a type outside ``authorized`` replaced by ``[TYPE]``.

    Overlapping unauthorized spans are replaced as one, labelled by the one starting first
    (then the longer); authorized spans are left as they are.
    """
    out, pos = [], 0
    hidden = sorted((s for s in spans if s.entity_type not in authorized),
                    key=lambda s: (s.start, -(s.end - s.start)))
    for sp in hidden:
        if sp.start < pos:  # inside a field already replaced: widen it
            pos = max(pos, sp.end)
            continue
        out += [text[pos:sp.start], f"[{sp.entity_type}]"]
        pos = sp.end
    out.append(text[pos:])
    return "".join(out)


class EPEOrchestrator(BaselineOrchestrator):
    """Top-K_max experts by expertise, one round, each sent its authorized view of the task.

    Parameters
    ----------
    k_max : int
        Experts per query.
    recognizer : PiiRecognizer or None
        Finds the fields (the run's ``rules.pii`` recognizer); ``None`` forwards the task as is.
    embedder : Embedder, optional
        Unused.
    """

    def __init__(self, *, k_max: int, recognizer: PiiRecognizer | None,
                 embedder: Embedder | None = None) -> None:
        super().__init__(k_max=k_max, embedder=embedder)
        self.recognizer = recognizer

    one_round = "EPEAgents: one round"

    def choose(self, query: OrchestratorQuery, z: CollabState | None,
               candidates: Sequence[CandidateState], *, round: int, k: int) -> Selection:
        """See :meth:`BaselineOrchestrator.choose`."""
        return self._pick(ranked(query, candidates)[:k], candidates, k)

    def compose(self, view: AgentView) -> tuple[str, str]:
        """The task with the fields this agent is not authorized for replaced by their type."""
        if self.recognizer is None:
            return view.text, ""
        spans = self.recognizer.analyze(view.text, EPE_FIELDS)
        allowed = authorized_entities(view.domain, view.client_domains)
        return filter_fields(view.text, spans, allowed), ""
