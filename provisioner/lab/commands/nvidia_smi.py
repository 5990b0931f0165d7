"""``nvidia-smi`` stand-in, on the lab node (``--lab-view=node``, default) and inside a container
(``--lab-view=ct``: the copy the driver installer put in ``/usr/bin``).

It answers from what the calling view really holds: the host module version from
``/sys/module/nvidia/version``, the userspace version from the ``libnvidia-ml.so.1`` link (in a
container), and the GPUs whose ``/dev/nvidiaN`` nodes exist and are usable (a mode-000 node is
one the device cgroup denies). Output is rendered by `provisioner.lab.render`. Exit codes as
the real tool: 0, 2 bad arguments, 6 no devices, 9 no driver, 12 NVML library missing,
18 driver/library version mismatch, 255 other error.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from provisioner.lab import render
from provisioner.lab.commands._common import die, out, state
from provisioner.lab.sandbox import lab_host, read_device_table

NVML_LINK = Path("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
STANDARD_QUERY = "index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total"
NVML_NOT_FOUND = (
    "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display "
    "Driver is properly installed and present in your system.\n"
    "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n"
)
UNKNOWN_ERROR = "Failed to initialize NVML: Unknown Error\n"
NO_DEVICES = "No devices were found\n"

# field -> (header with units, value(host, gpu, units))
_UNITS = {"memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB", "power.draw": "W", "power.limit": "W"}


def _field(name: str, host: render.LabHost, g: render.LabGpu, units: bool) -> str:
    values: dict[str, object] = {
        "index": g.index, "name": g.name, "uuid": g.uuid, "pci.bus_id": g.bus_id, "gpu_bus_id": g.bus_id,
        "compute_cap": g.compute_cap, "driver_version": host.driver_version, "memory.total": g.memory_mib,
        "memory.used": g.memory_used_mib, "memory.free": g.memory_mib - g.memory_used_mib - g.memory_reserved_mib,
        "temperature.gpu": g.temperature_c, "power.draw": f"{g.power_draw_w:.2f}",
        "power.limit": f"{g.power_limit_w:.2f}", "count": len(host.gpus), "serial": g.serial,
        "vbios_version": g.vbios, "persistence_mode": "Enabled" if host.persistence else "Disabled",
        "name_display": g.name, "fabric.state": host.fabric_state, "fabric.status": host.fabric_status,
        "minor_number": g.dev_minor,
    }
    if name not in values:
        raise KeyError(name)
    value = str(values[name])
    unit = _UNITS.get(name)
    return f"{value} {unit}" if unit and units else value


def _query(host: render.LabHost, fields: str, fmt: str) -> str:
    opts = [o.strip() for o in fmt.split(",")]
    if "csv" not in opts:
        die(f'"{fmt}" is not a valid format.', 2)
    noheader, nounits = "noheader" in opts, "nounits" in opts
    if fields == STANDARD_QUERY:
        return render.render_query_csv(host, units=not nounits, header=not noheader)
    names = [f.strip() for f in fields.split(",") if f.strip()]
    lines = []
    if not noheader:
        lines.append(", ".join(f"{n} [{_UNITS[n]}]" if n in _UNITS and not nounits else n for n in names))
    for g in host.gpus:
        try:
            lines.append(", ".join(_field(n, host, g, not nounits) for n in names))
        except KeyError as exc:
            die(f'Field "{exc.args[0]}" is not a valid field to query.', 2)
    return "\n".join(lines) + "\n"


def _usable(path: Path) -> tuple[bool, int | None]:
    """(exists as a char device, minor): the lab's minor from the view's device table."""
    try:
        st = os.stat(path)
    except OSError:
        return False, None
    if not stat.S_ISCHR(st.st_mode):
        return False, None
    entry = read_device_table().get(str(path))
    return True, entry[1] if entry else os.minor(st.st_rdev)


def _denied(path: Path) -> bool:
    """Whether the container's device cgroup denies the node (open() would fail with EPERM)."""
    entry = read_device_table().get(str(path))
    if entry is not None:
        return not entry[3]
    try:
        return os.stat(path).st_mode & 0o777 == 0
    except OSError:
        return True


def _short(version: str) -> str:
    return ".".join(version.split(".")[:2])


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    view = "node"
    if args and args[0].startswith("--lab-view="):
        view = args.pop(0).split("=", 1)[1]
    settings = state().settings()
    model = lab_host(settings)
    try:
        host_version = Path("/sys/module/nvidia/version").read_text().strip()
    except OSError:
        out(render.render_no_driver_error())
        return 9
    userspace = host_version
    if view == "ct":
        if not NVML_LINK.exists():
            out(NVML_NOT_FOUND)
            return 12
        userspace = os.readlink(NVML_LINK).rsplit("libnvidia-ml.so.", 1)[-1] if NVML_LINK.is_symlink() else ""
    if args in (["--version"], ["-v"]) and render.kmd_era(host_version):
        # R610: the old keys point to the new ones (NVIDIA/aicr#1667)
        out(f"NVIDIA-SMI version  : {userspace}\nNVML version        : {_short(userspace)}\n"
            'DRIVER version      : Deprecated, see "KMD version" instead\n'
            'CUDA version        : Deprecated, see "CUDA UMD version" instead\n'
            f"KMD version         : {host_version}\nCUDA UMD version    : {model.cuda_version}\n")
        return 0
    if args in (["--version"], ["-v"]):
        out(f"NVIDIA-SMI version  : {userspace}\nNVML version        : {_short(userspace)}\n"
            f"DRIVER version      : {host_version}\nCUDA Version        : {model.cuda_version}\n")
        return 0
    ok, _ = _usable(Path("/dev/nvidiactl"))
    if view == "node" and settings.host_created_nodes is not None and not model.gpus_fail_init:
        ok = _create_nodes()  # NVML runs nvidia-modprobe, which creates /dev/nvidiactl and /dev/nvidiaN
    if not ok:
        out(render.render_no_driver_error())
        return 9
    if _denied(Path("/dev/nvidiactl")):
        out(UNKNOWN_ERROR)
        return 255
    if userspace != host_version:
        out(render.render_mismatch_error(_short(userspace)))
        return 18
    if model.gpus_fail_init:
        # proprietary module on Blackwell: probed, never initialised (RmInitAdapter failed) -> no devices
        out(NO_DEVICES)
        return 6
    if (args and args[0] in ("-pm", "--persistence-mode")) or any(a.startswith("--persistence-mode=") for a in args):
        return _persistence(view, model, args)
    minors = []
    for node in sorted(Path("/dev").glob("nvidia[0-9]*")):
        ok, minor = _usable(node)
        if ok and minor is not None and not _denied(node):
            minors.append(minor)
    visible = [g for g in model.gpus if g.dev_minor in set(minors)]
    if not visible:
        out(NO_DEVICES)
        return 6
    gpus = tuple(g.model_copy(update={"index": i}) for i, g in enumerate(visible))
    host = model.model_copy(update={"gpus": gpus, "driver_version": host_version})
    return _dispatch(host, args)


#: what the host's nvidia-smi says when no GPU runs in vGPU mode (quoted in a public vGPU setup guide)
NO_VGPU = "No supported devices in vGPU mode\n"


def render_vgpu(host: render.LabHost) -> str:
    """``nvidia-smi vgpu`` on the node: a vGPU manager's table of GPUs (no VMs run in the lab, so no vGPU
    rows), laid out as a real host prints it (https://github.com/akb486/vgpu README, driver 525.147.01)."""
    from provisioner.lab.profiles import get_profile

    if not get_profile(state().settings().profile).vgpu_manager:
        return NO_VGPU
    rule = "+---------------------------------+------------------------------+------------+"
    v = host.driver_version
    rows = []
    for g in host.gpus:
        name = g.name if len(g.name) <= 25 else g.name[:22] + "..."
        rows.append(f"| {g.index:>3}  {name:<27}| {g.bus_id:<29}|{'0%':>5}       |")
    return "\n".join([
        "+" + "-" * 77 + "+", f"| NVIDIA-SMI {v:<23}Driver Version: {v:<26}|", "|" + rule[1:],
        "| GPU  Name                       | Bus-Id                       | GPU-Util   |",
        "|      vGPU ID     Name           | VM ID     VM Name            | vGPU-Util  |",
        "|=================================+==============================+============|",
        *rows, rule, ""])


def _create_nodes() -> bool:
    """What the driver's libraries do when the device files are missing: run nvidia-modprobe
    (setuid root) to create /dev/nvidiactl and /dev/nvidia<minor> (NVIDIA README, "How and when
    are the NVIDIA device files created?"). Only on the node; a container cannot mknod them."""
    from provisioner.lab.commands.nvidia_modprobe import create

    lab = state()
    settings = lab.settings()
    wanted = ["/dev/nvidiactl", *(f"/dev/nvidia{g.dev_minor}" for g in lab_host(settings).gpus)]
    if settings.host_created_nodes is not None and set(wanted) - set(settings.host_created_nodes):
        create(lab, wanted)
    return _usable(Path("/dev/nvidiactl"))[0]


def _persistence(view: str, model: render.LabHost, args: list[str]) -> int:
    value = args[1] if args[0] in ("-pm", "--persistence-mode") and len(args) > 1 else args[0].partition("=")[2]
    if value not in ("0", "1", "ENABLED", "DISABLED"):
        die(f'"{value}" is not a valid persistence mode value.', 2)
    enable = value in ("1", "ENABLED")
    if view != "node":
        out("Unable to set persistence mode for GPU 00000000:00:00.0: Insufficient Permissions\n"
            "Terminating early due to previous errors.\n")
        return 4
    state().update_settings(persistence=enable)
    word = "Enabled" if enable else "Disabled"
    out("".join(f"{word} persistence mode for GPU {g.bus_id}.\n" for g in model.gpus) + "All done.\n")
    return 0


def _dispatch(host: render.LabHost, args: list[str]) -> int:
    if not args:
        out(render.render_smi_table(host))
        return 0
    if args[0] == "topo":
        if "-m" in args or "--matrix" in args:
            out(render.render_topo_m(host))
            return 0
        if "-p2p" in args:
            out(render.render_topo_p2p(host))
            return 0
        die("Invalid combination of input arguments. Please run 'nvidia-smi topo -h' for help.", 2)
    if args[0] in ("-L", "--list-gpus"):
        out("".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in host.gpus))
        return 0
    if args[0] == "vgpu":
        out(render_vgpu(host))
        return 0
    if args[0] in ("-h", "--help"):
        out("NVIDIA System Management Interface -- LAB stand-in (gpu-provisioner lab)\n")
        return 0
    query = fmt = None
    selected: set[int] | None = None
    it = iter(args)
    q_full = False
    for a in it:
        if a.startswith("--query-gpu="):
            query = a.split("=", 1)[1]
        elif a == "--query-gpu":
            query = next(it, "")
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        elif a == "--format":
            fmt = next(it, "")
        elif a in ("-i", "--id"):
            selected = {int(x) for x in next(it, "").split(",") if x.strip().isdigit()}
        elif a.startswith("--id="):
            selected = {int(x) for x in a.split("=", 1)[1].split(",") if x.strip().isdigit()}
        elif a in ("-q", "--query"):
            q_full = True
        else:
            die(f'Option "{a}" is not recognized. Please run \'nvidia-smi -h\'.', 2)
    if selected is not None:
        host = host.model_copy(update={"gpus": tuple(g for g in host.gpus if g.index in selected)})
    if q_full and query is None:
        out(render.render_smi_q(host))
        return 0
    if query is None or fmt is None:
        die("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.", 2)
    out(_query(host, query, fmt))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
