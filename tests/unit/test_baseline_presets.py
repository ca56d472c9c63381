"""Preset ``exclude`` rules: how the baselines join a sweep only where a table needs them."""

from __future__ import annotations

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
