"""One training episode: a query driven through the collaboration engine with replayed answers.

The policy is the same :class:`~pfedma_flwr.routing.llm_orchestrator.LLMOrchestrator` that
serves the trained checkpoint, over a backend that calls back into the trainer; the clients'
answers come from a :class:`ReplayCache` recorded once, so training needs no live federation.
Everything between (anomaly filter, routing-state update, aggregation into ``z``, stopping)
is :class:`~pfedma_flwr.server.engine.CollaborationEngine` itself: the Flower strategy and
this loop cannot drift. Rules do not co-evolve here (replayed replies carry no rule traffic).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pfedma_flwr.agents.backends.base import Backend, GenerationResult, Messages
from pfedma_flwr.aggregation.consensus import CollabState
from pfedma_flwr.anomaly.judges import EmbeddingJudge, Judge
from pfedma_flwr.answers import is_correct
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.codec import ClientDescription
from pfedma_flwr.protocol.schema import ClientReply, ProcessedResponse, SchemaError
from pfedma_flwr.routing.llm_orchestrator import LLMOrchestrator
from pfedma_flwr.routing.state import RoutingTable
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.server.engine import CollaborationEngine
from pfedma_flwr.server.query_state import EngineSettings

Policy = Callable[[Messages], str]


class PolicyBackend(Backend):
    """A backend whose every generation is ``policy(messages)`` (the trainer's rollout)."""

    name = "policy"

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        if not callable(policy):
            raise ValueError(f"policy must be callable, got {policy!r}")
        self.policy = policy

    def _generate_batch(
        self, prompts: list[Messages], *, max_tokens: int, temperature: float,
        json_schema: dict[str, Any] | None, seed: int | None,
    ) -> list[GenerationResult]:
        return [GenerationResult(self.policy(p)) for p in prompts]


@dataclass(frozen=True)
class ReplayCache:
    """Recorded client answers per ``(query id, client id, round)`` plus the client pool.

    Parameters
    ----------
    clients : Mapping[str, ClientDescription]
        Client id → public description (what the orchestrator's prompt shows).
    answers : Mapping[tuple[str, str, int], ProcessedResponse]
        The processed response client ``c`` gave to query ``q`` in round ``t``.
    routing : Mapping, optional
        A :meth:`RoutingTable.to_dict` of a recorded run, so episodes start from learned
        ``C``/``S`` instead of the priors.
    """

    clients: Mapping[str, ClientDescription]
    answers: Mapping[tuple[str, str, int], ProcessedResponse]
    routing: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.clients:
            raise ValueError("a replay cache needs at least one client")
        strays = sorted({c for _, c, _ in self.answers} - set(self.clients))
        if strays:
            raise ValueError(f"replay answers of undeclared client(s) {strays}")

    def answer(self, query_id: str, client_id: str, round: int) -> ProcessedResponse | None:
        """The answer of that round, else the client's latest earlier one, else ``None``."""
        for t in range(round, 0, -1):
            got = self.answers.get((query_id, client_id, t))
            if got is not None:
                return got
        return None

    @classmethod
    def from_jsonl(cls, path: str | Path) -> ReplayCache:
        """Read a cache file (``.jsonl`` or ``.jsonl.gz``); errors name ``file:line``.

        One JSON object per line, by ``kind``: ``{"kind": "client", "client_id": …,
        "description": ClientDescription.to_dict()}``, ``{"kind": "answer", "query_id": …,
        "client_id": …, "round": t, "response": ProcessedResponse.to_dict()}`` and at most one
        ``{"kind": "routing", "state": RoutingTable.to_dict()}``.
        """
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"replay cache {p} does not exist")
        opener = gzip.open if p.suffix == ".gz" else open
        clients: dict[str, ClientDescription] = {}
        answers: dict[tuple[str, str, int], ProcessedResponse] = {}
        routing: dict[str, Any] = {}
        with opener(p, "rt", encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{p}:{n}"
                try:
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise ValueError("a line must be a JSON object")
                    kind = row.get("kind")
                    if kind == "client":
                        clients[_id(row, "client_id")] = ClientDescription.from_dict(
                            row.get("description"))
                    elif kind == "answer":
                        t = row.get("round")
                        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
                            raise ValueError(f"'round' must be an integer >= 1, got {t!r}")
                        key = (_id(row, "query_id"), _id(row, "client_id"), t)
                        if key in answers:
                            raise ValueError(f"a second answer for {key}")
                        pr = ProcessedResponse.from_dict(row.get("response"))
                        if pr.query_id != key[0]:
                            raise ValueError(f"response.query_id {pr.query_id!r} != {key[0]!r}")
                        answers[key] = pr
                    elif kind == "routing":
                        state = row.get("state")
                        if not isinstance(state, dict):
                            raise ValueError("'state' must be a RoutingTable.to_dict() object")
                        RoutingTable.from_dict(state)  # validate now, not mid-run
                        routing = state
                    else:
                        raise ValueError(f"unknown kind {kind!r} (client | answer | routing)")
                except (ValueError, SchemaError, TypeError) as e:
                    raise ValueError(f"{where}: {e}") from e
        return cls(clients=clients, answers=answers, routing=routing)


def _id(row: Mapping[str, Any], key: str) -> str:
    v = row.get(key)
    if not isinstance(v, str) or not v:
        raise ValueError(f"{key!r} must be a non-empty string, got {v!r}")
    return v


@dataclass(frozen=True)
class EpisodeSummary:
    """What :func:`pfedma_flwr.training.reward.compute_score` reads, and diagnostics."""

    format_ok: bool
    correct: bool
    step_correct: tuple[float, ...]
    num_selected: tuple[int, ...]
    tokens: int
    rounds: int
    stop_reason: str
    answer: str
    format_failures: dict[str, int] = field(default_factory=dict)
    policy_turns: int = 0

    def to_extra_fields(self) -> dict[str, Any]:
        """Plain values for veRL's ``extra_fields`` (merged into the reward's ``extra_info``)."""
        return {
            "format_ok": self.format_ok, "correct": self.correct,
            "step_correct": list(self.step_correct), "num_selected": list(self.num_selected),
            "tokens": self.tokens, "rounds": self.rounds, "stop_reason": self.stop_reason,
            "answer": self.answer, "format_failures": dict(self.format_failures),
            "policy_turns": self.policy_turns,
        }


def run_episode(
    task: Task,
    *,
    cache: ReplayCache,
    orchestrator: LLMOrchestrator,
    settings: EngineSettings,
    embedder: Embedder,
    judge: Judge | None = None,
    eta: float = 0.2,
) -> EpisodeSummary:
    """Route ``task`` for up to ``settings.t_max`` rounds with replayed client answers.

    Each round: the engine asks ``orchestrator`` (one policy turn; a malformed action falls
    back to the heuristic and counts against ``format_ok``), sends the query to the selected
    clients, whose answers come from ``cache`` (a missing one is a failed reply,
    ``replay_miss``), filters, updates routing states and aggregates ``z``. ``c_t`` is
    whether ``z`` after round ``t`` is correct.
    """
    before = dict(orchestrator.failures)
    turns_before = orchestrator.decisions
    engine = CollaborationEngine(
        tasks=[task], orchestrator=orchestrator,
        judge=judge or EmbeddingJudge(embedder=embedder), embedder=embedder,
        rules=GlobalRuleRepository(embedder=embedder, sim_threshold=settings.sim_threshold),
        routing=RoutingTable.from_dict(cache.routing) if cache.routing else RoutingTable(eta=eta),
        recognizer=None, settings=replace(settings, batch_size=1, rule_mode="NR"),
    )
    engine.register_clients(cache.clients)
    step_correct: list[float] = []
    num_selected: list[int] = []
    opts = task.options or None
    for server_round in range(1, settings.t_max + 2):
        plan = engine.plan_round(server_round)
        if not plan:
            break
        replies: dict[str, ClientReply] = {}
        failures: dict[str, str] = {}
        for cid, instruction in plan.items():
            rq = instruction.queries[0]
            pr = cache.answer(rq.query_id, cid, rq.round)
            if pr is None:
                failures[cid] = f"replay_miss: no recorded answer of {cid} to {rq.query_id}"
            else:
                replies[cid] = ClientReply(responses=(pr,), backend_calls=1, tokens=pr.tokens)
        record = engine.absorb_round(server_round, replies, failures)
        log = record["queries"][0]
        num_selected.append(len(log["selected"]))
        z = CollabState.from_dict(log["z"])
        step_correct.append(float(bool(z.answer) and bool(is_correct(
            z.answer, task.gold, task.answer_kind, options=opts))))
        if engine.done:
            break
    if not engine.done:
        engine.finish_all("budget")
    final = engine.finished[-1]
    failed = {k: v - before.get(k, 0) for k, v in orchestrator.failures.items()
              if v - before.get(k, 0) > 0}
    return EpisodeSummary(
        format_ok=not failed, correct=bool(final["correct"]),
        step_correct=tuple(step_correct), num_selected=tuple(num_selected),
        tokens=int(final["tokens"]), rounds=int(final["rounds"]),
        stop_reason=str(final["stop_reason"]), answer=str(final["answer"]),
        format_failures=failed, policy_turns=orchestrator.decisions - turns_before,
    )


def task_from_extra_info(extra: Mapping[str, Any], question: str, gold: str) -> Task:
    """Rebuild the :class:`Task` of a training row (see :mod:`pfedma_flwr.training.data`)."""
    try:
        options = json.loads(str(extra.get("options_json", "{}")))
        return Task(task_id=str(extra["task_id"]), benchmark=str(extra["benchmark"]),
                    domain=str(extra["domain"]), question=question, gold=gold,
                    answer_kind=str(extra["answer_kind"]), options=options)
    except KeyError as e:
        raise ValueError(f"training row extra_info lacks {e.args[0]!r} "
                         f"(build rows with 'python3 -m pfedma_flwr.training build-data')") from e
    except (json.JSONDecodeError, ValueError) as e:
        raise ValueError(f"training row {extra.get('task_id')!r}: {e}") from e
