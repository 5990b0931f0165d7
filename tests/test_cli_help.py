"""Every command's --help states its exit codes, and the wizard's help describes what it really does
(issue #28 item 5)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from provisioner.cli import main

COMMANDS = ["demo", "lab", "plan", "replay", "resolve", "burnin", "diagnose", "bundle", "tui"]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_help_lists_its_exit_codes(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"], terminal_width=120)
    assert result.exit_code == 0, result.output
    assert "Exit codes" in result.output
    assert " 0 " in result.output or "0 ok" in result.output or "0 pass" in result.output


@pytest.mark.parametrize("name", ["plan", "replay"])
def test_plan_and_replay_name_every_code_of_the_readme_table(name: str) -> None:
    out = CliRunner().invoke(main, [name, "--help"], terminal_width=160).output
    section = out[out.index("Exit codes"):]
    codes = {int(line.split()[0]) for line in section.splitlines()[1:] if line.strip()[:1].isdigit()}
    expected = {0, 1, 2, 3, 4, 130} | ({10} if name == "plan" else set())
    assert expected <= codes, codes


def test_tui_help_describes_the_recording_and_the_lab_truthfully() -> None:
    out = CliRunner().invoke(main, ["tui", "--help"], terminal_width=160).output
    assert "after every applied step" in out  # --record: saved as steps complete, not only by the Summary page
    assert "--stop-lab" in out and "keeps running" in out  # --lab no longer stops the lab it started
    assert "resume" in out.lower()
