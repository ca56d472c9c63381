"""Frozen judges of the benchmarks that need one (PrivacyLens, AlpacaEval; docs/judges.md).

One interface (:class:`~pfedma_flwr.judging.model.JudgeModel`: a backend, an identity, a disk
cache per judge and prompt), each benchmark's own judge prompt, and the string judge kept as a
labelled lower bound. The anomaly evaluator's ``llm`` judge reaches its model the same way.
"""
