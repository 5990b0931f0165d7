"""vGPU hosts (issue 24): the vGPU manager is recognised from the node's own outputs, and `driver.userspace`
stops with a finding that says what the container needs and that a guest driver is not the host's version.

Facts: NVIDIA's vGPU user guide (module ``nvidia_vgpu_vfio``, ``nvidia-smi vgpu``), the vGPU 18.2 package
(host 570.148.06, guest 570.148.08) and the API mismatch its guest driver gives in an LXC container
(https://github.com/nvidiavgpuarchive/index/issues/1); the `nvidia-smi vgpu` fixture is a real host's
(https://github.com/akb486/vgpu README)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provisioner.facts import catalog
from provisioner.facts.models import ParseError
from provisioner.facts.vgpu import VgpuFacts, parse_smi_vgpu, parse_vgpu, vgpu_host_problem
from tests.support.fx import fx
from tests.support.lab import lab_down, lab_up, node
from tests.support.lab import profile_lab as make_lab
from tests.support.labcache import with_shared_wheels
from tests.support.require import require

REPO = Path(__file__).resolve().parents[1]


# --- parsers on real outputs ----------------------------------------------------------------------------


def test_smi_vgpu_host_table() -> None:
    driver, gpus = parse_smi_vgpu(fx("smi_vgpu_host_525.txt"))
    assert driver == "525.147.01"
    (g,) = gpus
    assert (g.index, g.name, g.bus_id) == (0, "NVIDIA GeForce RTX 408...", "00000000:01:00.0")
    assert g.vgpus == ("NVIDIA RTXA...",)


@pytest.mark.parametrize("text", ["", "No supported devices in vGPU mode\n", fx("smi_table_rtx5090_570.txt")])
def test_smi_vgpu_without_the_table_is_no_vgpu(text: str) -> None:
    assert parse_smi_vgpu(text) == (None, ())


def test_smi_vgpu_table_without_rows_is_an_error() -> None:
    head = "\n".join(fx("smi_vgpu_host_525.txt").splitlines()[:6])
    with pytest.raises(ParseError):
        parse_smi_vgpu(head)


def test_vgpu_fact_module_or_table_makes_a_vgpu_host() -> None:
    table = "".join(f"vgpu: {line}\n" for line in fx("smi_vgpu_host_525.txt").splitlines())
    assert parse_vgpu("module: nvidia_vgpu_vfio\n").is_vgpu_host
    assert parse_vgpu(table).is_vgpu_host
    assert not parse_vgpu("vgpu: No supported devices in vGPU mode\n").is_vgpu_host
    assert not parse_vgpu("module: nvidia_uvm\n").is_vgpu_host
    assert not parse_vgpu("").is_vgpu_host


def test_finding_names_the_guest_driver_and_that_it_is_not_the_hosts_version() -> None:
    facts = VgpuFacts(manager_module="nvidia_vgpu_vfio")
    problem = vgpu_host_problem(facts, "570.148.06")
    assert problem is not None
    message, fix = problem
    assert "vGPU manager" in message and "nvidia_vgpu_vfio" in message
    assert "a vGPU guest driver is not the host's version" in message
    assert "host 570.148.06, guest 570.148.08" in message and "API mismatch" in message
    assert "exactly 570.148.06" in fix and "NVIDIA-Linux-x86_64-570.148.06-vgpu-kvm.run" in fix
    assert "Licensing Portal" in fix and "not the public .run" in fix and "driver_run" in fix
    assert "guest driver 570.148.08" in fix and "CUDA Version: N/A" in fix
    # an unknown vGPU release still says what to do, without inventing a guest version
    other = vgpu_host_problem(facts, "580.65.05")
    assert other is not None and "the guest driver of the same vGPU release" in other[1]
    assert vgpu_host_problem(VgpuFacts(), "570.148.06") is None


# --- the lab's vgpu profile, read through the engine's own facts -----------------------------------------


def probe(state: object, argv: list[str]) -> str:
    import shlex

    r = node(state, shlex.join(argv))  # type: ignore[arg-type]
    assert r.returncode == 0, r.stdout
    return r.stdout


@pytest.mark.timeout(240)
def test_lab_vgpu_node_reads_as_a_vgpu_host_and_others_do_not(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "vgpu")
    facts = catalog.VGPU.parse(probe(state, catalog.VGPU.argv))
    assert facts.manager_module == "nvidia_vgpu_vfio" and facts.driver_version == "570.148.06"
    assert len(facts.gpus) == 8 and {g.name for g in facts.gpus} == {"NVIDIA L40S"}
    # the vGPU manager's own nvidia-smi has no CUDA (akb486/vgpu README: "CUDA Version: N/A")
    assert "CUDA Version: N/A" in probe(state, ["nvidia-smi"])
    plain = make_lab(tmp_path / "plain", "rtxpro6000-8x")
    assert not catalog.VGPU.parse(probe(plain, catalog.VGPU.argv)).is_vgpu_host


# --- the node preflight: stops before any change unless the playbook names the host's own package ---------


def test_preflight_stops_a_public_driver_install_on_a_vgpu_host() -> None:
    from provisioner.exitcodes import ExitCode
    from provisioner.steps.host_preflight import vgpu_failure

    vgpu = VgpuFacts(manager_module="nvidia_vgpu_vfio")
    failure = vgpu_failure(vgpu, "570.148.06", public_driver=True)
    assert failure is not None and failure.exit_code == ExitCode.NO_SOLUTION
    assert "a vGPU guest driver is not the host's version" in str(failure)
    assert failure.findings[0]["rule"] == "preflight.vgpu_host"
    # the host's own vGPU-KVM package (driver_run) is the documented fix: no stop
    assert vgpu_failure(vgpu, "570.148.06", public_driver=False) is None
    assert vgpu_failure(VgpuFacts(), "570.148.06", public_driver=True) is None


# --- the engine against the lab: plan and replay stop at node.inventory with the finding ------------------


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *args], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_vgpu_lab_stops_at_node_inventory_before_any_change(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    root = tmp_path / "lab"
    env = dict(os.environ, PROVISIONER_LAB_ROOT=str(root), PROVISIONER_STATE_DIR=str(tmp_path / "state"),
               PROVISIONER_CACHE_DIR=str(with_shared_wheels(tmp_path / "cache")))
    up = lab_up(env, root, profile="vgpu")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        doc = yaml.safe_load((REPO / "playbooks" / "blackwell-8gpu-lxc.yaml").read_text())
        kinds = [s["kind"] for s in doc["steps"]]
        doc["steps"] = doc["steps"][: kinds.index("driver.userspace") + 1]
        book = tmp_path / "vgpu.yaml"
        book.write_text(yaml.safe_dump(doc, sort_keys=False))
        plan = cli(env, "plan", str(book), "--lab")
        out = plan.stdout + plan.stderr
        assert plan.returncode == 3, out[-4000:]  # ExitCode.NO_SOLUTION
        assert "published at none of" not in out
        assert "vGPU manager" in out and "a vGPU guest driver is not the host's version" in out, out[-4000:]
        assert "host 570.148.06, guest 570.148.08" in out and "vgpu-kvm.run" in out
        assert "diagnosis [driver_lib_mismatch]" in out
        replay = cli(env, "replay", str(book), "--lab", "--quiet")
        rout = replay.stdout + replay.stderr
        assert replay.returncode == 3, rout[-4000:]
        assert "a vGPU guest driver is not the host's version" in rout
        assert "2. Inventory the node's GPUs and driver: failed" in rout, rout[-4000:]  # node.inventory
        # the preflight stopped the run before any change: no container was created
        from provisioner.lab.state import LabState

        lab = LabState(root)
        assert not lab.conf_path(200).exists() and not lab.ct_dir(200).exists()
        assert list((lab.root / "etc" / "pve" / "lxc").glob("*.conf")) == []
    finally:
        lab_down(env, root)
