"""Predicates over live facts (a dict of probe name -> raw output or parsed value).

The keys are documented in docs/diagnose-rules.md ("Live facts"). Every predicate is pure:
it reads the dict and returns candidates with human-readable evidence lines that quote the
facts it compared.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from provisioner.diagnose import probes
from provisioner.diagnose.engine import Candidate
from provisioner.diagnose.extract import add_derived
from provisioner.diagnose.model import Category

Facts = Mapping[str, object]

SHM_MIN_BYTES = 1 << 30  # NCCL needs room for its shm rings; JAX-Toolbox warns below 1 GB
NVIDIA_MAJOR = 195
# Minor-version compatibility floors per CUDA major (torch-matrix.md §0 rule 3, §2a).
DRIVER_FLOOR_FOR_CUDA: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
BLACKWELL_MIN_DRIVER = "570.0"
# Debugging knobs the NCCL docs say not to keep in production (burnin.md §6.4).
NCCL_DEBUG_KNOBS = (
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_NVLS_ENABLE",
)
# Facts holding raw command output that the log rules read as well.
TEXT_FACT_KEYS = ("nvidia_smi", "dmesg", "torch_check", "pct_start", "install_log", "log")


def _cand(
    category: Category, confidence: float, rule: str, root_cause: str, fix: str, evidence: list[str]
) -> Candidate:
    return Candidate(
        category=category,
        confidence=confidence,
        best=f"facts.{rule}",
        root_cause=root_cause,
        fix=fix,
        rules=[f"facts.{rule}"],
        evidence=evidence,
        generic_only=False,
        from_facts=True,
    )


def _caps_text(caps: list[tuple[int, int]]) -> str:
    """'12.0 x8' style summary of per-GPU compute capabilities."""
    seen: dict[tuple[int, int], int] = {}
    for cc in caps:
        seen[cc] = seen.get(cc, 0) + 1
    return ", ".join(f"{a}.{b}" + (f" x{n}" if n > 1 else "") for (a, b), n in seen.items())


def _host_driver(facts: Facts) -> str | None:
    return probes.driver_version(facts.get("host_driver_version"))


def check_driver_versions(facts: Facts) -> list[Candidate]:
    host = _host_driver(facts)
    ct = probes.driver_version(facts.get("container_driver_version"))
    if not host or not ct or probes.same_driver_version(host, ct):
        return []
    return [
        _cand(
            "driver_lib_mismatch",
            0.95,
            "host_module_vs_container_userspace",
            f"The container's userspace driver ({ct}) differs from the host kernel module ({host}).",
            f"Reinstall the userspace in the container at exactly {host}: "
            f"NVIDIA-Linux-x86_64-{host}.run --no-kernel-modules --silent (or the matching distro packages).",
            [f"host kernel module version: {host}", f"container userspace version: {ct}"],
        )
    ]


def check_cuda_loader(facts: Facts) -> list[Candidate]:
    """libcuda.so.1 as the container's dynamic loader sees it (`probes.cuda_loader`): it must resolve, and
    what it needs must resolve and load, or torch finds no CUDA driver whatever the device nodes say."""
    view = probes.cuda_loader(facts.get("cuda_loader"))
    if view is None or not view.broken:
        return []
    host = _host_driver(facts)
    install = (f"NVIDIA-Linux-x86_64-{host}.run --no-kernel-modules --silent" if host
               else "the host driver's .run with --no-kernel-modules")
    if view.resolved is None:
        cache = [f"ldconfig -p: {line}" for line in view.cache_lines if line.startswith("libcuda.so.1")]
        return [_cand(
            "missing_shared_lib", 0.93, "libcuda_not_loadable",
            "libcuda.so.1 (the CUDA driver library) is not found by the container's dynamic loader: "
            "CUDA cannot initialise and torch reports no GPU.",
            f"Install the userspace driver in the container at the host's version ({install}, or the matching "
            "distro package), then run `ldconfig`; if the file is elsewhere, add its directory to "
            "/etc/ld.so.conf.d/ and run `ldconfig`.",
            [view.not_found_line or "libcuda.so.1: not found by the loader",
             *(cache or ["ldconfig -p: no libcuda.so.1 entry"])],
        )]
    return [_cand(
        "missing_shared_lib", 0.9, "libcuda_needs_unresolved",
        f"libcuda.so.1 resolves to {view.resolved} but the loader cannot load it or what it needs "
        f"({'; '.join(view.unresolved[:3])}).",
        f"Reinstall the userspace driver in the container ({install}) and install the libraries it needs; "
        "`ldd` on the file must show no 'not found'.",
        [f"libcuda.so.1 => {view.resolved}", *(f"ldd: {line}" for line in view.unresolved[:6])],
    )]


def _uvm_major(facts: Facts) -> int | None:
    majors = probes.char_majors(facts.get("host_proc_devices"))
    if "nvidia-uvm" in majors:
        return majors["nvidia-uvm"]
    host_nodes = probes.device_nodes(facts.get("host_dev_nodes"))
    node = host_nodes.get("/dev/nvidia-uvm")
    return node.major if node else None


def check_device_nodes(facts: Facts) -> list[Candidate]:
    if facts.get("container_dev_nodes") is None:
        return []
    nodes = probes.device_nodes(facts.get("container_dev_nodes"))
    out: list[Candidate] = []
    want = probes.gpu_count(facts.get("host_gpu_count"))
    have = probes.gpu_nodes(nodes)
    missing: list[str] = []
    if want is not None and len(have) < want:
        missing += [f"/dev/nvidia{i}" for i in range(want) if f"/dev/nvidia{i}" not in nodes]
    if "/dev/nvidiactl" not in nodes:
        missing.append("/dev/nvidiactl")
    if missing:
        out.append(
            _cand(
                "container_device_missing",
                0.92,
                "device_nodes_vs_gpu_count",
                f"The container has {len(have)} GPU device node(s)"
                + (f" for {want} GPU(s) on the host" if want is not None else "")
                + f"; missing: {', '.join(missing)}.",
                "Pass every /dev/nvidiaN plus /dev/nvidiactl into the container (devN entries on PVE >= 8.1, "
                "or lxc.mount.entry + lxc.cgroup2.devices.allow c 195:* rwm).",
                [f"container device nodes: {' '.join(sorted(nodes)) or '(none)'}"]
                + ([f"host GPU count: {want}"] if want is not None else []),
            )
        )
    uvm_missing = [p for p in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if p not in nodes]
    if uvm_missing:
        host_nodes = probes.device_nodes(facts.get("host_dev_nodes"))
        host_lacks = facts.get("host_dev_nodes") is not None and "/dev/nvidia-uvm" not in host_nodes
        out.append(
            _cand(
                "container_device_missing",
                0.9,
                "uvm_nodes_missing",
                f"{', '.join(uvm_missing)} missing in the container"
                + (" and on the host (nvidia-uvm nodes not created)" if host_lacks else "")
                + "; CUDA cannot initialise without them.",
                ("Create them on the host at boot with `nvidia-modprobe -u -c=0`, then pass" if host_lacks else "Pass")
                + " /dev/nvidia-uvm and /dev/nvidia-uvm-tools into the container.",
                [f"container device nodes: {' '.join(sorted(nodes)) or '(none)'}"]
                + (["host device nodes lack /dev/nvidia-uvm"] if host_lacks else []),
            )
        )
    uvm = _uvm_major(facts)
    ct_uvm = nodes.get("/dev/nvidia-uvm")
    if uvm is not None and ct_uvm is not None and ct_uvm.major is not None and ct_uvm.major != uvm:
        out.append(
            _cand(
                "container_device_missing",
                0.85,
                "uvm_major_stale",
                f"/dev/nvidia-uvm in the container has major {ct_uvm.major} but the host's nvidia-uvm "
                f"major is {uvm} (dynamic major changed after a driver reload or reboot).",
                "Recreate the container's node from the host (devN passthrough does it at start) and update "
                f"lxc.cgroup2.devices.allow to c {uvm}:* rwm.",
                [f"container /dev/nvidia-uvm major: {ct_uvm.major}", f"host nvidia-uvm major: {uvm}"],
            )
        )
    ct_count = probes.gpu_count(facts.get("container_gpu_count"))
    if want is not None and ct_count is not None and ct_count < want and not missing:
        out.append(
            _cand(
                "container_device_missing",
                0.85,
                "container_gpu_count",
                f"The container sees {ct_count} of the host's {want} GPUs.",
                "Pass all /dev/nvidiaN nodes and check CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES in the container.",
                [f"host GPU count: {want}", f"container GPU count: {ct_count}"],
            )
        )
    return out


def _major_for(path: str, facts: Facts) -> int | None:
    if path.startswith("/dev/nvidia-uvm"):
        return _uvm_major(facts)
    if path.startswith("/dev/nvidia-caps"):
        return probes.char_majors(facts.get("host_proc_devices")).get("nvidia-caps")
    if path.startswith("/dev/nvidia"):
        return NVIDIA_MAJOR
    return None


def check_lxc_config(facts: Facts) -> list[Candidate]:
    raw = facts.get("lxc_config")
    if raw is None:
        return []
    conf = probes.lxc_config(raw)
    v1_allow_lines = conf.raw_text("lxc.cgroup.devices.allow")
    idmap_lines = conf.raw_text("lxc.idmap")
    out: list[Candidate] = []
    nvidia_mounts = [p for p in conf.mount_sources() if p.startswith("/dev/nvidia")]
    nvidia_devs = [p for p in conf.dev_paths() if p.startswith("/dev/nvidia")]
    if not nvidia_mounts and not nvidia_devs:
        out.append(
            _cand(
                "container_device_missing",
                0.85,
                "no_gpu_passthrough",
                "The container config passes no /dev/nvidia* device through.",
                "Add devN entries for every /dev/nvidiaN, /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia-uvm-tools "
                "(PVE >= 8.1, as root@pam), or lxc.mount.entry lines plus lxc.cgroup2.devices.allow.",
                ["lxc config: no dev*/lxc.mount.entry for /dev/nvidia*"],
            )
        )
    if v1_allow_lines and str(facts.get("cgroup_fs", "cgroup2fs")).strip() != "tmpfs":
        out.append(
            _cand(
                "proxmox_lxc",
                0.85,
                "cgroup_v1_keys_on_v2",
                "The config uses cgroup v1 keys (lxc.cgroup.devices.allow) on a cgroup v2 host, "
                "so the device rules are ignored.",
                "Rename them to lxc.cgroup2.devices.allow (or use devN entries).",
                [*v1_allow_lines[:4], f"host cgroup filesystem: {facts.get('cgroup_fs', 'cgroup2fs (assumed)')}"],
            )
        )
    uncovered: dict[int, list[str]] = {}
    for path in nvidia_mounts:
        if path in nvidia_devs:
            continue
        major = _major_for(path, facts)
        if major is not None and not conf.allows_char_major(major):
            uncovered.setdefault(major, []).append(path)
    if uncovered:
        majors = sorted(uncovered)
        paths = [p for m in majors for p in uncovered[m]]
        out.append(
            _cand(
                "container_device_missing",
                0.9,
                "cgroup_allow_vs_majors",
                f"The device cgroup does not allow major(s) {', '.join(map(str, majors))}, so "
                f"{', '.join(paths[:4])} are bind-mounted but cannot be opened.",
                "Add " + "; ".join(f"lxc.cgroup2.devices.allow: c {m}:* rwm" for m in majors)
                + " (read dynamic majors from /proc/devices), or switch to devN entries.",
                (conf.raw_text("lxc.cgroup2.devices.allow")[:6] or ["lxc config: no lxc.cgroup2.devices.allow lines"])
                + [f"needed major for {uncovered[m][0]}: {m}" for m in majors],
            )
        )
    if idmap_lines:
        kinds = {re.split(r"[:=]", ln, maxsplit=1)[1].split()[0] for ln in idmap_lines}
        absent = [k for k in ("u", "g") if k not in kinds]
        if absent:
            out.append(
                _cand(
                    "proxmox_lxc",
                    0.88,
                    "idmap_incomplete",
                    f"lxc.idmap maps no {' or '.join('uids' if k == 'u' else 'gids' for k in absent)}; with any "
                    "lxc.idmap line Proxmox adds no default mapping, so the container cannot start.",
                    "Add " + " and ".join(f"`lxc.idmap: {k} 0 100000 65536`" for k in absent)
                    + " (split around passed-through ids) and matching /etc/subuid, /etc/subgid entries.",
                    idmap_lines[:6],
                )
            )
    return out


def _gpu_total(facts: Facts) -> int | None:
    for key in ("container_gpu_count", "host_gpu_count"):
        n = probes.gpu_count(facts.get(key))
        if n is not None:
            return n
    caps = probes.compute_caps(facts.get("gpu_compute_caps"))
    return len(caps) if caps else None


def check_shm(facts: Facts) -> list[Candidate]:
    size = probes.shm_bytes(facts.get("shm"))
    if size is None or size >= SHM_MIN_BYTES:
        return []
    gpus = _gpu_total(facts)
    uses_nccl = (gpus is not None and gpus >= 2) or bool(probes.env_vars(facts.get("nccl_env")))
    if not uses_nccl:
        return []
    return [
        _cand(
            "nccl_failure",
            0.75,
            "shm_too_small",
            f"/dev/shm is {size / 2**20:.0f} MiB; NCCL's shared-memory transport needs more "
            f"(< 1 GiB fails with 'No space left on device') for {gpus or 'several'} GPUs.",
            "Give the container a larger /dev/shm (LXC: mount a tmpfs of several GiB on /dev/shm; "
            "Docker: --shm-size=8g or --ipc=host).",
            [f"/dev/shm size: {size} bytes", f"GPUs in use: {gpus}"],
        )
    ]


def check_torch_arch(facts: Facts) -> list[Candidate]:
    archs = probes.arch_list(facts.get("torch_arch_list"))
    caps = probes.compute_caps(facts.get("gpu_compute_caps"))
    if not archs or not caps:
        return []
    bad = sorted({cc for cc in caps if not any(probes.arch_runs_on(k, n, s, cc) for k, n, s in archs)})
    if not bad:
        return []
    sm = f"{bad[0][0]}{bad[0][1]}"
    fields = {"sm": sm, "cc": f"{bad[0][0]}.{bad[0][1]}"}
    add_derived(fields)
    listed = " ".join(f"{k}_{n}{s}" for k, n, s in archs)
    return [
        _cand(
            "arch_unsupported",
            0.95,
            "torch_arch_vs_gpu",
            f"The installed torch has no kernels for compute capability {', '.join(f'{a}.{b}' for a, b in bad)} "
            f"(built for {listed}).",
            fields["arch_fix"],
            [f"torch arch list: {listed}", f"GPU compute capabilities: {_caps_text(caps)}"],
        )
    ]


def check_torch_cuda_vs_driver(facts: Facts) -> list[Candidate]:
    driver = _host_driver(facts) or probes.driver_version(facts.get("container_driver_version"))
    out: list[Candidate] = []
    if not driver:
        return out
    cuda = probes.cuda_version(facts.get("torch_cuda_version"))
    cpu_only = probes.torch_is_cpu_only(facts.get("torch_version"), facts.get("torch_cuda_version"))
    if cuda is not None and cpu_only is not True:
        floor = DRIVER_FLOOR_FOR_CUDA.get(cuda[0])
        if floor and probes.version_tuple(driver) < probes.version_tuple(floor):
            out.append(
                _cand(
                    "driver_too_old",
                    0.93,
                    "torch_cuda_vs_driver",
                    f"torch {facts.get('torch_version', '')} is built with CUDA {cuda[0]}.{cuda[1]}, which needs "
                    f"driver >= {floor}; the host driver is {driver}.",
                    f"Upgrade the host driver to >= {floor}, or install a torch variant for an older CUDA "
                    "(`provisioner resolve` picks one for this driver).",
                    [f"torch.version.cuda: {cuda[0]}.{cuda[1]}", f"host driver: {driver}"],
                )
            )
    caps = probes.compute_caps(facts.get("gpu_compute_caps"))
    if any(cc[0] >= 10 for cc in caps) and probes.version_tuple(driver) < probes.version_tuple(BLACKWELL_MIN_DRIVER):
        out.append(
            _cand(
                "driver_too_old",
                0.9,
                "blackwell_driver_floor",
                f"Blackwell GPUs need driver R570 or newer; the host driver is {driver}.",
                "Install a driver >= 570 (open kernel modules) on the host, "
                "then the matching userspace in the container.",
                [f"GPU compute capabilities: {_caps_text(caps)}", f"host driver: {driver}"],
            )
        )
    return out


def check_cpu_only(facts: Facts) -> list[Candidate]:
    version, cuda = facts.get("torch_version"), facts.get("torch_cuda_version")
    if "torch_cuda_version" not in facts and version is None:
        return []
    if "torch_cuda_version" in facts and cuda is None:
        cuda = "None"  # JSON null: torch.version.cuda is None, i.e. a CPU build
    if probes.torch_is_cpu_only(version, cuda) is not True:
        return []
    return [
        _cand(
            "cpu_only_wheel",
            0.95,
            "torch_cpu_build",
            f"The installed torch ({version or 'unknown version'}) is a CPU-only build (torch.version.cuda is {cuda}).",
            "Reinstall torch from the CUDA index the resolver picks (e.g. https://download.pytorch.org/whl/cu128).",
            [f"torch.__version__: {version}", f"torch.version.cuda: {cuda}"],
        )
    ]


def check_nccl_env(facts: Facts) -> list[Candidate]:
    env = probes.env_vars(facts.get("nccl_env"))
    knobs = {k: v for k, v in env.items() if k in NCCL_DEBUG_KNOBS}
    if not knobs:
        return []
    return [
        _cand(
            "nccl_failure",
            0.45,
            "nccl_debug_env",
            "NCCL debugging variables are set in the environment ("
            + ", ".join(f"{k}={v}" for k, v in sorted(knobs.items()))
            + "); they hide a broken transport or cost bandwidth and should not stay in production.",
            "Unset them and re-run the burn-in; if P2P hangs without NCCL_P2P_DISABLE, fix ACS/IOMMU on the host.",
            [f"{k}={v}" for k, v in sorted(knobs.items())],
        )
    ]


CHECKS: tuple[Callable[[Facts], list[Candidate]], ...] = (
    check_driver_versions,
    check_cuda_loader,
    check_device_nodes,
    check_lxc_config,
    check_shm,
    check_torch_arch,
    check_torch_cuda_vs_driver,
    check_cpu_only,
    check_nccl_env,
)


def facts_candidates(facts: Facts) -> list[Candidate]:
    """Run every live-facts predicate."""
    out: list[Candidate] = []
    for check in CHECKS:
        out.extend(check(facts))
    return out


def facts_fields(facts: Facts) -> dict[str, str]:
    """Template fields the facts reveal (used to fill log-rule templates)."""
    fields: dict[str, str] = {}
    driver = _host_driver(facts)
    if driver:
        fields["driver"] = driver
        fields["module_version"] = driver
    ct = probes.driver_version(facts.get("container_driver_version"))
    if ct:
        fields["lib_version"] = ct
    caps = probes.compute_caps(facts.get("gpu_compute_caps"))
    if caps:
        fields["cc"] = f"{caps[0][0]}.{caps[0][1]}"
        fields["sm"] = f"{caps[0][0]}{caps[0][1]}"
    if facts.get("torch_version"):
        fields["torch_version"] = str(facts["torch_version"])
    return fields
