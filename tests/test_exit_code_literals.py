"""No literal exit code outside `provisioner/exitcodes.py` (issue #25 item 4): every place that sets, raises,
compares or passes an exit code names an `ExitCode` member, so the README's table and the code cannot drift.

Scanned: `provisioner/` and `screens/`, by AST (strings holding scripts shipped to a host are data, not code).
Not scanned, with reason: `provisioner/burnin/` (shipped alone into the container; it may import nothing of the
engine, and its exit status is the rank's, read by the burn-in step) and `provisioner/lab/` (stand-ins of `pct`,
`nvidia-smi`, … exit with the codes of the real tools they model, not ours)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = ("provisioner/burnin/", "provisioner/lab/", "provisioner/exitcodes.py")
NAMES = {"exit_code", "return_code", "code"}


def _int(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def literal_exit_codes(source: str, path: str) -> list[str]:
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call):
            func = _name(node.func)
            if func in ("SystemExit", "exit", "_exit") and node.args and _int(node.args[0]):
                out.append(f"{where}: {func}({ast.unparse(node.args[0])})")
            if func in ("fail", "exit_with") and len(node.args) >= 2 and _int(node.args[1]):
                out.append(f"{where}: {func}(…, {ast.unparse(node.args[1])})")
            if func == "max" and any(_name(a) in NAMES for a in node.args) and any(_int(a) for a in node.args):
                out.append(f"{where}: {ast.unparse(node)}")
            for kw in node.keywords:
                if kw.arg in ("exit_code", "return_code") and _int(kw.value):
                    out.append(f"{where}: {kw.arg}={ast.unparse(kw.value)}")
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_name(t) in ("exit_code", "return_code") for t in targets) and _int(node.value):
                out.append(f"{where}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_name(s) in ("exit_code", "return_code", "returncode_of_run") for s in sides) and \
                    any(_int(s) for s in sides):
                out.append(f"{where}: {ast.unparse(node)}")
    return out


def test_the_scanner_finds_literals_and_passes_members() -> None:
    bad = ("raise SystemExit(2)\nsys.exit(4)\nx = StepFailed('m', exit_code=3)\nr.fail('m', 4)\n"
           "r.exit_code = max(r.exit_code, 4)\nself.exit_code = 1\nif r.exit_code == 10: pass\n")
    assert len(literal_exit_codes(bad, "x.py")) == 7
    good = ("raise SystemExit(ExitCode.USAGE)\nx = StepFailed('m', exit_code=ExitCode.NO_SOLUTION)\n"
            "script = 'import sys; sys.exit(0)'\nr.exit_code = max(r.exit_code, ExitCode.UNREACHABLE)\n")
    assert literal_exit_codes(good, "x.py") == []


def test_no_literal_exit_code_outside_exitcodes_py() -> None:
    found: list[str] = []
    for path in sorted([*ROOT.joinpath("provisioner").rglob("*.py"), *ROOT.joinpath("screens").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(SKIP):
            continue
        found += literal_exit_codes(path.read_text(encoding="utf-8"), rel)
    assert found == [], "use provisioner.exitcodes.ExitCode:\n" + "\n".join(found)
