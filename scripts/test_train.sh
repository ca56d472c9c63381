#!/usr/bin/env bash
# The tests that need the optional 'train' extra (veRL 0.9.1, and TRL for the CPU GRPO smoke
# test), in a venv beside the system Python: veRL pins transformers <5.11 and the project runs on
# a newer one, so the extra goes into .venv-train (which sees the system's packages, torch and
# the project included) and the system Python keeps its transformers. Without veRL these tests
# skip in `python3 -m pytest -q`; this runs them. Measured here: ~40 s to install with a warm
# pip cache, ~30 s of tests. Re-running reuses the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 FLWR_TELEMETRY_ENABLED=0
VENV=${PFEDMA_TRAIN_VENV:-.venv-train}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV"
fi
# The project with its 'train' extra (pyproject.toml holds the versions); everything else it
# needs is satisfied by the system's packages, so only the extra's packages land here.
# trl: the GRPO smoke test.
"$VENV/bin/python" -m pip install -q -e ".[train]" "trl==1.16.0"
# The imports the tests would otherwise skip on: here a missing one is an error, not a skip.
"$VENV/bin/python" -c "import verl, verl.experimental.agent_loop, trl"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/unit/test_training_agent_loop.py tests/unit/test_training_config.py \
  tests/unit/test_training_trl_smoke.py
