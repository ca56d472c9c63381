"""The server side of PFedMA as a plain state machine (no Flower): plan a round, absorb replies.

Per query and collaboration round t (DESIGN §1): q̃ = P_in(q, Ω_global) → orchestrator picks
E^t or STOP → clients answer → anomaly filter → routing-state update → aggregation into z^t →
rule feedback, candidate pool, promotion, H-scores, Resolve → refinement for t+1. The Flower
strategy and the RL agent loop both drive this same engine, so the two paths cannot drift.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pfedma_flwr.aggregation.consensus import CollabState, aggregate
from pfedma_flwr.aggregation.refinement import REFINERS, Refiner
from pfedma_flwr.anomaly.judges import Judge
from pfedma_flwr.anomaly.scores import evaluate_batch
from pfedma_flwr.baselines import hooks
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.profiles import knowledge_domain
from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.schema import (
    ClientReply,
    GlobalRule,
    RespondInstruction,
    RoutedQuery,
)
from pfedma_flwr.protocol.wire import ClientDescription
from pfedma_flwr.routing.base import (
    BaseOrchestrator,
    CandidateState,
    Orchestrator,
    OrchestratorQuery,
    Selection,
    as_orchestrator,
    validate_selection,
)
from pfedma_flwr.routing.state import RoutingTable
from pfedma_flwr.rules.pii import PiiRecognizer
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.rules.server.server_flow import REDISTRIBUTE_MODES, evolve_global_rules
from pfedma_flwr.server.absorb import RoundSignals, absorb_answers, gather, query_log
from pfedma_flwr.server.candidates import CandidateViews
from pfedma_flwr.server.capability import Consensus, lone_answer_signals
from pfedma_flwr.server.checkpoint import engine_state, load_engine_state
from pfedma_flwr.server.posing import pose
from pfedma_flwr.server.query_state import (
    EngineSettings,
    QueryState,
    collect_replies,
    finish_record,
    round_record,
)
from pfedma_flwr.server.run_summary import describe_run, run_summary
from pfedma_flwr.server.totals import EngineTotals

logger = logging.getLogger(__name__)

class CollaborationEngine:
    """Server state of a PFedMA run over a stream of tasks (continuous batching).

    Parameters
    ----------
    tasks : Sequence[Task]
        The evaluation stream; at most ``settings.batch_size`` are active at once.
    orchestrator, judge, embedder, rules, routing, recognizer
        The plug-in components (see :mod:`pfedma_flwr.server_app` for how config builds them).
    settings : EngineSettings
        Loop constants.
    on_query_end : Callable[[dict], None] | None
        Receives each finished query's record (the results writer appends it at once).
    aggregator : Callable[..., CollabState] | None
        Builds ``z``, called like :func:`aggregate` (default).

    ``orchestrator`` is held under the full contract (:func:`as_orchestrator`): a
    ``select``-only plug-in is wrapped, ``self.orchestrator.name`` names the policy itself.
    """

    #: Attributes a state copy keeps by reference (plug-ins, callbacks, read-only data, the
    #: finished list that a rollback truncates): :mod:`pfedma_flwr.server.transaction`.
    SHARED = ("orchestrator", "judge", "embedder", "recognizer", "on_query_end", "finished",
              "settings", "_tasks", "_task_ids", "clients", "_profile_emb")

    def __init__(
        self, *, tasks: Sequence[Task], orchestrator: BaseOrchestrator | Orchestrator,
        judge: Judge, embedder: Embedder, rules: GlobalRuleRepository, routing: RoutingTable,
        recognizer: PiiRecognizer | None, settings: EngineSettings,
        on_query_end: Callable[[dict[str, Any]], None] | None = None,
        aggregator: Callable[..., CollabState] | None = None,
        refiner: Refiner | None = None,
    ) -> None:
        if not tasks:
            raise ValueError("CollaborationEngine needs at least one task")
        if len({t.task_id for t in tasks}) != len(tasks):
            raise ValueError("task ids must be unique")
        self.settings = settings
        self.orchestrator: BaseOrchestrator = as_orchestrator(orchestrator)
        self.judge, self.embedder = judge, embedder
        self.rules, self.routing, self.recognizer = rules, routing, recognizer
        self.on_query_end, self.aggregate = on_query_end, aggregator or aggregate
        self.refine: Refiner = refiner or REFINERS.get(settings.refine_style)
        self._tasks = list(tasks)
        self._task_ids = [t.task_id for t in tasks]
        self._pending = list(tasks)[::-1]
        self._active: list[QueryState] = []
        self.finished: list[dict[str, Any]] = []
        self.clients: dict[str, ClientDescription] = {}
        self._available: list[str] = []
        self._profile_emb: dict[str, np.ndarray] = {}
        self._rng = np.random.default_rng(settings.seed)
        self._n_tasks = len(tasks)
        self.last_round_record: dict[str, Any] = {}
        # (client, domain) -> g of finished queries' lone answers, applied with the next
        # routing update (routing/lone.py; empty at every checkpoint)
        self._lone: dict[tuple[str, str], list[float]] = {}
        # query rules P_in applied while planning this round (rule id -> queries)
        self._query_fired: dict[str, int] = {}
        # every counter of the run (summary "totals" and "generation", status)
        self.totals = EngineTotals()

    # ------------------------------------------------------------------ bookkeeping

    @property
    def done(self) -> bool:
        """True once every task finished."""
        return not self._pending and not self._active

    def num_active(self) -> int:
        """Queries currently in flight."""
        return len(self._active)

    def max_rounds(self) -> int:
        """An upper bound on Flower rounds (every query uses at most ``t_max``)."""
        return self._n_tasks * self.settings.t_max + 1

    def describe(self) -> dict[str, Any]:
        """Configuration for ``summary()`` logs (:func:`~.run_summary.describe_run`)."""
        return describe_run(self.settings, tasks=self._n_tasks, orchestrator=self.orchestrator.name,
                            judge=type(self.judge).__name__)

    def _price(self, cid: str) -> float:
        """USD per million tokens of ``cid``: the server's price table at its described backbone."""
        desc = self.clients.get(cid)
        return self.settings.price(desc.backbone if desc is not None else "default")

    def register_clients(self, descriptions: Mapping[str, ClientDescription]) -> None:
        """Record each client's public profile (the profile part of its routing state M_i)."""
        self.clients = dict(sorted(descriptions.items()))
        self.rules.electorate.population = len(self.clients)
        ids = list(self.clients)
        embs = self.embedder.encode([self.clients[c].description for c in ids])
        self._profile_emb = {c: embs[k] for k, c in enumerate(ids)}
        for c in ids:
            self.routing.get(c)

    # ------------------------------------------------------------------ planning

    def _fill(self) -> None:
        while self._pending and len(self._active) < self.settings.batch_size:
            self._active.append(QueryState(task=self._pending.pop()))

    def plan_round(
        self, server_round: int, available: Sequence[str] | None = None
    ) -> dict[str, RespondInstruction]:
        """Route every active query; return one instruction per selected client.

        ``available`` restricts routing to clients currently connected (default: all
        registered clients).
        """
        if not self.clients:
            raise RuntimeError("plan_round before register_clients")
        live = None if available is None else set(available)
        self._available = [c for c in self.clients if live is None or c in live]
        s = self.settings
        global_rules = [r for r in self.rules.rules() if r.active]
        per_client: dict[str, list[RoutedQuery]] = {}
        for q in self._active:
            q.routed = {}
        # Queries that stop at planning free their slot at once, so refill until this round
        # carries work or the stream is exhausted (no empty Flower rounds).
        while not per_client and (self._pending or self._active):
            self._fill()
            todo = [q for q in self._active if not q.routed]
            if not todo:
                break
            self._route(todo, global_rules, per_client)
        snapshot = tuple(self.rules.snapshot()) if s.rule_mode in REDISTRIBUTE_MODES else ()
        for c in per_client:  # the rules each client holds: only those it may rate
            self.rules.electorate.note_sent(c, [r.rule_id for r in snapshot])
        return {
            c: RespondInstruction(server_round=server_round, queries=tuple(qs),
                                  global_rules=snapshot)
            for c, qs in sorted(per_client.items())
        }

    def _route(
        self, todo: list[QueryState], global_rules: list[GlobalRule],
        per_client: dict[str, list[RoutedQuery]],
    ) -> None:
        """Ask the orchestrator about each query in ``todo`` (finishing those that stop)."""
        s = self.settings
        q_embs = self.embedder.encode([q.task.question for q in todo])
        views = CandidateViews(clients=self.clients, routing=self.routing,
                               profile_embeddings=self._profile_emb,
                               price=self._price if s.prices else None)
        early_stop = self.orchestrator.stop_before_routing
        full: set[str] = set()  # clients already holding protocol.max_items queries
        for k, q in enumerate(todo):
            if q.t >= s.t_max:
                self._finish(q, "t_max")
                continue
            if early_stop(q.z, round=q.t + 1) is not None:
                self._finish(q, "orchestrator_stop")
                continue
            # A client holds at most one message's worth of queries per round (the protocol's
            # cap, which it enforces): with more queries in flight than that, the orchestrator
            # routes among the clients with room left; a query with none waits a round.
            room = [c for c in self._available if c not in full] if full else self._available
            if not room:
                continue
            domain = knowledge_domain(q.task.domain)
            kind = q.task.answer_kind
            filtered = {h.client_id for h in q.history
                        if h.response is not None and not h.retained}
            candidates = [views.get(c, asked=c in q.asked, kind=kind, filtered=c in filtered)
                          for c in room]
            sel = self._select(q, domain, q_embs[k], candidates, room)
            if sel is None:
                continue
            rq, pin = self._pose(q, domain, global_rules)
            view = hooks.composer(self.orchestrator, q, rq, sel.clients, self.clients, pin)
            q.selections.append(list(sel.clients))
            q.why = sel.why_record()
            for c in sel.clients:
                q.asked.add(c)
                q.routed[c] = view(c)
                per_client.setdefault(c, []).append(q.routed[c])
                if len(per_client[c]) >= s.max_queries_per_client:
                    full.add(c)

    def _select(self, q: QueryState, domain: str, embedding: np.ndarray,
                candidates: list[CandidateState], room: list[str]) -> Selection | None:
        """The orchestrator's checked selection for ``q``; ``None`` when the query ended."""
        s = self.settings
        spent = hooks.orchestrator_tokens(self.orchestrator)
        sel = self.orchestrator.select(
            OrchestratorQuery(query_id=q.task.task_id, text=q.task.question, domain=domain,
                              embedding=embedding),
            q.z, candidates, round=q.t + 1, k_max=s.k_max,
        )
        # the routing policy's own tokens are part of the query's cost (an LLM policy
        # spent ~2x the agents' tokens in docs/training.md)
        spent = max(0, hooks.orchestrator_tokens(self.orchestrator) - spent)
        q.orchestrator_tokens += spent
        q.cost += spent * s.price("orchestrator") / 1e6
        try:
            sel = validate_selection(sel, room, s.k_max)
        except ValueError as e:
            # A plug-in policy's malformed action ends the query (R_fmt = -1 in §3.11).
            self.totals.invalid_selections += 1
            self._finish(q, f"invalid_selection: {e}")
            return None
        if sel.stop:
            self._finish(q, "orchestrator_stop")
            return None
        return sel

    # ------------------------------------------------------------------ absorbing

    def absorb_round(
        self, server_round: int, replies: Mapping[str, ClientReply], failures: Mapping[str, str]
    ) -> dict[str, Any]:
        """Evaluate, update routing states, aggregate, evolve global rules; return the round log."""
        s = self.settings
        by_query, rejected = collect_replies(replies, self._by_id)
        in_flight = [q for q in self._active if q.routed]
        order, groups, client_errors = gather(in_flight, by_query, self._price)
        results = evaluate_batch(
            groups, kinds=[q.task.answer_kind for q in in_flight], judge=self.judge,
            embedder=self.embedder, lambda_pool=s.lambda_pool, alpha_con=s.alpha_con,
            tolerance=s.tolerance, intent_tolerance=s.intent_tolerance, ablation=s.ablation,
            consensus=s.consensus,
            options=[q.task.options or None for q in in_flight],
            prior=[[h.response.final_answer for h in q.history
                    if h.retained and h.response is not None] for q in in_flight],
            queries=[q.task.question for q in in_flight],
        )
        signals = RoundSignals()
        query_logs = []
        consensus = self._consensus()
        for q, cids, grp, res, errs in zip(in_flight, order, groups, results, client_errors,
                                           strict=True):
            query_logs.append(self._absorb_query(q, cids, grp, res, errs, consensus, signals))
        self._record_routing(signals.quality, signals.retained)
        self.totals.failures += len(failures)
        self.totals.count_answers({q.task.task_id: sorted(q.routed) for q in in_flight},
                                  by_query, failures)
        self.totals.rejected_items += sum(int(x.get("n", 1)) for x in rejected)
        rules_log = evolve_global_rules(
            mode=s.rule_mode, rules=self.rules, server_round=server_round, replies=replies,
            client_ok=signals.client_ok, embedder=self.embedder, sim_threshold=s.sim_threshold,
            rng=self._rng, recognizer=self.recognizer, query_fired=self._query_fired)
        self._query_fired = {}
        self.last_round_record = round_record(
            server_round, query_logs, groups, results, replies, failures, rejected, rules_log,
            num_global=len(self.rules), num_finished=len(self.finished))
        return self.last_round_record

    def _absorb_query(
        self, q: QueryState, cids: list[str], grp: list[Any], res: list[Any],
        errs: dict[str, str], consensus: Consensus, signals: RoundSignals,
    ) -> dict[str, Any]:
        """One query's round (:func:`~.absorb.absorb_answers`), counters, finish; its log."""
        retained, filtered = absorb_answers(q, cids, grp, res, consensus, signals)
        self.totals.retained += retained
        self.totals.filtered += filtered
        log = query_log(q, cids, grp, res, errs)
        if sum(r is not None for r in grp) < self.settings.min_replies:
            self._finish(q, "too_few_replies")
        elif q.t >= self.settings.t_max:
            self._finish(q, "t_max")
        return log

    def _record_routing(self, round_q: dict[tuple[str, str], list[float]],
                        round_r: Mapping[tuple[str, str], list[bool]]) -> None:
        """One routing step per (client, domain): this round's answers plus lone answers."""
        for key, gs in self._lone.items():
            round_q.setdefault(key, []).extend(gs)
        self._lone = {}
        for key in dict.fromkeys([*round_r, *round_q]):
            self.routing.record_round(key[0], key[1], qualities=round_q.get(key, []),
                                      retained=list(round_r.get(key, [])))

    def _consensus(self) -> Consensus:
        return Consensus(aggregate=self.aggregate, routing=self.routing, settings=self.settings,
                         embedder=self.embedder)

    def _by_id(self, query_id: str) -> QueryState | None:
        for q in self._active:
            if q.task.task_id == query_id:
                return q
        return None

    # ------------------------------------------------------------------ posing, finishing

    def _pose(self, q: QueryState, domain: str,
              global_rules: list[GlobalRule]) -> tuple[RoutedQuery, Callable[[str], str]]:
        """``q̃`` of ``q``'s next round (:func:`~.posing.pose`), its rule firings counted.

        Returns the routed query and ``P_in`` itself (for what an orchestrator composes).
        """
        refine = self.refine if self.settings.refine_query else None  # -RQ: none
        posed = pose(q, domain, global_rules, recognizer=self.recognizer, quarantine=self.rules,
                     refine=refine)
        q.query_rules_fired += len(posed.fired)
        for rid in posed.fired:  # the server's own feedback on its query rules (issue 30)
            self._query_fired[rid] = self._query_fired.get(rid, 0) + 1
        return posed.query, posed.pin

    def _finish(self, q: QueryState, reason: str) -> None:
        # lone answers teach C when their query ends, applied with the next routing update
        for key, g in lone_answer_signals(self._consensus(), q):
            self._lone.setdefault(key, []).append(g)
        self._active.remove(q)
        rec = finish_record(q, reason)
        self.finished.append(rec)
        hooks.observe_outcome(self.orchestrator, q)
        if self.on_query_end is not None:
            self.on_query_end(rec)

    def finish_all(self, reason: str) -> None:
        """End every query still active (budget exhausted); their z so far is kept."""
        for q in list(self._active):
            self._finish(q, reason)
        self._record_routing({}, {})
        while self._pending:
            self._finish(QueryState(task=self._pending.pop()), "not_started")

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self, server_round: int) -> dict[str, Any]:
        """State to continue after ``server_round`` (:func:`~.checkpoint.engine_state`)."""
        return engine_state(self, server_round)

    def load_state_dict(self, d: Mapping[str, Any]) -> int:
        """Restore a :meth:`state_dict`; return the last completed server round."""
        return load_engine_state(self, d)

    def summary(self, wall_seconds: float = 0.0) -> dict[str, Any]:
        """Run summary (:func:`~.totals.run_summary`): accuracy, costs, rules, status."""
        return run_summary(
            finished=self.finished, clients=self.clients, rules=self.rules.rules(),
            routing=self.routing, orchestrator=self.orchestrator, totals=self.totals,
            settings=self.settings, wall_seconds=wall_seconds)
