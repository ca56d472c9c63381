"""Routing: per-client routing state (DESIGN §3.8) and the orchestrator (§3.12)."""

from pfedma_flwr.routing.base import AgentView, BaseOrchestrator, QueryOutcome, as_orchestrator
from pfedma_flwr.routing.llm_orchestrator import LLMOrchestrator, parse_action
from pfedma_flwr.routing.orchestrator import (
    ORCHESTRATORS,
    CandidateState,
    HeuristicOrchestrator,
    Orchestrator,
    OrchestratorQuery,
    RandomOrchestrator,
    Selection,
    should_stop,
    validate_selection,
)
from pfedma_flwr.routing.state import (
    RoutingState,
    RoutingTable,
    quality_signal,
    update_routing_state,
)

__all__ = [
    "ORCHESTRATORS",
    "AgentView",
    "BaseOrchestrator",
    "QueryOutcome",
    "as_orchestrator",
    "CandidateState",
    "HeuristicOrchestrator",
    "LLMOrchestrator",
    "Orchestrator",
    "OrchestratorQuery",
    "RandomOrchestrator",
    "RoutingState",
    "RoutingTable",
    "Selection",
    "parse_action",
    "quality_signal",
    "should_stop",
    "update_routing_state",
    "validate_selection",
]

# The LLM policy lives in its own module (it imports the heuristic one as its fallback).
ORCHESTRATORS.add("llm", LLMOrchestrator)
