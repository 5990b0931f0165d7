"""driver_too_old and driver_lib_mismatch: the driver versus the CUDA runtime, and userspace versus the kernel module."""

from __future__ import annotations

from provisioner.diagnose.catalogue import CODE_END
from provisioner.diagnose.model import Rule
from provisioner.diagnose.rules.common import DRIVER_ENTRY_NAME

# CUDA driver API and NVML entry points newer than any driver still in use (see driver.cuda_driver_symbol_missing)
_NEW_DRIVER_ENTRY = (
    r"cu[A-Z]\w*_v[3-9]|cuDevicePrimaryCtx\w+_v2|cuStreamGetCaptureInfo_v2|cuGraph\w+_v2"
    r"|cuMem(?:Create|Map|MapArrayAsync|Unmap|Release|AddressReserve|AddressFree|SetAccess|GetAccess"
    r"|GetAllocationGranularity|GetAllocationPropertiesFromHandle|ExportToShareableHandle"
    r"|ImportFromShareableHandle|RetainAllocationHandle|Pool\w+|AllocAsync|FreeAsync|AllocFromPoolAsync|Batch\w+"
    r"|GetHandleForAddressRange|Discard\w*|Prefetch\w*_v2|Advise_v2)\w*"
    r"|cuGraph[A-Z]\w*|cuLaunchKernelEx|cuLaunchCooperativeKernel\w*|cuLaunchHostFunc|cuTensorMap\w+|cuLibrary\w+"
    r"|cuKernel\w+|cuMulticast\w+|cuGreenCtx\w+|cuDevSmResource\w+|cuDevResource\w+|cuCoredump\w+"
    r"|cuCheckpoint\w+|cuUserObject\w+|cuStreamBeginCaptureToGraph|cuStreamGetId|cuCtxGetId|cuFuncGetName"
    r"|cuGetProcAddress\w*|cuFlushGPUDirectRDMAWrites|cuDeviceGetUuid_v2|cuCtxCreate_v[34]|cuLogs\w+"
    r"|nvml[A-Z]\w*_v[3-9]|nvmlInitWithFlags|nvmlDeviceGet(?:ComputeRunningProcesses|GraphicsRunningProcesses"
    r"|MemoryInfo)_v2|nvmlDeviceGetGpuInstance\w*|nvmlDeviceGetMigMode|nvmlDeviceGetGpuFabricInfo\w*"
)

RULES: tuple[Rule, ...] = (
    Rule(
        name="driver.insufficient_for_runtime",
        category="driver_too_old",
        patterns=(
            r"CUDA driver version is insufficient for CUDA runtime version",
            r"cudaErrorInsufficientDriver",
            r"driver version is insufficient",
        ),
        confidence=0.92,
        root_cause=(
            "The CUDA runtime in use is newer than the installed driver[ {driver}] supports"
            "[ (driver CUDA {driver_cuda})]."
        ),
        fix=(
            "Upgrade the host driver to a branch that supports this CUDA version, or install a build "
            "made for the driver's CUDA (e.g. an older PyTorch CUDA variant / image tag)."
        ),
        examples=(
            "Check failed: error == cudaSuccess (35 vs. 0)  CUDA driver version is insufficient for CUDA runtime "
            "version",
        ),
    ),
    Rule(
        name="driver.torch_driver_too_old",
        category="driver_too_old",
        patterns=(
            r"The NVIDIA driver on your system is too old",
            r"please update your GPU driver by downloading and installing a new version",
        ),
        confidence=0.92,
        root_cause=(
            "The driver's CUDA version[ ({driver_cuda})] is older than the CUDA[ {torch_cuda}] the installed "
            "PyTorch[ ({torch_version})] was built with."
        ),
        fix=(
            "Upgrade the host driver (cu12x needs >= 525.60.13, cu13x needs >= 580), or install a PyTorch "
            "variant the driver supports[ (CUDA <= {driver_cuda})]; `provisioner resolve` picks one."
        ),
        examples=(
            "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 12080). "
            "Please update your GPU driver by downloading and installing a new version from the URL: "
            "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org/ to install a "
            "PyTorch version that has been compiled with your version of the CUDA driver.",
        ),
    ),
    Rule(
        name="driver.forward_compat_unsupported",
        category="driver_too_old",
        patterns=(
            r"forward compatibility was attempted on non supported HW",
            r"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            r"cudaErrorCompatNotSupportedOnDevice",
        ),
        confidence=0.88,
        root_cause=(
            "The CUDA runtime is newer than the driver and the driver tried the forward-compatibility "
            "path, which this GPU does not support (error 804)."
        ),
        fix=(
            "Upgrade the host driver to natively support the CUDA version in use, and remove cuda-compat libraries "
            "from the library path."
        ),
        examples=(
            "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
            "functions before calling NumCudaDevices() that might have already set an error? Error 804: forward "
            "compatibility was attempted on non supported HW",
        ),
    ),
    Rule(
        name="driver.container_requirement",
        category="driver_too_old",
        patterns=(
            r"requirement error: unsatisfied condition: cuda\s*>=\s*\d",
            r"This container was built for NVIDIA Driver Release [\d.]+ or later, but version [\d.]+ was detected",
            r"please update your driver to a newer version, or use an earlier cuda container",
        ),
        confidence=0.92,
        root_cause="The container image needs CUDA[ {required_cuda}] but the host driver[ {driver}] is older.",
        fix="Upgrade the host driver, or use an image tag built for the CUDA version the driver supports.",
        examples=(
            "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your "
            "driver to a newer version, or use an earlier cuda container: unknown",
        ),
    ),
    Rule(
        name="driver.ptx_toolchain_newer",
        category="driver_too_old",
        patterns=(
            r"the provided PTX was compiled with an unsupported toolchain",
            r"CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            r"cudaErrorUnsupportedPtxVersion",
            r"NVIDIA driver's CUDA version is [\d.]+ which is older than the ptxas CUDA version",
        ),
        confidence=0.8,
        root_cause="PTX in the binary was produced by a CUDA toolchain newer than the driver's JIT compiler.",
        fix=(
            "Upgrade the driver to at least the CUDA version that produced the PTX, or install a build with SASS for "
            "this GPU."
        ),
        examples=("RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.",),
    ),
    Rule(
        name="driver.kernel_image_invalid",
        category="driver_too_old",
        patterns=(
            r"a PTX JIT compilation failed",
            r"CUDA_ERROR_INVALID_PTX",r"device kernel image is invalid", r"cudaErrorInvalidKernelImage"),
        confidence=0.55,
        root_cause=(
            "The driver cannot load the kernel image: typically compressed fatbins (CUDA >= 12.4 toolchains) on a "
            "driver older than 550.54.14."
        ),
        fix=(
            "Upgrade the driver to >= 550.54.14 (or the branch matching the build's CUDA), or install a build not "
            "using compressed fatbins."
        ),
        examples=("RuntimeError: CUDA error: device kernel image is invalid",),
    ),
    Rule(
        name="driver.gpu_newer_than_driver",
        category="driver_too_old",
        patterns=(
            r"NVRM: The NVIDIA [^\n]{0,80}GPU installed in this system is not supported by the [\d.]+ NVIDIA",
            r"is not supported by the [\d.]+ NVIDIA Linux driver release",
        ),
        confidence=0.85,
        unless=r"Legacy drivers",
        root_cause="The installed driver branch predates this GPU (e.g. Blackwell needs R570 or newer).",
        fix="Install a driver branch that supports the GPU (R570+ for Blackwell; open kernel modules).",
        examples=(
            "NVRM: The NVIDIA GPU 10de:2bb1 (PCI ID: 10de:2bb1) installed in this system is not supported by the "
            "550.54.14 NVIDIA Linux driver release.",
        ),
    ),
    Rule(
        # Flatpak gives a sandboxed app the NVIDIA userspace (libGL, libcuda, libnvidia-*) as the runtime extension
        # org.freedesktop.Platform.GL.nvidia-<version>, which works only at exactly the host driver's version; after a
        # host driver update without the matching extension, GL finds no NVIDIA GLX (flathub/org.blender.Blender#97:
        # host 510.54, no GL.nvidia-510-54)
        name="mismatch.flatpak_nvidia_gl_extension",
        category="driver_lib_mismatch",
        patterns=(
            r"extension \"?GLX\"? missing on display",
            r"libGL error: No matching fbConfigs or visuals found",
            r"libGL error: failed to load driver: (?:swrast|nvidia)",
        ),
        messages=("blender.glx_unavailable",),
        # in a Flatpak sandbox (its run, its per-app data, its NVIDIA GL extension; not GL.default, Mesa's)
        context=r"\bflatpak (?:run|install|update|info)\b|/\.var/app/[\w.-]+/|\borg\.freedesktop\.Platform\.GL(?:32)?\.nvidia",
        # another GPU's Mesa driver (an AMD or Intel host), or a display forwarded over ssh (its GLX is the client's)
        unless=(r"MESA-LOADER|\bradeonsi\b|\bamdgpu\b|\biris\b|\bi965\b|\bnouveau\b|\bssh -[XY]\b"
                r"|DISPLAY=localhost:|\bX11 forwarding\b"),
        confidence=0.75,
        root_cause=("A Flatpak app found no working NVIDIA GL userspace in its sandbox: Flatpak provides it as the "
                    "org.freedesktop.Platform.GL.nvidia-<version> extension, which must be exactly the host driver's "
                    "version[ ({driver})], and the one installed is not (or none is)."),
        fix=("Install the extension for the host's driver version, every part of it with dots as dashes (510.54 → "
             "`org.freedesktop.Platform.GL.nvidia-510-54`, 545.29.06 → `…GL.nvidia-545-29-06`): `flatpak install "
             "flathub org.freedesktop.Platform.GL.nvidia-<version>` (and `…GL32.nvidia-…` for 32-bit apps), system-wide "
             "if the app is; `flatpak update` after every host driver update installs it; check with `cat "
             "/sys/module/nvidia/version` and `flatpak list --runtime | grep nvidia`."),
        examples=("$ flatpak run org.blender.Blender\nintern/ghost/intern/GHOST_WindowX11.cpp:206: X11 glXChooseVisual() "
                  "failed, verify working openGL system!\ninitial window could not find the GLX extension",),
    ),
    Rule(
        name="mismatch.nvml",
        category="driver_lib_mismatch",
        patterns=(
            # NVML_ERROR_LIB_RM_VERSION_MISMATCH (18) as each tool words it: nvidia-smi's "Driver/library version
            # mismatch", NVML's own "RM has detected an NVML/RM version mismatch" (XuehaiPan/nvitop#41), the
            # bindings' constant (pynvml `NVMLError_LibRmVersionMismatch`, rapidsai/dask-cuda#949; tensorpack's
            # `NVML_ERROR_LIB_RM_VERSION_MISMATCH`, #1244) and the bare code (ollama: `nvmlInit_v2 err: 18`)
            r"Driver/library version mismatch",
            r"NVML library version:\s*\d+",
            r"NVML/RM version mismatch",
            r"lib[ _]?rm[ _]?version[ _]?mismatch",
            r"\bnvml\w*[^\n]{0,30}?\b(?:err(?:or)?|failure|failed|returned|return code)\W{0,3}18" + CODE_END,
        ),
        confidence=0.93,
        root_cause=(
            "The userspace driver libraries[ ({lib_version})] do not match the loaded kernel module"
            "[ ({module_version})]."
        ),
        fix=(
            "Make userspace and kernel module the same version: reboot/reload the module after a driver "
            "upgrade, or (in a container) reinstall the userspace .run with --no-kernel-modules at exactly "
            "the host's /sys/module/nvidia/version."
        ),
        examples=(
            "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178",
            "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown",
            "pynvml.nvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch.",
            "tensorpack.utils.nvml.NvmlException: NVML_ERROR_LIB_RM_VERSION_MISMATCH",
            "nvmlInit_v2 err: 18",
        ),
    ),
    Rule(
        name="mismatch.api_mismatch",
        category="driver_lib_mismatch",
        patterns=(
            r"API mismatch: the NVIDIA kernel module has (?:the )?version",
            r"NVRM: API mismatch: the client (?:'[^'\n]{1,80}' \(pid \d+\) )?(?:NVRM: )?has the version",
            r"kernel version [\d.]+ does not match DSO version",
        ),
        confidence=0.93,
        root_cause=(
            "The kernel module[ ({module_version})] and a userspace component[ ({lib_version})] are different driver "
            "versions."
        ),
        fix=(
            "Install matching versions (reboot after upgrading; in containers install userspace at the host module's "
            "version)."
        ),
        examples=(
            "NVRM: API mismatch: the client has the version 535.129.03, but\nNVRM: this kernel module has the "
            "version 535.104.05.  Please\nNVRM: make sure that this kernel module and all NVIDIA driver\n"
            "NVRM: components have the same version.",
        ),
    ),
    Rule(
        # kernel_gsp.c checks the .fwversion of the GSP firmware file against the module's own version and refuses a
        # file from another release: RmInitAdapter then fails, but the cause is the mismatch
        name="mismatch.gsp_firmware",
        category="driver_lib_mismatch",
        patterns=(),
        messages=("nvrm.gsp_firmware_version_mismatch",),
        confidence=0.92,
        demotes=("no_driver_loaded",),
        root_cause=(
            "The kernel module and the GSP firmware it loads are different driver releases: the module refuses the "
            "firmware (a module built from older sources than its package says, or firmware/userspace updated without "
            "the module), so the GPU does not initialise."
        ),
        fix=(
            "Install the module, its firmware (/lib/firmware/nvidia/<version>/) and the userspace from one release: "
            "compare `modinfo nvidia | grep ^version` with the firmware directory and `nvidia-smi`'s driver, rebuild "
            "the DKMS/akmod module from the matching sources (or go back to the release that matches), then reboot."
        ),
        examples=(
            # Nobara-Project/rpm-sources#526 (a DKMS package built from a source tree one release behind)
            "NVRM: GPU0 _kgspFwContainerVerifyVersion: GSP firmware image version mismatch:\ngot version 595.71.05, "
            "expected version 595.58.03\nNVRM: GPU0 kgspInitRm_IMPL: Error preparing GSP-RM image",
        ),
    ),
    Rule(
        # libnvidia-container's detection (src/nvc_info.c) opens each driver library the ld cache lists: a file named
        # for another driver version that is gone is an older driver's link or cache entry left by an upgrade
        # (NVIDIA/nvidia-docker#1610 and #1404: "libnvidia-tls.so.470.86", "….418.39" beside a newer driver; NVIDIA's
        # answer there: remove every libnvidia* file of another version; void-linux/void-packages#51704: a stale
        # libnvidia-nvvm.so.4 link to 525.105.17 after the 550 upgrade)
        name="mismatch.stale_driver_library",
        category="driver_lib_mismatch",
        patterns=(),
        messages=("nvc.detection_error",),
        # the file it could not open is a driver library named for a driver version (not a node, not a .so.1 link)
        # (not there: "no such file", or nothing after it; a permission error is another cause)
        requires=(r"detection error: open failed: [^\n:]*?lib(?:nvidia|cuda)[\w-]*\.so\.\d{3}\.\d+(?:\.\d+)?"
                  r"(?::\s*no such file|[ \t]*(?:$|\n))",),
        demotes=("container_device_missing",),
        confidence=0.86,
        root_cause=("The NVIDIA container runtime found a driver library of another driver version that is not there "
                    "any more: a link or ld.so.cache entry of an older driver was left behind by the upgrade, beside "
                    "the installed driver's libraries."),
        fix=("On the host list the driver's libraries with their versions (`ls -l /usr/lib/x86_64-linux-gnu/libnvidia* "
             "/usr/lib64/libnvidia* /usr/lib/libnvidia* 2>/dev/null | grep -v \"$(cat /sys/module/nvidia/version)\"`), "
             "remove the links and files of the old version (or reinstall the driver packages so they own every "
             "link), run `ldconfig`, then start the container again."),
        examples=("nvidia-container-cli: detection error: open failed: /usr/lib/x86_64-linux-gnu/libnvidia-tls.so.470.86: "
                  "no such file or directory: unknown.",),
    ),
    Rule(
        name="mismatch.cuda_803",
        category="driver_lib_mismatch",
        patterns=(
            r"system has unsupported display driver / cuda driver combination",
            r"cudaErrorSystemDriverMismatch",
            r"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        ),
        confidence=0.88,
        root_cause="libcuda (userspace) and the kernel module are different driver versions (CUDA error 803).",
        fix=(
            "Align the userspace driver with the kernel module version (reboot after an upgrade, or reinstall the "
            "matching userspace)."
        ),
        examples=(
            "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Error 803: system has "
            "unsupported display driver / cuda driver combination",
        ),
    ),
    Rule(
        # FFmpeg's NVENC check (libavcodec/nvenc.c): the SDK it was built against (nv-codec-headers) sets the minimum
        # driver; a media server's image (Jellyfin, Plex, Tdarr, Frigate) carries its own FFmpeg, the driver is the host's
        name="driver.nvenc_needs_newer_driver",
        category="driver_too_old",
        patterns=(r"\bminimum required Nvidia driver (?:for nvenc )?is [\d.]+ or newer",),
        messages=("ffmpeg.nvenc_driver_too_old", "ffmpeg.nvenc_invalid_version"),
        context=r"nvenc|nvEncode",  # "invalid version (15)" is NVENC's only beside its encoder's name
        confidence=0.85,
        root_cause=("This FFmpeg (the transcoder a media server or image ships) was built against an NVENC SDK newer than "
                    "the installed driver supports: its encoder needs a newer driver release."),
        fix=("Update the host's driver to at least the release FFmpeg names (a container uses the host's driver), or "
             "use a build of the image/FFmpeg made against an older NVENC SDK (nv-codec-headers) for this driver."),
        examples=("[h264_nvenc @ 0x55855d101140] The minimum required Nvidia driver for nvenc is 418.30 or newer",
                  "[h264_nvenc @ 000001e8482050c0] Cannot get the preset configuration: invalid version (15)"),
    ),
    Rule(
        # conda's __cuda virtual package is the driver's CUDA version (conda docs, "Managing virtual packages");
        # libsolv prints the conflict (problems.c SOLVER_RULE_PKG_CONSTRAINS), conda's classic solver lists the
        # requirement beside "Your installed version is: <__cuda>"
        name="driver.conda_cuda_virtual_package",
        category="driver_too_old",
        patterns=(
            r"has constraint __cuda\s*>=?\s*[\d.]+\S* conflicting with __cuda-[\d.]+",
            r"__cuda\[version='>=[\d.]+'\][\s\S]{0,600}?Your installed (?:version|CUDA driver) is: [\d.]+",
        ),
        messages=("cuda.insufficient_driver",),
        demotes=("resolver_failure",),
        confidence=0.85,
        root_cause=("A package of the environment needs a newer CUDA than the driver supports: conda's __cuda virtual "
                    "package (the driver's CUDA version) is older than the package's constraint; the CUDA toolkit on "
                    "PATH (nvcc) does not count."),
        fix=("Update the NVIDIA driver to one whose CUDA version (nvidia-smi's header) meets the constraint, or pin the "
             "environment's CUDA to the driver's (`cuda-version=<driver's CUDA>`, an older cudatoolkit); on a machine "
             "without the GPU (a build host) set CONDA_OVERRIDE_CUDA."),
        examples=("  - package cudatoolkit-11.6.0-habf752d_9 has constraint __cuda >=11.6.0 conflicting with __cuda-10.2-0",),
    ),
    Rule(
        # the CUDA driver API (libcuda) and NVML (libnvidia-ml) are the driver's libraries, and each entry point exists
        # from the release that added it: a program built against a newer CUDA finds a newer entry point missing in an
        # older driver's (trexminer/T-Rex#95: cuDevicePrimaryCtxSetFlags_v2, CUDA 11.0, on driver 440). Only entry
        # points newer than any driver still met: `_v3`+ revisions, CUDA 11's primary-context `_v2`s, and the families
        # CUDA 10-12 added (virtual memory management, stream-ordered allocation, graphs, launch attributes, tensor
        # maps, libraries/kernels, multicast, green contexts, checkpoints); NVML's `_v3`+ and R418+ calls. An entry
        # point every driver has (cuInit, cuLaunchKernel, cuMemcpyHtoD_v2 of CUDA 3.2) missing is libcuda not linked
        # or not loaded (owl-project/NVISII#104), not the driver's age: `lib.undefined_symbol`. Windows names the
        # driver's DLL itself (nvcuda.dll, nvml.dll) lacking the entry point: the driver, whatever the entry point.
        name="driver.cuda_driver_symbol_missing",
        category="driver_too_old",
        patterns=(),
        messages=("ld.undefined_symbol", "windows.entry_point_not_found"),
        # case-sensitive (patterns are not): the driver API's upper-case letter after `cu`/`nvml` is part of the signal
        requires=(r"undefined symbol: (?-i:" + _NEW_DRIVER_ENTRY + r")\b"
                  rf"|entry point (?-i:{DRIVER_ENTRY_NAME}) could not be located in the dynamic link library "
                  r"[^\n]{0,120}?\b(?:nvcuda|nvml)\.dll"
                  r"|entry point (?:named )?[\"'`]?nvml[A-Z]\w*[\"'`]? in (?:the )?(?:DLL )?[\"'`]?nvml\b",),
        unless=r"\bzluda\b",  # ZLUDA's libcuda is not NVIDIA's driver
        confidence=0.85,
        demotes=("missing_shared_lib",),
        root_cause=("The program was built for a newer CUDA than the driver offers: the driver's library (libcuda or "
                    "NVML, nvcuda.dll or nvml.dll on Windows) has no entry point[ `{symbol}`], which newer driver "
                    "releases add."),
        fix=("Update the NVIDIA driver to a release that supports the CUDA version the program was built with (in a "
             "container, the host's driver), or use a build of the program for the driver's CUDA version (nvidia-smi's "
             "`CUDA Version`)."),
        examples=("/home/rik/Downloads/trex/t-rex: symbol lookup error: /home/rik/Downloads/trex/t-rex: undefined symbol: "
                  "cuDevicePrimaryCtxSetFlags_v2",
                  "The procedure entry point cuDevicePrimaryCtxReset_v2 could not be located in the dynamic link library "
                  "nvcuda.dll"),
    ),
)
