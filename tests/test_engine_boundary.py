"""The engine's layers hold (ARCHITECTURE §1): the engine never imports the UI; cli -> stepwise/fleet ->
assembly -> runner -> steps -> facts -> transport; only provisioner.cli imports the lab; the burn-in
imports nothing of the engine (pyproject.toml [tool.importlinter])."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_engine_does_not_import_textual_or_screens() -> None:
    code = (
        "import sys, pkgutil, importlib, provisioner\n"
        "for m in pkgutil.walk_packages(provisioner.__path__, 'provisioner.'):\n"
        "    if m.name.startswith(('provisioner.cli.tui', 'provisioner.lab.commands')) or m.name.endswith('__main__'):\n"
        "        continue\n"
        "    importlib.import_module(m.name)\n"
        "bad = [m for m in sys.modules if m == 'textual' or m.startswith(('textual.', 'screens'))]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_import_linter_contract() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"Contracts: (\d+) kept, (\d+) broken", proc.stdout)
    assert m is not None, proc.stdout
    assert int(m.group(1)) >= 5 and m.group(2) == "0", proc.stdout
    for name in ("The engine never imports the UI", "One engine path", "Only provisioner.cli imports the lab",
                 "The burn-in (shipped into the container) imports nothing of the engine"):
        assert name in proc.stdout
