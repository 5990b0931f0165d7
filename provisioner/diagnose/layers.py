"""The layer a log's failing lines point at, when no message the catalogue or a rule knows matched.

A log from a program, version or wrapper the rules have not met still says, in its failing lines, which layer
failed: a line that reports a failure ("error", "failed", "cannot", "not found", "mismatch", ...) and names the
layer's own things (`nvidia-smi` and the kernel module; `sm_90` and compute capability; `libcudnn.so.9`; NCCL and
ranks; pip/uv/conda and versions; DKMS and kernel headers; Xid and ECC; `--gpus` and `nvidia.com/gpu` in a
docker/Kubernetes log; `/dev/dri`, cgroup device rules and idmaps in an LXC one). This module reads those words,
weighs them per category over every failing line, and offers the layer with the most weight as a low-confidence
finding, never above a rule's: "no known message matched; the failing lines point at ...".

It runs only where nothing else found a cause and needs more than one weak word: a healthy log (no failing line) or
a lone "failed" beside the word "nvidia" gives no finding. It reads the lines that report a failure; where they name
no layer (a reporter's "cannot get it to work", a traceback whose last line names nothing), or name layers too weakly
or two alike, it reads the rest of the log's lines (not its tables, not the lines its programs mark as information),
among the layers the failing lines named if they named any, at a lower confidence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from provisioner.diagnose.evidence import RUNTIMES, LogEvidence, negated_mention
from provisioner.diagnose.model import Category
from provisioner.diagnose.normalize import fold_typography, strip_prefix
from provisioner.diagnose.rx import Regex, compile_rx

CONFIDENCE = 0.3  # below every rule's: a layer, not a known message
WHOLE_LOG_CONFIDENCE = 0.2  # the failing lines name no layer; the rest of the log's words do
MIN_SCORE = 3  # a finding needs this much weight: one failing line with a specific word, or weaker words on several
MAX_FAILING_LINES = 2000  # lines read in a long log (the last ones: a failure is usually last)
MAX_LINE_CHARS = 600
EVIDENCE_LINES = 3

#: a line that reports a failure, in the words programs and people use for one
_FAILURE = compile_rx(
    r"\b(?:error|errors|err|failed|fails?|failing|failure|cannot|can ?not|can't|could ?not|couldn't|unable|"
    r"not found|no such|denied|refused|invalid|mismatch\w*|insufficient|too old|not supported|unsupported|"
    r"incompatible|not compatible|timed? ?out|abort(?:ed|ing)?|fatal|panic|segmentation fault|crash(?:ed|es)?|"
    r"missing|not (?:available|detected|loaded|compiled|working|recognized|found)|doesn't work|does not work|"
    r"no (?:gpus?|cuda|devices?|nvidia)\b[\w ]{0,20}(?:found|available|detected|usable|selected|set)|hang(?:s|ing)?|stuck|"
    r"stall(?:s|ed|ing)?|freez(?:es|ing)|froze|"
    # the hardware's own words for a fault: the kernel module's "fallen off the bus", "not responding", a lost GPU
    r"fallen off the bus|off the bus|not responding|(?:gpu|device) (?:is )?lost|lost from the bus|reset required|"
    # a kernel's refusal: a module's key, a probe another driver took
    r"rejected|was not called)\b"
    r"|\w+(?:Error|Exception)\b"
    # a check of the GPU answered no on its own line: "is_available() returns False", collect_env's "Is CUDA
    # available: False", "CUDA available: False"
    r"|\b(?:cuda\.is_available|is_built_with_cuda)\(\)\)?\W{0,3}\s*(?:returns?|->|:|=|is)?\s*False\b"
    r"|\bcuda\b[^\n]{0,20}\bavailable\b\W{0,3}\s*False\b"
)
#: a stack frame (c10's "frame #0: c10::Error::Error(…) + 0xe0 (0x… in /…/libc10.so)", gdb's "#3 0x… in f () from
#: /…/libcuda.so.1", a JVM's "at org.…(…)"): where the failure passed, not a failure of its own
_FRAME = compile_rx(r"^\s*(?:frame #\d+:|#\d+\s+0x[0-9a-f]+ in |at [\w.$<>]+\([^)\n]*\)\s*$)")
#: a field whose value says nothing is wrong (nvidia-smi -q's "Reset Required : No" or its 570+ "… : Requested
#: functionality has been deprecated"; collect_env's "[conda] Could not collect", "GPU models and configuration: No
#: CUDA"); a test runner's skipped test; ldconfig's notice about WSL's libcuda (printed by every healthy WSL 2 container)
_QUIET_FIELD = compile_rx(r"^(?:[^:\n]{1,60}:|\s*\[\w+\])\s*(?:no|n/a|none|could not collect|no cuda|requested "
                          r"functionality has been deprecated)\.?\s*$")
_NOT_RUN = compile_rx(r"(?-i:\bSKIPPED\b|\bSKIP\b|\bXFAIL(?:ED)?\b)|\bis not a symbolic link\b"
                     # the kernel loading an out-of-tree or unsigned module where signatures are not enforced: it loads
                     r"|\btaint(?:s|ing) kernel\b")
#: collect_env's line for a build without CUDA: its value is the finding, not a quiet field
_BUILT_WITHOUT_CUDA = compile_rx(r"\bcuda used to build pytorch:\s*(?:none|could not collect)\b")
#: a line saying its part came up ("NVRM: loading NVIDIA UNIX … Kernel Module", "[drm] Initialized nvidia-drm", "Nvlink
#: Core is being initialized"): that layer works, the whole-log reading does not weigh it
_SUCCEEDED = compile_rx(r"\b(?:loading|loaded|initiali[sz]ed|being initiali[sz]ed|registered|successfully|succeeded)\b")


def _says_nothing_wrong(line: str) -> bool:
    """A stack frame, a test not run, a benign notice, or a field whose value is quiet (not collect_env's CPU build)."""
    return _FRAME.search(line) is not None or _NOT_RUN.search(line) is not None \
        or (_QUIET_FIELD.search(line) is not None and _BUILT_WITHOUT_CUDA.search(line) is None)


#: the answer a REPL prints on the line after the check ("torch.cuda.is_available()" / "False")
_CHECK_CALL = compile_rx(r"\bcuda\.(?:is_available|device_count)\(\)|\bis_built_with_cuda\(\)")
_NO_ANSWER = compile_rx(r"^\s*(?:>>>\s*|Out\[\d+\]:\s*)?(?:False|0)\s*(?:#[^\n]*)?$")  # a pasted "# should be True"
#: the same words where they count nothing: "ECC errors: 0", "0 errors", "errors: none", "no errors"
_HEALTHY = compile_rx(
    r"\b(?:errors?|failures?|failed)\s*[:=]?\s*(?:0|none|n/a)\b|\b(?:0|no|zero)\s+(?:errors?|failures?|failed)\b"
    r"|\bwithout (?:any )?errors?\b|^\s*(?:\w+\s+){0,2}errors?\s*:?\s*$"  # nvidia-smi -q's "ECC Errors" section title
    # the kernel freezing tasks for suspend/hibernate (kernel/power/process.c): "Freezing user space processes ...
    # (elapsed 0.002 seconds) done.", "Freezing remaining freezable tasks completed"
    r"|\bFreezing (?:user space processes|remaining freezable tasks)\b|\bfreezable\b"
    # a header row's column titles, drawn with heavy bars ("┃ host ┃ ok ┃ changed ┃ failed ┃ skipped ┃": the recap this
    # tool prints with rich); a status cell of a light-barred row ("| modprobe nvidia | failed |") still fails
    r"|\x{2503}(?:\s*(?:failed|failures?|errors?|#?wrong)\s*\x{2503})+"
)
#: a structured (JSON) event fails only where its own level or status field says so; docker's json-file lines
#: ({"log": …, "stream": …}) carry a program's text, read as any line's
_JSON_LINE = compile_rx(r"^\s*\{\s*\"")
_DOCKER_JSON = compile_rx(r"^\s*\{\s*\"log\"\s*:")
_JSON_FAILED = compile_rx(r"\"(?:level|severity|status|outcome|result)\"\s*:\s*\"(?:error|err|fatal|failed|failure|critical|"
                          r"crit|panic)\"")
#: pip's notice that it did not re-check what was installed before: printed by installs that went on
_PIP_NOTICE = compile_rx(r"pip's dependency resolver does not currently take into account")
#: a hedged clause: what might fail, not what failed ("If X fails to find the NVIDIA X driver module, please …")
_HEDGE = compile_rx(r"\b(?:if|in case|unless|whether|should|may|might)\b[^.;:!?\n]{0,100}")
#: a line whose program recovered on its own ("Failed to hardlink files; falling back to full copy", "retrying")
_RECOVERED = compile_rx(r"\bfalling back\b|\bretrying\b|\bwill retry\b")
#: a line its program marks as a warning: a failure the whole-log reading does not stand on (the .run installer's
#: "WARNING: Unable to determine the path to install the libglvnd EGL vendor library config files")
_WARNING = compile_rx(r"(?-i:\bWARN(?:ING)?\b)|\blevel=warn(?:ing)?\b|^\s*\[?W\d{4} ")
#: inxi's graphics listing names the X drivers that did not load (inxi 2: "driver: nouveau,vesa FAILED: nvidia unloaded:
#: fbdev"; inxi 3: "driver: X: loaded: modesetting unloaded: fbdev,vesa failed: nvidia", wrapped or not): the display
#: server's state, printed by a healthy compute host too (inxi's man page, -G)
_INXI_X_DRIVERS = compile_rx(r"(?:\bdriver:|\b(?:un)?loaded:) [\w,-]+ (?:(?:un)?loaded: [\w,-]+ )?failed: [\w,-]+")
#: this tool's own step line for a step that succeeded or a plan's ("5. Make the GPUs … survive a host reboot: changed
#: (0.7s)  boot unit … is not installed: …", render/console.py): the detail says what the step found and changed
_STEP_SUCCEEDED = compile_rx(r"^\s*\d+\.\s[^\n]{0,160}?:\s*(?:ok|changed|skipped|will change|no change)"
                             r"(?:\s*\(\d+(?:\.\d+)?s\)|\s{2}|$)")
#: a line its program marks as information, not as a failure ("NCCL INFO NET/IB : No device found.", level=info)
_INFO = compile_rx(r"(?-i:\b(?:INFO|DEBUG|TRACE|NOTICE)\b)|\blevel=(?:info|debug|trace)\b|^\s*\[?[IDT]\d{4} "
                   # nvidia-installer's log marks its progress messages "-> " (its errors "ERROR:", warnings "WARNING:")
                   r"|^\s*-> ")


@dataclass(frozen=True)
class Cue:
    """Words of one layer, and what a failing line holding them weighs for its category."""

    category: Category
    weight: int
    regex: Regex
    needs: str = ""  # "lxc": only where the log shows an LXC context; "runtime": a docker/podman/k8s one; "host": not one
    # the program that carried the failure, not its layer: its words count nowhere in a log where a failing line names
    # a cause it carries (_CARRIED: "OCI runtime create failed: … nvidia-container-cli: requirement error: … please
    # update your driver" is the driver's version, reported through the container runtime)
    messenger: bool = False
    # a prefix the program puts on every line it prints (the kernel module's "NVRM:"): it names the layer only on a
    # line that names no other ("NVRM: GPU … has fallen off the bus" is the hardware's)
    alone: bool = False


def _cue(category: Category, weight: int, regex: str, needs: str = "", messenger: bool = False,
         alone: bool = False) -> Cue:
    return Cue(category, weight, compile_rx(regex), needs, messenger, alone)


#: the causes a messenger only carries, by the least weight a failing line's words must have for each: a version
#: compared (any word), the host's driver absent or the hardware failing (their strong words only)
_CARRIED: dict[Category, int] = {"driver_too_old": 1, "driver_lib_mismatch": 1, "no_driver_loaded": 4, "oom_or_hw": 4}


_GPU_WORDS = r"\b(?:nvidia\S*|gpus?|cuda|/dev/nvidia\S*|nvidia-smi|nvml)\b"

CUES: tuple[Cue, ...] = (
    # the GPU's architecture against what was built for it
    _cue("arch_unsupported", 3, r"\bsm_?\d{2,3}[a-z]?\b|\bcompute[ _]capabilit|\bcuda capabilit|\bkernel image\b|\bunsupported sm\b"
         r"|\bcompute_\d{2,3}\b|\bgpu arch|\barch(?:itecture)?s? (?:list|not|is not|are not|un)"),
    _cue("arch_unsupported", 2, r"\b(?:gpu|device|card)\b[^\n]{0,60}\b(?:too old|no longer supported|not supported)"),
    # a program's own check of the GPU's capability ("GPU0 Quadro K600 … capability 3.0, NOT SUPPORTED", "compute
    # capability 3.0 is below the minimum 3.5")
    _cue("arch_unsupported", 3, r"\bcapability\s*:?\s*\d{1,2}\.\d\b[^\n]{0,60}\b(?:not supported|unsupported|too old"
         r"|(?:is |are )?(?:below|less than) (?:the )?(?:minimum )?(?:of )?(?:\w+ )?\d{1,2}\.\d\b)"
         r"|\b(?:not supported|unsupported)\b[^\n]{0,40}\bcapability\s*:?\s*\d{1,2}\.\d\b"),
    # a driver older than the CUDA asked for
    _cue("driver_too_old", 3, r"\bdriver\b[^\n]{0,80}\b(?:too old|older|insufficient|outdated|update|upgrade|newer|"
         r"at least|minimum|requires?|required)\b|\b(?:too old|insufficient|outdated|newer|minimum|at least|update|"
         r"upgrade)\b[^\n]{0,80}\bdriver\b|\bnvidia_require_cuda\b|\bforward compatib"
         # a requirement on the driver's CUDA that is not met (nvidia-container-cli's, nvidia-docker 1's)
         r"|\bunsatisfied condition:\s*cuda\b|\bunsupported cuda version\b"),
    # the kernel module against the userspace
    _cue("driver_lib_mismatch", 4, r"\bmismatch\w*\b[^\n]{0,80}\b(?:drivers?|librar\w*|nvml|api|client|kernel|"
         r"modules?|versions?)\b|\b(?:drivers?|librar\w*|nvml|api|client|kernel|modules?|versions?)\b[^\n]{0,80}"
         r"\bmismatch|\b(?:kmod|module|driver|librar\w*|nvml|user-?space)\b[^\n]{0,80}\b(?:does not|doesn't|do not|"
         r"don't) match\b"),
    # the kernel driver itself
    _cue("no_driver_loaded", 2, r"\bnvidia-smi\b|\bnvidia (?:kernel )?(?:module|driver)\b|\bnvidia\.ko\b|\bmodprobe\b"
         r"|\bnouveau\b|\bsecure ?boot\b|\bkernel module\b|\bno devices were found\b|\binsmod\b"
         r"|\bdriver (?:is )?not (?:loaded|installed|found|running)"),
    _cue("no_driver_loaded", 2, r"\bnvrm\b", alone=True),
    # the driver absent or refused, in the words every layer above it uses (NVML's "Driver Not Loaded", nvidia-smi's
    # "couldn't communicate with the NVIDIA driver", modprobe's "Module nvidia not found", a module signature refused)
    # (in a docker/k8s log an application's "no driver" is the container's missing GPU; the runtime's own NVML
    # "driver not loaded" is the host's)
    _cue("no_driver_loaded", 4, r"\bnvml error: driver not loaded\b|\bfailed to initialize nvml: driver not loaded\b"),
    _cue("no_driver_loaded", 4, r"\bcommunicate with the nvidia driver\b|\bfound no nvidia driver\b|\bdriver ?not ?loaded\b"
         r"|\bnvidia driver (?:is )?not (?:loaded|installed|running)\b|\bmodule nvidia[\w-]* not found\b"
         r"|\bkey was rejected\b|\brequired key not available\b|\bsig_enforce\b"
         r"|\bprobe routine was not called\b", needs="host"),
    # a docker/podman/Kubernetes container without the GPU
    _cue("container_device_missing", 3, r"--gpus\b|\bnvidia\.com/gpu\b|\bdevice driver\b|\bdevice request|\bcdi\b"
         r"|\bcontainer toolkit\b|\bnvidia_visible_devices\b|\bdevice plugin\b|\bcapabilit(?:y|ies)\b", needs="runtime"),
    _cue("container_device_missing", 3, r"\bnvidia-container\S*|\bruntime\b", needs="runtime", messenger=True),
    # a library of the driver's (not the toolkit's) missing in a container: the runtime mounts those from the host
    _cue("container_device_missing", 4, r"\blib(?:cuda|nvidia-[\w-]+|nvcuvid)\.so\b", needs="runtime"),
    _cue("container_device_missing", 2, _GPU_WORDS, needs="runtime", messenger=True),
    # LXC/LXD/Incus/Proxmox plumbing
    _cue("proxmox_lxc", 3, r"/dev/(?:nvidia\S*|dri\S*)|\brenderd\d+\b|\bcard\d\b|\bcgroup\S*|\bdevices\.allow\b"
         r"|\bmount\.entry\b|\bidmap|\bdev\d+:|\bpermission denied\b|\bpassthrough\b|\bhook\b|\bunprivileged\b"
         r"|\bsubgid\b|\bsubuid\b", needs="lxc"),
    _cue("proxmox_lxc", 2, _GPU_WORDS, needs="lxc"),
    # a library the loader cannot find
    _cue("missing_shared_lib", 3, r"\blib[\w+-]*\.so\b|\.so\.\d|\.dll\b|\bdlopen\b|\bshared (?:object|librar)"
         r"|\bld_library_path\b|\bldconfig\b|\bdynamic (?:library|link)|\blibrar(?:y|ies)\b[^\n]{0,30}\b(?:not found|"
         r"missing|(?:cannot|could not|can't|couldn't) be (?:found|loaded)|failed to load)"),
    # a CPU-only build
    _cue("cpu_only_wheel", 4, r"\bcompiled with (?:cuda|gpu)|\bcpu[- ]only\b|\bcpuonly\b|\bnot compiled with\b"
         r"|\bbuilt without (?:cuda|gpu)|\bwithout (?:cuda|gpu) support|\bcpuexecutionprovider\b"
         # collect_env's line for a build without CUDA
         r"|\bcuda used to build pytorch:\s*(?:none|could not collect)\b"),
    # a CPU build's version or build string: what is installed, unless the line is a resolver's failure to find it
    _cue("cpu_only_wheel", 4, r"\+cpu\b|\bpy3(?:\.?\d+)?_cpu_\d", alone=True),
    # NCCL and the collectives
    _cue("nccl_failure", 3, r"\bnccl\w*|\bprocessgroupnccl\b"),
    _cue("nccl_failure", 1, r"\bc10d\b|\ball_?reduce\b|\ball_?gather\b|\bbarrier\b|\bcollective\b|\bwatchdog\b"
         r"|\brank\s*\d+|\btorch\.distributed\b|\bgloo\b"),
    # installing the driver or CUDA packages
    _cue("installer_failure", 3, r"\bnvidia-installer\b|\bdkms\b|\bkernel (?:headers|sources?|source tree)\b"
         r"|\bmodpost\b|\bakmods?\b|\bkmod\b|\bnvidia-[\w.-]*\.run\b|\bunmet dependencies\b|\bheld broken packages\b"
         r"|\bbuilding (?:the )?(?:kernel )?modules?\b|\bbad return status for module build\b"
         # installing the driver itself, in the installer's and people's words
         r"|\binstall(?:ing|ation|er)?\b[^\n]{0,20}\bnvidia (?:graphics )?driver\b[^\n]{0,60}\b(?:fail\w*|error|unable|"
         r"cannot|can't)|\b(?:fail\w*|unable|cannot|can't|could not)\b[^\n]{0,40}\binstall\w*[^\n]{0,20}\bnvidia "
         r"(?:graphics )?driver\b|\bappears? to already be loaded\b"),
    _cue("installer_failure", 1, r"\bmake(?:\[\d+\])?:|\bgcc\b|\bcompiler\b|\bapt(?:-get)?\b|\bdpkg\b|\bdnf\b"
         r"|\byum\b|\bzypper\b|\bpacman\b"),
    # finding a build the package manager can install
    _cue("resolver_failure", 4, r"\bno matching distribution\b|\bcould not find a version\b|\bfrom versions\b"
         r"|\bresolutionimpossible\b|\bunsatisfiable\b|\bno solution found\b|\bconflicting (?:dependencies|requirements)"
         r"|\brequires-python\b|\bnot a supported wheel\b|\bnothing provides\b|\bno (?:matching |compatible )?"
         r"(?:wheel|distribution|version)s?\b|\bnot available for (?:this|your) platform\b"
         # uv's "can't be installed because it doesn't have a source distribution or wheel for the current platform"
         r"|\bcan't be installed because\b|\bdoesn't have a (?:source distribution or )?wheel\b"),
    _cue("resolver_failure", 1, r"\bpip3?\b|\buv\b|\bconda\b|\bmamba\b|\bpoetry\b|\bpdm\b|\bpixi\b|\bwheels?\b"
         r"|\bindex-url\b|\bpypi\b|\bdependenc(?:y|ies)\b|\bresolv\w*"),
    # the hardware, or its memory
    _cue("oom_or_hw", 4, r"\bxid\b|\bfallen off\b|\boff the bus\b|\bout of memory\b|\blost from the bus\b|\bgpu is lost\b"
         r"|\breset required\b"),
    _cue("oom_or_hw", 3, r"\becc\b|\boom\b|\baer\b|\buncorrect\w*|\bthermal\b|\boverheat\w*|\bpower (?:cap|limit|supply|brake)|\billegal (?:memory|address)"
         r"|\bnvlink\b|\bretired pages\b|\brow remap|\bgsp\b"),
    # "hardware" as a fault ("hardware error", "faulty hardware"), not the GPU's video or compute engines ("hardware
    # encoder/decoding/acceleration unavailable": a library or device the program did not get)
    _cue("oom_or_hw", 1, r"\bpcie?\b|\bhardware[- ](?:error|fault|failure|problem|issue|defect|malfunction)s?\b"
         r"|\b(?:faulty|bad|broken|defective|failing)(?: gpu)? hardware\b|\bunknown error\b|\bmemory access\b"),
)

#: what each layer's finding says, in the words of the layer
_LAYER: dict[Category, tuple[str, str]] = {
    "arch_unsupported": ("the GPU's architecture and the architectures the software was built for",
                         "Compare the GPU's compute capability (nvidia-smi --query-gpu=compute_cap) with the build's "
                         "(torch.cuda.get_arch_list()); install a build that includes it."),
    "driver_too_old": ("the driver's version against the CUDA version the software needs",
                       "Compare `nvidia-smi`'s CUDA Version with the software's CUDA; update the driver or install a "
                       "build for an older CUDA."),
    "driver_lib_mismatch": ("the kernel module's version against the driver libraries'",
                            "Compare `cat /proc/driver/nvidia/version` with the libraries' version (nvidia-smi, "
                            "libcuda.so.*); reboot after a driver upgrade, or install the userspace of the module's "
                            "version."),
    "no_driver_loaded": ("the NVIDIA kernel driver (not loaded, or not reachable)",
                         "Check `lsmod | grep nvidia`, `dmesg | grep -i nvrm` and `nvidia-smi` on the host; load or "
                         "rebuild the module for the running kernel (Secure Boot, nouveau)."),
    "container_device_missing": ("the container runtime's GPU plumbing (the container did not get the GPU)",
                                 "Run the container with the GPU requested (`--gpus all`, CDI, `nvidia.com/gpu` "
                                 "limits) and check `nvidia-ctk` / the device plugin's logs."),
    "cpu_only_wheel": ("a CPU-only build of the framework", "Install the CUDA build of the framework (the wheel "
                       "index for your CUDA), and check `torch.version.cuda`."),
    "missing_shared_lib": ("a shared library the loader cannot find",
                           "Find the library (`ldconfig -p | grep <name>`); install the package that ships it or add "
                           "its directory to the loader's path."),
    "nccl_failure": ("NCCL and the collective communication between ranks",
                     "Rerun with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET) and read each rank's first WARN line."),
    "installer_failure": ("installing the driver or CUDA packages",
                          "Read the installer's or DKMS's own log (/var/log/nvidia-installer.log, make.log) for its "
                          "first error; kernel headers and the compiler must match the running kernel."),
    "resolver_failure": ("finding an installable build (the package index, the Python version or the platform)",
                         "Check the index URL, the Python version and the platform against the wheels published for "
                         "them."),
    "oom_or_hw": ("GPU memory or the GPU hardware",
                  "Read `dmesg` for Xid/ECC/AER lines and `nvidia-smi -q -d ECC,MEMORY`; reduce memory use for an OOM."),
    "proxmox_lxc": ("the LXC container's device plumbing (device nodes, cgroup rules, idmaps)",
                    "Compare the container's /dev entries and config (devN: / lxc.mount.entry / "
                    "lxc.cgroup2.devices.allow, the gid of the render/video groups) with the host's nodes."),
}


@dataclass
class LayerGuess:
    """The layer with the most weight, its score and the failing lines that gave it (index, text)."""

    category: Category
    score: int
    runner_up: Category | None
    runner_up_score: int
    lines: list[tuple[int, str]] = field(default_factory=list)
    whole_log: bool = False  # decided by the rest of the log's words: the failing lines named no layer, or too weakly

    @property
    def confidence(self) -> float:
        return WHOLE_LOG_CONFIDENCE if self.whole_log else CONFIDENCE

    @property
    def root_cause(self) -> str:
        if self.whole_log:
            return (f"No message this tool knows matched; the log reports a failure and its words point at "
                    f"{_LAYER[self.category][0]}.")
        return (f"No message this tool knows matched; the failing lines point at {_LAYER[self.category][0]}.")

    @property
    def fix(self) -> str:
        return _LAYER[self.category][1]


def _blank(rx: Regex, line: str) -> str:
    """`line` with what `rx` matches blanked out."""
    out, at = [], 0
    for m in rx.finditer(line):
        out.append(line[at:m.start()])
        out.append(" ")
        at = m.end()
    out.append(line[at:])
    return "".join(out)


def failing_lines(lines: tuple[str, ...] | list[str]) -> list[tuple[int, str]]:
    """The lines that report a failure (index, text), the last MAX_FAILING_LINES of them: not the ones whose
    failure word counts nothing ("ECC errors: 0"), nor the ones their program prints as information."""
    out: list[tuple[int, str]] = []
    previous = ""
    for i, raw in enumerate(lines):
        line = raw[:MAX_LINE_CHARS]
        asked, previous = previous, (line if line.strip() else previous)
        if line.strip() and _NO_ANSWER.search(line) is not None and _CHECK_CALL.search(asked) is not None:
            out.append((i, f"{asked.strip()} -> {line.strip()}"))  # the check and its answer, read as one line
            continue
        if not line.strip() or _FAILURE.search(line) is None or _says_nothing_wrong(line):
            continue
        if _JSON_LINE.search(line) is not None and _JSON_FAILED.search(line) is None \
                and _DOCKER_JSON.search(line) is None:
            continue  # a run log's or a service's JSON event: its fields say whether it failed
        if _FAILURE.search(_blank(_HEDGE, _blank(_HEALTHY, line))) is None:
            continue  # "ECC errors: 0", "if X fails …": the failure word counts nothing
        if any(rx.search(line) is not None for rx in (_PIP_NOTICE, _INFO, _RECOVERED, _INXI_X_DRIVERS, _STEP_SUCCEEDED)):
            continue
        out.append((i, line))
    return out[-MAX_FAILING_LINES:]


def _allowed(cue: Cue, ev: LogEvidence) -> bool:
    if cue.needs == "lxc":
        return ev.lxc_context
    runtime = any(p in RUNTIMES for p in ev.places) and not ev.lxc_context
    if cue.needs == "runtime":
        return runtime
    if cue.needs == "host":
        return not runtime
    return True


def _weigh(numbered_lines: list[tuple[int, str]], cues: list[Cue]
           ) -> tuple[dict[Category, int], dict[Category, list[tuple[int, int, str]]]]:
    """Each layer's weight over the lines (a line counts once, for its heaviest word of each layer). A messenger's
    words (the container runtime that reported the failure) count nowhere once a line names a cause it carries
    (`_CARRIED`); an `alone` cue's only on a line that names no other layer."""
    score: dict[Category, int] = defaultdict(int)
    fed: dict[Category, list[tuple[int, int, str]]] = defaultdict(list)
    carried: list[tuple[Category, int, int, str]] = []
    cause_carried = False
    seen: set[str] = set()
    for index, line in numbered_lines:
        line = line[:MAX_LINE_CHARS]
        if not line.strip() or line.strip() in seen:
            continue  # a line repeated (a retry loop, a pasted log twice) weighs once
        seen.add(line.strip())
        best: dict[Category, int] = {}
        messenger: dict[Category, int] = {}
        alone: dict[Category, int] = {}
        for cue in cues:
            into = messenger if cue.messenger else alone if cue.alone else best
            if cue.weight > into.get(cue.category, 0):
                m = cue.regex.search(line)
                if m is not None and not negated_mention(line, m.start()):  # "* No `GPU has fallen off the bus`"
                    into[cue.category] = cue.weight
        for category, weight in alone.items():
            if not best.keys() - {category} and weight > best.get(category, 0):
                best[category] = weight
        cause_carried = cause_carried or any(best.get(c, 0) >= w for c, w in _CARRIED.items())
        for category, weight in messenger.items():
            if weight > best.get(category, 0):
                carried.append((category, weight - best.get(category, 0), index, line.strip()))
        for category, weight in best.items():
            score[category] += weight
            fed[category].append((weight, index, line.strip()))
    if not cause_carried:
        for category, extra, index, text in carried:
            score[category] += extra
            fed[category].append((extra, index, text))
    return score, fed


def _top(score: dict[Category, int]) -> tuple[Category, int, Category | None, int] | None:
    """The heaviest layer with MIN_SCORE or more and no tie, with the runner-up."""
    if not score:
        return None
    ranked = sorted(score.items(), key=lambda kv: -kv[1])
    top, top_score = ranked[0]
    second, second_score = ranked[1] if len(ranked) > 1 else (None, 0)
    if top_score < MIN_SCORE or top_score == second_score:
        return None
    return top, top_score, second, second_score


#: a row of a table (nvidia-smi's, a listing's): the state it lists is not where the failure is
_TABLE_ROW = compile_rx(r"^\s*[|+\x{2502}\x{2503}\x{250f}\x{2517}\x{2523}\x{2521}\x{2514}\x{250c}]")


def _context_line(line: str) -> bool:
    """A line the whole-log reading weighs: not a table row, not a line its program marks as information, not one
    whose failure word counts nothing ("ECC errors: 0")."""
    return not (_TABLE_ROW.search(line) or _INFO.search(line) or _HEALTHY.search(line) or _says_nothing_wrong(line)
                or _SUCCEEDED.search(line))


#: a failure of the GPU stack, in its own words: what shows the failure a version comparison needs beside it
_GPU_FAILURE = compile_rx(r"\b(?:cuda\w*|cu\w*init|gpus?|nvidia\w*|nvml|nccl|cudnn|cublas|torch|driver|device)\b"
                          # a program finding no device to run on ("No devices are set", "no CUDA devices found")
                          r"|\bno (?:cuda |gpu )?devices (?:are |were )?(?:found|available|detected|set|selected|usable)\b")


def _reported(failing: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The failing lines that report a failure, not a warning: what the whole-log reading stands on."""
    return [(i, line) for i, line in failing if _WARNING.search(line) is None]


def gpu_failure(lines: tuple[str, ...] | list[str]) -> str | None:
    """The last line that reports a failure of the GPU stack (not a warning), or None."""
    for _, line in reversed(_reported(failing_lines(lines))):
        if _GPU_FAILURE.search(line) is not None:
            return line.strip()
    return None


_LEVEL = compile_rx(r"(?-i:\b(?:DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE)\b)")


def _without_wrapper(line: str) -> str:
    """`line` without the prefix a wrapper or logger put before it, keeping the log level that prefix held."""
    folded = fold_typography(line)
    plain = strip_prefix(folded)
    if plain == folded:
        return folded
    level = _LEVEL.search(folded[: len(folded) - len(plain)])
    return f"{level.group(0)} {plain}" if level is not None else plain


def guess_layer(lines: tuple[str, ...] | list[str], ev: LogEvidence) -> LayerGuess | None:
    """The layer the failing lines of `lines` weigh most for. Where they name none (a bare "it fails", a traceback's
    last line without a layer's word), or name layers too weakly or two alike, the layer the rest of the log's words
    weigh most for (among those the failing lines named, if any; not its tables or INFO lines), at a lower confidence,
    if a line that is not a warning reports a failure. None: no failure reported, too little weight, or a tie."""
    # each line as its program printed it: a wrapper's per-line prefix (torchrun's "[rank3]:", compose's "svc |", a
    # timestamp) names no layer; a log level in it ("- INFO -", "- ERROR -") is the program's own word and stays
    lines = [_without_wrapper(line) for line in lines]
    cues = [c for c in CUES if _allowed(c, ev)]
    failing = failing_lines(lines)
    score, fed = _weigh(failing, cues)
    found = _top(score)
    whole = False
    if found is None:
        hard = _reported(failing)
        if not hard:
            return None  # no failure is reported (or only warnings)
        named = set(score)  # the layers the failing lines name, too weakly or two alike: the rest of the log decides
        start = max(0, len(lines) - MAX_FAILING_LINES)
        context = [(i, line) for i, line in enumerate(lines) if i >= start and _context_line(line)]
        score, fed = _weigh(context, [c for c in cues if not named or c.category in named])
        found = _top(score)
        if found is None:
            return None
        whole = True
        # the line that says it failed leads the evidence (the last failing line that names the chosen layer, else the
        # last one that reports a failure), then the layer's heaviest words
        on_top = {i for _, i, _ in fed[found[0]]}
        last, said = next(((i, line) for i, line in reversed(hard) if i in on_top), hard[-1])
        fed[found[0]] = [(99, last, said.strip()), *[f for f in fed[found[0]] if f[1] != last]]
    top, top_score, second, second_score = found
    strongest = sorted(fed[top], key=lambda t: (-t[0], -t[1]))[:EVIDENCE_LINES]
    return LayerGuess(top, top_score, second, second_score,
                      [(i, text) for _, i, text in sorted(strongest, key=lambda t: t[1])], whole_log=whole)


def numbered(guess: LayerGuess, number: Callable[[int], int]) -> list[tuple[str, int]]:
    """The guess's evidence lines with their numbers in the log the user has."""
    return [(text, number(i)) for i, text in guess.lines]
