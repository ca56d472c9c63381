"""Record a replay cache: the configured client agents answer the training queries once.

Each of ``num_clients`` agents is built exactly as a Flower node builds it
(:func:`pfedma_flwr.client.components.build_agent`, same profiles, backends and local rules)
and answers every task as a round-1 query in batches; the answers, as processed for upload,
become ``answer`` lines and each agent's public description a ``client`` line
(:meth:`pfedma_flwr.training.episode.ReplayCache.from_jsonl` reads the file). Few-shot
demonstrations are off by default: training rows come from the same dev pools as the agents'
private data ``D_i``, and an agent must not answer a question it holds as an example.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.client.components import build_agent
from pfedma_flwr.data.benchmarks import Task
from pfedma_flwr.data.profiles import knowledge_domain
from pfedma_flwr.protocol.schema import RespondInstruction, RoutedQuery

logger = logging.getLogger(__name__)


def record_replay(
    tasks: Sequence[Task],
    out: str | os.PathLike[str],
    *,
    num_clients: int,
    config_name: str = "pfedma",
    overrides: str = "",
    few_shot: int = 0,
    batch_size: int = 8,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the replay cache of ``tasks`` answered by ``num_clients`` agents to ``out``.

    ``config_name``/``overrides`` select the agents exactly as for a run (``--config`` /
    ``--set``); ``out`` ending in ``.gz`` is gzip-compressed. Returns counts per client of
    answers and of answers without a response (their error codes are kept in the file).
    """
    if num_clients < 1 or batch_size < 1 or few_shot < 0:
        raise ValueError(f"num_clients and batch_size must be >= 1 and few_shot >= 0, got "
                         f"{num_clients}, {batch_size}, {few_shot}")
    path = Path(out)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass --overwrite to replace it")
    run_config = {"config-name": config_name,
                  "overrides": f"agent.few_shot={few_shot} {overrides}".strip()}
    agents = [build_agent(run_config, {"partition-id": i, "num-partitions": num_clients})
              for i in range(num_clients)]
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    counts: dict[str, dict[str, int]] = {}
    with opener(path, "wt", encoding="utf-8") as fh:
        for agent in agents:
            cid = agent.client_key
            fh.write(json.dumps({"kind": "client", "client_id": cid,
                                 "description": agent.describe().to_dict()}) + "\n")
        for agent in agents:
            cid, state = agent.client_key, agent.new_state()
            got = counts.setdefault(cid, {"answers": 0, "no_response": 0})
            for start in range(0, len(tasks), batch_size):
                chunk = tasks[start:start + batch_size]
                ins = RespondInstruction(server_round=1, queries=tuple(
                    RoutedQuery(query_id=t.task_id, text=t.question,
                                domain=knowledge_domain(t.domain), round=1,
                                answer_kind=t.answer_kind) for t in chunk))
                reply = agent.respond(ins, state)
                for pr in reply.responses:
                    fh.write(json.dumps({"kind": "answer", "query_id": pr.query_id,
                                         "client_id": cid, "round": 1,
                                         "response": pr.to_dict()}) + "\n")
                    got["answers"] += 1
                    got["no_response"] += pr.response is None
                logger.info("replay %s: %d/%d answered", cid, got["answers"], len(tasks))
    return {"file": str(path), "clients": counts}
