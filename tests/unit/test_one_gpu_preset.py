"""conf/one_gpu.yaml: one local server for agents, judge and orchestrator, sized for it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from pfedma_flwr.config import load_config
from pfedma_flwr.experiments import launch

ROOT = Path(__file__).resolve().parents[2]
# vLLM's default --max-num-seqs, which docs/one_gpu.md starts the server with
SERVER_SEQS = 256


def _cfg(overrides: str = ""):
    return load_config({"config-name": "one_gpu", "overrides": overrides})


def test_every_endpoint_is_the_same_local_server_and_model():
    cfg = _cfg()
    sections = [
        cfg.agent.backend,
        cfg.anomaly.judge_backend,
        cfg.routing.llm_backend,
        cfg.evaluation.judge_backend,
    ]
    assert {(b.name, b.base_url, b.model) for b in sections} == {
        ("openai", "http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct")
    }
    assert cfg.anomaly.judge == "llm"
    # a key variable is named, never a key
    assert {b.api_key_env for b in sections} == {"PFEDMA_LOCAL_API_KEY"}


def test_requests_in_flight_fit_the_server():
    cfg = _cfg()
    s = cfg.strategy
    agent_requests = s.batch_size * s.k_max  # one collaboration round of each active query
    assert agent_requests + cfg.anomaly.judge_backend.concurrency <= SERVER_SEQS
    # a client's share of a round (at most batch_size queries) goes out at once
    assert cfg.agent.backend.concurrency >= s.batch_size


def test_the_docs_start_the_server_the_preset_points_at():
    doc = (ROOT / "docs" / "one_gpu.md").read_text(encoding="utf-8")
    cfg = _cfg()
    assert f"vllm serve {cfg.agent.backend.model} --host 127.0.0.1 --port 8000" in doc
    assert f"--model-path {cfg.agent.backend.model}" in doc
    assert f"--max-num-seqs {SERVER_SEQS}" in doc
    for key in re.findall(r"`((?:agent|anomaly|routing|strategy)\.[\w.]+)`", doc):
        obj = cfg
        for part in key.split("."):
            assert hasattr(obj, part), f"docs/one_gpu.md names unknown key {key}"
            obj = getattr(obj, part)


def test_overriding_the_url_points_every_section_elsewhere():
    url = "http://127.0.0.1:9999/v1"
    cfg = _cfg(
        " ".join(
            f"{s}.base_url={url}"
            for s in ("agent.backend", "anomaly.judge_backend", "routing.llm_backend")
        )
    )
    assert {
        cfg.agent.backend.base_url,
        cfg.anomaly.judge_backend.base_url,
        cfg.routing.llm_backend.base_url,
    } == {url}


def test_launcher_reserves_no_gpu_and_one_cpu_per_endpoint_client(monkeypatch, tmp_path):
    assert launch.cpus_per_client_for("one_gpu") == 1.0
    seen = []

    def fake_flwr(args, env, **kw):
        seen.append(args)
        return subprocess.CompletedProcess(args, 1, stdout="not json", stderr="stop here")

    monkeypatch.setattr(launch, "start_superlink", lambda *a: subprocess.Popen(["true"]))
    monkeypatch.setattr(launch, "_flwr", fake_flwr)
    # no vLLM server here: the launcher's own check of the endpoint is off for this test
    launch.run(config="one_gpu", num_clients=4, output_dir=tmp_path / "o", backend_check=False)
    fed = seen[0][seen[0].index("--federation-config") + 1]
    assert fed == "num-supernodes=4 client-resources-num-cpus=1 client-resources-num-gpus=0"
    launch.run(
        config="one_gpu",
        num_clients=4,
        output_dir=tmp_path / "o",
        gpus_per_client=0.25,
        backend_check=False,
    )
    assert seen[1][seen[1].index("--federation-config") + 1].endswith(
        "client-resources-num-gpus=0.25"
    )
