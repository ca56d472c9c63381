#!/usr/bin/env bash
# PPO training of the PFedMA orchestrator on veRL 0.9.1 (docs/training.md).
#
# GPU box: 4 x 80 GB (A100/H100) as in Router-R1 for Qwen2.5-3B-Instruct with FSDP offload
# and vLLM at 60 % GPU memory; 1 x 80 GB works with N_GPUS=1 (same batch, slower). CPU RAM
# >= 128 GB (FSDP offloads parameters and optimizer states of actor, reference and critic).
# Install there: pip install -e '.[train]' "verl[vllm,fsdp]==0.9.1"   (torch 2.11 + vLLM 0.24)
#
#   MODEL_PATH=/models/Qwen2.5-3B-Instruct PFEDMA_REPLAY=/data/replay.jsonl.gz \
#     bash scripts/train_orchestrator.sh [extra Hydra overrides...]
#   bash scripts/train_orchestrator.sh --check [overrides...]   # compose + veRL checks, CPU
#
# Environment: MODEL_PATH (local HF dir; nothing downloads), PFEDMA_REPLAY (replay cache),
# DATA_DIR (parquet rows; built here when absent), N_GPUS (default 4), OUT (checkpoints).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
CHECK=0
if [[ "${1:-}" == "--check" ]]; then
  CHECK=1
  shift
fi
: "${MODEL_PATH:?set MODEL_PATH to a local model directory (e.g. Qwen2.5-3B-Instruct)}"
DATA_DIR=${DATA_DIR:-$REPO/outputs/orchestrator_data}
N_GPUS=${N_GPUS:-4}
OUT=${OUT:-$REPO/outputs/orchestrator_ppo}
export HF_HUB_OFFLINE=1

OVERRIDES=(
  "actor_rollout_ref.model.path=$MODEL_PATH"
  "data.train_files=$DATA_DIR/train.parquet"
  "data.val_files=$DATA_DIR/val.parquet"
  "actor_rollout_ref.rollout.agent.agent_loop_config_path=$REPO/conf/training/agent_loops.yaml"
  "reward.custom_reward_function.path=$REPO/pfedma_flwr/training/reward.py"
  "trainer.n_gpus_per_node=$N_GPUS"
  "trainer.default_local_dir=$OUT"
)

if [[ $CHECK == 1 ]]; then
  exec "$PY" -m pfedma_flwr.training check-config "${OVERRIDES[@]}" "$@"
fi

: "${PFEDMA_REPLAY:?set PFEDMA_REPLAY to the replay cache of client answers (.jsonl/.jsonl.gz)}"
[[ -f "$PFEDMA_REPLAY" ]] || { echo "replay cache $PFEDMA_REPLAY does not exist" >&2; exit 2; }
export PFEDMA_REPLAY
if [[ ! -f "$DATA_DIR/train.parquet" ]]; then
  "$PY" -m pfedma_flwr.training build-data --out "$DATA_DIR"
fi
# the agent loop and reward function are imported inside veRL's Ray workers
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m verl.trainer.main_ppo --config-path "$REPO/conf/training" \
  --config-name ppo_router_r1 "${OVERRIDES[@]}" "$@"
