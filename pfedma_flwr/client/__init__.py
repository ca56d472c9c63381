"""The client side (what stays on a node), Flower-free.

- :mod:`~pfedma_flwr.client.agent`: the client agent (answers, local and global rules, the
  outgoing filter) and :mod:`~pfedma_flwr.client.state` (its private state store);
- :mod:`~pfedma_flwr.client.components`: builds an agent from the run config under the node's
  own :mod:`~pfedma_flwr.client.node_security` policy;
- :mod:`~pfedma_flwr.client.audit`: the node's local audit log.

Nothing here imports :mod:`pfedma_flwr.server`, and the import-contract tests check it. The
ClientApp shell is :mod:`client_apps.agent_app`.
"""
