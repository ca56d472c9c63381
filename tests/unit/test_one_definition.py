r"""One definition per concept: answer kinds, rule modes, the ``\boxed{}`` parser, atomic writes.

Each concept has one definition; the other places that name it import or derive it, and these
tests fail if a copy reappears or drifts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pfedma_flwr.answers import ANSWER_KINDS, AnswerKind, canonical_answer, last_boxed
from pfedma_flwr.rules.modes import RULE_MODES, RuleMode

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ answer kinds


def test_answer_kind_is_a_str_enum_whose_values_are_answer_kinds():
    assert ANSWER_KINDS == ("number", "option", "math", "text", "action", "response")
    assert AnswerKind.OPTION == "option" and f"{AnswerKind.MATH}" == "math"
    assert AnswerKind("text") is AnswerKind.TEXT


def test_every_module_uses_the_one_answer_kinds_tuple():
    from pfedma_flwr.agents import prompting, reasoning
    from pfedma_flwr.data import benchmarks
    from pfedma_flwr.protocol import schema

    for mod in (schema, prompting, reasoning, benchmarks):
        assert mod.ANSWER_KINDS is ANSWER_KINDS, mod.__name__


def test_no_module_spells_the_kinds_out_again():
    literal = re.compile(r"""\(\s*["']number["']\s*,\s*["']option["']""")
    copies = [str(p.relative_to(ROOT)) for p in (ROOT / "pfedma_flwr").rglob("*.py")
              if literal.search(p.read_text(encoding="utf-8"))]
    assert copies == []


# ------------------------------------------------------------------ \boxed{}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces are balanced
        (r"\boxed{a} then \boxed{b}", "b"),  # the last box
        (r"\boxed{1 + \boxed{2}}", r"1 + \boxed{2}"),  # a box inside the last box is content
        (r"\boxed{\boxed{5}}", "5"),  # a box that is all box is unwrapped
        (r"\fbox{7}", "7"),  # \fbox counts
        (r"\boxed {B}", "B"),  # a space before the brace
        (r"\boxed{ 4 }", "4"),  # content stripped
        (r"\boxed{12} and \boxed{3", "12"),  # a cut-off box: the last complete one
        (r"\boxedx", None),  # not a box
        ("no box", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_bench_math_and_reasoning_use_the_one_parser():
    from pfedma_flwr.agents import reasoning
    from pfedma_flwr.data import bench_math

    assert bench_math.last_boxed is last_boxed
    assert reasoning.last_boxed is last_boxed


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        # the answers call sites' cases before the merge
        (r"\boxed{3.0}", "number", "3"),
        (r"\boxed{D}", "option", "D"),
        (r"The answer is $\boxed{\dfrac{3}{4}}$", "math", "3/4"),
        # where the old parser (last "\boxed{" start) read differently
        (r"\boxed{12} then \boxed{3", "number", "12"),  # was "3": the cut-off box's digit
        (r"\boxed {B}", "option", "B"),  # was "boxed b": the box went unseen
    ],
)
def test_canonical_answer_reads_boxes(text, kind, expected):
    assert canonical_answer(text, kind) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the reasoning call site's case before the merge
        (r"\boxed{42}", ("42", True)),
        # the old reasoning parser saw neither \fbox nor a box after a cut-off one: both fell
        # back to the text's last number, not explicit
        (r"Thus \fbox{7}.", ("7", True)),
        (r"So \boxed{12}. Next \boxed{3", ("12", True)),
    ],
)
def test_reasoning_extract_answer_reads_boxes(text, expected):
    from pfedma_flwr.agents.reasoning import extract_answer

    assert extract_answer(text, "number") == expected


# ------------------------------------------------------------------ rule modes


def test_rule_modes_are_the_enum_config_names():
    assert RULE_MODES == ("full", "NR", "SR", "LE", "G2L", "L2G")
    assert [RuleMode.parse(n) for n in RULE_MODES] == list(RuleMode)
    # the persisted values stay lower case (client state files written before)
    assert [m.value for m in RuleMode] == ["full", "nr", "sr", "le", "g2l", "l2g"]


def test_rule_mode_parse_is_exact_and_names_the_choices():
    with pytest.raises(ValueError, match=r"'nr'.*available: \['full', 'NR'"):
        RuleMode.parse("nr")


def test_rule_mode_rank_orders_enforcement():
    rank = {m.config_name: m.rank for m in RuleMode}
    assert rank == {"NR": 0, "SR": 1, "LE": 2, "G2L": 2, "L2G": 2, "full": 3}


def test_config_node_policy_engine_and_agent_agree_with_the_enum():
    from pfedma_flwr import config
    from pfedma_flwr.client import node_security
    from pfedma_flwr.client.agent import parse_rule_mode
    from pfedma_flwr.rules.server import server_flow

    assert config.RULE_MODES is RULE_MODES
    assert node_security.RULE_MODE_RANK == {m.config_name: m.rank for m in RuleMode}
    assert set(server_flow.PROMOTE_MODES) == {m.config_name for m in RuleMode if m.upload}
    assert set(server_flow.REDISTRIBUTE_MODES) == {m.config_name for m in RuleMode if m.adopt}
    assert [parse_rule_mode(n) for n in RULE_MODES] == list(RuleMode)


def test_presets_name_only_known_rule_modes():
    named = {m for p in (ROOT / "conf").rglob("*.yaml")
             for m in re.findall(r"rules\.mode:\s*([\w-]+)", p.read_text(encoding="utf-8"))}
    assert named and named <= set(RULE_MODES)


# ------------------------------------------------------------------ the atomic writer


def test_results_and_state_store_share_the_one_writer():
    from pfedma_flwr import persistence
    from pfedma_flwr.server import report, results

    assert results.write_text_atomic is persistence.write_text_atomic
    assert report.write_text_atomic is persistence.write_text_atomic


def _record_fsyncs(monkeypatch) -> list[str]:
    """Patch os.fsync in persistence to log what each synced fd is (file or directory)."""
    import os
    import stat

    from pfedma_flwr import persistence

    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(persistence.os, "fsync", fsync)
    return synced


def test_checkpoint_json_is_fsynced_file_then_directory(tmp_path, monkeypatch):
    import json
    import stat

    from pfedma_flwr.server.results import ResultsWriter

    writer = ResultsWriter(tmp_path / "run")
    synced = _record_fsyncs(monkeypatch)
    writer.checkpoint({"round": 3})
    # the data before the rename, the directory entry after it
    assert synced == ["file", "dir"]
    path = tmp_path / "run" / "checkpoint.json"
    assert json.loads(path.read_text()) == {"round": 3}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_state_store_save_is_fsynced_file_then_directory(tmp_path, monkeypatch):
    from pfedma_flwr.persistence import StateStore

    synced = _record_fsyncs(monkeypatch)
    StateStore(tmp_path / "state").save("client-1", {"n": 1})
    assert synced == ["file", "dir"]


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    from pfedma_flwr import persistence

    target = tmp_path / "checkpoint.json"
    persistence.write_text_atomic(target, "old")

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(persistence.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        persistence.write_text_atomic(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json"]
