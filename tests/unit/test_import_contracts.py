"""Import contracts: which modules may load Flower, the harness, or the client's private store.

Two kinds of check. A subprocess imports a module in a fresh interpreter and looks at
``sys.modules`` (what really loads, package ``__init__`` files included). A static scan parses
every module of ``pfedma_flwr/``, ``strategies/`` and ``client_apps/`` with :mod:`ast` and
follows its imports (function-local ones and ``importlib.import_module("literal")`` too, which a
runtime check of the module alone would miss), so a lazy import cannot hide a dependency.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("pfedma_flwr", "strategies", "client_apps")

# The layers (README "Layout", docs/extending.md "Where code goes").
SERVER = ("pfedma_flwr.server",)
CLIENT = ("pfedma_flwr.client",)
# Shared mechanisms and foundations: used by both sides, so they import neither side, no shell
# and not the harness.
SHARED = (
    "pfedma_flwr.protocol", "pfedma_flwr.routing", "pfedma_flwr.anomaly",
    "pfedma_flwr.aggregation", "pfedma_flwr.rules", "pfedma_flwr.agents", "pfedma_flwr.data",
    "pfedma_flwr.answers", "pfedma_flwr.config", "pfedma_flwr.config_checks",
    "pfedma_flwr.config_schema", "pfedma_flwr.config_yaml",
    "pfedma_flwr.embeddings", "pfedma_flwr.equations", "pfedma_flwr.logs",
    "pfedma_flwr.persistence", "pfedma_flwr.registry",
    "pfedma_flwr.resources", "pfedma_flwr.judging", "pfedma_flwr.run_config", "pfedma_flwr.text",
)
SHELLS = ("pfedma_flwr.server_app", "strategies", "client_apps")
# The top level of pfedma_flwr/: a new flat module needs a decision about its layer here.
TOP_LEVEL = {
    "__init__", "__main__", "_app", "agents", "aggregation", "anomaly", "answers", "baselines",
    "cli", "client", "config", "config_checks", "config_schema", "config_yaml", "data", "embeddings", "equations",
    "experiments", "judging", "logs", "persistence", "protocol", "registry", "resources",
    "routing", "rules", "run_config", "server", "server_app", "testing", "text", "training",
}
# Server side: the engine and everything the ServerApp builds it from.
SERVER_ROOTS = (
    "pfedma_flwr.server.engine",
    "pfedma_flwr.server.components",
    "pfedma_flwr.server_app",
    "pfedma_flwr.server.query_state",
    "pfedma_flwr.server.results",
    "pfedma_flwr.server.progress",
)
# The client's private rule store and the agent holding it: never loaded by the server.
# The folder is the boundary (issue 31 item 6): everything under rules/client/.
CLIENT_PRIVATE = (
    "pfedma_flwr.rules.client",
    "pfedma_flwr.client",
    "client_apps",
)
# The server's rule repository, promotion and Resolve: never loaded by the client side.
SERVER_RULES = ("pfedma_flwr.rules.server",)
# Modules that may import Flower (flwr, flwr_datasets): the codec, the ServerApp, the
# in-process test grid, the flwr-datasets partitioners, the Strategy and ClientApp shells,
# and the harness.
FLOWER_ALLOWED = (
    "pfedma_flwr.protocol.codec",
    "pfedma_flwr.server_app",
    "pfedma_flwr.testing",
    "pfedma_flwr.data.partition",
    "pfedma_flwr.experiments",
    "strategies",
    "client_apps",
)
# Single Flower imports allowed elsewhere: logs.configure_logging sets the level of Flower's
# own console handler (a function-local import, run only in processes Flower started).
FLOWER_ALLOWED_IMPORTS = {("pfedma_flwr.logs", "flwr.common.logger"),
                          ("pfedma_flwr.logs", "flwr.common.logger.update_console_handler")}
# Modules that may import the experiment harness: itself and the ``pfedma`` command.
HARNESS_ALLOWED = ("pfedma_flwr.experiments", "pfedma_flwr.cli")


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for top in SCANNED for p in sorted((ROOT / top).rglob("*.py"))}


def _raw_imports(name: str, path: Path) -> set[str]:
    """Every dotted name ``path`` imports, ``from a import b`` giving both ``a`` and ``a.b``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"):
            out.add(node.args[0].value)
    return out


def _graph() -> dict[str, set[str]]:
    """Module → the scanned modules it loads: import targets and their parent packages."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for target in _raw_imports(name, path):
            parts = target.split(".")
            for k in range(1, len(parts) + 1):
                if ".".join(parts[:k]) in mods:
                    deps.add(".".join(parts[:k]))
        # a module also runs its parent packages' __init__
        parts = name.split(".")
        deps.update(".".join(parts[:k]) for k in range(1, len(parts)) if ".".join(parts[:k]) in mods)
        graph[name] = deps - {name}
    return graph


def _closure(graph: dict[str, set[str]], root: str) -> set[str]:
    seen, todo = {root}, [root]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _loaded_after_import(*modules: str) -> set[str]:
    code = ("import importlib, json, sys\n"
            f"for m in {list(modules)!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


# ------------------------------------------------------------------ the scanner itself


def test_scanner_sees_function_local_relative_and_importlib_imports(tmp_path):
    src = tmp_path / "pkg" / "sub" / "mod.py"
    src.parent.mkdir(parents=True)
    src.write_text(
        "import os.path\n"
        "from . import sibling\n"
        "from ..other import thing\n"
        "def f():\n"
        "    from flwr.app import Message\n"
        "    return importlib.import_module('pfedma_flwr.agents.backends.simulated')\n",
        encoding="utf-8",
    )
    got = _raw_imports("pkg.sub.mod", src)
    assert {"os.path", "pkg.sub", "pkg.sub.sibling", "pkg.other", "pkg.other.thing",
            "flwr.app", "flwr.app.Message", "pfedma_flwr.agents.backends.simulated"} <= got


def test_graph_follows_parent_packages():
    g = _graph()
    # importing rules.server.global_repo runs rules/__init__ and rules/server/__init__ first
    assert {"pfedma_flwr.rules", "pfedma_flwr.rules.server"} <= \
        g["pfedma_flwr.rules.server.global_repo"]
    # "from pfedma_flwr.x import Name" depends on the module x, not on a module "x.Name"
    assert "pfedma_flwr.protocol.wire" in g["pfedma_flwr.protocol.codec"]
    assert "pfedma_flwr.rules.server.global_repo" in _closure(g, "pfedma_flwr.server.engine")


# ------------------------------------------------------------------ Flower


def test_engine_and_client_agent_import_without_flower():
    loaded = _loaded_after_import("pfedma_flwr.server.engine", "pfedma_flwr.client.agent",
                                  "pfedma_flwr.protocol.wire")
    assert "pfedma_flwr.server.engine" in loaded and "pfedma_flwr.client.agent" in loaded
    assert not {m for m in loaded if m == "flwr" or m.startswith("flwr.")}


def test_protocol_reexports_the_wire_types():
    from pfedma_flwr.protocol import codec as protocol
    from pfedma_flwr.protocol import wire

    for name in ("ClientDescription", "IDENTITY_MODES", "assign_client_keys", "node_client_key"):
        assert getattr(protocol, name) is getattr(wire, name)


def test_only_the_shells_codec_and_harness_import_flower():
    offenders = sorted(
        (name, target)
        for name, path in _modules().items() if not _under(name, FLOWER_ALLOWED)
        for target in _raw_imports(name, path)
        if _under(target, ("flwr", "flwr_datasets"))
        and (name, target) not in FLOWER_ALLOWED_IMPORTS
    )
    assert offenders == []


# ------------------------------------------------------------------ the harness


def test_nothing_outside_the_harness_imports_it():
    g = _graph()
    found = {(name, dep) for name, deps in g.items() if not _under(name, HARNESS_ALLOWED)
             for dep in deps if _under(dep, ("pfedma_flwr.experiments",))}
    assert found == set()


def test_the_launcher_is_the_harness_bottom_layer():
    # the runner starts variants through launch.run; launch never reaches presets, runner,
    # analysis or plots (it was the other way round before the layout: launch.py and
    # experiments/ imported each other through function-local imports)
    g = _graph()
    assert "pfedma_flwr.experiments.launch" in _closure(g, "pfedma_flwr.experiments.runner")
    # the package __init__ is what `import pfedma_flwr.experiments.launch` runs first; its
    # own edges are the package's public names, not the launcher's
    bottom = [f"pfedma_flwr.experiments.{m}"
              for m in ("launch", "outcome", "preflight", "processes", "tracking")]
    for m in bottom:
        g[m] -= {"pfedma_flwr.experiments"}
    reached = _closure(g, "pfedma_flwr.experiments.launch")
    assert sorted(m for m in reached if _under(m, ("pfedma_flwr.experiments",))) == bottom


# ------------------------------------------------------------------ the layers


def test_top_level_holds_only_the_layers_and_foundations():
    top = {p.stem if p.is_file() else p.name for p in (ROOT / "pfedma_flwr").iterdir()
           if (p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__"))}
    assert top == TOP_LEVEL


def test_server_and_client_never_import_each_other():
    g = _graph()
    server = {m: sorted(d for d in _closure(g, m) if _under(d, CLIENT))
              for m in g if _under(m, SERVER)}
    client = {m: sorted(d for d in _closure(g, m) if _under(d, SERVER))
              for m in g if _under(m, CLIENT)}
    assert len(server) >= 6 and len(client) >= 5
    assert server == {m: [] for m in server}
    assert client == {m: [] for m in client}


def test_shared_mechanisms_import_neither_side_nor_shells_nor_harness():
    g = _graph()
    banned = SERVER + CLIENT + SHELLS + ("pfedma_flwr.experiments", "pfedma_flwr.cli",
                                         "pfedma_flwr.baselines", "pfedma_flwr.training")
    shared = [m for m in g if _under(m, SHARED)]
    reached = {m: sorted(d for d in _closure(g, m) if _under(d, banned)) for m in shared}
    assert len(shared) > 60
    assert reached == {m: [] for m in shared}


# ------------------------------------------------------------------ the privacy boundary


def test_server_modules_never_reach_the_client_rule_store_statically():
    g = _graph()
    strategies = tuple(m for m in g if _under(m, ("strategies",)))
    reached = {root: sorted(m for m in _closure(g, root) if _under(m, CLIENT_PRIVATE))
               for root in SERVER_ROOTS + strategies}
    assert strategies, "no strategies module scanned"
    assert reached == {root: [] for root in reached}


def test_server_modules_never_load_the_client_rule_store():
    loaded = _loaded_after_import(*SERVER_ROOTS, "strategies.pfedma")
    assert "pfedma_flwr.server.engine" in loaded
    assert sorted(m for m in loaded if _under(m, CLIENT_PRIVATE)) == []


def test_rules_are_arranged_by_side_and_neither_side_reaches_the_other():
    g = _graph()
    client_side = [m for m in g if _under(m, ("pfedma_flwr.client", "client_apps",
                                               "pfedma_flwr.rules.client"))]
    reached = {m: sorted(d for d in _closure(g, m) if _under(d, SERVER_RULES))
               for m in client_side}
    assert len(client_side) >= 10
    assert reached == {m: [] for m in client_side}
    # the shared rule modules reach neither side's rule store
    shared = [m for m in g if _under(m, ("pfedma_flwr.rules",))
              and not _under(m, CLIENT_PRIVATE + SERVER_RULES)]
    sides = {m: sorted(d for d in _closure(g, m) if _under(d, CLIENT_PRIVATE + SERVER_RULES))
             for m in shared}
    assert len(shared) >= 15
    assert sides == {m: [] for m in shared}
    # the side of each moved module is its folder
    for m in ("local_repo", "local_entries", "adaptation", "outgoing", "relevance"):
        assert f"pfedma_flwr.rules.client.{m}" in g
    for m in ("global_repo", "global_update", "promotion", "resolve", "server_flow", "feedback"):
        assert f"pfedma_flwr.rules.server.{m}" in g
