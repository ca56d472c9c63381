"""Wire dataclasses and node identity that need no Flower (the engine and the agent use them).

:mod:`pfedma_flwr.protocol.codec` is the Flower codec and re-exports everything here, so the
engine (:mod:`pfedma_flwr.server.engine`) and the client agent (:mod:`pfedma_flwr.client.agent`)
import without loading ``flwr``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pfedma_flwr.protocol.schema import DEFAULT_LIMITS, Limits, SchemaError
from pfedma_flwr.protocol.validation import excerpt, id_, no_extra, obj_, str_

# Declared client keys: the node config's client-id or "partition-<i>" (log- and file-safe,
# the alphabet of persistence.validate_key).
_CLIENT_KEY = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True)
class ClientDescription:
    """Public metadata a client announces once: its profile (routing state M_i's profile part)."""

    profile_name: str
    domains: tuple[str, ...]
    description: str
    backbone: str = "default"
    # How the agent answers tasks it can compute (number answers): "program" (it writes and
    # runs a short program) or "cot" (a chain of thought); public, advisory routing metadata
    # (a client that misstates it only changes who is asked first, DESIGN §3.12 revision).
    reasoning: str = "cot"
    # Stable identity across restarts (node config "client-id", else "partition-<id>"); node
    # ids are random per run, so routing states and checkpoints are keyed by this instead.
    client_key: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "client_key": self.client_key,
            "profile_name": self.profile_name,
            "domains": list(self.domains),
            "description": self.description,
            "backbone": self.backbone,
            "reasoning": self.reasoning,
        }

    @classmethod
    def from_dict(cls, d: Any, lim: Limits = DEFAULT_LIMITS) -> ClientDescription:
        d = obj_(d, "description")
        no_extra(d, "description", {"schema_version", "client_key", "profile_name", "domains",
                                    "description", "backbone", "reasoning"})
        key = d.get("client_key", "")
        if key != "":
            key = id_(key, "description.client_key", lim)
            if not _CLIENT_KEY.fullmatch(key):
                raise SchemaError("description.client_key",
                                  f"{excerpt(key)} is not [A-Za-z0-9._-]{{1,128}}")
        doms = d.get("domains", [])
        if not isinstance(doms, list) or len(doms) > 32:
            raise SchemaError("description.domains", "expected a list of at most 32 strings")
        return cls(
            profile_name=str_(d.get("profile_name"), "description.profile_name", lim),
            domains=tuple(str_(x, f"description.domains[{k}]", lim, cap=lim.max_id_chars)
                          for k, x in enumerate(doms)),
            description=str_(d.get("description"), "description.description", lim),
            backbone=str_(d.get("backbone", "default"), "description.backbone", lim,
                          cap=lim.max_id_chars),
            reasoning=_reasoning(d.get("reasoning", "cot")),
            client_key=key,
        )


#: How an agent answers what it can compute: a chain of thought, or a program it runs.
REASONING_WAYS: tuple[str, ...] = ("cot", "program")
#: Answer kinds a program computes (a program prints a number; options and free text do not
#: come out of a computation). Other tasks are answered in chain of thought by every agent.
PROGRAM_KINDS = frozenset({"number"})


def reasoning_way(announced: str, answer_kind: str) -> str:
    """How an agent that announced ``announced`` answers a task of ``answer_kind``."""
    return announced if answer_kind in PROGRAM_KINDS else "cot"


def _reasoning(value: Any) -> str:
    if value not in REASONING_WAYS:
        raise SchemaError("description.reasoning",
                          f"expected one of {list(REASONING_WAYS)}, got {excerpt(value)}")
    return str(value)


# ------------------------------------------------------------------ node identity

IDENTITY_MODES: tuple[str, ...] = ("auto", "node", "declared")


def node_client_key(node_id: int, public_key: bytes) -> str:
    """The engine key of a node from what the SuperLink authenticated about it.

    In deployment every Fleet request is signed with the SuperNode's private key and its node
    id is bound to that public key (Flower 1.42 ``NodeAuthServerInterceptor``), so the key's
    fingerprint is an identity no other node can present; it is stable across runs while the
    node keeps its key file (``--auth-supernode-private-key``). Without a key: the node id.
    """
    if public_key:
        return "key-" + hashlib.sha256(public_key).hexdigest()[:16]
    return f"node-{node_id}"


def assign_client_keys(
    claims: Mapping[int, tuple[str, bytes]], mode: str
) -> tuple[dict[int, str], dict[int, str]]:
    """Engine key per node, and the nodes left out of routing with the reason.

    ``claims`` maps node id → (declared ``client_key``, public key bytes). ``mode`` ``"node"``
    ignores the declaration (a label only); ``"declared"`` (simulation, where the operator runs
    every ClientApp) uses it when present. A key that two or more nodes resolve to is given to
    none of them: neither claimant can take over the other's reputation, and nobody is renamed.
    """
    if mode not in ("node", "declared"):
        raise ValueError(f"identity mode must be 'node' or 'declared', got {mode!r}")
    keys = {n: declared if mode == "declared" and declared else node_client_key(n, pk)
            for n, (declared, pk) in claims.items()}
    holders: dict[str, list[int]] = {}
    for n, k in keys.items():
        holders.setdefault(k, []).append(n)
    rejected: dict[int, str] = {}
    for k, nodes in holders.items():
        if len(nodes) > 1:
            for n in nodes:
                rejected[n] = f"duplicate_key: {k!r} claimed by {len(nodes)} nodes"
                del keys[n]
    return keys, rejected
