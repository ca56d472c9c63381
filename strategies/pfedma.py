"""PFedMA as a Flower 1.42 ``Strategy``: a thin shell over :class:`CollaborationEngine`.

One Flower round is one collaboration round of every active query of the batch. The strategy
only turns engine plans into ``query.respond`` messages and replies back into dataclasses
(:mod:`pfedma_flwr.protocol.codec`); every PFedMA mechanism lives in the engine's pure modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from pfedma_flwr.config import PFedMAConfig
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.protocol.codec import (
    IDENTITY_MODES,
    QUERY_RESPOND,
    ClientDescription,
    decode_reply,
    encode_instruction,
)
from pfedma_flwr.protocol.schema import DEFAULT_LIMITS, ClientReply, Limits, SchemaError
from pfedma_flwr.protocol.startup import StartupCause, StartupFailed
from pfedma_flwr.protocol.validation import excerpt
from pfedma_flwr.server.components import build_engine
from pfedma_flwr.server.engine import CollaborationEngine
from pfedma_flwr.server.transaction import absorb_isolated
from strategies.delivery import Delivery, send_and_track
from strategies.handshake import handshake, wait_for_nodes

RoundHook = Callable[[int, dict[str, Any]], None]


@dataclass
class PFedMAResult:
    """What a PFedMA run returns: per-round metrics and the engine's final summary."""

    round_metrics: dict[int, MetricRecord] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


class PFedMA(Strategy):
    """Federated multi-agent orchestration with privacy-rule co-evolution (PFedMA).

    Parameters
    ----------
    engine : CollaborationEngine
        Server-side PFedMA state and mechanisms (orchestrator, anomaly evaluation, routing
        states, aggregation, global privacy rules).
    round_timeout : float (default: 900.0)
        Seconds to wait for the replies of one round; missing replies are recorded as
        ``timeout`` failures of those clients.
    min_nodes : int (default: 2)
        Connected nodes required before the first round.
    node_wait_timeout : float (default: 120.0)
        Seconds to wait for ``min_nodes`` (a bounded wait: SIGTERMed nodes vanish at once).
    limits : Limits (default: DEFAULT_LIMITS)
        Caps on reply payloads.
    on_round_end : Callable[[int, dict], None] | None (default: None)
        Called with the round number and the round record after each round (logging, W&B,
        checkpoints) so the loop never needs copying.
    on_progress : Callable[[dict], None] | None (default: None)
        Told when a node's reply arrives during a round (and every 15 s while none does), as
        :meth:`strategies.delivery.Delivery.to_dict` plus the replying ``client``: live
        progress inside a round, which can last minutes.
    identity : str (default: "auto")
        Where a node's engine key comes from (docs/threat_model.md). ``"node"``: what the
        SuperLink authenticated (public-key fingerprint, else node id); the client's declared
        ``client_key`` is only a label. ``"declared"``: the declared key (simulation, where
        every ClientApp is the operator's code; stable across a resume). ``"auto"``:
        ``"declared"`` on Flower's simulation grid or when no node has a public key, else
        ``"node"``. In every mode a key claimed by two nodes is given to neither.

    Notes
    -----
    Paper: "PFedMA: Who Should Join Next as Federated Multi-Agent Orchestration Evolves?".
    """

    def __init__(
        self,
        *,
        engine: CollaborationEngine,
        round_timeout: float = 900.0,
        min_nodes: int = 2,
        node_wait_timeout: float = 120.0,
        limits: Limits = DEFAULT_LIMITS,
        on_round_end: RoundHook | None = None,
        identity: str = "auto",
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if round_timeout <= 0:
            raise ValueError(f"round_timeout must be > 0 seconds, got {round_timeout}")
        if min_nodes < 1:
            raise ValueError(f"min_nodes must be >= 1, got {min_nodes}")
        if node_wait_timeout < 0:
            raise ValueError(f"node_wait_timeout must be >= 0, got {node_wait_timeout}")
        if identity not in IDENTITY_MODES:
            raise ValueError(f"identity must be one of {list(IDENTITY_MODES)}, got {identity!r}")
        self.engine = engine
        self.round_timeout = round_timeout
        self.min_nodes = min_nodes
        self.node_wait_timeout = node_wait_timeout
        self.limits = limits
        self.on_round_end = on_round_end
        self.on_progress = on_progress
        self.identity = identity
        # Handshake outcome for the summary: the mode used and the nodes left out, with why.
        self.identity_log: dict[str, Any] = {}
        self._sent: dict[str, int] = {}
        self._answers_of: dict[int, int] = {}  # node -> queries its message carries this round
        self._startup_causes: dict[int, StartupCause | str] = {}
        # Engine ids are stable client keys; Flower node ids are random per run.
        self._node_of: dict[str, int] = {}
        self._key_of: dict[int, str] = {}

    # ------------------------------------------------------------------ registry hook

    @classmethod
    def engine_parts(cls, cfg: PFedMAConfig, parts: dict[str, Any]) -> dict[str, Any]:
        """Engine components this strategy builds itself (``server.components.build_engine``).

        PFedMA uses the configured ones (``{}``); a baseline returns its own ``orchestrator``,
        ``aggregator`` and ``settings`` built from ``parts`` (embedder, recognizer, settings).
        """
        return {}

    @classmethod
    def from_config(
        cls, cfg: PFedMAConfig, *, tasks: Sequence[Task],
        on_query_end: Callable[[dict[str, Any]], None] | None = None,
        on_round_end: RoundHook | None = None,
    ) -> PFedMA:
        """The strategy of a run config (what ``strategy.name`` resolves to is called this way)."""
        s = cfg.strategy
        return cls(engine=build_engine(cfg, tasks, on_query_end, customize=cls.engine_parts),
                   round_timeout=s.round_timeout, min_nodes=s.min_nodes,
                   node_wait_timeout=s.node_wait_timeout, limits=cfg.protocol,
                   identity=s.identity, on_round_end=on_round_end)

    # ------------------------------------------------------------------ Flower API

    def summary(self) -> None:
        """Log the strategy's configuration as a tree."""
        log(INFO, "\t├──> PFedMA settings:")
        for key, value in self.engine.describe().items():
            log(INFO, "\t│\t├── %s: %s", key, value)
        log(INFO, "\t└──> round timeout %.0fs, min nodes %d", self.round_timeout, self.min_nodes)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Route every active query and build one ``query.respond`` message per selected node."""
        # A node that left (SIGTERM) or expired (missed heartbeats) is not routed to again.
        live = set(grid.get_node_ids())
        plan = self.engine.plan_round(
            server_round, available=[k for k, n in self._node_of.items() if n in live]
        )
        self._sent, self._answers_of = {}, {}
        msgs = []
        for client_id, instruction in plan.items():
            node_id = self._node_of[client_id]
            self._sent[client_id] = node_id
            self._answers_of[node_id] = len(instruction.queries)
            msgs.append(
                Message(
                    content=encode_instruction(instruction),
                    dst_node_id=node_id,
                    message_type=QUERY_RESPOND,
                    group_id=str(server_round),
                    ttl=self.round_timeout + 60,
                )
            )
        return msgs

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Decode replies at the seam, hand them to the engine, return round metrics."""
        parsed: dict[str, ClientReply] = {}
        failures: dict[str, str] = {}
        for msg in replies:
            try:
                node = msg.metadata.src_node_id
                client_id = self._key_of.get(node, f"node-{node}")
            except Exception as e:  # noqa: BLE001 - a reply without metadata names nobody
                log(WARNING, "Reply without readable metadata ignored (%s)", type(e).__name__)
                continue
            if client_id not in self._sent:
                log(WARNING, "Reply from node %s that was not asked this round: ignored", client_id)
                continue
            if client_id in parsed or client_id in failures:
                failures[client_id] = "duplicate reply"
                parsed.pop(client_id, None)
                continue
            try:
                if msg.has_error():
                    failures[client_id] = (f"error reply (code {excerpt(msg.error.code)}): "
                                           f"{excerpt(msg.error.reason, 200)}")
                    continue
                parsed[client_id] = decode_reply(msg.content, self.limits)
            except SchemaError as e:
                failures[client_id] = f"malformed reply: {e.coded()}"
            except Exception as e:  # noqa: BLE001 - one client's reply never ends the run
                failures[client_id] = f"malformed reply: internal at reply: {type(e).__name__}"
        for client_id in self._sent:
            if client_id not in parsed and client_id not in failures:
                failures[client_id] = "timeout: no reply within the round"
        # a client whose content makes the engine raise is rolled back and recorded as failed
        record = absorb_isolated(self.engine, server_round, parsed, failures)
        metrics = MetricRecord({k: float(v) for k, v in record["metrics"].items()})
        return None, metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """PFedMA has no separate evaluation phase (answers are scored as queries finish)."""
        return []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """No evaluation phase."""
        return None

    # ------------------------------------------------------------------ loop

    def _progress(self, d: Delivery) -> None:
        if self.on_progress is None:
            return
        rec = d.to_dict()
        if d.node is not None and d.node in self._key_of:
            rec["client"] = self._key_of[d.node]
        self.on_progress(rec)

    def wait_for_nodes(self, grid: Grid) -> list[int]:
        """Wait (bounded) until ``min_nodes`` nodes are connected; return their ids."""
        return wait_for_nodes(grid, self.min_nodes, self.node_wait_timeout)

    def handshake(self, grid: Grid, nodes: list[int]) -> dict[str, ClientDescription]:
        """Ask every node for its public profile; bind each to a key (see ``identity``).

        Nodes that fail, send a malformed description, or resolve to a key another node also
        resolves to are left out of routing, logged, and listed in :attr:`identity_log`.
        """
        hs = handshake(grid, nodes, identity=self.identity, limits=self.limits,
                       timeout=self.round_timeout, on_progress=self._progress)
        self._startup_causes = hs.causes
        for key, node in hs.node_of.items():
            self._node_of[key], self._key_of[node] = node, key
        self.identity_log = hs.log
        return hs.descriptions

    def start(  # type: ignore[override]
        self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None,
        timeout: float | None = None, *, start_round: int = 0, **_: Any,
    ) -> PFedMAResult:
        """Run until every query of the stream finished (or ``num_rounds`` Flower rounds).

        ``start_round`` is the last completed round of a resumed run (its engine state was
        restored from a checkpoint); numbering continues after it.
        """
        t0 = time.time()
        log(INFO, "Starting %s strategy:", type(self).__name__)
        self.summary()
        nodes = self.wait_for_nodes(grid)
        # where the run's time goes (bench/profile_run.py): seconds per phase
        timing = {"nodes_s": time.time() - t0, "handshake_s": 0.0, "plan_s": 0.0,
                  "wait_s": 0.0, "absorb_s": 0.0}
        t_hs = time.time()
        descriptions = self.handshake(grid, nodes)
        timing["handshake_s"] = time.time() - t_hs
        if len(descriptions) < self.min_nodes:
            raise StartupFailed(started=len(descriptions), asked=len(nodes),
                                needed=self.min_nodes, causes=self._startup_causes)
        self.engine.register_clients(descriptions)
        log(INFO, "%d clients registered", len(descriptions))
        result = PFedMAResult()
        server_round = start_round
        max_rounds = start_round + (num_rounds if num_rounds is not None
                                    else self.engine.max_rounds())
        round_timeout = timeout if timeout is not None else self.round_timeout
        while not self.engine.done and server_round < max_rounds:
            server_round += 1
            ticks = [time.time()]
            msgs = list(self.configure_train(server_round, ArrayRecord(), ConfigRecord(), grid))
            ticks.append(time.time())
            if not msgs and self.engine.done:
                break  # the last queries stopped while being planned: nothing to send
            log(INFO, "[ROUND %s] %d active queries -> %d nodes", server_round,
                self.engine.num_active(), len(msgs))
            replies = send_and_track(
                grid, msgs, timeout=round_timeout, server_round=server_round,
                answers_of=self._answers_of, on_progress=self._progress) if msgs else []
            ticks.append(time.time())
            _arrays, metrics = self.aggregate_train(server_round, replies)
            ticks.append(time.time())
            spent = {f"{k}_s": round(b - a, 3) for k, a, b in
                     zip(("plan", "wait", "absorb"), ticks[:-1], ticks[1:], strict=True)}
            for k, v in spent.items():
                timing[k] += v
            self.engine.last_round_record["timing"] = spent
            if metrics is not None:
                result.round_metrics[server_round] = metrics
                log(INFO, "\t└──> %s", dict(metrics))
            if self.on_round_end is not None:
                self.on_round_end(server_round, self.engine.last_round_record)
        self.engine.finish_all("round budget exhausted")
        result.summary = {**self.engine.summary(wall_seconds=time.time() - t0),
                          "identity": self.identity_log,
                          "timing": {k: round(v, 3) for k, v in timing.items()}}
        log(INFO, "PFedMA finished in %.1fs: %s", time.time() - t0,
            {k: result.summary[k] for k in ("accuracy", "num_queries") if k in result.summary})
        return result
