"""The orchestrator contract: BaseOrchestrator's defaults, the select-only adapter, the built-ins."""

from __future__ import annotations

import pytest

from pfedma_flwr.baselines import hooks
from pfedma_flwr.baselines.debate import OptAgentOrchestrator
from pfedma_flwr.baselines.epe import EPEOrchestrator
from pfedma_flwr.baselines.fedicl import FedICLOrchestrator
from pfedma_flwr.baselines.kabb import KABBOrchestrator
from pfedma_flwr.baselines.moa import MoAOrchestrator
from pfedma_flwr.baselines.router import RouterR1Orchestrator
from pfedma_flwr.baselines.single import SingleAgentOrchestrator
from pfedma_flwr.routing import (
    ORCHESTRATORS,
    AgentView,
    BaseOrchestrator,
    CandidateState,
    HeuristicOrchestrator,
    LLMOrchestrator,
    OrchestratorQuery,
    RandomOrchestrator,
    RoutingState,
    Selection,
    as_orchestrator,
)

QUERY = OrchestratorQuery(query_id="q1", text="2+2?", domain="math")
CANDS = [CandidateState(client_id=c, state=RoutingState()) for c in ("a", "b", "c")]
VIEW = AgentView(client_id="a", client_domains=("math",), query_id="q1", text="2+2?",
                 refinement="earlier: 4", domain="math", round=2, answer_kind="numeric",
                 selected=("a",), history=(), z=None)


class FirstOnly(BaseOrchestrator):
    """The smallest plug-in: select only."""

    def select(self, query, z, candidates, *, round, k_max=None):  # noqa: ANN001, ANN201
        return Selection((candidates[0].client_id,)) if round == 1 else Selection.stop_now("1")


class DuckTyped:
    """An object with select and some optional methods, not a subclass."""

    def __init__(self) -> None:
        self.tokens = 7
        self.seen: list[str] = []
        self.counter = 3

    def select(self, query, z, candidates, *, round, k_max=None):  # noqa: ANN001, ANN201
        return Selection((candidates[-1].client_id,))

    def compose(self, view):  # noqa: ANN001, ANN201
        return view.text + " (checked)", ""

    def observe(self, outcome):  # noqa: ANN001, ANN201
        self.seen.append(outcome.query_id)

    def state_dict(self):  # noqa: ANN201
        return {"seen": list(self.seen)}

    def load_state_dict(self, d):  # noqa: ANN001, ANN201
        self.seen = list(d["seen"])


def test_base_defaults_are_the_engine_s_no_op_contract():
    o = FirstOnly()
    assert o.select(QUERY, None, CANDS, round=1).clients == ("a",)
    assert o.stop_before_routing(None, round=2) is None
    assert not o.composes
    assert o.compose(VIEW) == ("2+2?", "earlier: 4")
    assert o.observe(object()) is None  # type: ignore[arg-type]
    assert o.state_dict() == {}
    assert hooks.orchestrator_state(o) is None  # no checkpoint entry for a stateless policy
    hooks.load_orchestrator_state(o, {"anything": 1})  # nothing to restore, no error
    assert o.tokens == 0 and hooks.orchestrator_tokens(o) == 0
    assert o.name == "FirstOnly"
    assert as_orchestrator(o) is o


def test_select_is_the_one_required_method():
    class NoSelect(BaseOrchestrator):
        pass

    with pytest.raises(TypeError, match="select"):
        NoSelect()  # type: ignore[abstract]


def test_a_select_only_object_is_wrapped_and_keeps_its_optional_methods():
    inner = DuckTyped()
    o = as_orchestrator(inner)
    assert isinstance(o, BaseOrchestrator) and o is not inner
    assert o.name == "DuckTyped"
    assert o.select(QUERY, None, CANDS, round=1).clients == ("c",)
    assert o.composes and o.compose(VIEW) == ("2+2? (checked)", "")
    assert o.stop_before_routing(None, round=2) is None  # it has none: the default
    assert hooks.orchestrator_tokens(o) == 7
    inner.tokens = 9
    assert hooks.orchestrator_tokens(o) == 9  # read live, not copied at wrap time
    assert o.counter == 3  # attribute reads fall through to the plug-in
    o.load_state_dict({"seen": ["q0"]})
    assert inner.seen == ["q0"] and hooks.orchestrator_state(o) == {"seen": ["q0"]}


def test_a_select_only_object_without_optional_methods_gets_the_defaults():
    class Bare:
        def select(self, query, z, candidates, *, round, k_max=None):  # noqa: ANN001, ANN201
            return Selection.stop_now("bare")

    o = as_orchestrator(Bare())
    assert not o.composes and o.compose(VIEW) == ("2+2?", "earlier: 4")
    assert hooks.orchestrator_state(o) is None and hooks.orchestrator_tokens(o) == 0
    assert o.select(QUERY, None, CANDS, round=1).stop


@pytest.mark.parametrize("bad", [object(), 3, type("S", (), {"select": 1})()])
def test_something_without_select_is_refused_naming_its_type(bad):  # noqa: ANN001
    with pytest.raises(TypeError, match=type(bad).__name__):
        as_orchestrator(bad)


def test_a_negative_or_boolean_token_counter_counts_as_zero():
    o = as_orchestrator(DuckTyped())
    o.inner.tokens = -5
    assert hooks.orchestrator_tokens(o) == 0
    o.inner.tokens = True
    assert hooks.orchestrator_tokens(o) == 0


class _Backend:
    def generate(self, prompts, *, max_tokens, temperature):  # noqa: ANN001, ANN201
        return []


@pytest.mark.parametrize("policy", [
    HeuristicOrchestrator(k_max=2), RandomOrchestrator(k_max=2),
    LLMOrchestrator(backend=_Backend(), k_max=2), SingleAgentOrchestrator(k_max=1),
    FedICLOrchestrator(k_max=2), EPEOrchestrator(k_max=2, recognizer=None),
    RouterR1Orchestrator(k_max=1), KABBOrchestrator(k_max=2), OptAgentOrchestrator(k_max=2),
    MoAOrchestrator(k_max=2, t_max=2),
], ids=lambda p: type(p).__name__)
def test_every_built_in_and_baseline_policy_is_a_base_orchestrator(policy):  # noqa: ANN001
    assert isinstance(policy, BaseOrchestrator)
    assert as_orchestrator(policy) is policy


def test_the_composing_baselines_say_so_and_the_others_do_not():
    assert EPEOrchestrator(k_max=2, recognizer=None).composes
    assert MoAOrchestrator(k_max=2, t_max=2).composes
    assert not KABBOrchestrator(k_max=2).composes
    assert not HeuristicOrchestrator(k_max=2).composes


def test_every_registered_orchestrator_class_subclasses_the_base():
    for name in ORCHESTRATORS.names():
        assert issubclass(ORCHESTRATORS.get(name), BaseOrchestrator), name
