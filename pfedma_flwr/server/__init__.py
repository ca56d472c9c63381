"""The server side (what the honest-but-curious server runs), Flower-free.

- :mod:`~pfedma_flwr.server.engine`: the collaboration engine (routing, filtering,
  aggregation, rule promotion per round) and :mod:`~pfedma_flwr.server.query_state`;
- :mod:`~pfedma_flwr.server.components`: builds the engine's injected components (orchestrator,
  judge, aggregator, refiner, embedder) from their config sections and registries;
- :mod:`~pfedma_flwr.server.results`, :mod:`~pfedma_flwr.server.progress`,
  :mod:`~pfedma_flwr.server.report`: run outputs.

Nothing here imports :mod:`pfedma_flwr.client` (the client's private rule store), and the
import-contract tests check it. The ServerApp shell is :mod:`pfedma_flwr.server_app`.
"""
