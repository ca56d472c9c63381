"""ClientApp: one PFedMA agent per node; state lives in ``context.state`` between messages.

With a ``state-dir`` in the node config (deployment), the agent's private state (``Ω_local``,
rule counters, ``X_i``) is also kept in a node-local :class:`~pfedma_flwr.persistence.StateStore`
so it survives a SuperNode restart and later runs, and every outgoing message is summarized in
``<state-dir>/audit-<client>.jsonl`` (``<client>``: the node's ``client-id``, else
``p<partition-id>``) (:mod:`pfedma_flwr.client.audit`). Without one, only
``context.state`` is used and the audit keeps counters there.

Security settings are the node's (:mod:`pfedma_flwr.client.node_security`): backend, endpoint, key
variable, data dir and minimum rule mode come from the node config, and ``module:attr`` code
named by the run config is imported only where the node config sets ``allow-plugins=true``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from pfedma_flwr.agents.backends import BackendUnavailableError
from pfedma_flwr.agents.backends.embedded import MissingModelError
from pfedma_flwr.client.agent import AgentState, ClientAgent
from pfedma_flwr.client.audit import add_to_counters, append_record, summarize_payload
from pfedma_flwr.client.components import build_agent, node_identity, node_policy
from pfedma_flwr.config import ConfigError
from pfedma_flwr.logs import configure_logging
from pfedma_flwr.persistence import StateStore, validate_key
from pfedma_flwr.protocol.codec import (
    JSON_FIELD,
    PAYLOAD_KEY,
    decode_instruction,
    encode_description,
    encode_reply,
)
from pfedma_flwr.protocol.startup import startup_message
from pfedma_flwr.registry import plugin_imports

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

STATE_KEY = "pfedma-agent-state"
AUDIT_KEY = "pfedma-audit"
logger = logging.getLogger(__name__)
# PFEDMA_LOG_LEVEL from the launcher's --log-level, in every Ray worker that loads the app
configure_logging()
app = ClientApp()


def state_store(node_config: dict[str, Any]) -> tuple[StateStore, str] | None:
    """The node's persistent store and this agent's key, or ``None`` without ``state-dir``."""
    state_dir = str(node_config.get("state-dir", "") or "").strip()
    if not state_dir:
        return None
    return StateStore(state_dir), f"agent-{_client_suffix(node_config)}"


def _client_suffix(node_config: dict[str, Any]) -> str:
    """File-name part identifying this client: its ``client-id``, else ``p<partition-id>``."""
    client_id = str(node_config.get("client-id", "") or "").strip()
    if client_id:
        return validate_key(client_id)
    pid, _ = node_identity(node_config)
    return f"p{pid}"


def load_state(context: Context, agent: ClientAgent) -> AgentState:
    """The agent's private state: this run's ``context.state``, else the node's store, else new.

    Raises
    ------
    pfedma_flwr.persistence.StateCorruptError
        If the stored state cannot be read; the file has been moved aside (not deleted) and the
        next message starts from a fresh state.
    """
    if STATE_KEY in context.state.config_records:
        raw = context.state.config_records[STATE_KEY]["json"]
        return AgentState.from_dict(json.loads(str(raw)))
    store = state_store(dict(context.node_config))
    if store is None:
        return agent.new_state()
    st, key = store
    # a payload of the wrong shape is quarantined like an undecodable file: fresh state
    state = st.load_as(key, AgentState.from_dict)
    if state is None:
        return agent.new_state()
    if state.rules.mode != agent.mode:
        logger.warning("stored client state has rules.mode %s but this run uses %s; use a "
                       "separate state-dir per experiment condition", state.rules.mode.value,
                       agent.mode.value)
    logger.info("restored client state %s (%d rounds)", st.path(key), state.rounds)
    return state


def save_state(context: Context, state: AgentState) -> None:
    """Store the agent's private state for the next message (and on disk with a state dir)."""
    payload = state.to_dict()
    context.state[STATE_KEY] = ConfigRecord({"json": json.dumps(payload)})
    store = state_store(dict(context.node_config))
    if store is not None:
        store[0].save(store[1], payload)


def audit(context: Context, message_type: str, content: RecordDict) -> None:
    """Record the size/field summary of an outgoing payload (JSONL in state-dir, or counters)."""
    payload = str(content.config_records[PAYLOAD_KEY][JSON_FIELD])
    record = summarize_payload(message_type, payload)
    node = dict(context.node_config)
    state_dir = str(node.get("state-dir", "") or "").strip()
    if state_dir:
        append_record(Path(state_dir).expanduser() / f"audit-{_client_suffix(node)}.jsonl",
                      {**record, "run_id": int(context.run_id)})
        return
    old = context.state.config_records.get(AUDIT_KEY)
    counters = {str(k): v for k, v in old.items() if isinstance(v, int)} if old is not None else {}
    context.state[AUDIT_KEY] = ConfigRecord(dict(add_to_counters(counters, record)))


def startup_kind(error: BaseException) -> str:
    """``generation`` if the agent's model cannot answer, ``config`` for a wrong setting."""
    if isinstance(error, BackendUnavailableError | MissingModelError | ImportError):
        return "generation"
    return "config" if isinstance(error, ConfigError) else "error"


@app.query("describe")
def describe(msg: Message, context: Context) -> Message:
    """Announce this node's public profile.

    A dead endpoint, a model the endpoint does not serve, missing weights or a bad node
    config fail the handshake here, not every later query, with one line the server finds in
    the error reply (:mod:`pfedma_flwr.protocol.startup`).
    """
    node = dict(context.node_config)
    try:
        with plugin_imports(node_policy(node).allow_plugins):
            agent = build_agent(dict(context.run_config), node)
            content = encode_description(agent.describe())
        agent.backend.health_check()
    except Exception as e:
        try:
            who = _client_suffix(node)
        except Exception:  # noqa: BLE001 - a node config too broken to name the client
            who = "?"
        raise RuntimeError(startup_message(who, startup_kind(e), e)) from e
    audit(context, msg.metadata.message_type, content)
    return Message(content, reply_to=msg)


@app.query("respond")
def respond(msg: Message, context: Context) -> Message:
    """Answer the routed queries with privacy-processed responses, candidates and feedback."""
    with plugin_imports(node_policy(dict(context.node_config)).allow_plugins):
        agent = build_agent(dict(context.run_config), dict(context.node_config))
        instruction = decode_instruction(msg.content, agent.limits)
        state = load_state(context, agent)
        reply = agent.respond(instruction, state)
    save_state(context, state)
    content = encode_reply(reply)
    audit(context, msg.metadata.message_type, content)
    return Message(content, reply_to=msg)
