"""Windows driver numbers (what `nvidia-smi` shows under WSL2) are read by their real branch (issue 35 item 6).

Each Windows number below is one NVIDIA published or a WSL2 user's nvidia-smi printed; the source of each
is in `provisioner.driver_eol.WINDOWS_NUMBERING`.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from provisioner import driver_eol
from provisioner.cli import main
from provisioner.driver_eol import LINUX_BRANCHES, WINDOWS_NUMBERING, branch_eol_problems, driver_branch
from provisioner.resolver.data import load_data


@pytest.mark.parametrize("entry", WINDOWS_NUMBERING, ids=lambda e: f"R{e.branch}")
def test_windows_numbering_reads_as_its_branch(entry: driver_eol.WindowsNumbering) -> None:
    for number in entry.examples:
        assert driver_branch(number) == entry.branch, number


def test_every_branch_from_r470_to_r590_is_held() -> None:
    held = {e.branch for e in WINDOWS_NUMBERING}
    assert {b for b in LINUX_BRANCHES if 470 <= b <= 590} <= held


def test_linux_numbers_read_as_themselves() -> None:
    for linux in ("470.256.02", "535.288.01", "550.54.15", "570.26", "575.51.03", "580.95.05", "590.44.01",
                  "595.71.05"):
        assert driver_branch(linux) == int(linux.split(".")[0])
    assert driver_branch("610.12") == 610  # past the newest known branch: a branch of its own


def test_a_pascal_gpu_on_an_r580_windows_driver_is_still_driven() -> None:
    assert branch_eol_problems(["6.1"], "581.42") == []
    assert branch_eol_problems(["6.1"], "582.16") == []
    assert [p.branch for p in branch_eol_problems(["6.1"], "591.59")] == [590]  # R590 (Windows) dropped Pascal
    assert [p.branch for p in branch_eol_problems(["3.5"], "472.50")] == []  # Kepler on R470 (Windows)


def test_resolve_picks_a_build_for_pascal_on_wsl2() -> None:
    res = CliRunner().invoke(main, ["resolve", "--cc", "6.1", "--driver", "581.42", "--python", "3.12", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output.strip().splitlines()[-1])
    assert doc["variant"].startswith("cu") and doc["torch"], doc


def test_the_data_file_carries_driver_eol_ceilings() -> None:
    """One source of truth: the packaged data's ceilings are `driver_eol.RULES`, R580 last for Maxwell,
    Pascal and Volta ("The release 580 series will be the last to support GPUs based on the Maxwell,
    Pascal, and Volta architectures", NVIDIA's deprecation schedule)."""
    ceilings = {c.id: c for c in load_data().gpu_driver_constraints if c.max_driver_excl is not None}
    assert set(ceilings) == {r.id for r in driver_eol.RULES}
    for rule in driver_eol.RULES:
        assert ceilings[rule.id].max_driver_excl == str(rule.first_dropped)
    assert ceilings["maxwell-pascal-volta-last-r580"].cc_max_excl == "7.5"
