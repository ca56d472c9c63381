"""PFedMA as a Flower 1.42 ``Strategy``: a thin shell over :class:`CollaborationEngine`.

One Flower round is one collaboration round of every active query of the batch. The strategy
only turns engine plans into ``query.respond`` messages and replies back into dataclasses
(:mod:`pfedma_flwr.protocol`); every PFedMA mechanism lives in the engine's pure modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from pfedma_flwr.collaboration import CollaborationEngine
from pfedma_flwr.protocol import (
    QUERY_DESCRIBE,
    QUERY_RESPOND,
    ClientDescription,
    decode_description,
    decode_reply,
    empty_content,
    encode_instruction,
)
from pfedma_flwr.schema import DEFAULT_LIMITS, ClientReply, Limits, SchemaError

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
    ) -> None:
        if round_timeout <= 0:
            raise ValueError(f"round_timeout must be > 0 seconds, got {round_timeout}")
        if min_nodes < 1:
            raise ValueError(f"min_nodes must be >= 1, got {min_nodes}")
        if node_wait_timeout < 0:
            raise ValueError(f"node_wait_timeout must be >= 0, got {node_wait_timeout}")
        self.engine = engine
        self.round_timeout = round_timeout
        self.min_nodes = min_nodes
        self.node_wait_timeout = node_wait_timeout
        self.limits = limits
        self.on_round_end = on_round_end
        self._sent: dict[str, int] = {}
        # Engine ids are stable client keys; Flower node ids are random per run.
        self._node_of: dict[str, int] = {}
        self._key_of: dict[int, str] = {}

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
        self._sent = {}
        msgs = []
        for client_id, instruction in plan.items():
            node_id = self._node_of[client_id]
            self._sent[client_id] = node_id
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
            client_id = self._key_of.get(msg.metadata.src_node_id, str(msg.metadata.src_node_id))
            if client_id not in self._sent:
                log(WARNING, "Reply from node %s that was not asked this round: ignored", client_id)
                continue
            if client_id in parsed or client_id in failures:
                failures[client_id] = "duplicate reply"
                parsed.pop(client_id, None)
                continue
            if msg.has_error():
                failures[client_id] = f"error reply (code {msg.error.code}): {msg.error.reason}"
                continue
            try:
                parsed[client_id] = decode_reply(msg.content, self.limits)
            except SchemaError as e:
                failures[client_id] = f"malformed reply: {e}"
        for client_id in self._sent:
            if client_id not in parsed and client_id not in failures:
                failures[client_id] = "timeout: no reply within the round"
        record = self.engine.absorb_round(server_round, parsed, failures)
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

    def wait_for_nodes(self, grid: Grid) -> list[int]:
        """Wait (bounded) until ``min_nodes`` nodes are connected; return their ids."""
        deadline = time.monotonic() + self.node_wait_timeout
        while True:
            nodes = sorted(grid.get_node_ids())
            if len(nodes) >= self.min_nodes:
                return nodes
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"only {len(nodes)} of the required {self.min_nodes} nodes connected "
                    f"within {self.node_wait_timeout:.0f}s"
                )
            time.sleep(0.5)

    def handshake(self, grid: Grid, nodes: list[int]) -> dict[str, ClientDescription]:
        """Ask every node for its public profile; nodes that fail are left out of routing."""
        msgs = [
            Message(content=empty_content(), dst_node_id=n, message_type=QUERY_DESCRIBE,
                    group_id="0", ttl=self.round_timeout + 60)
            for n in nodes
        ]
        out: dict[str, ClientDescription] = {}
        for r in sorted(grid.send_and_receive(msgs, timeout=self.round_timeout),
                        key=lambda m: m.metadata.src_node_id):
            node = r.metadata.src_node_id
            if r.has_error():
                log(WARNING, "Node %s failed the handshake: %s", node, r.error.reason)
                continue
            try:
                desc = decode_description(r.content, self.limits)
            except SchemaError as e:
                log(WARNING, "Node %s sent a malformed description: %s", node, e)
                continue
            key = desc.client_key or f"node-{node}"
            if key in out:
                log(WARNING, "Client key %r claimed twice; node %s becomes %r", key, node,
                    f"{key}@{node}")
                key = f"{key}@{node}"
            out[key] = desc
            self._node_of[key], self._key_of[node] = node, key
        return out

    def start(  # type: ignore[override]
        self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None,
        timeout: float | None = None, *, start_round: int = 0, **_: Any,
    ) -> PFedMAResult:
        """Run until every query of the stream finished (or ``num_rounds`` Flower rounds).

        ``start_round`` is the last completed round of a resumed run (its engine state was
        restored from a checkpoint); numbering continues after it.
        """
        t0 = time.time()
        log(INFO, "Starting PFedMA strategy:")
        self.summary()
        nodes = self.wait_for_nodes(grid)
        descriptions = self.handshake(grid, nodes)
        if len(descriptions) < self.min_nodes:
            raise RuntimeError(
                f"only {len(descriptions)} nodes answered the handshake; need {self.min_nodes}"
            )
        self.engine.register_clients(descriptions)
        log(INFO, "%d clients registered", len(descriptions))
        result = PFedMAResult()
        server_round = start_round
        max_rounds = start_round + (num_rounds if num_rounds is not None
                                    else self.engine.max_rounds())
        round_timeout = timeout if timeout is not None else self.round_timeout
        while not self.engine.done and server_round < max_rounds:
            server_round += 1
            msgs = list(self.configure_train(server_round, ArrayRecord(), ConfigRecord(), grid))
            if not msgs and self.engine.done:
                break  # the last queries stopped while being planned: nothing to send
            log(INFO, "[ROUND %s] %d active queries -> %d nodes", server_round,
                self.engine.num_active(), len(msgs))
            replies = grid.send_and_receive(msgs, timeout=round_timeout) if msgs else []
            _, metrics = self.aggregate_train(server_round, replies)
            if metrics is not None:
                result.round_metrics[server_round] = metrics
                log(INFO, "\t└──> %s", dict(metrics))
            if self.on_round_end is not None:
                self.on_round_end(server_round, self.engine.last_round_record)
        self.engine.finish_all("round budget exhausted")
        result.summary = self.engine.summary(wall_seconds=time.time() - t0)
        log(INFO, "PFedMA finished in %.1fs: %s", time.time() - t0,
            {k: result.summary[k] for k in ("accuracy", "num_queries") if k in result.summary})
        return result
