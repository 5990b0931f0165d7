"""Conventions sysadmins script against (issue 36 item 5): what a command is asked for on stdout (the plan,
the recap; `--json` replaces it there), progress on stderr; -v/-q on every command that runs steps;
did-you-mean for a mistyped command; skipped steps under their own names; errors in words, never errno
numbers; an interrupted step counted as interrupted. And the demo's lab removal (issue 36 item 6)."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from provisioner.cli import main
from provisioner.cli.tree_removal import remove, survey
from provisioner.events import RunFinished, StepFinished, StepStarted
from provisioner.render.console import ConsoleRenderer, recap_table, shorten
from provisioner.runner import HostResult, exit_code, recap_json
from provisioner.words import errno_in_words, error_words
from tests.support.step_kinds import FileStep, use_kinds

ROOT = Path(__file__).resolve().parents[1]


def provisioner(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120, check=False)


def closed_port() -> int:
    """A port nothing listens on: bound, then closed (the kernel answers RST to a connect)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- did-you-mean ---------------------------------------------------------------------------------------------

def test_a_mistyped_command_names_the_closest_one() -> None:
    r = provisioner("demoo")
    assert r.returncode == 2, r.stderr
    assert "No such command 'demoo'. Did you mean 'demo'?" in r.stderr, r.stderr
    assert "Did you mean one of: 'replay', 'plan'?" in provisioner("replya").stderr  # closest first
    far = provisioner("zzzz")
    assert far.returncode == 2 and "The commands: demo, lab, plan, replay" in far.stderr, far.stderr


# -- stdout: the answer; stderr: the progress ------------------------------------------------------------------

def _file_playbook(tmp_path: Path, *contents: str) -> Path:
    steps = "".join(f"  - kind: test.file\n    params: {{path: {tmp_path}/f{i}.txt, content: {c}}}\n"
                    for i, c in enumerate(contents))
    pb = tmp_path / "pb.yaml"
    pb.write_text(f"schema_version: 1\ntarget: {{host: localhost, local: true}}\nsteps:\n{steps}")
    return pb


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A playbook of two `test.file` steps on this machine (real files through the local transport)."""
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")
    use_kinds(monkeypatch, FileStep)
    return _file_playbook(tmp_path, "a", "b")


def test_plan_prints_its_plan_on_stdout_and_its_progress_on_stderr(files: Path) -> None:
    res = CliRunner().invoke(main, ["plan", str(files)])
    assert res.exit_code == 0, res.output
    out, err = res.stdout, res.stderr
    # `provisioner plan … | grep 'will change'` finds each step and each change
    found = [re.sub(r" \(\d+\.\ds\)", "", ln) for ln in out.splitlines() if "will change" in ln]
    assert found == [
        " 1. write a file: will change  write " + str(files.parent / "f0.txt"),
        "   will change: write " + str(files.parent / "f0.txt"),
        " 2. write a file: will change  write " + str(files.parent / "f1.txt"),
        "   will change: write " + str(files.parent / "f1.txt"),
        "┃ host      ┃ no change ┃ will change ┃ failed ┃ skipped ┃",
    ], out
    assert "PLAN" not in out and "run log:" not in out
    assert "will change" not in err and "PLAN " in err and "run log: " in err, err


def test_plan_json_replaces_the_text_on_stdout(files: Path) -> None:
    res = CliRunner().invoke(main, ["plan", str(files), "--json"])
    assert res.exit_code == 0, res.output
    (line,) = res.stdout.splitlines()  # only the JSON: the plan's text went to stderr
    doc = json.loads(line)
    assert doc["hosts"]["localhost"]["changed"] == 2 and doc["hosts"]["localhost"]["interrupted"] == 0
    assert "   will change: write " in res.stderr and "Plan" in res.stderr


def test_replay_default_is_one_line_per_step_verbose_streams_quiet_prints_the_recap_only(files: Path) -> None:
    first = CliRunner().invoke(main, ["replay", str(files)])
    assert first.exit_code == 0, first.output
    assert "Recap" in first.stdout and " 1. write a file: changed" not in first.stdout
    assert " 1. write a file: changed" in first.stderr and " 2. write a file: changed" in first.stderr
    assert "$ sh -c" not in first.stderr and "info: written" not in first.stderr  # not streamed by default

    again = CliRunner().invoke(main, ["replay", str(files), "-q"])
    assert again.exit_code == 0, again.output
    assert "Recap" in again.stdout
    assert "write a file" not in again.stderr and "APPLY" not in again.stderr, again.stderr
    assert "run log: " in again.stderr

    (files.parent / "f0.txt").write_text("changed by hand")
    loud = CliRunner().invoke(main, ["replay", str(files), "--verbose"])
    assert loud.exit_code == 0, loud.output
    assert "▶ 1. write a file" in loud.stderr and "$ sh -c" in loud.stderr and "info: written" in loud.stderr
    assert "will change: write" in loud.stderr and "Recap" in loud.stdout


@pytest.mark.parametrize("command", ["plan", "replay", "demo"])
def test_every_command_that_runs_steps_has_verbose_and_quiet(command: str, tmp_path: Path) -> None:
    helped = CliRunner().invoke(main, [command, "--help"])
    assert "-v, --verbose" in helped.output and "-q, --quiet" in helped.output, helped.output
    args = [command] if command == "demo" else [command, str(_file_playbook(tmp_path, "a"))]
    both = CliRunner().invoke(main, [*args, "-v", "-q"])
    assert both.exit_code == 2 and "exclude each other" in both.output, both.output


# -- skipped steps, errors in words ------------------------------------------------------------------------

def test_skipped_steps_are_named_by_their_own_step_and_errors_said_in_words(tmp_path: Path) -> None:
    """node.connect fails (nothing listens on the SSH port): the later steps are listed under their own
    titles, once "skipped", and the error has no errno number."""
    port = closed_port()
    pb = tmp_path / "pb.yaml"
    pb.write_text(f"schema_version: 1\ntarget:\n  host: 127.0.0.1\n  container: 200\n  ssh:\n    port: {port}\n"
                  "steps:\n  - kind: node.connect\n  - kind: node.inventory\n  - kind: lxc.start\n")
    r = provisioner("plan", str(pb), env=dict(os.environ, PROVISIONER_STATE_DIR=str(tmp_path / "st"),
                                              COLUMNS="200"))
    assert r.returncode == 4, r.stdout + r.stderr
    assert " 2. Inventory the node's GPUs and driver: skipped: step 1 (node.connect) failed" in r.stdout, r.stdout
    assert " 3. Start the container: skipped: step 1 (node.connect) failed" in r.stdout, r.stdout
    assert "skipped skipped" not in r.stdout + r.stderr
    # the failed step is an error: stderr, in words
    assert f"connection refused: nothing listens on 127.0.0.1 port {port}" in r.stderr, r.stderr
    assert "Errno" not in r.stdout + r.stderr


def test_errno_numbers_become_words() -> None:
    assert errno_in_words("cannot fetch http://x/: <urlopen error [Errno -2] Name or service not known>") == \
        "cannot fetch http://x/: host name not found (DNS)"
    assert errno_in_words("OSError: [Errno 28] No space left on device") == "OSError: No space left on device"
    assert errno_in_words("no number here") == "no number here"
    # a real refused connection through urllib (the download path's error)
    with pytest.raises(urllib.error.URLError) as info:
        urllib.request.urlopen(f"http://127.0.0.1:{closed_port()}/x", timeout=10)
    assert "Errno" in str(info.value)
    assert error_words(info.value) == "connection refused (nothing listens on that port)"
    # the resolver's failure as urllib wraps it
    gai = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert error_words(urllib.error.URLError(gai)) == "host name not found (DNS)"


# -- interrupted is its own count ---------------------------------------------------------------------------

def test_an_interrupted_step_counts_as_interrupted_not_failed() -> None:
    result = HostResult(host="h", by_index={0: "ok", 1: "interrupted", 2: "skipped"}, exit_code=130)
    recap = recap_json([result])
    assert recap == {"hosts": {"h": {"ok": 1, "changed": 0, "failed": 0, "skipped": 1, "interrupted": 1}},
                     "status": "failed"}  # the contract's status: the run did not succeed
    assert result.failed and exit_code([result]) == 130
    out = io.StringIO()
    Console(file=out, width=120).print(recap_table(recap["hosts"]))
    header = next(ln for ln in out.getvalue().splitlines() if "host" in ln)
    assert "interrupted" in header, out.getvalue()
    clean = io.StringIO()
    Console(file=clean, width=120).print(recap_table({"h": {"ok": 3}}))
    assert "interrupted" not in clean.getvalue()  # the column only when a step was interrupted


# -- step details are never cut mid-word --------------------------------------------------------------------

def test_step_details_are_shortened_at_a_word_with_an_ellipsis() -> None:
    text = "add devN entries for /dev/nvidia0, /dev/nvidia1, /dev/nvidia2, /dev/nvidiactl"
    short = shorten(text, 40)
    assert len(short) <= 40 and short.endswith("…") and text.startswith(short[:-1])
    assert short == "add devN entries for /dev/nvidia0…"
    out = io.StringIO()
    r = ConsoleRenderer(Console(file=out, width=90, force_terminal=True, color_system=None), verbose=False)
    r(StepStarted(host="h", index=3, step="lxc.gpu_passthrough", title="Pass the GPUs through to the container"))
    r(StepFinished(host="h", index=3, step="lxc.gpu_passthrough", status="changed", message=text * 2,
                   duration_s=6.6))
    (line,) = out.getvalue().splitlines()
    assert len(line) <= 90 and line.endswith("…"), line
    kept = line.split("(6.6s)  ", 1)[1][:-1]
    assert (text * 2).startswith(kept) and (text * 2)[len(kept)] in " ,", line  # cut between words
    r(RunFinished(run_id="r", recap={"h": {"ok": 0, "changed": 1, "failed": 0, "skipped": 0}}, status="ok"))


# -- the demo's lab removal -----------------------------------------------------------------------------------

def test_the_lab_tree_is_removed_whole_without_following_links(tmp_path: Path) -> None:
    """Hard links (a venv and its uv cache), a mode-000 directory (overlayfs's work dir), a link to a
    directory outside: everything under the root goes, nothing outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the lab's\n")
    lab = tmp_path / "lab"
    venv, cache, work = lab / "ct" / "opt" / "venv", lab / "ct" / "root" / ".cache" / "uv", lab / "ovl" / "work"
    for d in (venv, cache, work / "inner"):
        d.mkdir(parents=True)
    for i in range(300):
        (cache / f"m{i}.py").write_bytes(b"x" * 1000)
        os.link(cache / f"m{i}.py", venv / f"m{i}.py")
    (work / "inner" / "f").write_text("w")
    work.chmod(0)
    (lab / "ct" / "escape").symlink_to(outside)
    tree = survey(lab)
    assert len(tree.files) == 602 and tree.size == 300 * 1000 + 1, tree.describe()  # each inode once
    assert tree.describe() == "602 files, 300.0 kB"
    seen: list[tuple[int, int]] = []
    remove(tree, lambda done, total: seen.append((done, total)))
    assert not lab.exists()
    assert (outside / "keep.txt").read_text() == "not the lab's\n"
    assert seen and seen[-1] == (602, 602)
    assert stat.S_ISDIR(outside.stat().st_mode)
