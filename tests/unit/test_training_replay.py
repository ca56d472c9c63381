"""Replay recording: the configured agents answer training queries; the file feeds an episode."""

import gzip
import json

import pytest

from pfedma_flwr.embeddings import HashingEmbedder
from pfedma_flwr.routing.llm_orchestrator import LLMOrchestrator
from pfedma_flwr.server.query_state import EngineSettings
from pfedma_flwr.training.__main__ import main
from pfedma_flwr.training.data import training_tasks
from pfedma_flwr.training.episode import PolicyBackend, ReplayCache, run_episode
from pfedma_flwr.training.replay import record_replay


@pytest.fixture(scope="module")
def tasks():
    return training_tasks(["medqa"], per_benchmark=6)[:3]


def test_recorded_cache_reads_back_and_drives_an_episode(tmp_path, tasks):
    out = tmp_path / "replay.jsonl.gz"
    info = record_replay(tasks, out, num_clients=2, config_name="tiny")
    assert info["clients"] == {"partition-0": {"answers": 3, "no_response": 0},
                               "partition-1": {"answers": 3, "no_response": 0}}
    with gzip.open(out, "rt") as fh:
        kinds = [json.loads(line)["kind"] for line in fh]
    assert kinds == ["client"] * 2 + ["answer"] * 6
    cache = ReplayCache.from_jsonl(out)
    assert set(cache.clients) == {"partition-0", "partition-1"}
    assert {(q, t) for q, _, t in cache.answers} == {(t.task_id, 1) for t in tasks}
    emb = HashingEmbedder(dim=64)
    orch = LLMOrchestrator(backend=PolicyBackend(lambda _m: "<select>partition-1</select>"),
                           k_max=1, embedder=emb)
    s = run_episode(tasks[0], cache=cache, orchestrator=orch,
                    settings=EngineSettings(t_max=1, k_max=1), embedder=emb)
    # one round with the recorded answer of partition-1
    assert s.format_ok and s.num_selected == (1,) and s.rounds == 1


def test_refuses_to_overwrite_and_bad_sizes(tmp_path, tasks):
    out = tmp_path / "r.jsonl"
    out.write_text("")
    with pytest.raises(FileExistsError, match="--overwrite"):
        record_replay(tasks, out, num_clients=1, config_name="tiny")
    with pytest.raises(ValueError, match="num_clients"):
        record_replay(tasks, out, num_clients=0, config_name="tiny", overwrite=True)


def test_cli_names_a_bad_override(tmp_path, capsys):
    code = main(["record-replay", "--out", str(tmp_path / "r.jsonl"), "--num-clients", "1",
                 "--config", "tiny", "--benchmarks", "medqa", "--per-benchmark", "4",
                 "--limit", "1", "--set", "agent.nosuch=1"])
    assert code == 2
    assert "nosuch" in capsys.readouterr().err
