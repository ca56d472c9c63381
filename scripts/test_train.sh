#!/usr/bin/env bash
# The tests that need the optional 'train' extra (veRL 0.9.1, TRL for the CPU GRPO smoke test),
# in .venv-train: a venv of its own, WITHOUT the system's site-packages, installed from the
# lock (requirements/lock.txt). veRL pins transformers <5.11; isolated, no package installed
# into the system Python (a newer transformers or kernels, say) can break it. Every CI run
# builds it in a clean clone, so it is also the check that the lock installs into an empty
# environment: `pip check` and installed.py --verify name any package that moved. Without
# veRL these tests skip in `python3 -m pytest -q`; here a missing import is an error.
# Measured here: ~2 min to build the venv with a warm pip cache, ~30 s of tests; a venv built
# from the same lock is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 FLWR_TELEMETRY_ENABLED=0
LOCK=requirements/lock.txt
VENV=${PFEDMA_TRAIN_VENV:-.venv-train}
STAMP="$VENV/.lock-sha256"
WANT=$(cat "$LOCK" pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  VPY="$VENV/bin/python"
  "$VPY" -m pip install -q -c "$LOCK" torch
  "$VPY" -m pip install -q -c "$LOCK" "$(bash scripts/llama_wheel.sh "$VPY")"
  "$VPY" -m pip install -q -c "$LOCK" -e ".[dev,train]"
  "$VPY" -m pip check
  "$VPY" scripts/installed.py --extras dev,train --no-models --verify
  echo "$WANT" > "$STAMP"
fi
VPY="$VENV/bin/python"
# The imports the tests would otherwise skip on: here a missing one is an error, not a skip.
"$VPY" -c "import verl, verl.experimental.agent_loop, trl"
"$VPY" -m pytest -q -p no:cacheprovider \
  tests/unit/test_training_agent_loop.py tests/unit/test_training_config.py \
  tests/unit/test_training_trl_smoke.py
