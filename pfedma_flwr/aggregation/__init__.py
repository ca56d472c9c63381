"""Aggregation of the accepted responses (DESIGN §3.8) and the refinement prompt of round t+1.

- :mod:`~pfedma_flwr.aggregation.consensus`: answer groups, weighted consensus, ``z``;
- :mod:`~pfedma_flwr.aggregation.refinement`: what the next round's agents see of ``z``.
"""
