#!/usr/bin/env bash
# Lint, format and type checks, run by .ci/run before the tests (also fine by hand).
#   ruff check     the whole repository (pyproject.toml [tool.ruff])
#   ruff format    --check over the files listed in FORMATTED (the rest keeps its hand layout)
#   mypy           over TYPED, the modules that type-check clean; add a module once it does
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# launch.py and report.py keep their compact hand layout: ruff format would take both past
# the ~400-line module limit (STYLE.md) without making them clearer.
FORMATTED=(
  pfedma_flwr/cli.py pfedma_flwr/logs.py pfedma_flwr/server/progress.py
  pfedma_flwr/server/provenance.py pfedma_flwr/server/report_plots.py pfedma_flwr/resources.py
  pfedma_flwr/experiments/tracking.py
  tests/unit/test_launch.py tests/unit/test_progress.py tests/unit/test_report.py
  tests/unit/test_report_run.py tests/unit/test_one_gpu_preset.py
  tests/unit/test_flwr_run_deps.py tests/e2e/test_llama_server.py
  pfedma_flwr/rules/private_facts.py tests/unit/test_private_facts.py
  tests/strategy/test_private_facts_run.py scripts/train_private_facts.py
  tests/unit/test_delivery.py tests/unit/test_run_config.py
)
TYPED=(
  pfedma_flwr/cli.py pfedma_flwr/logs.py pfedma_flwr/experiments/launch.py
  pfedma_flwr/server/progress.py pfedma_flwr/server/provenance.py
  pfedma_flwr/server/report.py pfedma_flwr/server/report_plots.py pfedma_flwr/resources.py
  pfedma_flwr/experiments/tracking.py
  pfedma_flwr/protocol/codec.py pfedma_flwr/protocol/schema.py pfedma_flwr/protocol/validation.py
  pfedma_flwr/server/results.py pfedma_flwr/persistence.py pfedma_flwr/equations.py
  pfedma_flwr/experiments/metrics.py pfedma_flwr/agents/program.py pfedma_flwr/config_checks.py
  pfedma_flwr/client/state.py pfedma_flwr/server/query_state.py pfedma_flwr/rules/server_flow.py
  pfedma_flwr/rules/private_facts.py pfedma_flwr/protocol/wire.py pfedma_flwr/agents/hooks.py
  pfedma_flwr/experiments/attacks.py pfedma_flwr/agents/backends/configured.py
  pfedma_flwr/routing/llm_action.py pfedma_flwr/routing/llm_orchestrator.py
  pfedma_flwr/aggregation/refinement.py pfedma_flwr/agents/backends/cache.py
  pfedma_flwr/rules/guard_catalogue.py pfedma_flwr/rules/guard_rules.py pfedma_flwr/agents/guard.py
  pfedma_flwr/agents/tool_plan.py pfedma_flwr/data/bench_asb_tasks.py pfedma_flwr/client/posing.py
  pfedma_flwr/experiments/agent_benchmarks.py
  pfedma_flwr/experiments/stats.py pfedma_flwr/experiments/compare.py
  pfedma_flwr/experiments/select.py pfedma_flwr/agents/options.py pfedma_flwr/routing/lone.py
  pfedma_flwr/routing/base.py pfedma_flwr/baselines/hooks.py pfedma_flwr/server/components.py
  pfedma_flwr/judging/model.py pfedma_flwr/judging/privacylens.py
  pfedma_flwr/judging/privacylens_prompts.py pfedma_flwr/judging/alpacaeval.py
  pfedma_flwr/judging/alpacaeval_prompts.py pfedma_flwr/judging/factory.py
  pfedma_flwr/agents/actions.py pfedma_flwr/agents/backends/llama_scoring.py
  pfedma_flwr/data/privacylens_tools.py pfedma_flwr/data/privacylens_prompt.py
  pfedma_flwr/experiments/privacy_eval.py pfedma_flwr/experiments/judged.py
  pfedma_flwr/judging/string_match.py pfedma_flwr/judging/validation.py pfedma_flwr/judging/cli.py
  pfedma_flwr/rules/normalize.py pfedma_flwr/rules/probe.py
  pfedma_flwr/rules/feedback.py pfedma_flwr/anomaly/evidence.py
  pfedma_flwr/aggregation/public_state.py pfedma_flwr/rules/pattern_grammar.py
  pfedma_flwr/experiments/preflight.py pfedma_flwr/experiments/processes.py
  pfedma_flwr/experiments/outcome.py pfedma_flwr/run_config.py pfedma_flwr/protocol/startup.py
)

echo "[lint] ruff check"
$PY -m ruff check .
echo "[lint] ruff format --check (${#FORMATTED[@]} files)"
$PY -m ruff format --check "${FORMATTED[@]}"
echo "[lint] mypy (${#TYPED[@]} modules)"
# silent: imported modules are analysed for types but their own errors are not reported here
$PY -m mypy --follow-imports=silent "${TYPED[@]}"
