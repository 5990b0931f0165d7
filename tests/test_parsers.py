"""Pure fact parsers on hand-recorded real-format outputs (tests/fixtures/outputs/)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner.facts.device_nodes import parse_ls_dev, parse_proc_devices, parse_stat_dev
from provisioner.facts.driver_module import parse_module_version, parse_proc_driver_version
from provisioner.facts.installer_log import parse_installer_log
from provisioner.facts.models import NvidiaSmiFailed, ParseError, SmiFailureKind
from provisioner.facts.proxmox import parse_pveversion
from provisioner.facts.smi_csv import parse_gpu_query_csv
from provisioner.facts.smi_failure import classify_smi_failure, parse_smi_status
from provisioner.facts.smi_q import parse_smi_q
from provisioner.facts.smi_table import parse_smi_table
from provisioner.facts.smi_topo import parse_topo_matrix, parse_topo_p2p
from provisioner.facts.system import (
    parse_cgroup_fs,
    parse_df,
    parse_df_entries,
    parse_ldd_version,
    parse_os_release,
    parse_pip_freeze,
)
from provisioner.facts.vgpu import parse_smi_vgpu, parse_vgpu
from tests.support.fx import FIXTURES, fx

# --- nvidia-smi --query-gpu ------------------------------------------------------------------


def test_query_csv_rtx_pro_6000_server() -> None:
    gpus = parse_gpu_query_csv(fx("smi_query_csv_rtxpro6000_x2_580.txt"))
    assert [g.index for g in gpus] == [0, 1]
    g = gpus[1]
    assert g.name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert g.uuid == "GPU-a83f20d6-51c4-9e7b-d402-3b6f18c9e57a"
    assert g.pci_bus_id == "00000000:27:00.0"
    assert g.compute_cap == "12.0"
    assert g.driver_version == "580.95.05"
    assert g.memory_mib == 97887


def test_query_csv_header_and_nounits() -> None:
    gpus = parse_gpu_query_csv(fx("smi_query_csv_h100_x8_nounits_header.txt"))
    assert len(gpus) == 8
    assert {g.compute_cap for g in gpus} == {"9.0"}
    assert {g.memory_mib for g in gpus} == {81559}
    assert gpus[7].pci_bus_id == "00000000:DB:00.0"
    assert len({g.uuid for g in gpus}) == 8


def test_query_csv_mixed_gpus_and_na_memory() -> None:
    gpus = parse_gpu_query_csv(fx("smi_query_csv_mixed_na.txt"))
    assert [g.compute_cap for g in gpus] == ["8.9", "12.0", "8.0"]
    assert gpus[2].memory_mib is None
    assert gpus[0].memory_mib == 24564


def test_query_csv_other_field_order() -> None:
    text = "00000000:17:00.0, 0, 12.0, GPU-4b1e9c27-0d53-8f6a-2c91-7e0a5d3f86b2, Tesla X, 595.71.05, 97887 MiB\n"
    fields = ("pci.bus_id", "index", "compute_cap", "uuid", "name", "driver_version", "memory.total")
    (gpu,) = parse_gpu_query_csv(text, fields)
    assert (gpu.index, gpu.name, gpu.pci_bus_id, gpu.compute_cap) == (0, "Tesla X", "00000000:17:00.0", "12.0")


def test_query_csv_old_driver_without_compute_cap_field() -> None:
    with pytest.raises(NvidiaSmiFailed) as info:
        parse_gpu_query_csv(fx("smi_query_invalid_field_470.txt"))
    assert info.value.failure.kind is SmiFailureKind.INVALID_FIELD
    assert info.value.failure.invalid_field == "compute_cap"


@pytest.mark.parametrize(
    "text",
    [
        "0, NVIDIA X, GPU-abc, 00000000:17:00.0, 12.0, 595.71.05\n",  # missing column
        "zero, NVIDIA X, GPU-ab12, 00000000:17:00.0, 12.0, 595.71.05, 1 MiB\n",
        "0, NVIDIA X, GPU-ab12, 17:00.0, 12.0, 595.71.05, 1 MiB\n",
        "0, NVIDIA X, nope, 00000000:17:00.0, 12.0, 595.71.05, 1 MiB\n",
        "0, NVIDIA X, GPU-ab12, 00000000:17:00.0, twelve, 595.71.05, 1 MiB\n",
        "0, NVIDIA X, GPU-ab12, 00000000:17:00.0, 12.0, latest, 1 MiB\n",
        "0, NVIDIA X, GPU-ab12, 00000000:17:00.0, 12.0, 595.71.05, lots\n",
        "index, name, uuid, pci.bus_id, compute_cap, driver_version, memory.total [MiB]\n",
        "",
    ],
)
def test_query_csv_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_gpu_query_csv(text)


def test_query_csv_requires_all_fields() -> None:
    with pytest.raises(ParseError, match="not queried"):
        parse_gpu_query_csv("0, x\n", ("index", "name"))


# --- nvidia-smi failures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("smi_mismatch.txt", SmiFailureKind.DRIVER_LIBRARY_MISMATCH),
        ("smi_no_driver.txt", SmiFailureKind.NO_DRIVER),
        ("smi_no_devices.txt", SmiFailureKind.NO_DEVICES),
        ("smi_nvml_unknown_error.txt", SmiFailureKind.NVML_UNKNOWN_ERROR),
        ("smi_command_not_found.txt", SmiFailureKind.COMMAND_NOT_FOUND),
    ],
)
def test_smi_failures_classified_and_raised(name: str, kind: SmiFailureKind) -> None:
    text = fx(name)
    status = parse_smi_status(text)
    assert not status.ok
    assert status.failure is not None and status.failure.kind is kind
    for parser in (parse_gpu_query_csv, parse_smi_q, parse_smi_table, parse_topo_matrix, parse_topo_p2p):
        with pytest.raises(NvidiaSmiFailed) as info:
            parser(text)
        assert info.value.failure.kind is kind
        assert isinstance(info.value, ParseError)


def test_mismatch_carries_nvml_library_version() -> None:
    failure = classify_smi_failure(fx("smi_mismatch.txt"))
    assert failure is not None
    assert failure.nvml_library_version == "570.124"
    assert failure.message == "Failed to initialize NVML: Driver/library version mismatch"


def test_smi_status_ok_on_data() -> None:
    assert parse_smi_status(fx("smi_query_csv_rtxpro6000_x2_580.txt")).ok
    assert parse_smi_status(fx("smi_q_a100_x2_535.txt")).failure is None


# --- nvidia-smi -q ----------------------------------------------------------------------------


def test_smi_q_a100_r535() -> None:
    q = parse_smi_q(fx("smi_q_a100_x2_535.txt"))
    assert (q.driver_version, q.cuda_version, q.attached_gpus) == ("535.183.06", "12.2", 2)
    assert q.timestamp == "Mon Mar  3 10:14:52 2025"
    a, b = q.gpus
    assert a.bus_id == "00000000:4B:00.0" and b.bus_id == "00000000:CA:00.0"
    assert a.product_name == "NVIDIA A100 80GB PCIe"
    assert a.uuid == "GPU-3c7f0a92-e51b-4d86-b2c9-68a1f4e0d7b3"
    assert a.product_architecture == "Ampere"
    assert (a.pcie_gen_current, a.pcie_gen_max, a.pcie_width_current, a.pcie_width_max) == (4, 4, 16, 16)
    assert (b.pcie_gen_current, b.pcie_width_current) == (3, 8)
    assert a.ecc_enabled is True and a.ecc_pending is True
    assert b.ecc_pending is False
    assert a.temperature_c == 36
    assert a.power_draw_w == pytest.approx(61.37)
    assert a.power_limit_w == pytest.approx(300.0)
    assert a.memory_total_mib == 81920
    assert a.persistence_mode is True
    assert a.compute_cap is None  # nvidia-smi -q does not print a compute capability


def test_smi_q_rtx5090_r570_na_fields_and_processes() -> None:
    q = parse_smi_q(fx("smi_q_rtx5090_570.txt"))
    (g,) = q.gpus
    assert q.driver_version == "570.133.07" and q.cuda_version == "12.8"
    assert g.ecc_enabled is None and g.ecc_pending is None  # "N/A" on GeForce
    assert g.power_draw_w == pytest.approx(31.40)  # instantaneous preferred over average
    assert g.power_limit_w == pytest.approx(575.0)
    assert g.persistence_mode is False
    assert g.serial_number == "0"
    assert g.temperature_c == 38


def test_smi_q_r460_legacy_keys() -> None:
    q = parse_smi_q(fx("smi_q_v100_460_legacy.txt"))
    (g,) = q.gpus
    assert g.product_architecture is None
    assert g.ecc_enabled is True  # "Ecc Mode" spelling of old drivers
    assert g.power_draw_w == pytest.approx(41.85)
    assert g.power_limit_w == pytest.approx(300.0)
    assert (g.pcie_gen_current, g.pcie_width_max) == (3, 16)
    assert g.bus_id == "00000000:00:1E.0"


def test_smi_q_r610_kmd_and_umd_fields_win_over_deprecated_ones() -> None:
    # header verbatim from Jaded-Encoding-Thaumaturgy/vs-jetpack#295 (R610 610.47, 2026-05-29)
    q = parse_smi_q(fx("smi_q_r610_kmd_umd.txt"))
    assert (q.driver_version, q.cuda_version) == ("610.47", "13.3")
    assert (q.kmd_version, q.cuda_umd_version) == ("610.47", "13.3")
    assert q.deprecated_fields == ("Driver Version", "CUDA Version")
    (g,) = q.gpus
    assert g.product_name == "NVIDIA GeForce RTX 5090" and g.temperature_c == 38


def test_smi_q_deprecated_or_unknown_fields_never_fail() -> None:
    base = "==============NVSMI LOG==============\n\n"
    gpu = "GPU 00000000:17:00.0\n    Product Name : NVIDIA H100\n    GPU UUID : GPU-1a2b\n"
    # only the deprecated field, note and all (a driver between the rename and R610's KMD field)
    q = parse_smi_q(base + "Driver Version : 610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD"
                    " Version instead]\nAttached GPUs : 1\n" + gpu)
    assert q.driver_version == "610.43.02" and q.kmd_version is None
    assert q.deprecated_fields == ("Driver Version",)
    # the legacy field gone entirely; an unknown header field and a deprecated GPU field are ignored
    q = parse_smi_q(base + "KMD Version : 615.10\nUMD Version : 615.10\nFuture Field : [Deprecated; gone]\n"
                    "Attached GPUs : 1\n" + gpu + "    Persistence Mode : Enabled [Deprecated; use X]\n")
    assert (q.driver_version, q.cuda_version) == ("615.10", None)
    assert q.gpus[0].persistence_mode is True
    # a KMD Version that is no version falls back to the legacy field rather than failing
    q = parse_smi_q(base + "Driver Version : 610.47\nKMD Version : N/A\nAttached GPUs : 1\n" + gpu)
    assert q.driver_version == "610.47"


def test_query_csv_r610_driver_version_with_note() -> None:
    line = ("0, NVIDIA B200, GPU-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b, 00000000:63:00.0, 10.0, "
            "610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead], 183359 MiB\n")
    (g,) = parse_gpu_query_csv(line)
    assert g.driver_version == "610.43.02" and g.compute_cap == "10.0"


def test_smi_q_filtered_single_gpu_keeps_attached_count() -> None:
    text = fx("smi_q_a100_x2_535.txt")
    cut = text.index("\nGPU 00000000:CA:00.0")
    q = parse_smi_q(text[:cut])
    assert q.attached_gpus == 2 and len(q.gpus) == 1


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Driver Version : 595.71.05\n",  # no NVSMI LOG header
        "==============NVSMI LOG==============\n\nAttached GPUs : 1\n",
        "==============NVSMI LOG==============\nDriver Version : 595.71.05\nAttached GPUs : many\n",
        "==============NVSMI LOG==============\nDriver Version : 595.71.05\nAttached GPUs : 1\n"
        "GPU 00000000:17:00.0\n    Product Brand : NVIDIA\n",
    ],
)
def test_smi_q_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_smi_q(text)


# --- nvidia-smi table -------------------------------------------------------------------------


def test_smi_table_r570_with_processes() -> None:
    t = parse_smi_table(fx("smi_table_rtx5090_570.txt"))
    assert (t.smi_version, t.driver_version, t.cuda_version) == ("570.133.07", "570.133.07", "12.8")
    (g,) = t.gpus
    assert g.name == "NVIDIA GeForce RTX 5090" and g.persistence_mode is False
    assert g.display_active is True
    assert (g.fan_percent, g.temperature_c, g.perf_state) == (0, 38, "P8")
    assert (g.power_usage_w, g.power_cap_w) == (31, 575)
    assert (g.memory_used_mib, g.memory_total_mib, g.gpu_util_percent) == (711, 32607, 3)
    assert g.volatile_uncorr_ecc == "N/A" and g.mig_mode == "N/A"
    assert len(t.processes) == 2 and "/usr/lib/xorg/Xorg" in t.processes[0]


def test_smi_table_r595_truncated_names() -> None:
    t = parse_smi_table(fx("smi_table_rtxpro6000_x2_595.txt"))
    assert [g.index for g in t.gpus] == [0, 1]
    assert {g.name for g in t.gpus} == {"NVIDIA RTX PRO 6000 Blac..."}
    assert [g.bus_id for g in t.gpus] == ["00000000:16:00.0", "00000000:27:00.0"]
    assert t.gpus[1].power_usage_w == 412 and t.gpus[1].memory_used_mib == 90118
    assert t.gpus[0].fan_percent is None and t.gpus[0].volatile_uncorr_ecc == "0"
    assert t.gpus[0].mig_mode == "Disabled"


def test_smi_table_r470_narrow_layout() -> None:
    t = parse_smi_table(fx("smi_table_v100_x2_470.txt"))
    assert t.cuda_version == "11.4"
    assert [g.name for g in t.gpus] == ["Tesla V100-SXM2...", "Tesla V100-SXM2..."]
    assert t.gpus[1].compute_mode == "E. Process"
    assert t.processes == ("No running processes found",)


def test_smi_table_r610_kmd_umd_banner() -> None:
    # sgl-project/sglang#27487 (B200 x2, 610.43.02): the title has no "Driver Version" any more
    t = parse_smi_table(fx("smi_table_b200_x2_610.txt"))
    assert (t.smi_version, t.driver_version, t.cuda_version) == ("610.43.02", "610.43.02", "13.3")
    assert [g.bus_id for g in t.gpus] == ["00000000:63:00.0", "00000000:68:00.0"]
    assert [g.power_cap_w for g in t.gpus] == [1000, 1000] and t.gpus[1].power_usage_w == 142
    assert {g.memory_total_mib for g in t.gpus} == {183359} and t.gpus[0].mig_mode == "Disabled"


def test_smi_table_mig_enabled_gpu_and_kmd_title() -> None:
    text = "\n".join(
        [
            "+-----------------------------------------------------------------------------------------+",
            "| NVIDIA-SMI 610.43.02              KMD Version: 610.43.02     CUDA UMD Version: 13.3     |",
            "+-----------------------------------------+------------------------+----------------------+",
            "|=========================================+========================+======================|",
            "|   0  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:61:00.0 Off |                   On |",
            "| N/A   34C    P0            108W /  600W |                  N/A   |     N/A      Default |",
            "|                                         |                        |              Enabled |",
            "+-----------------------------------------+------------------------+----------------------+",
            "",
            "+-----------------------------------------------------------------------------------------+",
            "| MIG devices:                                                                            |",
            "+------------------+----------------------------------+-----------+-----------------------+",
        ]
    )
    t = parse_smi_table(text)
    assert (t.driver_version, t.cuda_version) == ("610.43.02", "13.3")
    (g,) = t.gpus
    assert g.memory_used_mib is None and g.memory_total_mib is None and g.gpu_util_percent is None
    assert (g.mig_mode, g.volatile_uncorr_ecc, g.power_usage_w) == ("Enabled", "On", 108)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "+----+\n| hello |\n+----+\n",
        "| NVIDIA-SMI 595.71.05   Driver Version: 595.71.05   CUDA Version: 13.2 |\n",
        "| NVIDIA-SMI 595.71.05   Driver Version: 595.71.05   CUDA Version: 13.2 |\n|===|\n| bogus row |\n",
    ],
)
def test_smi_table_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_smi_table(text)


# --- topology ---------------------------------------------------------------------------------


def test_topo_m_nvlink_nics() -> None:
    t = parse_topo_matrix(fx("topo_m_h100_x8_nvlink_nics_550.txt"))
    assert t.gpus == tuple(f"GPU{i}" for i in range(8))
    assert t.devices[-4:] == ("NIC0", "NIC1", "NIC2", "NIC3")
    assert t.link("GPU0", "GPU7") == "NV18"
    assert t.link("GPU0", "NIC0") == "PXB" and t.link("NIC3", "GPU0") == "SYS"
    assert t.cpu_affinity["GPU5"] == "56-111,168-223"
    assert t.numa_affinity["GPU2"] == "0" and t.gpu_numa_id["GPU2"] is None
    assert "NIC0" not in t.cpu_affinity
    assert t.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"}
    assert t.legend["NV#"] == "Connection traversing a bonded set of # NVLinks"


def test_topo_m_ansi_tty_output() -> None:
    t = parse_topo_matrix(fx("topo_m_rtx5090_x2_phb_ansi.txt"))
    assert t.devices == ("GPU0", "GPU1")
    assert t.link("GPU1", "GPU0") == "PHB"
    assert t.cpu_affinity == {"GPU0": "0-31", "GPU1": "0-31"}


def test_topo_m_r470_without_gpu_numa_id() -> None:
    t = parse_topo_matrix(fx("topo_m_t4_x4_470.txt"))
    assert t.link("GPU0", "GPU1") == "PIX" and t.link("GPU1", "GPU2") == "SYS"
    assert t.numa_affinity == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    assert t.gpu_numa_id == {}
    with pytest.raises(KeyError):
        t.link("GPU0", "GPU9")


def test_topo_m_space_separated_paste() -> None:
    text = (
        "        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
        "GPU0     X      PHB     0-23    0               N/A\n"
        "GPU1    PHB      X      0-23    0               N/A\n"
    )
    t = parse_topo_matrix(text)
    assert t.link("GPU0", "GPU1") == "PHB" and t.cpu_affinity["GPU1"] == "0-23"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\tGPU0\tGPU1\nGPU0\t X \tPHB\n",  # missing GPU1 row
        "\tGPU0\tGPU1\nGPU0\tPHB\tPHB\nGPU1\tPHB\t X \n",  # bad diagonal
        "\tGPU0\tGPU1\nGPU0\t X \tWARP\nGPU1\tPHB\t X \n",  # unknown link type
        "\tGPU0\tGPU1\nGPU0\t X \nGPU1\tPHB\t X \n",  # short row
        "\tGPU0\nGPU0\t X \nGPU3\t X \n",  # unknown row
        "no matrix here\n",
    ],
)
def test_topo_m_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_topo_matrix(text)


def test_topo_p2p_gns() -> None:
    p = parse_topo_p2p(fx("topo_p2p_r_rtx5090_x2_gns.txt"))
    assert p.gpus == ("GPU0", "GPU1")
    assert not p.all_ok()
    assert p.not_ok_pairs() == [("GPU0", "GPU1", "GNS"), ("GPU1", "GPU0", "GNS")]
    assert p.legend["GNS"] == "GPU not supported"


def test_topo_p2p_cns_between_sockets() -> None:
    p = parse_topo_p2p(fx("topo_p2p_r_x4_cns.txt"))
    assert p.status["GPU0"]["GPU1"] == "OK" and p.status["GPU1"]["GPU3"] == "CNS"
    assert len(p.not_ok_pairs()) == 8


@pytest.mark.parametrize(
    "text",
    [
        "",
        " \tGPU0\tGPU1\t\n GPU0\tX\tMAYBE\t\n GPU1\tOK\tX\t\n",
        " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n",
        " \tGPU0\tGPU1\t\n GPU0\tOK\tOK\t\n GPU1\tOK\tX\t\n",
    ],
)
def test_topo_p2p_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_topo_p2p(text)


# --- kernel module version --------------------------------------------------------------------


def test_module_version() -> None:
    assert parse_module_version(fx("sys_module_nvidia_version.txt")) == "580.126.09"
    assert parse_module_version("570.124\n") == "570.124"
    for bad in ("", "cat: /sys/module/nvidia/version: No such file or directory\n", "5.71\n"):
        with pytest.raises(ParseError):
            parse_module_version(bad)


@pytest.mark.parametrize(
    ("name", "version", "flavour", "arch", "gcc"),
    [
        (
            "proc_driver_version_proprietary_550.txt",
            "550.54.14",
            "proprietary",
            "x86_64",
            "gcc version 12.2.0 (Debian 12.2.0-14)",
        ),
        (
            "proc_driver_version_open_590.txt",
            "590.48.01",
            "open",
            "x86_64",
            "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)",
        ),
        (
            "proc_driver_version_open_dkms_570.txt",
            "570.133.20",
            "open",
            "x86_64",
            "gcc version 12.2.0 (Debian 12.2.0-14)",
        ),
        (
            "proc_driver_version_open_aarch64_580.txt",
            "580.82.07",
            "open",
            "aarch64",
            "gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)",
        ),
    ],
)
def test_proc_driver_version(name: str, version: str, flavour: str, arch: str, gcc: str) -> None:
    info = parse_proc_driver_version(fx(name))
    assert (info.version, info.flavour, info.arch, info.gcc_version) == (version, flavour, arch, gcc)


def test_proc_driver_version_build_info() -> None:
    info = parse_proc_driver_version(fx("proc_driver_version_open_590.txt"))
    assert info.build_info.startswith("Release Build  (dvs-builder@U16-I3-B03-4-3)")
    assert parse_proc_driver_version(fx("proc_driver_version_proprietary_550.txt")).build_info == (
        "Thu Feb 22 01:44:30 UTC 2024"
    )


@pytest.mark.parametrize("text", ["", "GCC version:  gcc version 12.2.0\n", "NVRM version: nouveau 1.0\n"])
def test_proc_driver_version_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_proc_driver_version(text)


# --- /proc/devices ----------------------------------------------------------------------------


def test_proc_devices_frontend_era() -> None:
    d = parse_proc_devices(fx("proc_devices_frontend_535.txt"))
    assert d.nvidia_major == 195 and d.char["nvidia-frontend"] == 195
    assert d.uvm_major == 508 and d.caps_major == 236
    assert d.char_major("nvidia-nvswitch") == 234 and d.char_major("nvidia-nvlink") == 235
    assert d.char["tty"] == 4 and d.block["sd"] == 8
    assert d.block["zvol"] == 252


def test_proc_devices_r560_names() -> None:
    d = parse_proc_devices(fx("proc_devices_595_open.txt"))
    assert d.nvidia_major == 195 and d.char["nvidiactl"] == 195 and d.char["nvidia-modeset"] == 195
    assert "nvidia-frontend" not in d.char
    assert d.uvm_major == 510 and d.caps_major == 240
    assert d.char["nvidia-caps-imex-channels"] == 237


def test_proc_devices_without_nvidia() -> None:
    d = parse_proc_devices("Character devices:\n  1 mem\n\nBlock devices:\n  8 sd\n")
    assert d.nvidia_major is None and d.uvm_major is None and d.caps_major is None


@pytest.mark.parametrize("text", ["", "  1 mem\n", "Character devices:\nmem 1\n"])
def test_proc_devices_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_proc_devices(text)


# --- ls -l / stat -----------------------------------------------------------------------------


def test_ls_dev_host_with_caps_directory() -> None:
    nodes = parse_ls_dev(fx("ls_dev_nvidia_host_x2.txt")).by_path()
    assert set(nodes) == {
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-caps/nvidia-cap1",
        "/dev/nvidia-caps/nvidia-cap2",
    }
    assert (nodes["/dev/nvidiactl"].major, nodes["/dev/nvidiactl"].minor) == (195, 255)
    assert (nodes["/dev/nvidia-uvm-tools"].major, nodes["/dev/nvidia-uvm-tools"].minor) == (508, 1)
    assert nodes["/dev/nvidia0"].mode == 0o666 and nodes["/dev/nvidia0"].type == "c"
    assert nodes["/dev/nvidia-caps/nvidia-cap1"].mode_octal == "0400"
    assert nodes["/dev/nvidia-caps/nvidia-cap2"].mode == 0o444


def test_ls_dev_unprivileged_container_missing_node() -> None:
    listing = parse_ls_dev(fx("ls_dev_nvidia_ct_unpriv.txt"))
    assert listing.missing == ("/dev/nvidia-uvm-tools",)
    assert {n.owner for n in listing.nodes} == {"nobody"}
    assert {n.group for n in listing.nodes} == {"nogroup"}
    assert len(listing.nodes) == 4


def test_ls_dev_devn_long_iso_time() -> None:
    nodes = parse_ls_dev(fx("ls_dev_nvidia_devn_isotime.txt")).by_path()
    assert nodes["/dev/nvidia0"].mode == 0o660 and nodes["/dev/nvidia0"].group == "video"
    assert nodes["/dev/nvidia-uvm"].major == 511


def test_ls_dev_single_directory() -> None:
    listing = parse_ls_dev(fx("ls_dev_nvidia_caps_dir.txt"), directory="/dev/nvidia-caps")
    assert [(n.path, n.major, n.minor) for n in listing.nodes] == [
        ("/dev/nvidia-caps/nvidia-cap1", 240, 1),
        ("/dev/nvidia-caps/nvidia-cap2", 240, 2),
    ]


def test_ls_dev_nothing_matched() -> None:
    listing = parse_ls_dev("ls: cannot access '/dev/nvidia*': No such file or directory\n")
    assert listing.nodes == () and listing.missing == ("/dev/nvidia*",)


def test_ls_dev_special_bits_and_block_devices() -> None:
    listing = parse_ls_dev("brw-rw---T 1 root disk 8, 0 Jun 16 09:12 /dev/sda\n")
    (node,) = listing.nodes
    assert node.type == "b" and node.mode == 0o1660


@pytest.mark.parametrize("text", ["", "hello world\n", "crw-rw-rw- 1 root root 195\n"])
def test_ls_dev_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ls_dev(text)


def test_stat_dev_hex_majors() -> None:
    listing = parse_stat_dev(fx("stat_dev_nvidia.txt"))
    nodes = listing.by_path()
    assert "/dev/nvidia-caps" not in nodes  # a directory
    assert (nodes["/dev/nvidia-uvm"].major, nodes["/dev/nvidia-uvm"].minor) == (511, 0)
    assert (nodes["/dev/nvidiactl"].major, nodes["/dev/nvidiactl"].minor) == (195, 255)
    assert nodes["/dev/nvidia-modeset"].minor == 254 and nodes["/dev/nvidia0"].mode == 0o666
    assert listing.missing == ("/dev/nvidia1",)


@pytest.mark.parametrize("text", ["", "/dev/nvidia0 c3 0 666\n", "/dev/nvidia0 character special file zz 0 666\n"])
def test_stat_dev_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_stat_dev(text)


# --- Proxmox ----------------------------------------------------------------------------------


def test_pveversion_short() -> None:
    v = parse_pveversion(fx("pveversion_8.4.txt"))
    assert (v.manager_version, v.repoid, v.running_kernel) == ("8.4.1", "2a5fa54a8503f96d", "6.8.12-10-pve")
    assert v.release == (8, 4)
    assert v.packages == {}


def test_pveversion_pve7_dash_version() -> None:
    v = parse_pveversion(fx("pveversion_7.4.txt"))
    assert (v.manager_version, v.release, v.running_kernel) == ("7.4-3", (7, 4), "5.15.102-1-pve")


def test_pveversion_verbose() -> None:
    v = parse_pveversion(fx("pveversion_v_8.4.txt"))
    assert (v.manager_version, v.repoid, v.running_kernel) == ("8.4.1", "2a5fa54a8503f96d", "6.8.12-10-pve")
    assert v.packages["pve-container"] == "5.2.6"
    assert v.packages["lxc-pve"] == "6.0.0-1"
    assert v.packages["proxmox-ve"] == "8.4.0"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "bash: pveversion: command not found\n",
        "pve-manager/eight/abc (running kernel: x)\n",
        "proxmox-ve: 8.4.0 (running kernel: 6.8.12-10-pve)\n",
        "pve-manager: 8.4.1 (running version: 8.4.1/2a5f)\n",
    ],
)
def test_pveversion_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_pveversion(text)


# --- system -----------------------------------------------------------------------------------


def test_cgroup_fs() -> None:
    assert parse_cgroup_fs("cgroup2fs\n").version == 2
    assert parse_cgroup_fs("tmpfs\n").version == 1
    for bad in ("", "ext4\n", "stat: cannot read file system information for '/sys/fs/cgroup'\n"):
        with pytest.raises(ParseError):
            parse_cgroup_fs(bad)


def test_os_release() -> None:
    deb = parse_os_release(fx("os_release_debian12.txt"))
    assert (deb.id, deb.version_id, deb.version_codename) == ("debian", "12", "bookworm")
    assert deb.pretty_name == "Debian GNU/Linux 12 (bookworm)" and deb.id_like == ()
    ubu = parse_os_release(fx("os_release_ubuntu2404.txt"))
    assert (ubu.id, ubu.version_id, ubu.id_like) == ("ubuntu", "24.04", ("debian",))
    alp = parse_os_release(fx("os_release_alpine320.txt"))
    assert (alp.id, alp.version_id, alp.version_codename) == ("alpine", "3.20.3", None)
    rocky = parse_os_release(fx("os_release_rocky9.txt"))
    assert rocky.id == "rocky" and rocky.id_like == ("rhel", "centos", "fedora")
    assert rocky.fields["PLATFORM_ID"] == "platform:el9"


@pytest.mark.parametrize("text", ["", "# only a comment\n", "this is not os-release\n", 'NAME="unterminated\n'])
def test_os_release_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_os_release(text)


@pytest.mark.parametrize(
    ("name", "family", "version", "vendor", "package"),
    [
        ("ldd_debian12.txt", "glibc", "2.36", "Debian", "2.36-9+deb12u10"),
        ("ldd_ubuntu2404.txt", "glibc", "2.39", "Ubuntu", "2.39-0ubuntu8.4"),
        ("ldd_rocky9.txt", "glibc", "2.34", "GNU", None),
        ("ldd_alpine_musl.txt", "musl", "1.2.5", "musl", None),
    ],
)
def test_ldd_version(name: str, family: str, version: str, vendor: str, package: str | None) -> None:
    libc = parse_ldd_version(fx(name))
    assert (libc.family, libc.version, libc.vendor, libc.package_version) == (family, version, vendor, package)


def test_ldd_version_tuple_compares() -> None:
    assert parse_ldd_version(fx("ldd_ubuntu2404.txt")).version_tuple >= (2, 28)


@pytest.mark.parametrize("text", ["", "sh: ldd: not found\n", "musl libc (x86_64)\nno version\n"])
def test_ldd_version_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ldd_version(text)


def test_df_bytes_and_kib() -> None:
    host = parse_df(fx("df_B1_shm_host.txt"))
    assert (host.filesystem, host.size_bytes, host.mountpoint) == ("tmpfs", 270317133824, "/dev/shm")
    ct = parse_df(fx("df_k_shm_ct.txt"))
    assert ct.size_bytes == 32872724 * 1024 and ct.available_bytes == 32872724 * 1024
    small = parse_df(fx("df_busybox_shm_wrapped.txt"))
    assert small.filesystem == "shm-tmpfs-for-container-101"
    assert small.size_bytes == 64 * 1024 * 1024 and small.available_bytes == 0


def test_df_several_entries() -> None:
    text = fx("df_k_shm_ct.txt") + "tmpfs           32872724     0  32872724   0% /run/user/0\n"
    assert [e.mountpoint for e in parse_df_entries(text)] == ["/dev/shm", "/run/user/0"]
    with pytest.raises(ParseError, match="one filesystem"):
        parse_df(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Filesystem      Size  Used Avail Use% Mounted on\ntmpfs            32G     0   32G   0% /dev/shm\n",
        "Filesystem     1K-blocks  Used Available Use% Mounted on\n",
        "Filesystem     1K-blocks  Used Available Use% Mounted on\ntmpfs lots 0 1 0% /dev/shm\n",
        "df: /dev/shm: No such file or directory\n",
    ],
)
def test_df_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_df(text)


# --- nvidia-installer.log ---------------------------------------------------------------------


def test_installer_dkms_build_failure() -> None:
    log = parse_installer_log(fx("nvidia_installer_fail_build_dkms.log"))
    assert log.outcome == "failed"
    assert log.installer_version == "595.71.05" and log.driver_version == "595.71.05"
    assert log.command_line == ("./nvidia-installer", "--dkms", "-m=kernel-open", "--silent")
    assert log.errors[0].startswith("ERROR: Failed to run `/usr/sbin/dkms install -m nvidia -v 595.71.05")
    assert log.errors[-1].startswith("ERROR: Installation has failed.")
    assert log.failed_steps == (
        "-> Installation of the kernel module for the NVIDIA Accelerated Graphics Driver for Linux-x86_64 "
        "(version 595.71.05) failed.",
    )
    assert log.decisive_lines[1] == log.failed_steps[0]


def test_installer_missing_kernel_source() -> None:
    log = parse_installer_log(fx("nvidia_installer_fail_nosource.log"))
    assert log.outcome == "failed" and len(log.errors) == 2
    assert "Unable to find the kernel source tree" in log.errors[0]
    assert log.command_line == ("./nvidia-installer", "-s")


def test_installer_wrapped_console_load_failure() -> None:
    log = parse_installer_log(fx("nvidia_installer_fail_load_console.log"))
    assert log.outcome == "failed" and log.installer_version is None
    assert log.errors[0].startswith(
        "ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently"
    )
    assert "graphics driver release." in log.errors[0]  # continuation lines joined
    assert log.errors[1].startswith(
        "ERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log'"
    )
    assert log.kernel_module_load_error == "No such device"
    assert "-> Kernel module load error: No such device" in log.decisive_lines


def test_installer_drm_already_loaded() -> None:
    log = parse_installer_log(fx("nvidia_installer_fail_drm_loaded.log"))
    assert log.outcome == "failed"
    assert log.errors[0].startswith("ERROR: An NVIDIA kernel module 'nvidia-drm' appears to already be loaded")


def test_installer_userspace_success() -> None:
    log = parse_installer_log(fx("nvidia_installer_success_userspace.log"))
    assert log.outcome == "succeeded" and log.errors == ()
    assert "--no-kernel-modules" in log.command_line
    assert log.warnings[0].startswith("WARNING: The nvidia-drm module will not be installed.")
    assert log.decisive_lines == (
        "-> Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: 595.71.05) "
        "is now complete.",
    )


def test_installer_incomplete_log() -> None:
    text = fx("nvidia_installer_success_userspace.log").split("-> Searching for conflicting files:")[0]
    log = parse_installer_log(text)
    assert log.outcome == "incomplete" and log.driver_version == "595.71.05"


def test_installer_record_finished_and_unfinished() -> None:
    from provisioner.facts.installer_log import INSTALLER_RECORD_SEPARATOR, parse_installer_record

    full = fx("nvidia_installer_success_userspace.log")
    done = parse_installer_record(f"{INSTALLER_RECORD_SEPARATOR}\n{full}")
    assert done.leftover_installers == () and done.log is not None and done.unfinished is None
    # killed after the libraries (the log stops before its completion line; the copied .run stays in /root)
    cut = full.split("-> Searching for conflicting files:")[0]
    killed = parse_installer_record(f"/root/NVIDIA-Linux-x86_64-595.71.05.run\n{INSTALLER_RECORD_SEPARATOR}\n{cut}")
    assert killed.leftover_installers == ("NVIDIA-Linux-x86_64-595.71.05.run",)
    assert killed.unfinished is not None and "incomplete" in killed.unfinished and "still in /root" in killed.unfinished
    # no log and nothing left over (userspace installed some other way): nothing says unfinished
    assert parse_installer_record(f"{INSTALLER_RECORD_SEPARATOR}\n").unfinished is None
    # a log that is no installer's says nothing either; a missing separator is a parse error
    assert parse_installer_record(f"{INSTALLER_RECORD_SEPARATOR}\nhello\n").log is None
    with pytest.raises(ParseError):
        parse_installer_record("ls: cannot access '/root': Permission denied\n")


@pytest.mark.parametrize("text", ["", "hello\nworld\n", "Segmentation fault (core dumped)\n"])
def test_installer_log_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_installer_log(text)


# --- pip freeze -------------------------------------------------------------------------------


def test_pip_freeze_local_versions() -> None:
    freeze = parse_pip_freeze(fx("pip_freeze_torch_cu128.txt"))
    assert freeze.versions["torch"] == "2.11.0+cu128"
    assert freeze.versions["jinja2"] == "3.1.6"  # canonical names
    assert freeze.versions["typing-extensions"] == "4.14.0"
    assert freeze.versions["nvidia-nccl-cu12"] == "2.27.5"
    assert len(freeze.versions) == 20 and freeze.urls == {}


def test_uv_pip_freeze_direct_references() -> None:
    freeze = parse_pip_freeze(fx("uv_pip_freeze_direct.txt"))
    assert freeze.versions["burnin-probe"] == "0.3.1"
    assert freeze.versions["torch"] == "2.11.0+cu128"  # from the URL-quoted wheel name
    assert "gpu-provisioner-helpers" not in freeze.versions
    assert freeze.urls["gpu-provisioner-helpers"].startswith("git+https://")
    assert freeze.editable == ("file:///root/src/provisioner-tools",)
    assert freeze.versions["numpy"] == "2.3.1"


def test_pip_freeze_empty_environment_and_garbage() -> None:
    assert parse_pip_freeze("").versions == {}
    assert parse_pip_freeze("-e git+https://x.invalid/r.git@abc#egg=My_Pkg\n").editable == ("my-pkg",)
    for bad in ("torch 2.11.0\n", "error: No virtual environment found\n"):
        with pytest.raises(ParseError):
            parse_pip_freeze(bad)


# --- robustness: no parser raises anything but ParseError -------------------------------------

PARSERS: list[Callable[[str], Any]] = [
    parse_gpu_query_csv,
    parse_smi_q,
    parse_smi_table,
    parse_topo_matrix,
    parse_topo_p2p,
    parse_module_version,
    parse_proc_driver_version,
    parse_proc_devices,
    parse_ls_dev,
    parse_stat_dev,
    parse_installer_log,
    parse_pveversion,
    parse_cgroup_fs,
    parse_os_release,
    parse_ldd_version,
    parse_df,
    parse_pip_freeze,
    parse_smi_vgpu,
    parse_vgpu,
]
ALL_FIXTURES = sorted(p.name for p in FIXTURES.iterdir() if p.suffix in (".txt", ".log"))


def _only_parse_errors(parser: Callable[[str], Any], text: str) -> None:
    try:
        parser(text)
    except ParseError:
        pass


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
def test_every_fixture_through_every_parser(parser: Callable[[str], Any]) -> None:
    """Feeding one command's output to another's parser fails cleanly (ParseError) or parses."""
    for name in ALL_FIXTURES:
        _only_parse_errors(parser, fx(name))


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_truncated_and_mutated_fixtures(parser: Callable[[str], Any], data: st.DataObject) -> None:
    text = fx(data.draw(st.sampled_from(ALL_FIXTURES)))
    lines = text.split("\n")
    start = data.draw(st.integers(0, len(lines)))
    end = data.draw(st.integers(start, len(lines)))
    noise = data.draw(st.text(alphabet=" \t:|,=-X0123456789abcGPU\n", max_size=30))
    _only_parse_errors(parser, "\n".join(lines[start:end]) + noise)
