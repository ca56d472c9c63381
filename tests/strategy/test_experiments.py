"""Every experiment preset at the 'tiny' size, in-process (FakeGrid + run_server, no Ray).

The runner is the real one; only the executor differs from `python -m pfedma_flwr.experiments`
(which runs each variant with `flwr run`). Checks: the table has one row per variant with the
preset's columns, the plots exist, and the metrics are in range. Numbers are reported, not
asserted (the scripted agents mean nothing about PFedMA's quality).
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

import pytest

from client_apps.agent_app import app as client_app
from pfedma_flwr.client import components as client_components
from pfedma_flwr.config import load_config
from pfedma_flwr.experiments import VariantRun, load_preset, preset_names, run_experiment
from pfedma_flwr.experiments.tables import RAW_METRICS, SIGNED_METRICS, columns
from pfedma_flwr.server_app import run_server
from pfedma_flwr.testing import FakeGrid
from strategies.registry import METHODS

logger = logging.getLogger(__name__)


def fakegrid_executor(v: VariantRun) -> None:
    """Run one variant over an in-process FakeGrid with the real ServerApp/ClientApp code."""
    client_components.build_agent.cache_clear()
    rc = {"config-name": v.config, "output-dir": str(v.output_dir), "overrides": v.overrides}
    grid = FakeGrid(client_app, v.num_clients, rc)
    summary = run_server(grid, load_config(rc))
    assert summary["status"] == "completed"


pytestmark = pytest.mark.usefixtures("fresh_agent_caches")


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_presets_cover_the_papers_experiments():
    assert set(preset_names()) == {
        "main", "privacy", "robustness", "noniid", "rounds", "anomaly_ablation",
        "routing_ablation", "rules_ablation", "sensitivity", "orchestrator", "best_single",
        "sources"}
    rob = load_preset("robustness")
    # PFedMA and -all x (clean + 4 ratios) from one base configuration, then the baselines
    # clean and at the strongest attack (Table 2)
    assert [v.labels for v in rob.variants()][:2] == [{"method": "pfedma", "rho": "0.0"},
                                                       {"method": "pfedma", "rho": "0.1"}]
    assert rob.variants()[5].overrides == {"anomaly.ablation": "-all", "adversary.ratio": 0.0}
    rho_of: dict[str, list[str]] = {}
    for v in rob.variants():
        rho_of.setdefault(v.labels["method"], []).append(v.labels["rho"])
    assert list(rho_of) == ["pfedma", "-all", *METHODS[1:]]
    assert rho_of["pfedma"] == rho_of["-all"] == ["0.0", "0.1", "0.2", "0.3", "0.4"]
    assert all(rho_of[m] == ["0.0", "0.4"] for m in METHODS[1:])
    assert load_preset("noniid").size("paper").num_clients == 100


@pytest.mark.parametrize("name", sorted(preset_names()))
def test_preset_runs_at_tiny_size(name: str, tiny_preset):
    preset = load_preset(name)
    result, tmp_path = tiny_preset(name)
    variants = preset.variants()
    rows = _read_csv(tmp_path / "results.csv")
    assert len(rows) == len(variants)
    labels = list(preset.axes) or ["variant"]
    assert list(rows[0]) == labels + columns(preset, result["rows"])
    for row, v in zip(rows, variants, strict=True):
        assert [row[a] for a in labels] == [v.labels.get(a, v.name) for a in labels]
    md = (tmp_path / "results.md").read_text()
    main_table, _, per_bench = md.partition("## Per benchmark")
    assert main_table.count("\n|") == len(variants) + 2  # header, rule, one line per variant
    # the per-benchmark table: every variant overall and per benchmark
    comp = _read_csv(tmp_path / "comparison.csv")
    assert per_bench.count("\n|") == len(comp) + 2
    assert {r["benchmark"] for r in comp} >= {"all"}
    for spec in preset.plots:
        png = tmp_path / spec["file"]
        assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    for r in result["rows"]:
        for m, value in r["metrics"].items():
            # counts (tables.RAW_METRICS, also per round: global_rules/active@1) are not rates
            if m.split("/")[0] in SIGNED_METRICS and not math.isnan(value):
                assert -1.0 <= value <= 1.0, (name, r["variant"], m, value)
            elif m.split("/")[0] not in RAW_METRICS and not math.isnan(value):
                assert 0.0 <= value <= 1.0, (name, r["variant"], m, value)
        if not math.isnan(r["metrics"]["ACC"]):  # the interval holds the accuracy
            assert r["metrics"]["ACC_lo"] <= r["metrics"]["ACC"] <= r["metrics"]["ACC_hi"]
    if name == "orchestrator":
        # the LLM policy reports its format-failure rate; the others have none to report
        ffr = {r["labels"]["policy"]: r["metrics"]["FFR"] for r in result["rows"]}
        assert 0.0 <= ffr["llm"] <= 1.0
        assert math.isnan(ffr["heuristic"]) and math.isnan(ffr["all-agents"])
        # routing.prices of the preset (0.2 USD per million tokens for every backbone and the
        # orchestrator): cost = (agent tokens + the LLM policy's own tokens) x 0.2e-6
        for r in result["rows"]:
            m = r["metrics"]
            own = 0.0 if math.isnan(m["orchestrator_tokens"]) else m["orchestrator_tokens"]
            assert m["cost"] > 0, r["variant"]
            assert abs(m["cost"] - (m["tokens"] + own) * 0.2e-6) < 1e-9, r["variant"]
        llm = next(r for r in result["rows"] if r["labels"]["policy"] == "llm")
        assert llm["metrics"]["orchestrator_tokens"] > 0
    logger.warning("%s tiny:\n%s", name, md)


def test_injection_asr_pfedma_vs_filtering_disabled(tmp_path: Path):
    """rho_adv = 0.4 on the scripted agents: PFedMA's ASR beside -all (reported, not asserted)."""
    result = run_experiment("robustness", size="tiny", output_dir=tmp_path,
                            executor=fakegrid_executor,
                            only={"method": ["pfedma", "-all"], "rho": ["0.4"]})
    by = {(r["labels"]["method"], r["labels"]["rho"]): r["metrics"] for r in result["rows"]}
    pf, off = by[("pfedma", "0.4")], by[("-all", "0.4")]
    logger.warning("rho_adv=0.4 ASR: PFedMA %.3f, -all %.3f (det %.3f vs %.3f, exposure %.3f "
                   "vs %.3f)", pf["ASR"], off["ASR"], pf["det"], off["det"], pf["exposure"],
                   off["exposure"])
    assert 0.0 <= pf["ASR"] <= 1.0 and 0.0 <= off["ASR"] <= 1.0
    assert off["det"] == 0.0  # -all retains every response
    assert pf["exposure"] > 0.0  # malicious clients did take part


def test_main_compares_pfedma_with_the_papers_baselines(tmp_path: Path):
    from pfedma_flwr.experiments.runner import plan

    preset = load_preset("main")
    choices = tmp_path / "choices"  # the small selection is the lead's dev run: stand in for it
    choices.mkdir()
    (choices / "best_single-small.yaml").write_text(
        "overrides: {agent.profiles: [plain], agent.reasoning: program}\n")
    runs = {v.labels["method"]: vr[0] for v, vr in plan(preset, "small", tmp_path,
                                                        choices_dir=choices)}
    # Table 1's methods by their strategy.name, the best single agent chosen on dev questions,
    # the centralized bound, and the lone agent reasoning with programs
    levels = [METHODS[0], "best-single", "centralized", METHODS[1], "single-agent-program",
              *METHODS[2:]]
    assert list(runs) == levels
    # best-single: the chosen configuration, one member of the 8-client federation answering;
    # centralized: the same agent alone with the pooled data (one client)
    for m, n in (("best-single", 8), ("centralized", 1)):
        assert "'agent.profiles=[plain]'" in runs[m].overrides, m
        assert "agent.reasoning=program" in runs[m].overrides
        assert "strategy.name=single-agent" in runs[m].overrides and runs[m].num_clients == n
    # test questions 100-129, never the development questions the choice was made on
    assert "data.eval_offset=100" in runs["pfedma"].overrides
    assert "data.queries_per_benchmark=30" in runs["pfedma"].overrides
    # PFedMA with issue 33's sources of difference (the sources preset's full level), the
    # baselines without them
    for item in ("agent.few_shot=2", "agent.few_shot_style=cases", "data.partition=profile",
                 "agent.reasoning=profile", "agent.option_reasoning=profile",
                 "agent.permute_options=true", "agent.lessons=1", "routing.lone_answers=prior"):
        assert item in runs["pfedma"].overrides, item
        assert item not in runs["kabb"].overrides, item
    # the centralized bound retrieves from the pooled data as the clients do from theirs
    for item in ("agent.few_shot=2", "agent.few_shot_style=cases", "agent.few_shot_scope=query"):
        assert item in runs["centralized"].overrides, item
    for m in METHODS[1:]:
        assert f"strategy.name={m}" in runs[m].overrides
    prog = runs["single-agent-program"]
    assert prog.num_clients == 1 and "agent.reasoning=program" in prog.overrides
    assert "strategy.name=single-agent" in prog.overrides
    # the same agent pool and round budget for every method but the lone agents
    assert {runs[m].num_clients for m in METHODS if m != "single-agent"} == {8}
    assert runs["best-single"].num_clients == 8
    # the single agent: one client whatever the size's N, one round, no filter, no rules, greedy
    assert runs["pfedma"].num_clients == 8 and runs["single-agent"].num_clients == 1
    single = runs["single-agent"].overrides
    for item in ("strategy.t_max=1", "anomaly.ablation=-all", "rules.mode=NR",
                 "agent.backend.temperature=0.0", "'agent.profiles=[generalist]'"):
        assert item in single, (item, single)
    assert "num_clients" not in single  # reserved level key, not a config override
    # the CLI's --num-clients does not turn the single agent into a federation
    again = {v.labels["method"]: vr[0] for v, vr in plan(preset, "small", tmp_path, num_clients=5,
                                                          choices_dir=choices)}
    assert again["single-agent"].num_clients == 1 and again["pfedma"].num_clients == 5
    # at tiny size all eleven run, on the same questions, with a method column in results.csv
    result = run_experiment("main", size="tiny", output_dir=tmp_path / "tiny",
                            executor=fakegrid_executor)
    rows = _read_csv(tmp_path / "tiny" / "results.csv")
    assert [r["method"] for r in rows] == levels
    assert all(r["ACC"] not in ("", "nan") for r in rows)
    import json

    qs = [{json.loads(ln)["query_id"] for ln in (tmp_path / "tiny" / "runs" / r["variant"] /
                                                   "queries.jsonl").read_text().splitlines()}
          for r in result["rows"]]
    assert all(q == qs[0] for q in qs) and len(qs[0]) == 18  # the same 6 x 3 questions
    by = {r["labels"]["method"]: r["metrics"] for r in result["rows"]}
    assert by["single-agent"]["rounds"] == 1.0  # T_max 1
    # one-round methods by design; the others stay within T_max = 2
    assert by["epeagents"]["rounds"] == by["kabb"]["rounds"] == 1.0
    assert all(1.0 <= by[m]["rounds"] <= 2.0 for m in METHODS)


def test_only_selects_variants_by_axis_level_and_names_bad_input(tmp_path: Path):
    from pfedma_flwr.experiments.runner import select_variants

    variants = load_preset("robustness").variants()
    picked = select_variants(variants, {"rho": ["0.4"]})
    assert [v.labels["method"] for v in picked] == ["pfedma", "-all", *METHODS[1:]]
    assert {v.labels["rho"] for v in picked} == {"0.4"}
    assert len(select_variants(variants, {"rho": ["0.0", "0.4"], "method": ["-all"]})) == 2
    with pytest.raises(ValueError, match="no level \\['0.5'\\]"):
        select_variants(variants, {"rho": ["0.5"]})
    with pytest.raises(ValueError, match="no axis 'alpha'"):
        select_variants(variants, {"alpha": ["1"]})
    result = run_experiment("robustness", size="tiny", output_dir=tmp_path,
                            executor=fakegrid_executor,
                            only={"rho": ["0.4"], "method": ["pfedma", "kabb"]})
    assert [r["variant"] for r in result["rows"]] == ["method=pfedma_rho=0.4",
                                                      "method=kabb_rho=0.4"]


def test_det_and_fpr_count_only_responses_the_filter_scored(tmp_path: Path):
    from pfedma_flwr.agents import hooks as adv
    from pfedma_flwr.experiments.analysis import RunData, robustness

    cfg = load_config({"config-name": "tiny", "overrides": "adversary.kind=unreliable "
                       "adversary.ratio=0.4"})
    bad = {f"partition-{i}" for i in adv.malicious_clients("q1", 5, 0.4, cfg.adversary.seed)}
    good = sorted({f"partition-{i}" for i in range(5)} - bad)
    m1, m2 = sorted(bad)
    anomaly = {m1: {"retained": False, "reason": "above_tolerance"},   # detected
               m2: {"retained": False, "reason": "unparsed"},          # never scored
               good[0]: {"retained": False, "reason": "above_tolerance"},  # false positive
               good[1]: {"retained": True, "reason": "retained"},
               good[2]: {"retained": False, "reason": "unparsed"}}
    run = RunData(out_dir=tmp_path, cfg=cfg, summary={"num_clients": 5},
                  queries=[{"query_id": "q1", "selections": [[m1, good[0]]]}],
                  rounds=[{"queries": [{"query_id": "q1", "anomaly": anomaly}]}])
    out = robustness(run)
    # det = 1 of the 1 scored malicious response; fpr = 1 of the 2 scored benign ones
    assert (out["det"], out["fpr"], out["exposure"]) == (1.0, 0.5, 1.0)
