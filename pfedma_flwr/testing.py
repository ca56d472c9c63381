"""An in-process Grid: dispatches messages to a ClientApp with one Context per node (no Ray).

For tests, benchmarks and debugging a custom strategy or
ClientApp without Ray: ``run_server(FakeGrid(client_app, n, run_config), cfg)`` runs the real
ServerApp and ClientApp code in one process, one message at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity


class FakeGrid(Grid):
    """Runs ``client_app`` in-process for each message.

    ``behaviour[node_id]`` may replace the client for a node: a callable ``(msg, ctx) ->
    Message | None``; ``None`` simulates a node that never replies (timeout).
    """

    def __init__(self, client_app: Any, num_nodes: int, run_config: dict[str, Any],
                 behaviour: dict[int, Callable[[Message, Context], Message | None]] | None = None,
                 node_ids: list[int] | None = None) -> None:
        self.client_app = client_app
        self.node_ids = node_ids or [1000 + 7 * i for i in range(num_nodes)]
        self.contexts = {
            n: Context(run_id=1, node_id=n,
                       node_config={"partition-id": i, "num-partitions": num_nodes},
                       state=RecordDict(), run_config=dict(run_config))
            for i, n in enumerate(self.node_ids)
        }
        self.behaviour = behaviour or {}
        self.sent: list[Message] = []
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1

    # --- Grid API used by PFedMA
    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None
                         ) -> Iterable[Message]:
        replies = []
        for msg in messages:
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            ctx = self.contexts[node]
            fn = self.behaviour.get(node)
            TaskIdentity.node_id = node
            try:
                reply = fn(msg, ctx) if fn is not None else self.client_app(msg, ctx)
            except Exception as e:  # the real runtime turns handler exceptions into error replies
                err = Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, f"{type(e)}:<'{e}'>")
                reply = Message(err, reply_to=msg)
            finally:
                TaskIdentity.node_id = 0
            if reply is not None:
                replies.append(reply)
        return replies

    # --- unused abstract methods
    def set_run(self, run: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    @property
    def run(self) -> Any:  # pragma: no cover
        raise NotImplementedError

    def create_message(self, *a: Any, **k: Any) -> Message:  # pragma: no cover
        raise NotImplementedError

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # pragma: no cover
        raise NotImplementedError

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # pragma: no cover
        raise NotImplementedError
