"""Every command of the README's ```bash blocks either runs here and does what the README says,
or is skipped for a reason stated below (issue 32: docs checked against what commands do).

A new README command fails this test until it is listed: run (it must finish in about a minute
on this CPU, and its documented outcome is checked) or skipped with the reason. Commands run with
the worktree's code (``pfedma`` -> ``python -m pfedma_flwr``) in a temporary directory, so
``outputs/`` goes there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

#: command substring -> why it does not run here
SKIP = {
    "bash scripts/install.sh": "installs packages; CI runs it before the tests",
    "--num-clients 8 --output-dir outputs/latest": "the main job: 6-12 min on the embedded model",
    "--num-clients 12 --set strategy.t_max=3": "100 questions on the embedded model: hours",
    "vllm serve": "needs vLLM and a GPU",
    "--config one_gpu": "needs the vLLM server of the line before",
    "deploy/": "the deployment guide: tests/e2e/test_deployment.py runs it",
    "flower-superlink --host": "the deployment guide (TLS, keys)",
    "flower-supernode": "the deployment guide (TLS, keys)",
    "flwr supernode register": "the deployment guide (a running SuperLink)",
    "flwr run . pfedma": "the deployment guide (a running federation)",
    "flwr list pfedma": "the deployment guide (a running federation)",
}
#: command substring -> (exit code, what summary.json must say, or None)
EXPECT = {
    "--output-dir outputs/demo --overwrite": (0, {"status": "completed", "accuracy": 1.00}),
    "outputs/demo-random": (0, {"status": "completed", "accuracy": 0.80}),
    "outputs/demo-single": (0, {"status": "completed", "accuracy": 0.85}),
    "--config tiny --num-clients 3": (0, {"status": "completed", "num_queries": 6}),
    # no server at gpu-box: the launcher's own check fails fast naming the endpoint
    "agent.backend.base_url=http://gpu-box:8000/v1": (2, None),
}


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            cmd = line.split(" #")[0].strip()
            if cmd and not cmd.startswith("#") and not cmd.startswith("export "):
                out.append(cmd)
    return out


def _rule(cmd: str) -> tuple[str, object]:
    skip = [why for pat, why in SKIP.items() if pat in cmd]
    if skip:
        return "skip", skip[0]
    hits = [exp for pat, exp in EXPECT.items() if pat in cmd]
    assert len(hits) == 1, f"README command not classified in {__file__}: {cmd}"
    return "run", hits[0]


def test_every_readme_command_is_run_or_skipped_with_a_reason():
    for cmd in readme_commands():
        _rule(cmd)  # raises for a command nobody decided about


@pytest.mark.parametrize("cmd", [c for c in readme_commands() if _rule(c)[0] == "run"])
def test_readme_command_does_what_the_readme_says(cmd: str, tmp_path: Path):
    code, summary = _rule(cmd)[1]  # type: ignore[misc]
    args = shlex.split(cmd)
    if args[0] == "pfedma":
        args = ["python3", "-m", "pfedma_flwr", *args[1:]]
    assert args[:3] == ["python3", "-m", "pfedma_flwr"], cmd
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "unused"}
    res = subprocess.run([sys.executable, *args[1:]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == code, res.stdout[-2000:] + res.stderr[-2000:]
    if summary is None:
        last = res.stderr.strip().splitlines()[-1]
        assert "gpu-box" in last and last.endswith(f"(exit {code})")
        return
    out = Path(args[args.index("--output-dir") + 1]) if "--output-dir" in args else Path(
        "outputs/latest")
    got = json.loads((tmp_path / out / "summary.json").read_text())
    for key, value in summary.items():
        want = pytest.approx(value) if isinstance(value, float) else value
        assert got.get(key) == want, (key, got.get(key))
