"""R610 in the lab (issue 24): after `lab upgrade-driver 610.43.02` the node prints the R610 layouts the real
reports show (`nvidia-smi -q`: Jaded-Encoding-Thaumaturgy/vs-jetpack#295; the table's title:
sgl-project/sglang#27487; `nvidia-smi --version`: NVIDIA/aicr#1667), and the engine's facts read them."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from provisioner.facts import catalog
from provisioner.facts.smi_q import parse_smi_q
from provisioner.facts.smi_table import parse_smi_table
from provisioner.lab import day2, render
from tests.support.fx import fx
from tests.support.lab import node
from tests.support.lab import profile_lab as make_lab

pytestmark = pytest.mark.timeout(240)


def test_lab_r610_title_has_the_real_reports_shape() -> None:
    title = render.render_smi_table(render.LabHost(gpus=(), driver_version="610.43.02", cuda_version="13.3"))
    real = fx("smi_table_b200_x2_610.txt").splitlines()[2]
    assert title.splitlines()[2] == real
    # before R610 the title keeps its old keys
    old = render.render_smi_table(render.LabHost(gpus=(), driver_version="595.71.05")).splitlines()[2]
    assert "Driver Version: 595.71.05" in old and "KMD" not in old


def test_engine_reads_the_lab_node_after_an_upgrade_to_r610(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "rtxpro6000-8x")
    day2.upgrade_driver(state, "610.43.02")
    q_text = node(state, "nvidia-smi -q").stdout
    assert "Use KMD Version instead]" in q_text  # the deprecated field is really there
    q = parse_smi_q(q_text)
    assert (q.driver_version, q.kmd_version) == ("610.43.02", "610.43.02")
    assert q.deprecated_fields == ("Driver Version", "CUDA Version") and len(q.gpus) == 8
    table = parse_smi_table(node(state, "nvidia-smi").stdout)
    assert table.driver_version == "610.43.02" and len(table.gpus) == 8
    version = node(state, "nvidia-smi --version").stdout
    assert 'DRIVER version      : Deprecated, see "KMD version" instead' in version
    assert "KMD version         : 610.43.02" in version
    # the inventory query (the driver's own version field) still parses
    gpus = catalog.GPUS.parse(node(state, shlex.join(catalog.GPUS.argv)).stdout)
    assert {g.driver_version for g in gpus} == {"610.43.02"}
