"""The lab's output generators: round trip through the parsers, and the shape of real outputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.facts.device_nodes import parse_ls_dev, parse_proc_devices
from provisioner.facts.driver_module import parse_module_version, parse_proc_driver_version
from provisioner.facts.models import NvidiaSmiFailed, SmiFailureKind
from provisioner.facts.proxmox import parse_pveversion
from provisioner.facts.smi_csv import parse_gpu_query_csv
from provisioner.facts.smi_failure import parse_smi_status
from provisioner.facts.smi_q import SmiNode, parse_smi_q, parse_smi_q_tree
from provisioner.facts.smi_table import parse_smi_table
from provisioner.facts.smi_topo import parse_topo_matrix, parse_topo_p2p
from provisioner.lab import render
from provisioner.lab.render import LabGpu, LabHost, reference_host

FIXTURES = Path(__file__).parent / "fixtures" / "outputs"


def fx(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# --- the reference host -----------------------------------------------------------------------


def test_reference_host_is_the_documented_node() -> None:
    host = reference_host()
    assert len(host.gpus) == 8
    assert {g.name for g in host.gpus} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert {g.compute_cap for g in host.gpus} == {"12.0"}
    assert {g.memory_mib for g in host.gpus} == {97887}
    assert len({g.bus_id for g in host.gpus}) == 8 and len({g.uuid for g in host.gpus}) == 8
    assert (host.driver_version, host.flavour, host.cuda_version) == ("595.71.05", "open", "13.2")
    assert (host.pve_version, host.kernel, host.uvm_major) == ("8.4.1", "6.8.12-10-pve", 511)
    assert reference_host() == host  # deterministic


def test_lab_outputs_say_lab_where_text_is_free() -> None:
    host = reference_host()
    assert all("LAB" in (g.serial_number or "") for g in parse_smi_q(render.render_smi_q(host)).gpus)
    assert "LAB" in parse_proc_driver_version(render.render_proc_driver_version(host)).build_info


# --- round trips ------------------------------------------------------------------------------


def _assert_query_matches(host: LabHost, text: str) -> None:
    gpus = parse_gpu_query_csv(text)
    assert [(g.index, g.name, g.uuid, g.pci_bus_id, g.compute_cap, g.driver_version, g.memory_mib) for g in gpus] == [
        (g.index, g.name, g.uuid, g.bus_id, g.compute_cap, host.driver_version, g.memory_mib) for g in host.gpus
    ]


@pytest.mark.parametrize(("units", "header"), [(True, False), (False, False), (True, True), (False, True)])
def test_query_csv_round_trip(units: bool, header: bool) -> None:
    host = reference_host()
    _assert_query_matches(host, render.render_query_csv(host, units=units, header=header))


def _assert_smi_q_matches(host: LabHost, text: str) -> None:
    q = parse_smi_q(text)
    assert (q.driver_version, q.cuda_version, q.attached_gpus) == (
        host.driver_version,
        host.cuda_version,
        len(host.gpus),
    )
    for got, want in zip(q.gpus, host.gpus, strict=True):
        assert (got.bus_id, got.product_name, got.uuid, got.minor_number) == (
            want.bus_id,
            want.name,
            want.uuid,
            want.index,
        )
        assert got.memory_total_mib == want.memory_mib
        assert (got.pcie_gen_current, got.pcie_gen_max) == (want.pcie_gen_current, want.pcie_gen_max)
        assert (got.pcie_width_current, got.pcie_width_max) == (want.pcie_width_current, want.pcie_width_max)
        assert got.ecc_enabled is host.ecc and got.persistence_mode is host.persistence
        assert got.temperature_c == want.temperature_c
        assert got.power_draw_w == pytest.approx(want.power_draw_w, abs=0.005)
        assert got.power_limit_w == pytest.approx(want.power_limit_w)


def test_smi_q_round_trip() -> None:
    host = reference_host()
    _assert_smi_q_matches(host, render.render_smi_q(host))


def _assert_table_matches(host: LabHost, text: str) -> None:
    t = parse_smi_table(text)
    assert (t.smi_version, t.driver_version, t.cuda_version) == (
        host.driver_version,
        host.driver_version,
        host.cuda_version,
    )
    assert t.processes == ("No running processes found",)
    for got, want in zip(t.gpus, host.gpus, strict=True):
        assert (got.index, got.bus_id) == (want.index, want.bus_id)
        assert got.name == render.smi_display_name(want.name)
        assert want.name.startswith(got.name.removesuffix("..."))
        assert got.memory_total_mib == want.memory_mib and got.memory_used_mib == want.memory_used_mib
        assert got.temperature_c == want.temperature_c
        assert got.power_cap_w == round(want.power_limit_w)
        assert got.persistence_mode is host.persistence


def test_smi_table_round_trip() -> None:
    host = reference_host()
    _assert_table_matches(host, render.render_smi_table(host))


@pytest.mark.parametrize("ansi", [False, True])
def test_topo_m_round_trip(ansi: bool) -> None:
    host = reference_host()
    t = parse_topo_matrix(render.render_topo_m(host, ansi=ansi))
    assert t.devices == tuple(f"GPU{g.index}" for g in host.gpus)
    for a in host.gpus:
        for b in host.gpus:
            assert t.link(f"GPU{a.index}", f"GPU{b.index}") == render.topo_link(a, b)
        assert t.numa_affinity[f"GPU{a.index}"] == str(a.numa_node)
        assert t.cpu_affinity[f"GPU{a.index}"] == host.cpu_affinity[a.numa_node]
    assert t.link("GPU0", "GPU3") == "NODE" and t.link("GPU0", "GPU4") == "SYS"


@pytest.mark.parametrize("p2p", ["OK", "CNS", "NS"])
def test_topo_p2p_round_trip(p2p: str) -> None:
    host = reference_host().model_copy(update={"p2p": p2p})
    m = parse_topo_p2p(render.render_topo_p2p(host))
    assert m.gpus == tuple(f"GPU{i}" for i in range(8))
    assert m.all_ok() is (p2p == "OK")
    assert {m.status[a][b] for a in m.gpus for b in m.gpus if a != b} == {p2p}


@pytest.mark.parametrize("flavour", ["open", "proprietary"])
def test_driver_version_files_round_trip(flavour: str) -> None:
    host = reference_host().model_copy(update={"flavour": flavour})
    info = parse_proc_driver_version(render.render_proc_driver_version(host))
    assert (info.version, info.flavour, info.arch) == ("595.71.05", flavour, "x86_64")
    assert info.gcc_version == host.gcc_version.strip()
    assert parse_module_version(render.render_sys_module_version(host)) == host.driver_version


def test_proc_devices_round_trip() -> None:
    host = reference_host().model_copy(update={"uvm_major": 509, "caps_major": 237})
    d = parse_proc_devices(render.render_proc_devices(host))
    assert (d.nvidia_major, d.uvm_major, d.caps_major) == (195, 509, 237)
    assert d.char["nvidiactl"] == 195


def test_ls_dev_round_trip() -> None:
    host = reference_host()
    listing = parse_ls_dev(render.render_ls_dev(host))
    got = sorted((n.path, n.major, n.minor, n.mode) for n in listing.nodes)
    assert got == sorted(render.lab_dev_nodes(host))
    assert {n.owner for n in listing.nodes} == {"root"} and listing.missing == ()
    by_path = listing.by_path()
    assert (by_path["/dev/nvidia-uvm"].major, by_path["/dev/nvidia-uvm-tools"].minor) == (511, 1)
    assert by_path["/dev/nvidiactl"].minor == 255 and by_path["/dev/nvidia7"].minor == 7


@pytest.mark.parametrize("verbose", [False, True])
def test_pveversion_round_trip(verbose: bool) -> None:
    host = reference_host()
    v = parse_pveversion(render.render_pveversion(host, verbose=verbose))
    assert (v.manager_version, v.repoid, v.running_kernel, v.release) == (
        "8.4.1",
        "2a5fa54a8503f96d",
        "6.8.12-10-pve",
        (8, 4),
    )
    if verbose:
        assert v.packages["proxmox-ve"] == "8.4.0" and "pve-container" in v.packages


def test_mismatch_and_no_driver_errors() -> None:
    failure = parse_smi_status(render.render_mismatch_error("570.124")).failure
    assert failure is not None and failure.kind is SmiFailureKind.DRIVER_LIBRARY_MISMATCH
    assert failure.nvml_library_version == "570.124"
    with pytest.raises(NvidiaSmiFailed) as info:
        parse_gpu_query_csv(render.render_no_driver_error())
    assert info.value.failure.kind is SmiFailureKind.NO_DRIVER


# --- the shape of real recorded outputs -------------------------------------------------------


def test_error_texts_equal_the_recorded_ones() -> None:
    assert render.render_mismatch_error("570.124") == fx("smi_mismatch.txt")
    assert render.render_no_driver_error() == fx("smi_no_driver.txt")


def test_smi_table_matches_recorded_r595_layout() -> None:
    """Rendered from the values of GPU 0 of a recorded R595 table, the lines are identical."""
    recorded = fx("smi_table_rtxpro6000_x2_595.txt").split("\n")
    gpu = LabGpu(
        index=0,
        name=render.REFERENCE_GPU_NAME,
        uuid=render.lab_gpu_uuid(0),
        bus_id="00000000:16:00.0",
        compute_cap="12.0",
        memory_mib=97887,
        temperature_c=27,
        power_draw_w=36.0,
    )
    host = LabHost(gpus=(gpu,), driver_version="595.71.05", cuda_version="13.2")
    rendered = render.render_smi_table(host, timestamp="Tue Jun 16 11:20:05 2026").split("\n")
    assert rendered[:12] == recorded[:12]  # timestamp, title, headers and the whole GPU 0 block
    # spacer line, process box header, its bottom rule: as recorded; the row says no processes
    assert rendered[-9:-3] == recorded[-9:-3] and rendered[-2:] == recorded[-2:]
    assert rendered[-3] == "|  No running processes found" + " " * 61 + "|"
    assert {len(line) for line in rendered[1:] if line.strip()} == {91}


def test_smi_table_columns_line_up_with_recorded_r570() -> None:
    recorded = [ln for ln in fx("smi_table_rtx5090_570.txt").split("\n") if ln.startswith("|")]
    rendered = [ln for ln in render.render_smi_table(reference_host()).split("\n") if ln.startswith("|")]

    def bars(line: str) -> tuple[int, ...]:
        return tuple(i for i, c in enumerate(line) if c == "|")

    gpu_rows_recorded = {bars(ln) for ln in recorded[6:9]}
    gpu_rows_rendered = {bars(ln) for ln in rendered[6:-5]}
    assert gpu_rows_rendered == gpu_rows_recorded


def _paths(node: SmiNode, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for child in node.children:
        path = (*prefix, child.key.lower())
        out.add(path)
        out |= _paths(child, path)
    return out


def _gpu_block_paths(text: str) -> set[tuple[str, ...]]:
    tree = parse_smi_q_tree(text)
    paths: set[tuple[str, ...]] = set()
    for block in tree.children:
        if block.key.startswith("GPU "):
            paths |= _paths(block)
    return paths


def test_smi_q_keys_are_keys_real_nvidia_smi_prints() -> None:
    recorded = set().union(
        *(
            _gpu_block_paths(fx(n))
            for n in ("smi_q_rtx5090_570.txt", "smi_q_a100_x2_535.txt", "smi_q_v100_460_legacy.txt")
        )
    )
    rendered = _gpu_block_paths(render.render_smi_q(reference_host()))
    assert rendered - recorded == set()
    assert len(rendered) > 150


def test_smi_q_colon_column_matches_recorded() -> None:
    def colon_columns(text: str) -> set[int]:
        return {m.start() for ln in text.split("\n") if (m := re.search(r" : |: $|:$", ln)) and " : " in ln}

    assert colon_columns(render.render_smi_q(reference_host())) == colon_columns(fx("smi_q_rtx5090_570.txt"))
    head = render.render_smi_q(reference_host()).split("\n")[:8]
    assert head[:3] == fx("smi_q_rtx5090_570.txt").split("\n")[:3]  # "", "===NVSMI LOG===", ""


def test_query_csv_line_shape_matches_recorded() -> None:
    pattern = re.compile(r"^\d+, [^,]+, GPU-[0-9a-f-]{36}, [0-9A-F]{8}:[0-9A-F]{2}:00\.0, \d+\.\d, [\d.]+, \d+ MiB$")
    for line in fx("smi_query_csv_rtxpro6000_x2_580.txt").splitlines():
        assert pattern.match(line)
    for line in render.render_query_csv(reference_host()).splitlines():
        assert pattern.match(line)


def test_topo_layout_matches_recorded() -> None:
    rendered = render.render_topo_m(reference_host()).split("\n")
    recorded = fx("topo_m_h100_x8_nvlink_nics_550.txt").split("\n")
    legend_at = recorded.index("Legend:")
    assert rendered[rendered.index("Legend:") :] == recorded[legend_at : legend_at + 10]
    header = rendered[0].split("\t")
    assert header[0] == "" and header[-3:] == recorded[0].split("\t")[-3:]
    gpu0 = rendered[1].split("\t")
    assert gpu0[1] == " X " and gpu0[-2:] == ["", "N/A"]  # the empty cell real output has
    p2p = render.render_topo_p2p(reference_host().model_copy(update={"p2p": "CNS"})).split("\n")
    recorded_p2p = fx("topo_p2p_r_x4_cns.txt").split("\n")
    assert p2p[p2p.index("Legend:") :] == recorded_p2p[recorded_p2p.index("Legend:") :]
    assert all(re.match(r"^ GPU\d\t(?:(?:X|OK|CNS)\t)+$", ln) for ln in p2p[1:9])
    assert all(re.match(r"^ GPU\d\t(?:(?:X|OK|CNS)\t)+$", ln) for ln in recorded_p2p[1:5])


def test_proc_devices_and_ls_shape_match_recorded() -> None:
    line_re = re.compile(r"^(?:Character devices:|Block devices:|[ \d]{3} \S+|)$")
    assert all(line_re.match(ln) for ln in fx("proc_devices_595_open.txt").split("\n"))
    assert all(line_re.match(ln) for ln in render.render_proc_devices(reference_host()).split("\n"))
    ls_re = re.compile(r"^c[-rw]{9} 1 \w+ \w+ +\d+, +\d+ \w{3} [ \d]\d \d\d:\d\d \S+$")
    recorded = [ln for ln in fx("ls_dev_nvidia_host_x2.txt").split("\n") if ln.startswith("c")]
    rendered = [ln for ln in render.render_ls_dev(reference_host()).split("\n") if ln.startswith("c")]
    assert all(ls_re.match(ln) for ln in recorded + rendered)
    assert [ln.split()[-1] for ln in rendered[:3]] == [ln.split()[-1] for ln in recorded[:3]]  # C-locale order


def test_proc_driver_version_banner_matches_recorded() -> None:
    host = reference_host().model_copy(update={"driver_version": "590.48.01"})
    rendered = render.render_proc_driver_version(host).split("\n")
    recorded = fx("proc_driver_version_open_590.txt").split("\n")
    assert rendered[0].split("  ")[:3] == recorded[0].split("  ")[:3]
    assert rendered[1] == recorded[1]


# --- property: any lab host round-trips -----------------------------------------------------------

_NAMES = [
    render.REFERENCE_GPU_NAME,
    "NVIDIA H100 80GB HBM3",
    "NVIDIA GeForce RTX 5090",
    "NVIDIA L4",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
]


@st.composite
def lab_hosts(draw: st.DrawFn) -> LabHost:
    n = draw(st.integers(1, 8))
    buses = draw(st.lists(st.integers(1, 255), min_size=n, max_size=n, unique=True))
    gpus = tuple(
        LabGpu(
            index=i,
            name=draw(st.sampled_from(_NAMES)),
            uuid=render.lab_gpu_uuid(i, "prop"),
            bus_id=f"00000000:{bus:02X}:00.0",
            compute_cap=draw(st.sampled_from(["12.0", "9.0", "8.9"])),
            memory_mib=draw(st.integers(1024, 200000)),
            numa_node=draw(st.integers(0, 1)),
            temperature_c=draw(st.integers(20, 95)),
            power_draw_w=draw(st.floats(5, 700).map(lambda x: round(x, 2))),
            power_limit_w=draw(st.sampled_from([300.0, 450.0, 600.0, 700.0])),
            pcie_gen_current=draw(st.integers(1, 5)),
            pcie_width_current=draw(st.sampled_from([1, 4, 8, 16])),
        )
        for i, bus in enumerate(buses)
    )
    driver = draw(st.from_regex(r"\A(5[5-9]\d|6[01]\d)\.\d{2,3}\.\d{2}\Z"))
    return LabHost(
        gpus=gpus,
        driver_version=driver,
        flavour=draw(st.sampled_from(["open", "proprietary"])),
        cuda_version=draw(st.sampled_from(["12.8", "13.0", "13.2"])),
        p2p=draw(st.sampled_from(["OK", "CNS", "GNS", "NS"])),
        persistence=draw(st.booleans()),
        ecc=draw(st.booleans()),
    )


@settings(max_examples=40, deadline=None)
@given(host=lab_hosts())
def test_any_lab_host_round_trips(host: LabHost) -> None:
    _assert_query_matches(host, render.render_query_csv(host))
    _assert_smi_q_matches(host, render.render_smi_q(host))
    _assert_table_matches(host, render.render_smi_table(host))
    topo = parse_topo_matrix(render.render_topo_m(host))
    assert topo.gpus == tuple(f"GPU{g.index}" for g in host.gpus)
    p2p = parse_topo_p2p(render.render_topo_p2p(host))
    assert p2p.all_ok() is (host.p2p == "OK" or len(host.gpus) == 1)
    info = parse_proc_driver_version(render.render_proc_driver_version(host))
    assert (info.version, info.flavour) == (host.driver_version, host.flavour)
    assert len(parse_ls_dev(render.render_ls_dev(host)).nodes) == len(host.gpus) + 6
