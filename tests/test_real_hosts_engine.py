"""The engine on the lab's real-host profiles (issue #14, engine side): facts read from each profile's
node (real bash in the node's namespace, the engine's own argv), GPU selection by device minor, only
existing device nodes passed (skips named with why), the UUID-exact check, the open-module and
fabric-manager preflight, the driver layouts, and the one branch end-of-life rule."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provisioner.driver_eol import RULES, branch_eol_problems
from provisioner.events import Event
from provisioner.facts import catalog, pci, proxmox, smi_csv, system
from provisioner.facts.base import Fact
from provisioner.lab.profiles import get_profile
from provisioner.resolver import ResolveError, ResolveRequest, resolve
from provisioner.steps.base import Params, Plan, StepFailed, StepKind
from provisioner.steps.context import ChecksumConfirmation, StepContext
from provisioner.steps.driver_userspace import driver_sources, is_datacenter, tesla_base
from provisioner.steps.gpu_common import PassthroughParams, device_selection, visible_gpu_problem
from provisioner.steps.host_preflight import fabric_manager_failure, open_module_failure
from provisioner.steps.state import HostInventory
from tests.support.lab import node
from tests.support.lab import profile_lab as make_lab

pytestmark = pytest.mark.timeout(240)


def probe(state: object, fact: Fact[object]) -> object:
    """Run the engine's own argv for `fact` on the lab node and parse it with the fact's parser."""
    r = node(state, shlex.join(fact.argv))  # type: ignore[arg-type]
    assert r.returncode in fact.ok_statuses, r.stdout
    return fact.parse(r.stdout)


def inventory_of(state: object) -> HostInventory:
    """The HostInventory node.inventory builds, from the node's own outputs through the engine's facts."""
    gpus = probe(state, catalog.GPUS)
    devices = probe(state, catalog.PROC_DEVICES)
    nodes = probe(state, catalog.DEV_NODES)
    info = probe(state, catalog.GPU_INFORMATION)
    pve = probe(state, catalog.PVEVERSION)
    cgroup = system.parse_cgroup_fs("cgroup2fs\n")
    assert isinstance(pve, proxmox.PveVersion)
    return HostInventory(gpus=gpus, driver_version=gpus[0].driver_version, module_flavour="open",  # type: ignore
                         uvm_major=devices.uvm_major, caps_major=devices.caps_major,  # type: ignore[attr-defined]
                         device_nodes=sorted(n.path for n in nodes.nodes),  # type: ignore[attr-defined]
                         pve_version=pve.manager_version, pve_release=tuple(pve.release), kernel=pve.running_kernel,
                         cgroup_version=cgroup.version, gpu_minors={i.bus_id: i.minor for i in info})  # type: ignore


# --- GPU selection by device minor, existing nodes only ---------------------------------------------


def test_minors_shuffled_subset_maps_indices_to_device_minors(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "minors-shuffled")
    inv = inventory_of(state)
    p = get_profile("minors-shuffled")
    # the fact: /proc/driver/nvidia/gpus/<bus>/information Device Minor, keyed as nvidia-smi prints the bus
    assert [inv.minor_of(g) for g in inv.gpus] == list(p.minors) == [2, 0, 3, 1]
    sel = device_selection(inv, PassthroughParams(gpus=[1, 3]))
    assert [g.index for g in sel.gpus] == [1, 3]
    assert sel.devices[:2] == ["/dev/nvidia0", "/dev/nvidia1"]  # minors of index 1 and 3, not /dev/nvidia1, 3
    assert "/dev/nvidia3" not in sel.devices and "/dev/nvidia-modeset" in sel.devices  # modeset loaded here
    assert sel.skipped == []


def test_h200_headless_node_skips_modeset_and_says_why(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "h200-hgx-8x")
    inv = inventory_of(state)
    sel = device_selection(inv, PassthroughParams())
    assert "/dev/nvidia-modeset" not in sel.devices
    assert sel.devices == [f"/dev/nvidia{i}" for i in range(8)] + ["/dev/nvidiactl", "/dev/nvidia-uvm",
                                                                  "/dev/nvidia-uvm-tools"]
    (why,) = sel.skipped_notes()
    assert why.startswith("/dev/nvidia-modeset: not present on this host (nvidia-modeset not loaded; headless node)")
    # caps asked for: the HGX board has them, so they are passed, not skipped
    with_caps = device_selection(inv, PassthroughParams(caps=True))
    assert "/dev/nvidia-caps/nvidia-cap1" in with_caps.devices and len(with_caps.skipped) == 1


def test_reference_host_passes_modeset(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "rtxpro6000-8x")
    sel = device_selection(inventory_of(state), PassthroughParams())
    assert "/dev/nvidia-modeset" in sel.devices and sel.skipped == []
    # caps asked for on a host without them: skipped with the reason
    caps = device_selection(inventory_of(state), PassthroughParams(caps=True))
    assert [p for p, _ in caps.skipped] == ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]


def test_uuid_check_names_extra_and_missing_gpus() -> None:
    assert visible_gpu_problem(["GPU-a", "GPU-b"], ["GPU-b", "GPU-a"], 200) is None
    problem = visible_gpu_problem(["GPU-a", "GPU-b"], ["GPU-a", "GPU-c"], 200)
    assert problem is not None
    assert "GPUs not selected are visible: GPU-c" in problem and "selected GPUs are missing: GPU-b" in problem
    # counting is not enough: the same number of GPUs, the wrong ones
    assert visible_gpu_problem(["GPU-a"], ["GPU-z"], 200) is not None


def test_nvidia_smi_L_parser_reads_the_lab_node(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "minors-shuffled")
    listed = smi_csv.parse_smi_list(node(state, "nvidia-smi -L").stdout)
    gpus = probe(state, catalog.GPUS)
    assert [(i, u) for i, _, u in listed] == [(g.index, g.uuid) for g in gpus]  # type: ignore[attr-defined]


# --- preflight ------------------------------------------------------------------------------------------


def test_blackwell_proprietary_is_named_from_pci_ids_when_nvidia_smi_finds_no_devices(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "blackwell-proprietary")
    smi = node(state, shlex.join(catalog.GPUS.argv))
    assert smi.returncode == 6 and "No devices were found" in smi.stdout
    proc = probe(state, catalog.PROC_DRIVER_VERSION)
    pci = probe(state, catalog.PCI_NVIDIA)
    failure = open_module_failure("pve", proc, None, pci)  # type: ignore[arg-type]
    assert failure is not None
    assert "open kernel module" in failure.message and "proprietary" in failure.message
    assert "nvidia-open" in failure.fix and "NVreg_OpenRmEnableUnsupportedGpus is not the fix" in failure.fix
    (finding,) = failure.findings
    assert finding["rule"] == "preflight.open_kernel_module" and finding["category"] == "no_driver_loaded"
    assert failure.exit_code == 1


def test_open_module_on_blackwell_and_proprietary_on_hopper_pass(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "rtxpro6000-8x")
    proc = probe(state, catalog.PROC_DRIVER_VERSION)
    gpus = probe(state, catalog.GPUS)
    assert open_module_failure("pve", proc, gpus, []) is None  # type: ignore[arg-type]
    # the same Blackwell GPUs reported by a proprietary module: refused by compute capability
    prop = proc.model_copy(update={"flavour": "proprietary"})  # type: ignore[attr-defined]
    assert open_module_failure("pve", prop, gpus, []) is not None  # type: ignore[arg-type]
    hopper = [g.model_copy(update={"compute_cap": "9.0"}) for g in gpus]  # type: ignore[attr-defined]
    assert open_module_failure("pve", prop, hopper, []) is None


@pytest.mark.parametrize("scenario", [None, "fabricmanager-down"])
def test_fabric_manager_preflight_on_the_hgx_node(tmp_path: Path, scenario: str | None) -> None:
    state = make_lab(tmp_path / "lab", "h200-hgx-8x", *([scenario] if scenario else []))
    nvswitch = probe(state, catalog.NVSWITCH)
    fabric = probe(state, catalog.FABRIC_STATES)
    unit = probe(state, catalog.FABRICMANAGER)
    assert nvswitch.present and "/dev/nvidia-nvswitch0" in nvswitch.dev_nodes  # type: ignore[attr-defined]
    assert len(fabric) == 8  # type: ignore[arg-type]
    failure = fabric_manager_failure("pve", nvswitch, fabric, unit)  # type: ignore[arg-type]
    if scenario is None:
        assert unit.active and failure is None  # type: ignore[attr-defined]
        return
    assert unit.state == "inactive"  # type: ignore[attr-defined]
    assert failure is not None and "nvidia-fabricmanager" in failure.message
    assert "systemctl enable --now nvidia-fabricmanager" in failure.fix
    assert failure.findings[0]["rule"] == "preflight.fabric_manager"
    assert set(fabric.values()) == {"Not Started"}  # type: ignore[attr-defined]


def test_no_nvswitch_no_fabric_manager_needed(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "rtxpro6000-8x")
    nvswitch = probe(state, catalog.NVSWITCH)
    fabric = probe(state, catalog.FABRIC_STATES)
    assert not nvswitch.present and fabric == {}  # type: ignore[attr-defined]
    unit = probe(state, catalog.FABRICMANAGER)  # not installed on this node: "could not be found"
    assert not unit.active  # type: ignore[attr-defined]
    assert fabric_manager_failure("pve", nvswitch, fabric, unit) is None  # type: ignore[arg-type]


def test_nvswitch_seen_on_pci_alone() -> None:
    """A real HGX lspci line (class Bridge [0680], pci.ids "GH100 [H100 NVSwitch]" 10de:22a3)."""
    facts = pci.parse_nvswitch("pci: 07:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] "
                                  "(rev a1)\npci: 18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 "
                                  "80GB] [10de:2330] (rev a1)\n")
    assert facts.pci == ("07:00.0 [10de:22a3]",) and facts.present


# --- driver layouts -------------------------------------------------------------------------------------


def test_driver_sources_follow_gpu_class_and_arch() -> None:
    h200 = driver_sources("580.95.05", "x86_64", None, datacenter=True)
    assert [s.layout for s in h200] == ["tesla", "XFree86"]
    assert h200[0].url == "https://us.download.nvidia.com/tesla/580.95.05/NVIDIA-Linux-x86_64-580.95.05.run"
    assert h200[0].checksum_url is None
    rtx = driver_sources("595.71.05", "x86_64", None, datacenter=False)
    assert rtx[0].url == "https://download.nvidia.com/XFree86/Linux-x86_64/595.71.05/NVIDIA-Linux-x86_64-595.71.05.run"
    assert rtx[0].checksum_url == rtx[0].url + ".sha256sum"
    gh = driver_sources("580.95.05", "aarch64", "http://127.0.0.1:9/XFree86", datacenter=True)
    assert [s.url for s in gh] == [
        "http://127.0.0.1:9/tesla/580.95.05/NVIDIA-Linux-aarch64-580.95.05.run",
        "http://127.0.0.1:9/XFree86/Linux-aarch64/580.95.05/NVIDIA-Linux-aarch64-580.95.05.run"]
    assert tesla_base("https://mirror.example/nvidia/XFree86/") == "https://mirror.example/nvidia/tesla"


def test_gpu_class_from_the_profiles_names() -> None:
    from provisioner.facts.models import Gpu

    def g(name: str) -> Gpu:
        return Gpu(index=0, name=name, uuid="GPU-0", pci_bus_id="00000000:01:00.0", compute_cap="9.0",
                   driver_version="580.95.05", memory_mib=1)

    assert is_datacenter([g(get_profile("h200-hgx-8x").gpu.name)])
    assert is_datacenter([g(get_profile("gh200-aarch64").gpu.name)])
    assert not is_datacenter([g(get_profile("rtxpro6000-8x").gpu.name)])


# --- one branch end-of-life rule ------------------------------------------------------------------------


@pytest.mark.parametrize(("cc", "driver", "stops"), [
    ("7.0", "590.44.01", True), ("7.0", "580.95.05", False), ("6.1", "595.71.05", True), ("5.2", "580.95.05", False),
    ("7.5", "595.71.05", False), ("3.5", "535.54.03", True), ("3.5", "470.256.02", False), ("12.0", "595.71.05", False),
])
def test_resolver_and_driver_step_apply_the_same_eol_rule(cc: str, driver: str, stops: bool) -> None:
    from provisioner.steps.driver_userspace import legacy_gpu_problem
    from provisioner.steps.state import HostInventory as Inv

    problems = branch_eol_problems([cc], driver)
    assert bool(problems) is stops
    gpu = smi_csv.parse_gpu_query_csv(f"0, GPU, GPU-0, 00000000:01:00.0, {cc}, {driver}, 1000 MiB\n")
    inv = Inv(gpus=gpu, driver_version=driver, module_flavour="open", uvm_major=None, caps_major=None,
              device_nodes=[], pve_version="8.4.1", pve_release=(8, 4), kernel="k", cgroup_version=2)
    assert (legacy_gpu_problem(inv, driver) is not None) is stops  # the driver step
    result = resolve(ResolveRequest(cc=[cc], driver=driver, python="3.12"))
    refused = result if isinstance(result, ResolveError) else None
    if stops:  # the resolver refuses the same host, naming the family's last branch
        assert refused is not None and refused.code == "driver_too_new", refused
        assert f"R{problems[0].rule.last_branch}" in refused.fix
    else:
        assert refused is None or refused.code != "driver_too_new"


def test_eol_rules_cover_maxwell_pascal_volta_with_r580() -> None:
    (mpv,) = [r for r in RULES if r.last_branch == 580]
    assert mpv.applies((5, 0)) and mpv.applies((6, 1)) and mpv.applies((7, 2)) and not mpv.applies((7, 5))


# --- an unpublished checksum: shown, pinned, confirmed or recorded ---------------------------------------


class _TeslaServer:
    """A real HTTP server with download.nvidia.com's tesla/ layout: the .run and no .sha256sum."""

    def __init__(self, body: bytes, version: str) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        path = f"/tesla/{version}/NVIDIA-Linux-x86_64-{version}.run"

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def do_HEAD(self) -> None:
                self._serve(head=True)

            def do_GET(self) -> None:
                self._serve(head=False)

            def _serve(self, head: bool) -> None:
                found = self.path == path
                data = body if found else b"404"
                self.send_response(200 if found else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/XFree86"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_unpublished_checksum_is_shown_then_needs_a_pin_a_confirmation_or_the_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import hashlib

    from provisioner import download as dl
    from provisioner import playbook
    from provisioner.events import Bus
    from provisioner.steps.context import StepContext
    from provisioner.steps.driver_userspace import DriverParams, DriverUserspaceStep
    from provisioner.transport.local import LocalTransport

    monkeypatch.setenv("PROVISIONER_CACHE_DIR", str(tmp_path / "cache"))
    version = "580.95.05"
    body = b"#!/bin/sh\n# a .run stand-in\n" + bytes(range(256)) * 64
    sha = hashlib.sha256(body).hexdigest()
    server = _TeslaServer(body, version)
    try:
        (source, xfree) = driver_sources(version, "x86_64", server.base, datacenter=True)
        assert dl.url_exists(source.url) and not dl.url_exists(xfree.url)  # HEAD: 200 / 404
        pb = playbook.load(Path(__file__).resolve().parents[1] / "playbooks" / "h200-hgx-8x.yaml")

        def ctx() -> StepContext:
            return StepContext(playbook=pb, host="pve", bus=Bus(), node=LocalTransport())

        def step(**params: object) -> DriverUserspaceStep:
            return DriverUserspaceStep(DriverParams.model_validate({"driver_mirror": server.base, **params}))

        # headless, no pin: stop, naming the sha256 of what was downloaded and how to pin it
        with pytest.raises(StepFailed) as stop:
            asyncio.run(step()._expected(ctx(), source))
        assert stop.value.exit_code == 2 and sha in stop.value.message and f"sha256: {sha}" in stop.value.fix
        # the front end's hook: asked with the sha256 and size; refusing stops, confirming proceeds
        asked: list[ChecksumConfirmation] = []

        def hook(answer: bool) -> object:
            async def confirm(request: ChecksumConfirmation) -> bool:
                asked.append(request)
                return answer
            return confirm

        refused = ctx()
        refused.confirm_checksum = hook(False)  # type: ignore[assignment]
        with pytest.raises(StepFailed):
            asyncio.run(step()._expected(refused, source))
        confirmed = ctx()
        confirmed.confirm_checksum = hook(True)  # type: ignore[assignment]
        s = step()
        assert asyncio.run(s._expected(confirmed, source)) == sha and s._checksum == "confirmed"
        assert [(a.sha256, a.size, a.url) for a in asked] == [(sha, len(body), source.url)] * 2
        # pinned in the playbook, or recorded in resolved by an earlier run: no question asked
        pinned = step(sha256=sha)
        assert asyncio.run(pinned._expected(ctx(), source)) == sha and pinned._checksum == "pinned"
        recorded = ctx()
        recorded.resolved = recorded.resolved.merged({"driver": {"filename": source.filename, "sha256": sha}})
        r = step()
        assert asyncio.run(r._expected(recorded, source)) == sha and r._checksum == "recorded"
        assert len(asked) == 2
    finally:
        server.close()


# --- the wizard's confirmation: applying a confirmed plan that showed the sha256 confirms it -------------


class _PinParams(Params):
    sha256: str
    asked: str


class _UnpublishedChecksumStep(StepKind[_PinParams]):
    """`test.unpublished`: shows a sha256 in its plan and asks the context to confirm it on apply (as
    driver.userspace does for tesla/), writing the answer to `asked`."""

    kind = "test.unpublished"
    title = "confirm an unpublished checksum"
    Params = _PinParams

    async def check(self, ctx: StepContext) -> Plan:
        return Plan(changes=["install"], notes=[f"the downloaded file has sha256 {self.params.sha256}"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        request = ChecksumConfirmation(host=ctx.host, step=self.kind, url="http://x/y.run", filename="y.run",
                                       sha256=self.params.sha256, size=1)
        ok = ctx.confirm_checksum is not None and await ctx.confirm_checksum(request)
        Path(self.params.asked).write_text("confirmed" if ok else "refused")
        if not ok:
            raise StepFailed("not confirmed", exit_code=2)
        yield ctx.info("confirmed")


async def test_stepwise_apply_of_a_confirmed_plan_confirms_the_sha256_it_showed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.playbook import loads
    from provisioner.stepwise import StepSession
    from tests.support.step_kinds import use_kinds

    use_kinds(monkeypatch, _UnpublishedChecksumStep)
    sha = "ab" * 32
    asked = tmp_path / "asked"
    pb = loads(f"""schema_version: 1
target: {{host: localhost, local: true}}
steps:
  - {{kind: test.unpublished, params: {{sha256: "{sha}", asked: "{asked}"}}}}
""")
    session = StepSession(pb, runs_dir=tmp_path)
    # applied without a plan on screen: nothing showed the sha256, so it is not confirmed
    assert await session.apply(0) == "failed" and asked.read_text() == "refused"
    # planned (the page shows the sha256), then applied on the operator's confirmation
    assert await session.plan(0) == "planned"
    assert await session.apply(0) == "changed" and asked.read_text() == "confirmed"
    # a front end's own dialog decides instead of the plan
    session.context().confirm_checksum = _refuse
    assert await session.plan(0) == "planned"
    assert await session.apply(0) == "failed" and asked.read_text() == "refused"
    await session.close()


async def _refuse(request: ChecksumConfirmation) -> bool:
    return False
