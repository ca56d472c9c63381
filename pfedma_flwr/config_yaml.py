"""``conf/pfedma.yaml``, generated from the typed configuration (issue 31 item 1).

Each default and its comment is written once, in :mod:`pfedma_flwr.config_schema`. This module
renders those dataclasses as the main job's YAML: a section per dataclass (its docstring's first
line above it), every key at its default with the comment lines written directly above its field.
Backend sections other than ``agent.backend`` list only the keys that differ from
a backend section's defaults (``agent.backend`` lists them all).

``python3 -m pfedma_flwr.config_yaml --write`` rewrites the file, ``--check`` exits 1 when it is
stale; ``tests/unit/test_config_yaml.py`` runs the check.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
import textwrap
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from pfedma_flwr.config_schema import PFedMAConfig

HEADER = (
    "# Default PFedMA run: a real federation on the embedded 1.5B model (CPU, 8 clients, 20\n"
    "# questions). Every key is optional and at its default here.\n"
    "# GENERATED from pfedma_flwr/config_schema.py: edit a default or comment there, then run\n"
    "#   python3 -m pfedma_flwr.config_yaml --write\n"
    "# (tests/unit/test_config_yaml.py fails until this file follows).\n"
)
# the one backend section shown with every key; the others show what differs from BackendConfig
FULL_BACKEND = "agent.backend"


def field_comments(cls: type) -> dict[str, tuple[str, ...]]:
    """Field name -> the comment lines written directly above it in ``cls``'s source.

    A comment shared by consecutive fields (written above the first) belongs to the first.
    """
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    tree = ast.parse(source)
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    out: dict[str, tuple[str, ...]] = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above: list[str] = []
        i = stmt.lineno - 2  # 0-based index of the line above the field
        while i >= 0 and lines[i].strip().startswith("#"):
            above.append(lines[i].strip()[1:].strip())
            i -= 1
        if above:
            out[stmt.target.id] = tuple(reversed(above))
    return out


def _heading(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    first = doc.splitlines()[0] if doc else ""
    return re.sub(r":\w+:`~?([^`]*)`", r"\1", first).replace("``", "")


def _scalar(value: Any) -> str:
    if isinstance(value, dict) and not value:
        return "{}"
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False)
    return text.strip().removesuffix("...").strip()


def _emit(obj: Any, path: str, depth: int, out: list[str], backend: type) -> None:
    pad = "  " * depth
    comments = field_comments(type(obj))
    reference = backend() if (isinstance(obj, backend) and path != FULL_BACKEND) else None
    if reference is not None:
        out.append(f"{pad}# only what differs from a backend section's defaults ({FULL_BACKEND} "
                   "lists every key)")
    for f in fields(obj):
        value = getattr(obj, f.name)
        if reference is not None and value == getattr(reference, f.name):
            continue
        lines = comments.get(f.name, ())
        if not lines and depth == 0 and is_dataclass(value):
            lines = (_heading(type(value)),)
        if depth == 0 and out:
            out.append("")
        out.extend(f"{pad}# {c}".rstrip() for c in lines)
        key = f"{path}.{f.name}" if path else f.name
        if is_dataclass(value):
            out.append(f"{pad}{f.name}:")
            _emit(value, key, depth + 1, out, backend)
        else:
            out.append(f"{pad}{f.name}: {_scalar(value)}")


def render(cfg: PFedMAConfig | None = None) -> str:
    """The YAML of ``cfg`` (default: every default) with its schema comments."""
    cfg = cfg if cfg is not None else PFedMAConfig()
    out: list[str] = []
    # the backend section's class of cfg's own schema (a copy of the schema has its own)
    _emit(cfg, "", 0, out, type(cfg.agent.backend))
    return HEADER + "\n" + "\n".join(out) + "\n"


def default_path() -> Path:
    """Where the main job's YAML lives (the repository's conf/ or the wheel's copy)."""
    from pfedma_flwr.resources import conf_dir

    return conf_dir() / "pfedma.yaml"


def main(argv: list[str] | None = None) -> int:
    """``--write`` the YAML, ``--check`` it (exit 1 when stale), or print it."""
    ap = argparse.ArgumentParser(prog="python3 -m pfedma_flwr.config_yaml",
                                 description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--path", type=Path, default=None,
                    help="the YAML file (default: conf/pfedma.yaml)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the file")
    mode.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = ap.parse_args(argv)
    path = args.path or default_path()
    text = render()
    if args.write:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            print(f"{path} is stale: run python3 -m pfedma_flwr.config_yaml --write",
                  file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
