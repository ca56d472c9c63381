"""The run's opening: wait for nodes, then ask each for its public profile and bind keys.

Shared by PFedMA and the baselines (they subclass :class:`strategies.pfedma.PFedMA`). A node
that fails, sends a malformed description, or claims a key another node also resolves to is
left out of routing, never ends the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from logging import WARNING
from typing import Any

from flwr.app import Message
from flwr.common import log
from flwr.serverapp import Grid
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from pfedma_flwr.protocol.codec import (
    QUERY_DESCRIBE,
    ClientDescription,
    assign_client_keys,
    decode_description,
    empty_content,
)
from pfedma_flwr.protocol.schema import Limits, SchemaError
from pfedma_flwr.protocol.startup import StartupCause, parse_startup
from pfedma_flwr.protocol.validation import excerpt
from strategies.delivery import Delivery, send_and_track


@dataclass
class Handshake:
    """What the handshake bound: profiles and node of each client key, and its log.

    ``causes`` holds, per node left out for an error reply, the start-up failure its agent
    reported (:mod:`pfedma_flwr.protocol.startup`), else the reply's reason.
    """

    descriptions: dict[str, ClientDescription] = field(default_factory=dict)
    node_of: dict[str, int] = field(default_factory=dict)
    log: dict[str, Any] = field(default_factory=dict)
    causes: dict[int, StartupCause | str] = field(default_factory=dict)


def wait_for_nodes(grid: Grid, min_nodes: int, timeout: float) -> list[int]:
    """Wait up to ``timeout`` s until ``min_nodes`` nodes are connected; return their ids."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= min_nodes:
            return nodes
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"only {len(nodes)} of the required {min_nodes} nodes connected "
                f"within {timeout:.0f}s"
            )
        time.sleep(0.5)


def public_keys(grid: Grid) -> dict[int, bytes]:
    """Node id → public key as the SuperLink registered it (empty where none is known)."""
    try:
        return {int(i.node_id): bytes(i.public_key) for i in grid.get_nodes() if i.public_key}
    except Exception as e:  # noqa: BLE001 - a grid without node info: ids only
        log(WARNING, "grid.get_nodes() failed (%s): identities from node ids", e)
        return {}


def identity_mode(grid: Grid, identity: str) -> str:
    """``identity``, or for ``auto``: ``declared`` in simulation, else ``node`` if keys exist."""
    if identity != "auto":
        return identity
    if isinstance(grid, InMemoryGrid):  # Flower simulation: keys are random per run
        return "declared"
    return "node" if public_keys(grid) else "declared"


def handshake(grid: Grid, nodes: list[int], *, identity: str, limits: Limits,
              timeout: float, on_progress: Callable[[Delivery], None] | None = None
              ) -> Handshake:
    """Ask every node in ``nodes`` for its description; bind each to a client key.

    Parameters
    ----------
    grid : Grid
        The run's grid.
    nodes : list[int]
        Node ids to ask.
    identity : str
        ``auto``, ``node`` or ``declared`` (:data:`pfedma_flwr.protocol.codec.IDENTITY_MODES`).
    limits : Limits
        Size limits a description must respect.
    timeout : float
        Seconds to wait for the replies.
    on_progress : callable, optional
        Told as replies arrive (and every few seconds while none does), as round 0.
    """
    msgs = [
        Message(content=empty_content(), dst_node_id=n, message_type=QUERY_DESCRIBE,
                group_id="0", ttl=timeout + 60)
        for n in nodes
    ]
    descs: dict[int, ClientDescription] = {}
    left_out: dict[int, str] = {}
    causes: dict[int, StartupCause | str] = {}
    asked = set(nodes)
    for r in send_and_track(grid, msgs, timeout=timeout, server_round=0,
                            answers_of=dict.fromkeys(nodes, 0), on_progress=on_progress):
        try:
            node = int(r.metadata.src_node_id)
            if node not in asked or node in descs or node in left_out:
                continue  # unsolicited or repeated: the first answer counts
            if r.has_error():
                cause = parse_startup(r.error.reason or "")
                causes[node] = cause or str(r.error.reason)
                left_out[node] = (f"client {cause.client}: {cause.cause} [{cause.kind}]" if cause
                                  else f"error reply: {excerpt(r.error.reason, 200)}")
                continue
            descs[node] = decode_description(r.content, limits)
        except SchemaError as e:
            left_out[node] = f"malformed description: {e.coded()}"
        except Exception as e:  # noqa: BLE001 - one node's answer never ends the run
            left_out[node] = f"malformed description: internal ({type(e).__name__})"
    mode = identity_mode(grid, identity)
    pks = public_keys(grid)
    keys, dup = assign_client_keys(
        {n: (d.client_key, pks.get(n, b"")) for n, d in descs.items()}, mode)
    left_out.update(dup)
    for node, why in sorted(left_out.items()):
        log(WARNING, "Node %s left out of routing: %s", node, why)
    out = Handshake(log={"mode": mode, "left_out": {str(n): w for n, w in left_out.items()}},
                    causes=causes)
    for node, key in sorted(keys.items(), key=lambda kv: kv[1]):
        out.descriptions[key] = descs[node]
        out.node_of[key] = node
    return out
