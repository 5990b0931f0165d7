"""The wizard in a real terminal: scripts/tui_tmux_e2e.sh drives it in tmux against the lab."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support.require import require
from tests.support.tui import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_wizard_end_to_end_in_tmux_against_the_lab() -> None:
    require(shutil.which("tmux") is not None, "tmux is not installed (apt-get install tmux)")
    require(shutil.which("uv") is not None, "uv is not on PATH")
    proc = subprocess.run([str(ROOT / "scripts" / "tui_tmux_e2e.sh")], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "page Burn-in: done" in proc.stdout
    assert "OK: wizard in tmux against the lab, playbook saved and replayed with no changes" in proc.stdout
