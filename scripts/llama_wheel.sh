#!/usr/bin/env bash
# Prints the path of a llama-cpp-python wheel built for THIS CPU, building it once if needed.
#
#   bash scripts/llama_wheel.sh [PYTHON]
#
# PyPI has only an sdist of llama-cpp-python for Linux, so every environment would compile
# llama.cpp again (~5 min on 2 cores). The wheel is built once per (version, build flags, CPU
# feature set, Python tag) into $PFEDMA_CACHE/wheels (default ~/.cache/pfedma/wheels) and
# installed by path by scripts/install.sh, scripts/test_train.sh and scripts/lock.sh. The
# version is requirements/pins.txt's (the lock holds the same; tests/unit/test_lock.py). -DGGML_NATIVE=ON ties the wheel to this CPU
# (1.38x faster prompt prefill on AVX-512/VNNI, docs/accuracy.md), hence the CPU flags in the
# key: a home directory shared with another CPU gets its own wheel, never a foreign one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-${PYTHON:-python3}}
PINS=requirements/pins.txt
VERSION=$(sed -n 's/^llama-cpp-python==\([^ ;]*\).*/\1/p' "$PINS")
if [ -z "$VERSION" ]; then echo "llama_wheel.sh: no llama-cpp-python pin in $PINS" >&2; exit 1; fi
FLAGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF"
TAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
CPU=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m) | sha256sum | cut -c1-12)
KEY=$(printf '%s|%s|%s|%s' "$VERSION" "$FLAGS" "$CPU" "$TAG" | sha256sum | cut -c1-16)
DIR="${PFEDMA_CACHE:-$HOME/.cache/pfedma}/wheels/llama-$KEY"
WHEEL=$(ls "$DIR"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$WHEEL" ]; then
  mkdir -p "$DIR"
  TMP=$(mktemp -d "$DIR/.build.XXXXXX")
  echo "llama_wheel.sh: building llama-cpp-python $VERSION for this CPU (~5 min on 2 cores)" >&2
  # --no-cache-dir: pip's own wheel cache is keyed by the sdist, not by the CPU
  CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
    "$PY" -m pip wheel -q --no-deps --no-cache-dir -w "$TMP" "llama-cpp-python==$VERSION" >&2
  BUILT=$(ls "$TMP"/llama_cpp_python-"$VERSION"-*.whl)
  mv "$BUILT" "$DIR/"   # atomic within one file system: a concurrent reader never sees half
  rm -rf "$TMP"
  WHEEL="$DIR/$(basename "$BUILT")"
fi
echo "$WHEEL"
