"""Pure selection and aggregation rules of the paper's baselines (no Flower).

``strategies/`` wraps each as a thin Flower strategy; :mod:`.hooks` holds the optional
orchestrator capabilities (compose, observe, state) the engine calls.
"""
