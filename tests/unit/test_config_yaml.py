"""``conf/pfedma.yaml`` is generated from the typed configuration (issue 31 item 1).

A default is written once, in ``pfedma_flwr/config_schema.py``; the YAML, the engine settings
and the client agent's constructor follow it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from pfedma_flwr import config_schema
from pfedma_flwr.config import CONF_DIR, PFedMAConfig, schema
from pfedma_flwr.config_yaml import field_comments, main, render


def test_the_committed_yaml_is_the_generated_one():
    committed = (CONF_DIR / "pfedma.yaml").read_text(encoding="utf-8")
    assert committed == render(), ("conf/pfedma.yaml is stale: "
                                   "python3 -m pfedma_flwr.config_yaml --write")


def test_the_generated_yaml_loads_back_to_every_default():
    data = yaml.safe_load(render())
    loaded = OmegaConf.to_object(OmegaConf.merge(schema(), data))
    assert loaded == PFedMAConfig()


def test_every_key_is_in_the_yaml_and_has_a_comment():
    """Each field of each section is listed, under its own comment or its group's."""
    data = yaml.safe_load(render())
    cfg = PFedMAConfig()
    for section in dataclasses.fields(cfg):
        value = getattr(cfg, section.name)
        if not dataclasses.is_dataclass(value):
            assert section.name in data
            continue
        names = [f.name for f in dataclasses.fields(value)]
        assert set(names) == set(data[section.name]), section.name
        comments = field_comments(type(value))
        # a field without a comment of its own shares the one above an earlier field
        assert names[0] in comments, f"{section.name}.{names[0]} has no comment"


def test_field_comments_are_the_lines_directly_above_a_field():
    comments = field_comments(config_schema.StrategyConfig)
    assert comments["k_max"] == ("maximum clients selected per query round (K_max)",)
    assert comments["min_nodes"][0].startswith("connected nodes required")
    assert "node_wait_timeout" not in comments  # shares min_nodes' comment
    assert "aggregator_options" not in comments


def test_a_changed_default_is_one_edit_that_the_yaml_and_loader_follow(tmp_path, monkeypatch):
    """Edit one default in a copy of the schema: the rendered YAML carries it with its comment."""
    source = Path(config_schema.__file__).read_text(encoding="utf-8")
    edited = source.replace("    k_max: int = 2\n", "    k_max: int = 5\n", 1)
    assert edited != source
    path = tmp_path / "edited_schema.py"
    path.write_text(edited, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("edited_schema", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "edited_schema", module)
    spec.loader.exec_module(module)
    text = render(module.PFedMAConfig())
    lines = text.splitlines()
    at = lines.index("  k_max: 5")
    assert lines[at - 1] == "  # maximum clients selected per query round (K_max)"
    assert yaml.safe_load(text)["strategy"]["k_max"] == 5
    # everything else is as before: the one edit changed one line
    diff = [(a, b) for a, b in zip(render().splitlines(), lines, strict=True) if a != b]
    assert diff == [("  k_max: 2", "  k_max: 5")]


def test_check_fails_on_a_stale_file_and_write_fixes_it(tmp_path, capsys):
    stale = tmp_path / "pfedma.yaml"
    stale.write_text(render().replace("t_max: 2", "t_max: 3"), encoding="utf-8")
    assert main(["--check", "--path", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err
    assert main(["--write", "--path", str(stale)]) == 0
    assert main(["--check", "--path", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == render()


def test_backend_sections_other_than_the_agent_s_list_only_what_differs():
    data = yaml.safe_load(render())
    assert data["routing"]["llm_backend"] == {"max_tokens": 256}
    assert data["anomaly"]["judge_backend"] == {"max_tokens": 64}
    full = {f.name for f in dataclasses.fields(config_schema.BackendConfig)}
    assert set(data["agent"]["backend"]) == full
