"""ClientApp: one PFedMA agent per node; state lives in ``context.state`` between messages."""

from __future__ import annotations

import json
import os

from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from pfedma_flwr.client_agent import AgentState, ClientAgent
from pfedma_flwr.client_components import build_agent
from pfedma_flwr.protocol import decode_instruction, encode_description, encode_reply

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

STATE_KEY = "pfedma-agent-state"
app = ClientApp()


def load_state(context: Context, agent: ClientAgent) -> AgentState:
    """The agent's private state; a missing key means first participation."""
    if STATE_KEY not in context.state.config_records:
        return agent.new_state()
    raw = context.state.config_records[STATE_KEY]["json"]
    return AgentState.from_dict(json.loads(str(raw)))


def save_state(context: Context, state: AgentState) -> None:
    """Store the agent's private state for the next message of this run."""
    context.state[STATE_KEY] = ConfigRecord({"json": json.dumps(state.to_dict())})


@app.query("describe")
def describe(msg: Message, context: Context) -> Message:
    """Announce this node's public profile."""
    agent = build_agent(dict(context.run_config), dict(context.node_config))
    return Message(encode_description(agent.describe()), reply_to=msg)


@app.query("respond")
def respond(msg: Message, context: Context) -> Message:
    """Answer the routed queries with privacy-processed responses, candidates and feedback."""
    agent = build_agent(dict(context.run_config), dict(context.node_config))
    instruction = decode_instruction(msg.content, agent.limits)
    state = load_state(context, agent)
    reply = agent.respond(instruction, state)
    save_state(context, state)
    return Message(encode_reply(reply), reply_to=msg)
