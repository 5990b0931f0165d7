"""Evidence first (issue 27 item 1): a log normalised into typed facts, then decisions made from the facts.

    ev = extract_evidence(text)          # LogEvidence (pydantic): where it ran, driver, userspace, nodes, ...
    hits = decide(ev)                    # EvidenceHit per conclusion the facts support

One pass: a single RE2 scan over the text for the extractors' trigger literals (lower case) selects the
lines worth reading; each selected line is read once by the extractors whose trigger it holds. The
extractors are tolerant of how one fact is worded: case, articles, quotes, absolute or relative paths,
wrappers' suffixes (`nvidia-container-cli.real`), tool prefixes (`bash:`, `sh: 1:`, strace's
`openat(AT_FDCWD, "…") = -1 ENOENT`). Versions the field readers already know (`extract.log_fields`:
driver, module, library, torch, CUDA, Xid) are taken from them, not read twice.

The decisions are general (a fact, not a phrasing): a loaded module (its /proc/driver/nvidia readable, an
NVRM version line) with /dev/nvidiactl missing is nodes not passed/created, never "no driver"; the driver's
userspace missing (nvidia-smi not found, libnvidia-ml.so.1 not loadable) where a container ran is the
container's userspace, this project's first hypothesis on Proxmox/LXC (the host has the driver); a resolution
that failed installed nothing, so a `+cpu` inside the unsatisfiable requirement is not a CPU wheel.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, TypeVar

from pydantic import BaseModel, Field

from provisioner.diagnose.extract import cuda_from_driver_int
from provisioner.diagnose.model import Category
from provisioner.diagnose.rules.common import DOCKER_HOSTNAME, GPU_REQUEST_STEPS, WSL_CONTEXT
from provisioner.diagnose.rx import Match, Regex, compile_rx, literal_regex

Place = Literal["host", "lxc", "docker", "podman", "kubernetes", "hpc", "wsl", "container"]
Phase = Literal["headers", "build", "load", "install"]
CONTAINERS: tuple[Place, ...] = ("lxc", "docker", "podman", "kubernetes", "hpc", "container")
#: the containers whose runtime (the NVIDIA toolkit, enroot's hook, Apptainer's --nv) brings the host's driver in
RUNTIMES: tuple[Place, ...] = ("docker", "podman", "kubernetes", "hpc")
_CTL_OR_GPU = ("/dev/nvidiactl", "/dev/nvidia0")
_UVM_OR_MODESET = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


class LogEvidence(BaseModel):
    """What a log shows, as facts (each with the line that showed it in `lines`)."""

    places: list[Place] = Field(default_factory=list)  # every context seen (order of first sight)
    proxmox: bool = False
    driver_loaded: bool | None = None  # True: module seen loaded; False: seen not loaded; None: unknown
    driver_version: str | None = None  # the kernel module's
    userspace_version: str | None = None  # the user-space library's (NVML, nvidia-smi)
    userspace_missing: bool = False
    smi_cannot_communicate: bool = False
    nodes_seen: list[str] = Field(default_factory=list)
    nodes_missing: list[str] = Field(default_factory=list)
    cuda_version: str | None = None  # the driver's CUDA version
    torch_version: str | None = None
    torch_cuda: str | None = None
    runtime_cuda: str | None = None  # the CUDA runtime a program says it carries (deviceQuery, CuPy, a miner's banner)
    image_cuda: str | None = None  # the CUDA of the container image the log runs (its tag, its CUDA_VERSION)
    arch_list: list[str] = Field(default_factory=list)
    installer_phase: Phase | None = None
    nccl_errors: list[str] = Field(default_factory=list)
    xids: list[int] = Field(default_factory=list)
    resolution_failed: bool = False
    cpu_build_installed: bool = False  # a CPU-only torch ran (not just a requirement naming +cpu)
    kernel_upgraded: bool = False
    kernels: list[str] = Field(default_factory=list)  # kernel packages a listing shows (version-release)
    kernel_devel: list[str] = Field(default_factory=list)  # kernel-devel packages it shows
    dkms: list[tuple[str, str]] = Field(default_factory=list)  # (module, kernel) pairs `dkms status` shows built
    cuda_ran: bool = False  # the log shows an error only an initialised CUDA context returns (a launch, an allocation)
    insufficient_driver: bool = False  # the CUDA runtime said the driver is insufficient (cudaErrorInsufficientDriver)
    gpus: list[str] = Field(default_factory=list)  # the GPU models the log names (nvidia-smi, collect_env, lspci)
    module_version: str | None = None  # the kernel module's version as its own line prints it (NVRM, API mismatch)
    library_version: str | None = None  # the userspace's version as a library line prints it (NVML, client, .so)
    hw_errors: list[str] = Field(default_factory=list)  # "xid79" (off the bus), "aer", "gsp_timeout", "gsp_boot"
    generic_symptom: bool = False  # a line several causes print (RmInitAdapter failed, no CUDA-capable device)
    runtime: str | None = None  # the container runtime at work (nvidia-container-cli, nvidia-container-runtime)
    runtime_mode: str | None = None  # the toolkit's mode (legacy, cdi, csv) as it printed it
    no_cgroups: bool | None = None  # nvidia-container-cli's no-cgroups setting, where the log shows the config
    lxc_tool: Literal["proxmox", "lxd", "incus", "lxc"] | None = None  # the LXC front end the log shows
    blackwell_gpu: str | None = None  # a Blackwell GPU the log names (needs a CUDA >= 12.8 build)
    lines: dict[str, str] = Field(default_factory=dict)  # fact -> the (first) line that showed it
    line_no: dict[str, int] = Field(default_factory=dict)  # fact -> that line's number in the log (1-based)

    @property
    def in_container(self) -> bool:
        return any(p in CONTAINERS for p in self.places)

    def see(self, key: str, line: str, number: int | None = None) -> None:
        if key not in self.lines:
            self.lines[key] = line.strip()[:400]
            if number is not None:
                self.line_no[key] = number

    @property
    def lxc_context(self) -> bool:
        """The log ran in (or configures) an LXC container: Proxmox, LXD, Incus or plain LXC."""
        return self.proxmox or "lxc" in self.places or self.lxc_tool is not None


#: a message quoted as absent: a report's checklist of what it did NOT see ("* No `GPU has fallen off the bus`",
#: "- no 'NVRM: Xid' in dmesg", "without `Out of memory`"). The message there is the reporter's negative evidence,
#: not a line the program printed: neither the rules nor the extractors read it.
_NEGATED = compile_rx(r"^\s*(?:[-*+>\x{2022}]\s*)*(?:no|not|without|never|nor)\s+[`'\"][^`'\"\n]*$")


def negated_mention(text: str, start: int) -> bool:
    """The match at `start` in `text` sits inside a quote that its line opens with "No `" / "without '" (a
    checklist of messages the reporter did not see)."""
    line_start = text.rfind("\n", 0, start) + 1
    if start - line_start > 200:
        return False
    return _NEGATED.search(text[line_start:start]) is not None


#: a line a program prints on healthy runs while it probes for an optional part: NCCL's plugin loader at INFO, the
#: library it names being optional (NCCL goes on with its internal one). Its wordings by release (NVIDIA/nccl):
#: "NET/Plugin : Plugin load returned %d : %s." (src/net.cc, 2.4-2.19), "NET/Plugin : Plugin load (%s) returned %d :
#: %s" (2.18), "NET/Plugin : dlerror=%s No plugin found (%s), using internal implementation" (2.19),
#: "TUNER/Plugin: Plugin load returned %d : %s : when loading %s" (src/tuner.cc, 2.21), "%s/Plugin: Could not
#: find:%s" (src/plugin/plugin_open.cc, 2.30: NET, TUNER, PROFILER, ENV). A dlerror there ("libnccl-net.so: cannot
#: open shared object file") is no missing library.
_PROBE_LINE = compile_rx(r"\bNCCL\s+INFO\s+[A-Z]+/Plugin\s*:")


#: the log shows a network plugin was asked for (NCCL's "Error: network %s not found." in src/net.cc 2.12-2.19 and
#: src/plugin/net.cc, or NCCL_NET_PLUGIN naming one): then the probe's dlerror is the failure, not a probe
#: (NCCL_NET naming a built-in, IB or Socket, or NCCL_NET_PLUGIN=none asks for none)
PLUGIN_ASKED = compile_rx(r"\bError:\s+network\s+[^\n]{0,60}?\s*not\s+found"
                          r"|\bNCCL_NET_PLUGIN(?:\s+set\s+by\s+environment\s+to|\s*=)\s*[\"']?(?:[^n\s\"']|n[^o]|no[^n]|non[^e])")


def probe_line(text: str, start: int) -> bool:
    """The match at `start` in `text` sits on a line a program prints while probing for an optional part (NCCL's
    plugin loader at INFO)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    return _PROBE_LINE.search(text[line_start:line_end if line_end >= 0 else len(text)]) is not None


# (fact, trigger literals (lower case: one must be in the line), regex read on the line)
_NODE = r"(/dev/nvidia(?:ctl|-uvm-tools|-uvm|-modeset|-caps/nvidia-cap\d+|\d+))"
_EXTRACTORS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("place:lxc", ("lxc", "lxd", "incus", "pct "), r"\b(?:lxc|lxd|incus)\b|\bpct exec\b|\bpct enter\b|\bpct start\b|/etc/pve/lxc/"),
    ("proxmox", ("proxmox", "pve", "pct "), r"\bproxmox\b|\bpve\b|-pve\b|/etc/pve/|pveversion|\bpct exec\b|\bpct enter\b|\bpct start\b"),
    ("place:docker", ("docker", "nvidia-container", "containerd", "oci runtime", "root@", "hostname:"),
     r"\bdocker\b|nvidia-container-(?:cli|toolkit|runtime)|\bcontainerd\b|OCI runtime|" + DOCKER_HOSTNAME),
    ("place:podman", ("podman",), r"\bpodman\b"),
    # an HPC container runtime (enroot and SLURM's pyxis use libnvidia-container's hook; Apptainer's --nv binds the
    # host's driver libraries): what the container lacks of the driver is the runtime's to bring
    ("place:hpc", ("enroot", "pyxis", "apptainer", "singularity", "--container-image"),
     r"\benroot\b|\bpyxis\b|\bapptainer\b|\bsingularity\b|--container-image\b"),
    ("place:kubernetes", ("kube", "k8s"), r"\bkubectl\b|\bkubernetes\b|\bk8s\b|\bkubelet\b"),
    # WSL, read as the rules read it (rules/common.py WSL_CONTEXT: what its machines print, never a bare "WSL" nor
    # libnvidia-container's "(WSL)" debug line, which it prints on every host)
    ("place:wsl", ("wsl", "microsoft-standard", "/mnt/", "@desktop-"), WSL_CONTEXT),
    ("place:container", ("container",), r"\b(?:in|inside) (?:the |a |an |my |this )?(?:\w+ )?container\b"),
    ("proc_readable", ("/proc/driver/nvidia",),
     r"/proc/driver/nvidia/\w+[\"']?,[^\n]{0,40}\)\s*=\s*\d+\b|cat /proc/driver/nvidia/version"),
    ("nvrm_version", ("nvrm version",), r"NVRM version:\s*(?:NVIDIA UNIX[^\n]*?Kernel Module[^\n]*?)?(\d{3}\.\d+(?:\.\d+)?)"),
    ("smi_table", ("driver version",), r"Driver Version:\s*(\d{3}\.\d+(?:\.\d+)?)"),
    ("module_absent", ("not found", "missing", "not loaded", "could not insert"),
     r"Module nvidia\S* not found|NVIDIA kernel module missing|driver not loaded|NVIDIA driver is not loaded"),
    ("smi_cannot_communicate", ("couldn't communicate", "could not communicate"),
     r"(?:couldn't|could not) communicate with the NVIDIA driver"),
    # errors only a CUDA context that initialised can return: a kernel launched without a kernel for this GPU
    # (cudaErrorNoKernelImageForDevice, cudaErrorInvalidDeviceFunction), a launched kernel's fault
    # (cudaErrorIllegalAddress), an allocation on the device (PyTorch's caching allocator's "CUDA out of memory").
    # An insufficient driver fails cuInit/cudaGetDeviceCount before any of these (CUDA runtime API, error types).
    ("cuda_ran", ("kernel image", "device function", "illegal memory access", "out of memory", "illegaladdress",
                  "illegal_address"),
     r"no kernel image is available for execution|invalid device function|an illegal memory access was encountered"
     r"|CUDA out of memory\. Tried to allocate|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS"
     # CuPy's memory pool (cupy/cuda/memory.pyx OutOfMemoryError): "Out of memory allocating 1,024 bytes"
     r"|Out of memory allocating [\d,]+ bytes"),
    # the kernels and the kernel-devel trees a package listing shows (`yum/dnf list installed`, `rpm -qa`): the NVIDIA
    # module (DKMS, akmods, the .run installer) is built against the running kernel's kernel-devel
    ("pkg:kernel", ("kernel",),
     r"^\s*kernel(?:-core)?(?:\.(?:x86_64|aarch64)\s+|-)(\d+\.\d+\.\d+-[\w.]+?)(?:\.(?:x86_64|aarch64))?(?:\s|$)"),
    # `dkms status`: "module, version, kernel, arch: installed" (dkms 2) or "module/version, kernel, arch: installed"
    # (dkms 3) — the kernels each module is built for
    ("dkms", ("installed", "built"),
     r"^\s*([\w.+-]+)(?:,\s*|/)[\w.+~:-]+,\s*(\d+\.\d+[\w.+~-]*),\s*(?:x86_64|amd64|aarch64|arm64|ppc64le|i[3-6]86)\s*:"
     r"\s*(?:installed|built)\b"),
    ("pkg:kernel-devel", ("kernel-devel",),
     r"^\s*kernel-devel(?:\.(?:x86_64|aarch64)\s+|-)(\d+\.\d+\.\d+-[\w.]+?)(?:\.(?:x86_64|aarch64))?(?:\s|$)"),
    ("userspace_missing", ("nvidia-smi", "libnvidia-ml", "nvml", "libcuda.so", "libnvidia-"),
     # the binary absent, in the shells', runtimes' and package tools' wordings: `bash: nvidia-smi: command not
     # found`, `sh: 1: nvidia-smi: not found`, `exec: "nvidia-smi": executable file not found in $PATH` (runc),
     # `Container command 'nvidia-smi' not found or does not exist` (docker), `The program 'nvidia-smi' is
     # currently not installed`, `which: no nvidia-smi in (...)`
     r"\bnvidia-smi[\"'`]?:?\s+(?:command not found|not found|no such file or directory|executable file not found)"
     r"|\b(?:command|program|executable)\s+[\"'`]?nvidia-smi[\"'`]?\s+(?:(?:was )?not found|does not exist|is currently not installed)"
     r"|\bwhich: no nvidia-smi in\b"
     r"|libnvidia-ml\.so(?:\.1)?: cannot open shared object|load library failed: libnvidia-ml\.so"
     # the driver's other userspace libraries (the driver package's, never a wheel's): libcuda, libnvidia-*
     r"|\blib(?:cuda|nvidia-[\w-]+)\.so(?:\.\d+)*: cannot open shared object"
     r"|couldn't find libnvidia-ml\.so"
     # NVML's library itself not loadable, as the bindings say it: pynvml `NVMLError_LibraryNotFound: NVML Shared
     # Library Not Found` (stevezau/media_preview_generator#47), go-nvml `ERROR_LIBRARY_NOT_FOUND`, gonvml "could
     # not load NVML library" (mindprince/nvidia_gpu_prometheus_exporter#1)
     r"|\bnvml\w*[^\n]{0,20}?library[ _]?not[ _]?found"
     r"|(?:could not|couldn't|can't|cannot|unable to|failed to) load (?:the )?NVML library"),
    ("node_missing", ("/dev/nvidia",),
     _NODE + r"[\"'`]?[^\n]{0,100}?(?:ENOENT|no such file or directory|does not exist|not found|is missing)"
     # a report's words for the same fact, the node after the verb: "I didn't have `/dev/nvidia-uvm`", "not being
     # able to find /dev/nvidia-modeset", "there is no /dev/nvidia-uvm"
     r"|(?:(?:did|do|does|could|can)(?:n't| not)|never|not (?:being )?able to|unable to|cannot|failed to)"
     r" (?:have|had|see|find|get|open|access|stat|exist)\b[^\n/]{0,20}?[\"'`]?" + _NODE
     + r"|\b(?:there (?:is|was) no|missing|no such (?:device|node|file)|without(?: an?)?) [\"'`]?" + _NODE),
    ("node_seen", ("/dev/nvidia", "nvidiactl", "nvidia-uvm"), r"^\s*c[rwx-]{9}\S*\s[^\n]*?\s(?:/dev/)?(nvidia(?:ctl|-uvm-tools|-uvm|\d+))\s*$"),
    ("arch_list", ("sm_",), r"(?:arch(?:itecture)?s?(?: list)?|capabilities)\W{0,6}((?:'?sm_\d+[a-z]?'?[,\s]*){2,})"),
    ("phase:headers", ("kernel source", "kernel-headers", "kernel-devel", "headers"),
     r"unable to find (?:the )?kernel source tree|Unable to find a match: kernel-(?:headers|devel)"
     r"|kernel headers[^\n]{0,40}(?:not found|missing|not installed)"),
    ("phase:build", ("error", "fatal"), r"Building kernel modules|\bmake\[\d+\]: \*\*\*|\.c:\d+:\d+: fatal error:"
     r"|Makefile[^\n]{0,80}Error \d"),
    ("phase:load", ("kernel module", "could not insert"), r"Unable to load the (?:'nvidia[\w-]*' )?kernel module"
     r"|Kernel module load error|could not insert 'nvidia"),
    ("nccl", ("nccl",), r"\b(nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidUsage|RemoteError|InvalidArgument))\b"),
    ("resolution_failed", ("solution", "unsatisfiable", "resolutionimpossible", "satisfies the requirement",
                           "no matching distribution", "source distribution or wheel"),
     r"No solution found when resolving|requirements are unsatisfiable|ResolutionImpossible"
     r"|Could not find a version that satisfies the requirement|No matching distribution found"
     # uv (crates/uv-resolver/src/lock/mod.rs, lock/export/pylock_toml.rs): the locked distribution has no wheel
     # for this platform, so `uv sync`/`uv pip sync` installs nothing
     r"|can't be installed because it doesn't have a source distribution or wheel for the current platform"),
    ("cpu_build", ("compiled with cuda", "build pytorch", "+cpu"),
     r"Torch not compiled with CUDA enabled|CUDA used to build PyTorch\s*:\s*None"
     r"|^\s*(?:>>>\s*)?'?\d+\.\d+(?:\.\d+)?\+cpu'?\s*$|__version__[^\n]{0,20}\+cpu"),
    # the versions one log prints, each with its line (compared by `decide`)
    ("module_version", ("kernel module", "nvrm version"),
     r"NVRM version:[^\n]*?(\d{3}\.\d+(?:\.\d+)?)|Kernel Module(?: for \S+)?\s+(\d{3}\.\d+(?:\.\d+)?)"
     r"|kernel module has (?:the )?version \"?(\d{3}\.\d+(?:\.\d+)?)"),
    ("library_version", ("library version", "has the version", "has version", "dso version", "libnvidia-ml.so.",
                         "libcuda.so."),
     r"NVML library version:\s*(\d{3}\.\d+(?:\.\d+)?)"
     r"|(?:driver component|client)[^\n]{0,40}? has (?:the )?version \"?(\d{3}\.\d+(?:\.\d+)?)"
     r"|DSO version (\d{3}\.\d+(?:\.\d+)?)|\blib(?:nvidia-ml|cuda)\.so\.(\d{3}\.\d+(?:\.\d+)?)\b"),
    ("driver_cuda", ("cuda version",), r"CUDA (?:UMD )?Version:\s*(\d{2}\.\d)"),
    # the driver's CUDA and the runtime's, as programs print the pair: deviceQuery's "CUDA Driver Version / Runtime
    # Version  11.2 / 11.4" (cuda-samples), CuPy's show_config() "CUDA Driver Version : 11020" / "CUDA Runtime Version :
    # 11040", an application's banner "Cuda driver version: 11.2" / "Cuda runtime API version: 11.4" — the values of
    # cudaDriverGetVersion / cudaRuntimeGetVersion (1000 × major + 10 × minor)
    ("api_versions", ("runtime version",),
     r"\bCUDA Driver Version\s*/\s*Runtime Version\s*:?\s*(\d{1,2}\.\d{1,2})\s*/\s*(\d{1,2}\.\d{1,2})(?:\s|$)"),
    # the value alone, not a longer version (collect_env's "CUDA runtime version: 12.1.105" is nvcc's release, not a
    # runtime the program carries); numba -s prints a tuple, "CUDA Driver Version : (11, 4)"; PaddlePaddle's device
    # line "Driver API Version: 11.4, Runtime API Version: 10.2"
    ("api_driver_cuda", ("cuda driver version", "cuda driver api version", "driver api version"),
     r"\b(?:CUDA driver (?:API )?version|Driver API Version)\s*[:=]?\s*(\d{1,2}\.\d{1,2}|\d{4,5}"
     r"|\(\s*\d{1,2}\s*,\s*\d{1,2}\s*\))(?:[\s,;)\]]|$)"),
    ("runtime_cuda", ("cuda runtime version", "cuda runtime api version", "runtime api version"),
     r"\b(?:CUDA runtime (?:API )?version|Runtime API Version)\s*[:=]?\s*(\d{1,2}\.\d{1,2}|\d{4,5}"
     r"|\(\s*\d{1,2}\s*,\s*\d{1,2}\s*\))(?:[\s,;)\]]|$)"),
    # the CUDA runtime refusing the driver it found (cudaErrorInsufficientDriver, 35): what libcudart says when the
    # driver's libcuda is older than it, and also when no libcuda is reachable at all
    ("insufficient_driver", ("insufficient",),
     r"driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver|CUDA_ERROR_INSUFFICIENT_DRIVER"),
    # the CUDA a container image carries, as its tag names it (`nvidia/cuda:12.8.0-base-ubuntu22.04`,
    # `pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime`) or its environment says (NVIDIA's images set CUDA_VERSION)
    ("image_cuda", ("cuda:", "-cuda", "cuda_version"),
     r"\bnvidia/cuda:(\d{2}\.\d)(?:\.\d+)?-|\b[\w.-]+/[\w./-]+:[\w.]*-cuda(\d{2}\.\d)(?:\.\d+)?\b"
     r"|\bCUDA_VERSION[=:]\s*(\d{2}\.\d)(?:\.\d+)?\b"),
    ("torch_cuda", ("build pytorch", "+cu"),
     r"CUDA used to build PyTorch\s*:\s*(\d+\.\d+)|\btorch[-=]=?\s*\d+\.\d+(?:\.\d+)?(?:\.dev\d+)?\+cu(\d{2,3})\b"),
    # the wheel's local version where a report names it ("PyTorch 2.2.0+cu121", "PyTorch Version: 2.2.0+cu121"):
    # the build's CUDA when no line above says it (read after the scan)
    ("torch_cuda_named", ("torch",), r"\b(?:py)?torch\b[^\n]{0,30}?\b\d+\.\d+(?:\.\d+)?(?:\.dev\d+)?\+cu(\d{2,3})\b"),
    # a Blackwell GPU by its product name (RTX 50xx, RTX PRO Blackwell, B100/B200/B300, GB10): compute capability
    # 10.x/12.x, which no CUDA before 12.8 can target (CUDA 12.8 release notes: SM_100, SM_101, SM_120 added)
    ("blackwell", ("rtx", "blackwell", "b100", "b200", "b300", "gb10", "dgx spark"),
     r"\b((?:GeForce )?RTX 50[5-9]0(?: Ti)?(?: D)?|RTX PRO \d{3,4}(?: Blackwell)?|G?B[123]00|GB10|DGX Spark"
     r"|[\w -]{0,30}Blackwell)\b"),
    ("gpu", ("gpu ", "| "), r"^\s*GPU \d+: ((?:NVIDIA|Tesla|Quadro|GeForce)[^\n(]*?)\s*(?:\(UUID|$)"
     r"|^\|\s+\d+\s+((?:NVIDIA|Tesla|Quadro|GeForce)\b[\w -]*?)\s{2,}"),
    # hardware errors: specific evidence that explains a generic "no device" / "RmInitAdapter failed" beside it
    ("hw:xid79", ("xid", "fallen off"), r"\bXid\b[^\n]{0,40}?\b79\b|fallen off (?:of )?the bus"),
    ("hw:aer", ("aer", "pcie bus error"), r"PCIe Bus Error|\bAER:\s*(?:Uncorrected|Corrected|Multiple)|\baer_\w*status"),
    ("hw:gsp_timeout", ("gsp", "rpc"),
     r"Timeout (?:after \d+s of )?waiting for RPC[^\n]{0,30}GSP|_kgspLogRpcTimeout|\bGSP Timeout\b"
     r"|kgspIsHeartbeatTimedOut|Xid\b[^\n]{0,40}?\b(?:119|120)\b"),
    ("hw:gsp_boot", ("gsp", "firmware"),
     r"GSP[^\n]{0,60}(?:boot|bootstrap|init)[^\n]{0,60}(?:timed? ?out|timeout)"
     r"|(?:timed? ?out|timeout)[^\n]{0,60}GSP[^\n]{0,40}(?:boot|firmware|init)"
     r"|kgspWaitForRmInitDone[^\n]{0,80}(?:timeout|timed out|failed)|kgspBootstrap[^\n]{0,40}failed"
     r"|GSP[- ]RM (?:firmware )?(?:failed to boot|boot failed)|kfspWaitForSecureBoot[^\n]{0,40}timeout"),
    ("generic_symptom", ("rminitadapter", "rm_init_adapter", "cuda-capable", "no cuda gpus", "cuda_error_no_device",
                         "no devices were found"),
     r"RmInitAdapter failed|rm_init_adapter failed|no CUDA-capable device is detected|No CUDA GPUs are available"
     r"|CUDA_ERROR_NO_DEVICE|^\s*No devices were found"),
    # the container plumbing: which runtime, its mode and its cgroup setting; which LXC front end
    ("runtime_mode", ("auto-detected mode", "mode ="),
     r"Auto-detected mode as [\"']?(legacy|cdi|csv|jit-cdi)\b|^\s*mode\s*=\s*[\"'](legacy|cdi|csv|auto)[\"']"),
    ("runtime", ("nvidia-container",), r"\b(nvidia-container-(?:cli|runtime(?:-hook)?|toolkit))\b"),
    ("no_cgroups", ("no-cgroups",), r"^\s*#?\s*no-cgroups\s*=\s*(true|false)\b"),
    ("tool:lxd", ("lxd", "lxc config", "lxc launch", "lxc exec"),
     r"\blxd\b|\blxc (?:config|launch|exec|start|profile)\b|/var/(?:snap|lib)/lxd/"),
    ("tool:incus", ("incus",), r"\bincus\b"),
    ("tool:lxc", ("lxc.", "lxc-"), r"^\s*lxc\.[\w.]+\s*[:=]|\blxc-(?:start|attach|execute)\b|/var/lib/lxc/"),
    ("kernel_upgraded", ("kernel", "upgrade", "update"),
     r"kernel (?:upgrade|update)|(?:upgrad|updat)(?:e|ed|ing) (?:the |my )?(?:pve |proxmox |host )?kernel"
     r"|(?:proxmox|pve)-kernel-\d|after (?:an? |the )?(?:system |host |pve |proxmox )?(?:update|upgrade)"),
)


#: the regexes of the extractors the decisions read: the engine's prefilter keeps their lines in a long log's
#: windows (where it ran is read over the whole log instead: `places_of`)
_DECISIVE = ("proc_readable", "nvrm_version", "module_absent", "userspace_missing", "node_missing",
             "resolution_failed", "cpu_build", "kernel_upgraded", "hw:xid79", "hw:aer", "hw:gsp_timeout", "hw:gsp_boot",
             "generic_symptom", "cuda_ran", "pkg:kernel", "pkg:kernel-devel")
EXTRACTOR_REGEXES: tuple[str, ...] = tuple(r for k, _, r in _EXTRACTORS if k in _DECISIVE)
_PLACE_RX: tuple[tuple[str, Regex], ...] = tuple((k, compile_rx(r)) for k, _, r in _EXTRACTORS
                                                 if k.startswith(("place:", "tool:")) or k == "proxmox")
_ANY_PLACE: Regex = compile_rx("|".join(f"(?:{rx.pattern.removeprefix('(?m)')})" for _, rx in _PLACE_RX))
MAX_PLACE_LINES = 64  # lines naming a place read over a long log (the first ones tell where it ran)


def places_of(text: str, ev: LogEvidence) -> None:
    """Add where `text` ran to `ev`: one RE2 scan over the whole text for every place's regex at once (a long
    log's windows may not hold the line that says it); each matching line is then read by the place regexes."""
    seen = 0
    index, counted = 0, 0
    for m in _ANY_PLACE.finditer(text):
        start = text.rfind("\n", 0, m.start()) + 1
        index += text.count("\n", counted, start)
        counted = start
        end = text.find("\n", m.end())
        line = text[start:end if end >= 0 else len(text)]
        for key, rx in _PLACE_RX:
            hit = rx.search(line)
            if hit is not None:
                _apply(ev, key, hit, line, index + 1)
        seen += 1
        if seen >= MAX_PLACE_LINES:
            break


@dataclass(frozen=True)
class _Extractor:
    key: str
    triggers: tuple[str, ...]
    regex: Regex


def _compiled() -> tuple[tuple[_Extractor, ...], Regex]:
    ex = tuple(_Extractor(k, t, compile_rx(r)) for k, t, r in _EXTRACTORS)
    triggers = sorted({t for e in ex for t in e.triggers}, key=len, reverse=True)
    return ex, compile_rx("|".join(literal_regex(t) for t in triggers))


_EX, _TRIGGERS = _compiled()
_TORCH_CUDA_NAMED: Regex = next(e.regex for e in _EX if e.key == "torch_cuda_named")


def _lines_with_triggers(text: str) -> list[tuple[int, str]]:
    """Each line holding a trigger literal, once, in order, with its index (0-based) in `text` (one RE2 scan
    over the text; the line breaks before each line are counted once, incrementally)."""
    out: list[tuple[int, str]] = []
    end = -1
    index, counted = 0, 0
    for m in _TRIGGERS.finditer(text):
        if m.start() <= end:
            continue
        start = text.rfind("\n", 0, m.start()) + 1
        index += text.count("\n", counted, start)
        counted = start
        end = text.find("\n", m.end())
        end = len(text) if end < 0 else end
        out.append((index, text[start:end]))
    return out


def _numbered(number: Callable[[int], int] | None) -> Callable[[int], int]:
    return number if number is not None else (lambda i: i + 1)


def extract_evidence(text: str, fields: Mapping[str, str] | None = None,
                     number: Callable[[int], int] | None = None) -> LogEvidence:
    """The typed evidence of `text` (optionally with the values `extract.log_fields` already read). `number`
    maps a line's index in `text` to its number in the log the user has (default: index + 1)."""
    ev = LogEvidence()
    to_no = _numbered(number)
    for index, line in _lines_with_triggers(text):
        low = line.lower()
        for e in _EX:
            if not any(t in low for t in e.triggers):
                continue
            m = e.regex.search(line)
            if m is None or negated_mention(line, m.start()):
                continue
            _apply(ev, e.key, m, line, to_no(index))
    named = ev.lines.get("torch_cuda_named")
    if named is not None and "torch_cuda" not in ev.lines:
        m = _TORCH_CUDA_NAMED.search(named)
        if m is not None:
            _apply(ev, "torch_cuda", m, named, ev.line_no.get("torch_cuda_named"))
    f = fields or {}
    ev.driver_version = ev.driver_version or f.get("module_version")
    ev.userspace_version = ev.userspace_version or f.get("lib_version")
    ev.cuda_version = ev.cuda_version or f.get("driver_cuda")
    ev.torch_version = f.get("torch_version")
    ev.torch_cuda = ev.torch_cuda or f.get("torch_cuda")
    if not ev.arch_list and f.get("archs"):
        ev.arch_list = f["archs"].split()
    if f.get("xid"):
        ev.xids = [int(f["xid"])]
    return ev


def log_evidence(text: str) -> LogEvidence:
    """The evidence of a whole log as `diagnose` reads it (cleaned; the field readers' values included)."""
    from provisioner.diagnose.extract import log_fields
    from provisioner.diagnose.normalize import clean_log

    log = clean_log(text)
    fields: dict[str, str] = {}
    for view in reversed(log.views):
        fields.update(log_fields(view.text))
    return extract_evidence(log.full_text, fields)


#: the facts that are a flag: an extractor's key -> the LogEvidence field it sets (the key names the line)
_FLAGS = {"smi_cannot_communicate": "smi_cannot_communicate",
          "userspace_missing": "userspace_missing", "resolution_failed": "resolution_failed",
          "cpu_build": "cpu_build_installed", "kernel_upgraded": "kernel_upgraded", "cuda_ran": "cuda_ran",
          "insufficient_driver": "insufficient_driver"}


_T = TypeVar("_T")


def _add_once(items: list[_T], item: _T) -> None:
    """Append `item` unless `items` holds it (a list of facts in the order of first sight)."""
    if item not in items:
        items.append(item)


def _first(m: Match) -> str:
    """The first group of an alternation that took part in the match ('' if none)."""
    return next((g for g in m.groups() if g), "")


def _version(ev: LogEvidence, fact: str, value: str, line: str, number: int | None) -> None:
    """A version fact's first value in the log, with its line (`driver_cuda` is the field `cuda_version`)."""
    if fact not in ev.lines:
        setattr(ev, "cuda_version" if fact == "driver_cuda" else fact, value)
        ev.see(fact, line, number)


def _apply(ev: LogEvidence, key: str, m: Match, line: str, number: int | None = None) -> None:
    group = m.group
    if key in _FLAGS:
        setattr(ev, _FLAGS[key], True)
        ev.see(key, line, number)
    elif key.startswith("place:"):
        place: Place = key.split(":", 1)[1]  # type: ignore[assignment]
        _add_once(ev.places, place)
        ev.see(key, line, number)
    elif key.startswith("tool:"):
        tool = key.split(":", 1)[1]
        if ev.lxc_tool is None or ev.lxc_tool == "lxc":
            ev.lxc_tool = tool  # type: ignore[assignment]
        ev.see(key, line, number)
    elif key == "proxmox":
        ev.proxmox = True
        ev.lxc_tool = "proxmox"
        ev.see(key, line, number)
    elif key == "proc_readable":
        ev.driver_loaded = True
        ev.see("driver_loaded", line, number)
    elif key == "nvrm_version":
        ev.driver_loaded = True
        ev.driver_version = ev.driver_version or group(1)
        ev.see("driver_loaded", line, number)
    elif key == "smi_table":
        ev.driver_loaded = True
        ev.userspace_version = ev.userspace_version or group(1)
        ev.see("smi_works", line, number)
    elif key == "module_absent":
        if ev.driver_loaded is None:
            ev.driver_loaded = False
        ev.see(key, line, number)
    elif key == "node_missing":
        node = _first(m)
        _add_once(ev.nodes_missing, node)
        ev.see(f"node_missing:{node}", line, number)
    elif key == "torch_cuda_named":
        ev.see(key, line, number)
    elif key == "api_versions":
        _version(ev, "driver_cuda", group(1), line, number)
        _version(ev, "runtime_cuda", group(2), line, number)
    elif key in ("api_driver_cuda", "runtime_cuda"):
        _version(ev, "driver_cuda" if key == "api_driver_cuda" else key, _api_cuda(group(1)), line, number)
    elif key in ("module_version", "library_version", "driver_cuda", "torch_cuda", "image_cuda"):
        value = _first(m)
        if key == "torch_cuda" and "." not in value:  # a wheel's local tag: cu128 -> 12.8
            value = f"{value[:-1]}.{value[-1]}"
        if value:
            _version(ev, key, value, line, number)
    elif key == "blackwell":
        ev.blackwell_gpu = ev.blackwell_gpu or " ".join(group(1).split())
        ev.see(key, line, number)
    elif key == "gpu":
        name = " ".join(_first(m).split())
        if name:
            _add_once(ev.gpus, name)
            ev.see(f"gpu:{name}", line, number)
    elif key.startswith("hw:"):
        _add_once(ev.hw_errors, key.split(":", 1)[1])
        ev.see(key, line, number)
    elif key == "generic_symptom":
        ev.generic_symptom = True
        ev.see(key, line, number)
    elif key == "runtime_mode":
        ev.runtime_mode = ev.runtime_mode or _first(m).lower()
        ev.see(key, line, number)
    elif key == "runtime":
        ev.runtime = ev.runtime or group(1).lower()
        ev.see(key, line, number)
    elif key == "no_cgroups":
        if not line.lstrip().startswith("#"):
            ev.no_cgroups = group(1).lower() == "true"
            ev.see(key, line, number)
    elif key == "node_seen":
        _add_once(ev.nodes_seen, "/dev/" + group(1))
    elif key == "arch_list":
        ev.arch_list = ev.arch_list or [a.strip("',") for a in group(1).split() if a.strip("',")]
    elif key.startswith("phase:"):
        ev.installer_phase = ev.installer_phase or key.split(":", 1)[1]  # type: ignore[assignment]
        ev.see("installer_phase", line, number)
    elif key == "nccl":
        _add_once(ev.nccl_errors, group(1))
    elif key == "dkms":
        _add_once(ev.dkms, (group(1).lower(), group(2)))
        ev.see(f"dkms:{group(1).lower()}:{group(2)}", line, number)
    elif key in ("pkg:kernel", "pkg:kernel-devel"):
        _add_once(ev.kernel_devel if key == "pkg:kernel-devel" else ev.kernels, group(1))
        ev.see(key, line, number)


@dataclass(frozen=True)
class EvidenceHit:
    """A conclusion the evidence supports (a finding's candidate)."""

    name: str
    category: Category
    confidence: float
    root_cause: str
    fix: str
    evidence: tuple[str, ...]
    demotes: tuple[Category, ...] = ()
    line_of: Mapping[str, int] = field(default_factory=dict)  # evidence line -> its number in the log
    needs_symptom: bool = False  # a fact that is a cause only where the log also shows a failure


#: the driver branch that first supports each CUDA minor (NVIDIA's CUDA release notes, table 3): the fix names it
_FIRST_BRANCH = {(11, 8): 520, (12, 0): 525, (12, 1): 530, (12, 2): 535, (12, 3): 545, (12, 4): 550, (12, 5): 555,
                 (12, 6): 560, (12, 8): 570, (12, 9): 575, (13, 0): 580, (13, 1): 590}


def _api_cuda(value: str) -> str:
    """A CUDA version as the driver/runtime API returns it (11040), as numba prints it ("(11, 4)") or as printed
    (11.4): '11.4'."""
    if value.startswith("("):
        major, _, minor = value.strip("() ").partition(",")
        return f"{int(major)}.{int(minor)}"
    return value if "." in value else cuda_from_driver_int(value)


def _cuda(v: str | None) -> tuple[int, int] | None:
    if not v:
        return None
    major, _, minor = v.partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() and (minor or "0").isdigit() else None


def lxc_words(ev: LogEvidence) -> str:
    """How to pass the GPU's device nodes in, in the words of the tool the log shows."""
    if ev.lxc_tool == "proxmox" or (ev.proxmox and "lxc" in ev.places):
        return ("in /etc/pve/lxc/<vmid>.conf add devN entries (PVE >= 8.1: `dev0: /dev/nvidia0`, `dev1: /dev/nvidiactl`, "
                "`dev2: /dev/nvidia-uvm`, `dev3: /dev/nvidia-uvm-tools`; `pct set <vmid> -dev0 /dev/nvidia0`), or on "
                "older PVE `lxc.cgroup2.devices.allow: c 195:* rwm` plus `lxc.cgroup2.devices.allow: c <nvidia-uvm "
                "major>:* rwm` (from /proc/devices) and `lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none "
                "bind,optional,create=file` for each node")
    if ev.lxc_tool in ("lxd", "incus"):
        cli = "incus" if ev.lxc_tool == "incus" else "lxc"
        return (f"give the container the GPU device (`{cli} config device add <ct> gpu0 gpu`) and, for the driver's "
                f"userspace from the host, `{cli} config set <ct> nvidia.runtime=true` (then restart it)")
    if ev.lxc_context:
        return ("add `lxc.cgroup2.devices.allow: c 195:* rwm` and `lxc.cgroup2.devices.allow: c <nvidia-uvm "
                "major>:* rwm` (from /proc/devices) and an `lxc.mount.entry: /dev/nvidiaX dev/nvidiaX none "
                "bind,optional,create=file` line per node to the container's config")
    if ev.in_container:
        return ("run the container with the NVIDIA runtime (`docker run --gpus all`, or CDI `--device "
                "nvidia.com/gpu=all`), or pass each node with `--device /dev/nvidiaX`")
    return ("Proxmox: `devN:` lines or lxc.mount.entry + lxc.cgroup2.devices.allow; docker: `--gpus`/CDI")


def _runtime_brings_userspace(ev: LogEvidence) -> bool:
    """The missing driver userspace is the container runtime's to bring, not the image's: the toolkit's own dlopen
    of the host's NVML failed, or a docker/podman/Kubernetes container lacks a library of the driver's (the
    toolkit mounts the host's libcuda/libnvidia-* into a container that asks for a GPU)."""
    line = ev.lines.get("userspace_missing", "").lower()
    runtime = any(p in RUNTIMES for p in ev.places) and not ev.lxc_context
    return "load library failed" in line or (runtime and "cannot open shared object" in line)


def _compare_kernel_devel(ev: LogEvidence, hits: list[EvidenceHit]) -> None:
    """A listing whose kernel-devel trees match none of its kernels: the module cannot be built for the kernel."""
    if ev.kernels and ev.kernel_devel and not set(ev.kernels) & set(ev.kernel_devel):
        hits.append(EvidenceHit(
            name="evidence.kernel_devel_mismatch", category="installer_failure", confidence=0.8,
            root_cause=(f"The installed kernel-devel ({', '.join(ev.kernel_devel)}) matches none of the installed kernels "
                        f"({', '.join(ev.kernels)}): DKMS and the installer build the NVIDIA module against the running "
                        "kernel's tree, so it is not built and the driver does not load."),
            fix=("Install kernel-devel for the running kernel (`dnf install kernel-devel-$(uname -r)`), or update the "
                 "kernel to the kernel-devel's version and reboot; then rebuild the module (`dkms autoinstall`)."),
            evidence=_lines(ev, "pkg:kernel", "pkg:kernel-devel"),
            line_of=_line_of(ev, "pkg:kernel", "pkg:kernel-devel"),
            demotes=("no_driver_loaded",),
        ))


def _kernel_flavour(release: str) -> str:
    """A kernel release's flavour: its last dash-separated part when that is a word ("generic", "azure", "amd64",
    "pve", "lts"), else "" (RHEL's "513.el8.x86_64", Arch's "arch1-1")."""
    last = release.rsplit("-", 1)[-1] if "-" in release else ""
    return last.lower() if last[:1].isalpha() else ""


def _kernel_key(release: str) -> tuple[int, ...]:
    """A kernel release's numbers up to its first word ("4.16.0-0.bpo.1-amd64" -> (4, 16, 0, 0); RHEL's
    "4.18.0-513.5.1.el8_9.x86_64" -> (4, 18, 0, 513, 5, 1)), for "which is newer" within one flavour."""
    out: list[int] = []
    for part in re.split(r"[-.+~_]", release):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def _comparable_kernel(release: str) -> bool:
    """A release whose order the numbers tell: not a release candidate (6.1.0-rc1, Ubuntu's 060100rc1)."""
    return re.search(r"rc\d", release, re.IGNORECASE) is None


def _dkms_missing_kernel(ev: LogEvidence, hits: list[EvidenceHit]) -> None:
    """`dkms status` shows other modules built for a kernel newer than every kernel the nvidia module is built for: a
    kernel upgrade the NVIDIA module did not follow (it failed to build there, or the driver does not support it)."""
    nvidia = {k for m, k in ev.dkms if m.startswith("nvidia") and _comparable_kernel(k)}
    others = {k for m, k in ev.dkms if not m.startswith("nvidia") and _comparable_kernel(k)}
    missing: list[str] = []
    newest = ""
    for flavour in sorted({_kernel_flavour(k) for k in nvidia}):
        built = max((k for k in nvidia if _kernel_flavour(k) == flavour), key=_kernel_key)
        later = [k for k in others - nvidia if _kernel_flavour(k) == flavour and _kernel_key(k) > _kernel_key(built)]
        if later:
            newest, missing = built, sorted(later, key=_kernel_key)
    if not missing:
        return
    keys = [f"dkms:{m}:{k}" for m, k in ev.dkms if k in missing or (m.startswith("nvidia") and k == newest)]
    hits.append(EvidenceHit(
        name="evidence.dkms_nvidia_not_built_for_kernel", category="no_driver_loaded", confidence=0.82,
        root_cause=(f"DKMS has the nvidia module built for {newest} only, while other modules are built for the newer "
                    f"{', '.join(missing)}: the NVIDIA module did not follow the kernel upgrade, so under the new kernel "
                    "no NVIDIA driver loads."),
        fix=(f"Boot {newest} for now, or build the module for the new kernel: install its headers and run `dkms "
             f"autoinstall -k {missing[-1]}` (read its make.log if it fails: the driver release may predate the kernel, "
             "then install a newer driver from the distribution's updates)."),
        evidence=_lines(ev, *keys),
        line_of=_line_of(ev, *keys),
        needs_symptom=True,  # a listing of builds is a cause only beside a failure
    ))


def _cuda_newer_than_driver(ev: LogEvidence, key: str, version: str, *, name: str, confidence: float, root_cause: str,
                            upgrade: str, build: str, needs_symptom: bool) -> EvidenceHit:
    """A CUDA that something carries (a program's runtime, an image's toolkit) newer than the driver's CUDA, as one log
    prints both: the driver is too old for it."""
    branch = _FIRST_BRANCH.get(_cuda(version) or (0, 0))
    return EvidenceHit(
        name=name, category="driver_too_old", confidence=confidence, root_cause=root_cause,
        fix=((f"Upgrade {upgrade} to R{branch} or newer (CUDA {version}), " if branch else
              f"Upgrade {upgrade} to a branch that supports CUDA {version}, ")
             + f"or use {build} for CUDA {ev.cuda_version} or older."),
        evidence=_lines(ev, key, "driver_cuda"),
        line_of=_line_of(ev, key, "driver_cuda"),
        demotes=("no_driver_loaded",),
        needs_symptom=needs_symptom,
    )


def _compare_versions(ev: LogEvidence, hits: list[EvidenceHit]) -> None:
    """Versions one log prints, compared: the torch build's CUDA against the driver's, the userspace against the
    kernel module."""
    built, supported = _cuda(ev.torch_cuda), _cuda(ev.cuda_version)
    if built and supported and built > supported and "torch_cuda" in ev.lines and "driver_cuda" in ev.lines:
        branch = _FIRST_BRANCH.get(built)
        same_major = built[0] == supported[0]
        # within one major, a build newer than the driver's CUDA runs on CUDA's minor-version compatibility; a log
        # where CUDA then launched kernels or allocated memory shows the driver was not refused: its own error is
        # the cause, the versions only "also possible"
        host = " on the Proxmox host (and the same version's userspace in the container)" if ev.lxc_context else ""
        hits.append(EvidenceHit(
            name="evidence.torch_cuda_newer_than_driver", category="driver_too_old",
            confidence=0.9 if not same_major else 0.6 if ev.cuda_ran else 0.82,
            root_cause=(f"This PyTorch was built with CUDA {ev.torch_cuda} but the driver supports CUDA "
                        f"{ev.cuda_version} at most (nvidia-smi's `CUDA Version`): the driver is too old for this build."),
            fix=(f"Upgrade the NVIDIA driver{host} to R{branch} or newer (CUDA {ev.torch_cuda}), "
                 if branch else f"Upgrade the NVIDIA driver{host} to a branch that supports CUDA {ev.torch_cuda}, ")
                + (f"or install the PyTorch build for CUDA {ev.cuda_version} or older (e.g. the "
                   f"cu{ev.cuda_version.replace('.', '')} index); `provisioner resolve --driver <version>` picks one."
                   if ev.cuda_version else ""),
            evidence=_lines(ev, "torch_cuda", "driver_cuda"),
            line_of=_line_of(ev, "torch_cuda", "driver_cuda"),
            demotes=("no_driver_loaded", "cpu_only_wheel"),
            # within one major, CUDA's minor-version compatibility runs most of the build: a cause only beside a failure
            needs_symptom=same_major,
        ))
    torch_said = bool(built and supported and built > supported)  # the torch build's comparison says it already
    runtime = _cuda(ev.runtime_cuda)
    if runtime and supported and runtime > supported and "runtime_cuda" in ev.lines and "driver_cuda" in ev.lines \
            and not torch_said:
        same_major = runtime[0] == supported[0]
        hits.append(_cuda_newer_than_driver(
            ev, "runtime_cuda", ev.runtime_cuda or "", name="evidence.runtime_cuda_newer_than_driver",
            # within one major, a log where CUDA then launched kernels or allocated memory shows the driver was not
            # refused: its own error is the cause (even a generic one), the versions only "also possible"
            confidence=0.9 if not same_major else 0.4 if ev.cuda_ran else 0.8,
            root_cause=(f"The program carries the CUDA {ev.runtime_cuda} runtime but the driver supports CUDA "
                        f"{ev.cuda_version} at most, as the same log prints them: the driver is too old for this "
                        "build."),
            upgrade="the NVIDIA driver", build="the program's build",
            # within one major, CUDA's minor-version compatibility runs much of such a build: a cause only beside a
            # failure
            needs_symptom=same_major))
    image = _cuda(ev.image_cuda)
    if image and supported and image > supported and "image_cuda" in ev.lines and "driver_cuda" in ev.lines \
            and any(p in RUNTIMES for p in ev.places) and not torch_said:
        same_major = image[0] == supported[0]
        hits.append(_cuda_newer_than_driver(
            ev, "image_cuda", ev.image_cuda or "", name="evidence.image_cuda_newer_than_driver",
            confidence=0.88 if not same_major else 0.6 if ev.cuda_ran else 0.8,
            root_cause=(f"The container image carries CUDA {ev.image_cuda} but the host's driver supports CUDA "
                        f"{ev.cuda_version} at most (nvidia-smi's `CUDA Version`): a container uses the host's driver, "
                        "which is too old for this image."),
            upgrade="the host's NVIDIA driver", build="the image's build",
            # an image names its CUDA whether or not it ran: a cause only beside a failure (NVIDIA's images refuse
            # to start on an older driver; within one major, minor-version compatibility runs most of one)
            needs_symptom=True))
    module, lib = ev.module_version, ev.library_version
    if module and lib and module != lib and "module_version" in ev.lines and "library_version" in ev.lines:
        if ev.lxc_context:
            fix = (f"The container's userspace must equal the host's module: install only the userspace at {module} in "
                   f"the container (`NVIDIA-Linux-x86_64-{module}.run --no-kernel-modules --silent`, or the distro "
                   f"packages of exactly {module}); `provisioner replay PLAYBOOK` re-runs driver.userspace.")
        else:
            fix = (f"Load the module that matches the userspace {lib}: reboot (or `rmmod nvidia_uvm nvidia_drm "
                   f"nvidia_modeset nvidia && modprobe nvidia`), or reinstall the driver so module and libraries are "
                   f"one version; check `cat /proc/driver/nvidia/version` against `nvidia-smi`.")
        hits.append(EvidenceHit(
            name="evidence.userspace_vs_module", category="driver_lib_mismatch", confidence=0.9,
            root_cause=(f"The driver's userspace is {lib} but the loaded kernel module is {module}: NVML and CUDA refuse "
                        f"a module of another version"
                        + (" (the container's libraries do not follow the host's module)." if ev.lxc_context else ".")),
            fix=fix,
            evidence=_lines(ev, "library_version", "module_version"),
            line_of=_line_of(ev, "library_version", "module_version"),
            demotes=("no_driver_loaded", "container_device_missing"),
        ))


def _insufficient_yet_recent_in_container(ev: LogEvidence, hits: list[EvidenceHit]) -> None:
    """The CUDA runtime says the driver is insufficient inside a docker/podman/Kubernetes/HPC container whose host
    driver (nvidia-smi's `CUDA Version`) supports the runtime's CUDA major. Within a major, CUDA's minor-version
    compatibility runs a newer runtime on an older driver of that major (R525+ for 12.x, R580+ for 13.x), so the
    runtime did not find the host's libcuda: the container was not given the driver (libcudart answers "insufficient"
    when no libcuda loads). Where the log names the runtime's CUDA (the torch build's, the image's), that is
    compared; where it does not, a runtime of a newer major stays possible and the finding is only "also possible"."""
    supported = _cuda(ev.cuda_version)
    if not (ev.insufficient_driver and supported and supported[0] >= 12 and "driver_cuda" in ev.lines
            and any(p in RUNTIMES for p in ev.places) and not ev.lxc_context):
        return
    named = [c for c in (_cuda(ev.torch_cuda), _cuda(ev.image_cuda)) if c]
    if named and max(named)[0] > supported[0]:
        return  # a runtime of a newer major: the driver is too old indeed (the version comparisons say so)
    hits.append(EvidenceHit(
        name="evidence.insufficient_driver_in_container", category="container_device_missing",
        confidence=0.93 if named else 0.7,
        root_cause=(f"The CUDA runtime in the container says the driver is insufficient, yet the host's driver supports "
                    f"CUDA {ev.cuda_version} (nvidia-smi), which runs every CUDA {supported[0]}.x runtime: the "
                    "container did not get the host's driver libraries (libcudart says \"insufficient\" when no "
                    "libcuda loads), so it was not given the GPU."),
        fix=("Give the container the GPU through the NVIDIA runtime: " + GPU_REQUEST_STEPS + " (Unraid: "
             "`--runtime=nvidia` with NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES set, no stray spaces); "
             "then `nvidia-smi` inside it shows the host's driver."),
        evidence=_lines(ev, "insufficient_driver", "driver_cuda"),
        line_of=_line_of(ev, "insufficient_driver", "driver_cuda"),
        # with the runtime's CUDA named and within the driver's major, the versions show the driver is not too old
        demotes=("driver_too_old",) if named else (),
    ))


def _build_predates_gpu(ev: LogEvidence, hits: list[EvidenceHit]) -> None:
    """A torch build whose CUDA predates the GPU's architecture: CUDA 12.8 is the first toolkit that targets
    Blackwell (sm_100/sm_120; CUDA 12.8 release notes), so a +cu121/+cu124/+cu126 wheel has no kernels for an RTX
    50xx / RTX PRO Blackwell / B200, whatever the driver (PyTorch ships sm_120 from its cu128 builds, torch 2.7)."""
    built = _cuda(ev.torch_cuda)
    if not (ev.blackwell_gpu and built and built < (12, 8) and "blackwell" in ev.lines):
        return
    hits.append(EvidenceHit(
        name="evidence.torch_cuda_predates_gpu", category="arch_unsupported", confidence=0.86,
        root_cause=(f"This PyTorch was built with CUDA {ev.torch_cuda}, which predates the {ev.blackwell_gpu} "
                    "(Blackwell, compute capability 10.x/12.x): CUDA < 12.8 cannot target it, so the build has no "
                    "kernels for this GPU and CUDA reports it unusable."),
        fix=("Install a PyTorch build for CUDA 12.8 or newer (torch>=2.7 from the cu128/cu129/cu130 index) with a host "
             "driver >= 570; `provisioner resolve --cc 12.0 --driver <version> --python <x.y>` picks one."),
        evidence=_lines(ev, "torch_cuda", "blackwell"),
        line_of=_line_of(ev, "torch_cuda", "blackwell"),
        demotes=("cpu_only_wheel", "no_driver_loaded"),
    ))


_HW_WORDS = {"xid79": "the GPU fell off the bus (Xid 79)", "aer": "PCIe AER errors on the link",
             "gsp_timeout": "the GSP firmware stopped answering (RPC/heartbeat timeout)",
             "gsp_boot": "the GSP firmware did not boot (boot timeout)"}


def _hardware_over_generic(ev: LogEvidence, hits: list[EvidenceHit]) -> None:
    """A hardware or firmware fault beside a generic line ("RmInitAdapter failed", "no CUDA-capable device"):
    the generic line is the fault's consequence, the specific line names the cause."""
    if not (ev.hw_errors and ev.generic_symptom):
        return
    keys = tuple(f"hw:{h}" for h in ev.hw_errors)
    what = "; ".join(_HW_WORDS[h] for h in ev.hw_errors)
    firmware = set(ev.hw_errors) <= {"gsp_timeout", "gsp_boot"}
    hits.append(EvidenceHit(
        name="evidence.hardware_beside_generic", category="oom_or_hw", confidence=0.93,
        root_cause=(f"A GPU {'firmware' if firmware else 'hardware'} fault: {what}; the generic line beside it "
                    "(RmInitAdapter failed / no CUDA device) is its consequence, not a missing driver."),
        fix=(("Reset or power-cycle the GPU; try the driver branch with the GSP fix for this GPU or, with the "
              "proprietary flavour, `NVreg_EnableGpuFirmware=0` (options nvidia in /etc/modprobe.d); if it recurs on "
              "one GPU, treat it as faulty.") if firmware else
             ("Power-cycle the node (a GPU off the bus does not come back without it); check PCIe seating, risers, "
              "power cables and the slot's link (`lspci -vvv`, AER counters), BIOS/firmware; replace the GPU if it "
              "recurs.")),
        evidence=_lines(ev, *keys, "generic_symptom"),
        line_of=_line_of(ev, *keys, "generic_symptom"),
        demotes=("no_driver_loaded", "container_device_missing", "installer_failure"),
    ))


def decide(ev: LogEvidence) -> list[EvidenceHit]:
    """The conclusions `ev` supports, from its facts (never from one phrasing)."""
    hits: list[EvidenceHit] = []
    missing_core = [n for n in ev.nodes_missing if n in _CTL_OR_GPU or n.removeprefix("/dev/nvidia").isdigit()]
    where = _where(ev)
    if ev.driver_loaded and missing_core:  # (seen elsewhere, e.g. on the host, does not make them present here)
        hits.append(EvidenceHit(
            name="evidence.module_loaded_nodes_missing", category="container_device_missing", confidence=0.88,
            root_cause=(f"The NVIDIA kernel module is loaded (its /proc/driver/nvidia is readable{_ver(ev.driver_version)}) "
                        f"but {', '.join(missing_core)} {'is' if len(missing_core) == 1 else 'are'} missing {where}: "
                        + ("the device nodes were not passed into the container." if ev.in_container
                           else "the device nodes were not created (or not passed into this environment).")),
            fix=("Create the nodes on the host (`nvidia-modprobe -c=0 -u`, or run `nvidia-smi` there once) and pass "
                 f"/dev/nvidiactl, /dev/nvidiaN and /dev/nvidia-uvm* into the container: {lxc_words(ev)}."),
            evidence=_lines(ev, "driver_loaded", *(f"node_missing:{n}" for n in missing_core)),
            demotes=("no_driver_loaded",),
        ))
    missing_uvm = [n for n in ev.nodes_missing if n in _UVM_OR_MODESET]
    if missing_uvm and not missing_core and ev.driver_loaded is not False and not ev.userspace_missing:
        # CUDA opens /dev/nvidia-uvm (NVML does not): nvidia-smi works, CUDA fails. The node exists only once
        # nvidia_uvm is loaded and nvidia-modprobe (or a root CUDA program) created it; the LXC nvidia hook,
        # enroot and rootless runtimes cannot create it, and a container started before it existed lacks it
        hits.append(EvidenceHit(
            name="evidence.uvm_nodes_missing", category="container_device_missing", confidence=0.78,
            root_cause=(f"{', '.join(missing_uvm)} {'is' if len(missing_uvm) == 1 else 'are'} missing {where} while the "
                        "driver answers: the UVM/modeset nodes exist only after nvidia_uvm is loaded and nvidia-modprobe "
                        "(or a CUDA program run as root on the host) creates them, which a fresh boot or an unprivileged "
                        "runtime does not do; CUDA needs them, NVML (nvidia-smi) does not."),
            fix=("On the host at boot load nvidia-uvm and create the nodes (`modprobe nvidia-uvm && nvidia-modprobe -u "
                 "-c=0 -m`, from a systemd unit or nvidia-persistenced), then restart the container so they are passed "
                 f"in: {lxc_words(ev)}."),
            evidence=_lines(ev, *(f"node_missing:{n}" for n in missing_uvm), "driver_loaded"),
            demotes=("no_driver_loaded",),
        ))
    if ev.userspace_missing and ev.in_container and ev.driver_loaded is not False:
        lxc = ev.lxc_context
        after = " after the host's kernel upgrade" if ev.kernel_upgraded else ""
        hits.append(EvidenceHit(
            # in an LXC container (Proxmox, LXD, Incus) the userspace is the container's to install at the host's
            # version, its config's to pass: an LXC setup fault (proxmox_lxc), as the regression corpus labels
            # these reports; elsewhere (docker without the toolkit's injection) a container device/library fault
            name="evidence.container_userspace_missing",
            category="proxmox_lxc" if lxc else "container_device_missing",
            confidence=0.9 if lxc else 0.8,
            root_cause=(f"The NVIDIA driver's userspace (nvidia-smi, libnvidia-ml.so.1, libcuda.so.1) is missing inside the "
                        f"{'LXC ' if lxc else ''}container{after}: the host has the kernel module; the container needs "
                        "the user-space libraries at exactly the host's version"
                        + (" (a host driver rebuilt or upgraded with the kernel leaves the container's copy "
                           "missing or at the old version)." if ev.kernel_upgraded else ".")),
            fix=("Check `nvidia-smi` on the host and note its driver version; install only the userspace at that "
                 "version in the container (`NVIDIA-Linux-x86_64-<host version>.run --no-kernel-modules --silent`; "
                 "`provisioner replay PLAYBOOK` re-runs driver.userspace), or for docker let the NVIDIA container "
                 "toolkit inject it (`--gpus all`)."),
            evidence=_lines(ev, "userspace_missing", "kernel_upgraded", "proxmox", "place:lxc"),
            # nvidia-container-cli's "load library failed" (libnvidia-container src/dxcore.c, driver.c: the dlopen of
            # the host's libnvidia-ml) is the runtime not finding the host's driver, not a library the image lacks
            demotes=("no_driver_loaded", "missing_shared_lib") if _runtime_brings_userspace(ev) else ("no_driver_loaded",),
        ))
    if ev.resolution_failed and not ev.cpu_build_installed:
        hits.append(EvidenceHit(
            name="evidence.resolution_failed_first", category="resolver_failure", confidence=0.86,
            root_cause=("The package resolution failed, so nothing was installed: a requirement naming a `+cpu` (or any "
                        "other) build did not get that build, it could not be satisfied."),
            fix=("Read the resolver's reason; pin a torch version and local tag that the chosen index publishes for "
                 "this Python and platform (`provisioner resolve` picks one), or use the matching index URL."),
            evidence=_lines(ev, "resolution_failed"),
            demotes=("cpu_only_wheel",),
        ))
    _compare_versions(ev, hits)
    _insufficient_yet_recent_in_container(ev, hits)
    _compare_kernel_devel(ev, hits)
    _dkms_missing_kernel(ev, hits)
    _build_predates_gpu(ev, hits)
    _hardware_over_generic(ev, hits)
    return [h if h.line_of else replace(h, line_of=_line_of_texts(ev, h.evidence)) for h in hits]


def _ver(version: str | None) -> str:
    return f", module {version}" if version else ""


def _where(ev: LogEvidence) -> str:
    places = [p for p in ev.places if p != "container"]
    if ev.proxmox and "lxc" in places:
        return "in the Proxmox LXC container"
    if places:
        name = "enroot/Apptainer" if places[0] == "hpc" else places[0]
        return f"in the {name} container" if places[0] in CONTAINERS else f"on {name}"
    return "in the container" if ev.in_container else "where this ran"


def _lines(ev: LogEvidence, *keys: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ev.lines[k] for k in keys if k in ev.lines))


def _line_of(ev: LogEvidence, *keys: str) -> dict[str, int]:
    return {ev.lines[k]: ev.line_no[k] for k in keys if k in ev.lines and k in ev.line_no}


def _line_of_texts(ev: LogEvidence, texts: tuple[str, ...]) -> dict[str, int]:
    """The numbers of evidence lines given as text (the first fact that saw each)."""
    out: dict[str, int] = {}
    for key, text in ev.lines.items():
        if text in texts and key in ev.line_no:
            out.setdefault(text, ev.line_no[key])
    return out
