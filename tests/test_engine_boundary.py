"""The engine never imports the UI (ARCHITECTURE §1)."""

from __future__ import annotations

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
    assert "KEPT" in proc.stdout
