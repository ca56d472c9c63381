"""Preset ``exclude`` rules (the baselines join a sweep only where a table needs them) and the
clean-twin metrics BP and PNA (``undefended``)."""

from __future__ import annotations

import math

import pytest

from pfedma_flwr.experiments.presets import parse_preset


def _preset(exclude):
    return parse_preset("p", {"axes": {"method": {"a": {}, "b": {"strategy.name": "kabb"}},
                                       "rho": {"0": {}, "1": {}, "2": {}}},
                              "exclude": exclude})


def test_exclude_drops_the_combinations_it_names_only():
    p = _preset([{"method": ["b"], "rho": ["1", "2"]}])
    assert [v.name for v in p.variants()] == ["method=a_rho=0", "method=a_rho=1",
                                              "method=a_rho=2", "method=b_rho=0"]
    # a rule naming one axis drops every level of the others with it; a scalar is one level
    assert [v.name for v in _preset([{"rho": "0"}]).variants()] == [
        "method=a_rho=1", "method=a_rho=2", "method=b_rho=1", "method=b_rho=2"]
    assert len(_preset(None).variants()) == 6


@pytest.mark.parametrize(("exclude", "match"), [
    ([{"alpha": ["1"]}], r"exclude\[0\] names no axis 'alpha'; axes: \['method', 'rho'\]"),
    ([{"rho": ["0.5"]}], r"exclude\[0\]: axis 'rho' has no level \['0.5'\]"),
    ({"rho": ["0"]}, "exclude must be a list of mappings"),
    (["rho"], r"p.exclude\[0\] must be a mapping"),
])
def test_exclude_names_what_is_wrong(exclude, match):
    with pytest.raises(ValueError, match=match):
        _preset(exclude)


# ------------------------------------------------------------------ BP and PNA (App. H)

def _rows_and_runs(accs: dict[tuple[str, str], float]):
    from pathlib import Path

    from pfedma_flwr.config import PFedMAConfig
    from pfedma_flwr.experiments.analysis import RunData

    rows, runs = [], {}
    for (method, rho), acc in accs.items():
        cfg = PFedMAConfig()
        cfg.adversary.ratio = float(rho)
        cfg.adversary.kind = "injection"
        name = f"method={method}_rho={rho}"
        runs[name] = RunData(out_dir=Path("."), cfg=cfg, summary={}, queries=[])
        rows.append({"variant": name, "labels": {"method": method, "rho": rho},
                     "metrics": {"ACC": acc, "ASR": 0.25 if rho != "0" else float("nan")}})
    return rows, runs


def test_bp_is_the_defended_clean_acc_and_pna_the_undefended_one():
    from pfedma_flwr.experiments.analysis import add_clean_twin_metrics

    rows, runs = _rows_and_runs({("a", "0"): 0.8, ("a", "1"): 0.6, ("off", "0"): 0.9,
                                 ("off", "1"): 0.3, ("b", "0"): 0.7, ("b", "1"): 0.5})
    add_clean_twin_metrics(rows, runs, undefended={"method": {"a": "off"}})
    m = {r["variant"]: r["metrics"] for r in rows}
    # a: defences on 0.8 clean (BP), off 0.9 clean (PNA); NRP = 100 * 0.9 * (1 - 0.25)
    assert m["method=a_rho=1"]["BP"] == 0.8 and m["method=a_rho=1"]["PNA"] == 0.9
    assert m["method=a_rho=1"]["NRP"] == 100 * 0.9 * 0.75
    assert m["method=a_rho=0"]["BP"] == 0.8 and m["method=a_rho=0"]["PNA"] == 0.9
    # the undefended level itself and a method without a mapping: PNA = BP
    assert m["method=off_rho=1"]["PNA"] == m["method=off_rho=1"]["BP"] == 0.9
    assert m["method=b_rho=1"]["PNA"] == m["method=b_rho=1"]["BP"] == 0.7
    assert m["method=b_rho=1"]["NRP"] == 100 * 0.7 * 0.75
    # the undefended clean run left out (--only): PNA unknown, not silently BP
    rows, runs = _rows_and_runs({("a", "0"): 0.8, ("a", "1"): 0.6})
    add_clean_twin_metrics(rows, runs, undefended={"method": {"a": "off"}})
    assert rows[1]["metrics"]["BP"] == 0.8 and math.isnan(rows[1]["metrics"]["PNA"])


def test_unreliable_asr_is_decided_against_the_clean_twin_per_query_with_its_interval():
    from pathlib import Path

    from pfedma_flwr.config import PFedMAConfig
    from pfedma_flwr.experiments import stats
    from pfedma_flwr.experiments.analysis import RunData, add_clean_twin_metrics
    from pfedma_flwr.experiments.compare import add_rate_comparisons

    def run(ratio: float, right: list[bool]) -> RunData:
        cfg = PFedMAConfig()
        cfg.adversary.ratio, cfg.adversary.kind = ratio, "collusion"
        queries = [{"query_id": f"q{i}", "benchmark": "gsm8k", "correct": ok}
                   for i, ok in enumerate(right)]
        return RunData(out_dir=Path("."), cfg=cfg, summary={}, queries=queries)

    # clean right on q0, q1, q3; attacked wrong on q0, q2, q3: the attack won q0 and q3 (q2 was
    # lost without it), so ASR = 2/4; the filter-off level lost q1 too: 3/4
    runs = {"m=a_rho=0": run(0.0, [True, True, False, True]),
            "m=a_rho=1": run(0.4, [False, True, False, False]),
            "m=off_rho=0": run(0.0, [True, True, False, True]),
            "m=off_rho=1": run(0.4, [False, False, False, False])}
    rows = [{"variant": v, "labels": {"m": v[2:].split("_")[0], "rho": v[-1]},
             "metrics": {"ACC": 0.5}} for v in runs]
    won = add_clean_twin_metrics(rows, runs)
    assert won == {"m=a_rho=1": {"q0": ("gsm8k", True), "q1": ("gsm8k", False),
                                 "q2": ("gsm8k", False), "q3": ("gsm8k", True)},
                   "m=off_rho=1": {"q0": ("gsm8k", True), "q1": ("gsm8k", True),
                                   "q2": ("gsm8k", False), "q3": ("gsm8k", True)}}
    m = {r["variant"]: r["metrics"] for r in rows}
    assert m["m=a_rho=1"]["ASR"] == 0.5 and m["m=off_rho=1"]["ASR"] == 0.75
    rates = {v: {q: (b, float(ok)) for q, (b, ok) in w.items()} for v, w in won.items()}
    add_rate_comparisons(rows, rates, {"m": "a"}, {}, "ASR")
    assert (m["m=a_rho=1"]["ASR_lo"], m["m=a_rho=1"]["ASR_hi"]) == pytest.approx(
        stats.wilson_interval(2, 4))
    # +1/4 against the reference on the same queries, discordant 1:0 -> exact p = 1
    assert m["m=off_rho=1"]["dASR"] == pytest.approx(0.25)
    assert m["m=off_rho=1"]["p_ASR"] == pytest.approx(1.0)
    assert "ASR_lo" not in m["m=a_rho=0"]


def test_undefended_must_name_the_presets_axes_and_levels():
    axes = {"method": {"a": {}, "off": {}}, "rho": {"0": {}}}
    p = parse_preset("p", {"axes": axes, "undefended": {"method": {"a": "off"}}})
    assert p.undefended == {"method": {"a": "off"}}
    with pytest.raises(ValueError, match=r"undefended names axis 'alpha'"):
        parse_preset("p", {"axes": axes, "undefended": {"alpha": {"a": "off"}}})
    with pytest.raises(ValueError, match=r"undefended.method names levels \['nope'\]"):
        parse_preset("p", {"axes": axes, "undefended": {"method": {"a": "nope"}}})


def test_robustness_and_anomaly_presets_map_pfedma_to_its_filter_off_level():
    from pfedma_flwr.experiments.presets import load_preset

    assert load_preset("robustness").undefended == {"method": {"pfedma": "-all"}}
    ab = load_preset("anomaly_ablation").undefended["ablation"]
    assert set(ab) == {"full", "-intent", "-evidence", "-consensus"}
    assert set(ab.values()) == {"-all"}
    assert "BP" in load_preset("robustness").columns
