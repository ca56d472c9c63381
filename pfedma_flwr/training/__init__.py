"""Training the LLM orchestrator ``π_θ`` with PPO on veRL (docs/training.md).

``reward`` (the §3.11 trajectory reward) and ``data`` (veRL parquet rows) need no veRL;
``episode`` runs one query through the collaboration engine with a policy callback and replayed
client answers; ``agent_loop`` wraps it as a veRL ``AgentLoopBase`` (defined only when veRL is
installed: ``pip install -e '.[train]'``).
"""
