"""`provisioner tui --lab` with no lab running starts one, reaches the Connect page, and keeps it running on
exit (issue #28: quitting never throws away the lab's containers; `lab down` or `--stop-lab` stops it). A real terminal (tmux), polled for a screen state with a deadline, never a sleep."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.require import require

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[1]


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, check=False).stdout


def _wait(predicate: object, deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)  # a tmux capture-pane per poll is cheap; a coarse poll only adds latency
    raise AssertionError(f"timed out waiting for {what}")


def test_tui_lab_starts_a_lab_and_keeps_it_after_quit(tmp_path: Path) -> None:
    require(shutil.which("tmux") is not None, "tmux is not installed (apt-get install tmux)")
    require(subprocess.run(["unshare", "-Urm", "true"], capture_output=True, check=False).returncode == 0,
            "the lab needs user namespaces (`unshare -Urm`)")
    root = tmp_path / "lab"
    assert not (root / "private" / "connection.json").exists()
    sock = f"labtui-{secrets.token_hex(4)}"
    env = {"PROVISIONER_LAB_ROOT": str(root), "PROVISIONER_STATE_DIR": str(tmp_path / "state"), "TERM": "xterm-256color"}
    cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + \
        " ".join(shlex.quote(a) for a in [sys.executable, "-m", "provisioner", "tui", "--lab"]) + \
        "; echo TUI-EXITED-$?; sleep 600"
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", sock, "-x", "120", "-y", "40", "-c", str(ROOT),
                    cmd], check=True, env=dict(os.environ, **env))
    try:
        screen = lambda: _tmux(sock, "capture-pane", "-p", "-t", sock)  # noqa: E731
        _wait(lambda: "Connect" in screen() and "1/9" in screen(), 180, "the Connect page")
        conn = json.loads((root / "private" / "connection.json").read_text())
        pid = int(conn["pid"])
        assert Path(f"/proc/{pid}").exists()
        _tmux(sock, "send-keys", "-t", sock, "C-q")
        _wait(lambda: "TUI-EXITED-" in screen(), 60, "the wizard to exit")
        history = _tmux(sock, "capture-pane", "-p", "-J", "-S", "-", "-t", sock)  # the scrollback: a traceback
        assert "TUI-EXITED-0" in history, history
        assert (root / "private" / "connection.json").exists() and Path(f"/proc/{pid}").exists(), "quitting stopped the lab"
        assert "still running" in screen()
        down = subprocess.run([sys.executable, "-m", "provisioner", "lab", "down"], cwd=ROOT, capture_output=True,
                              text=True, env=dict(os.environ, **env), timeout=120, check=False)
        assert down.returncode == 0, down.stderr[-2000:]
        _wait(lambda: not (root / "private" / "connection.json").exists(), 30, "the lab to stop")
        _wait(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2],
              30, "the lab daemon to exit")
    finally:
        _tmux(sock, "kill-server")
