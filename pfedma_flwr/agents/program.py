"""Program-aided reasoning: the agent writes a short Python program and the client runs it.

A second way to reason beside the chain of thought (:mod:`pfedma_flwr.agents.reasoning`), for
tasks whose answer is a number. The agents of one model reasoning in the same way fail together,
so a vote among them adds nothing (issue 11: three samples of the 1.5B model voting scored what
one greedy answer scored); an agent that computes with a program makes different mistakes
(it does not slip on arithmetic, it mis-models the problem). On the 20 GSM8K questions of the
40-question run the 1.5B model, greedy, solved 9/20 with a program and 8/20 in chain of thought,
with three questions solved only by the program and two only in text (docs/accuracy.md).

The program runs **on the client**, never on the server, in a child interpreter:

* a static check first (:func:`check_program`): only imports of a few pure-computation modules
  (:data:`ALLOWED_IMPORTS`), no name or attribute that starts with ``_``, none of the builtins
  that reach outside the computation (:data:`FORBIDDEN_NAMES`: ``open``, ``exec``,
  ``__import__``, ``getattr`` ...);
* then ``python -I -S`` (isolated: no environment variables, no user site, no site-packages)
  with CPU-time, address-space and file-size limits, an empty environment, a fresh temporary
  working directory, a wall-clock timeout and a cap on the output read back.

The static check cannot be made a proof against every escape in CPython, and the program comes
from the client's own model, prompted with the routed query; the limits bound what a program
that slips past it can do. An agent whose program fails the check, errors, times out or prints
no number answers that query in chain of thought instead (:class:`~pfedma_flwr.client.agent.
ClientAgent`).

The structured response is derived from the program as from a chain of thought: its lines are
the reasoning's steps, followed by ``The program prints X.`` and ``The answer is X.``
(:func:`program_reasoning`), so claims and evidence stay real.
"""

from __future__ import annotations

import ast
import math
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from pfedma_flwr.agents.prompting import build_reasoning_messages
from pfedma_flwr.protocol.wire import REASONING_WAYS

REASONING_METHODS = REASONING_WAYS

ALLOWED_IMPORTS = frozenset({
    "math", "cmath", "fractions", "decimal", "statistics", "itertools", "functools",
    "operator", "collections", "datetime", "numbers",
})
FORBIDDEN_NAMES = frozenset({
    "open", "exec", "eval", "compile", "input", "breakpoint", "help", "exit", "quit",
    "globals", "locals", "vars", "dir", "getattr", "setattr", "delattr", "memoryview",
    "classmethod", "staticmethod", "super", "type", "object", "print_function",
})
MAX_PROGRAM_CHARS = 4000
MAX_OUTPUT_CHARS = 4096

INSTRUCTION = (
    "Solve the problem by writing one short Python program that computes the answer. Use a "
    "clear variable name for every quantity of the problem, one step per line, with a short "
    "comment saying what each step computes. Store the final number in a variable named "
    "answer and end with print(answer). Use only plain arithmetic (and the math module if "
    "needed). Reply with only the program in a ```python block."
)

# The child interpreter sets its own limits before it reads the program from stdin, so the
# parent needs no preexec_fn (unsafe in a process with threads, as Ray actors are).
_BOOT = (
    "import resource,sys\n"
    "resource.setrlimit(resource.RLIMIT_CPU,({cpu},{cpu}))\n"
    "resource.setrlimit(resource.RLIMIT_AS,({mem},{mem}))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE,(0,0))\n"
    "src=sys.stdin.read()\n"
    "del resource,sys\n"
    "exec(compile(src,'<program>','exec'),{{'__name__':'__main__'}})\n"
)
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class ProgramRun:
    """What running one program gave.

    Attributes
    ----------
    output : str
        Its standard output (capped at :data:`MAX_OUTPUT_CHARS`).
    answer : str
        The number it printed last, formatted (:func:`format_number`); empty if none.
    error : str
        Empty on success; else ``reason: detail`` (``rejected``, ``timeout``, ``runtime``,
        ``no_output``).
    """

    output: str
    answer: str
    error: str = ""

    @property
    def ok(self) -> bool:
        """Whether the program printed a number."""
        return not self.error and bool(self.answer)


def program_messages(*, profile_prompt: str, query_text: str, refinement: str = "",
                     lessons: Sequence[str] = (), cases: Sequence[tuple[str, str, str]] = ()
                     ) -> list[dict[str, str]]:
    """Chat messages asking for a program (profile, :data:`INSTRUCTION`, ``X_i``, D_i cases)."""
    return build_reasoning_messages(profile_prompt=profile_prompt, query_text=query_text,
                                    refinement=refinement, answer_kind="number",
                                    lessons=lessons, instruction=INSTRUCTION, cases=cases)


def extract_code(text: str) -> str:
    """The program of a reply: its first fenced block, else the whole reply."""
    m = _FENCE.search(text)
    return (m.group(1) if m else text).strip()


def check_program(code: str) -> str:
    """Why ``code`` may not run (empty string: it may).

    Rejects programs that do not parse, exceed :data:`MAX_PROGRAM_CHARS`, import outside
    :data:`ALLOWED_IMPORTS`, use a name or attribute starting with ``_`` or a name of
    :data:`FORBIDDEN_NAMES`.
    """
    if not code.strip():
        return "empty program"
    if len(code) > MAX_PROGRAM_CHARS:
        return f"program longer than {MAX_PROGRAM_CHARS} characters"
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as e:
        return f"syntax error: {e}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""])
            relative = isinstance(node, ast.ImportFrom) and node.level > 0
            bad = [m for m in mods if relative or m.split(".")[0] not in ALLOWED_IMPORTS]
            if bad:
                return f"import of {bad[0]!r} not allowed"
        elif isinstance(node, ast.Name) and (node.id.startswith("_") or node.id in FORBIDDEN_NAMES):
            return f"name {node.id!r} not allowed"
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return f"attribute {node.attr!r} not allowed"
        elif isinstance(node, ast.alias) and node.asname and node.asname.startswith("_"):
            return f"alias {node.asname!r} not allowed"
    return ""


def format_number(value: float) -> str:
    """A printed number as an answer: integral values without ``.0``, others to 6 decimals."""
    if not math.isfinite(value):
        return ""
    if abs(value - round(value)) < 1e-6:
        return str(int(round(value)))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def last_number(output: str) -> str:
    """The last number printed (thousands separators and ``$`` ignored), formatted."""
    for line in reversed(output.splitlines()):
        found = _NUMBER.findall(line.replace(",", "").replace("$", ""))
        if found:
            try:
                return format_number(float(found[-1]))
            except (OverflowError, ValueError):
                return ""
    return ""


def run_program(code: str, *, timeout_s: float = 5.0, cpu_s: int = 3,
                memory_mb: int = 512) -> ProgramRun:
    """Check and run one program in a limited child interpreter; never raises on its behalf."""
    if timeout_s <= 0 or cpu_s < 1 or memory_mb < 64:
        raise ValueError("timeout_s must be > 0, cpu_s >= 1 and memory_mb >= 64")
    why = check_program(code)
    if why:
        return ProgramRun("", "", f"rejected: {why}")
    boot = _BOOT.format(cpu=cpu_s, mem=memory_mb << 20)
    with tempfile.TemporaryDirectory(prefix="pfedma-program-") as cwd:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-c", boot], input=code, capture_output=True,
                text=True, timeout=timeout_s, env={}, cwd=cwd, start_new_session=True,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return ProgramRun("", "", f"timeout: over {timeout_s:g} s")
        except OSError as e:
            return ProgramRun("", "", f"runtime: {e}")
    out = done.stdout[:MAX_OUTPUT_CHARS]
    if done.returncode < 0:
        return ProgramRun(out, "", f"runtime: killed by signal {-done.returncode} (a limit)")
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return ProgramRun(out, "", f"runtime: {tail[0][:200]}")
    answer = last_number(out)
    return ProgramRun(out, answer, "" if answer else "no_output: the program printed no number")


def program_reasoning(code: str, run: ProgramRun) -> str:
    """The program as a reasoning text: its steps, what it printed and the answer statement.

    Imports and the bare ``print(answer)`` carry no step of the solution and are left out.
    """
    steps = [ln.rstrip() for ln in code.splitlines()
             if ln.strip() and not re.match(r"\s*(import|from)\s", ln)
             and not re.fullmatch(r"\s*print\(\s*answer\s*\)\s*", ln)]
    printed = run.output.strip().splitlines()[-1][:120] if run.output.strip() else run.answer
    return "\n".join([*steps, f"The program prints {printed}.", f"The answer is {run.answer}."])
