"""The wire between server and clients.

- :mod:`~pfedma_flwr.protocol.wire`: what a client announces (``ClientDescription``) and the
  client keys; plain dataclasses, no Flower.
- :mod:`~pfedma_flwr.protocol.schema`: the structured response and its validation into
  dataclasses (:mod:`~pfedma_flwr.protocol.validation` holds the shared checks).
- :mod:`~pfedma_flwr.protocol.codec`: the one place that turns those into Flower
  ``RecordDict`` messages and back; the only module of this package that imports Flower.

This ``__init__`` imports nothing, so loading ``protocol.wire`` never loads Flower.
"""
