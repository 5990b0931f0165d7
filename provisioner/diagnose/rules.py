"""The log rules, as data. See docs/diagnose-rules.md for how they are scored.

Conventions for `confidence`: 0.85-0.95 a message that names the cause; 0.6-0.8 a strong
signature with a few possible causes; <= 0.5 a generic symptom (mark `generic=True`).
A literal space in a pattern matches any whitespace run, line breaks included; patterns are
case-insensitive. Every rule carries real example lines; tests replay them all.
"""

from __future__ import annotations

from provisioner.diagnose.model import Rule

CONTAINER_CONTEXT = r"\b(?:docker|podman|lxc|lxd|pct|containerd|kubernetes|k8s|kubectl|container|nvidia-container)"
IN_CONTAINER = (
    r"\b(?:lxc|lxd|pct (?:exec|enter)|docker (?:run|exec)|podman (?:run|exec)|kubectl exec)\b"
    r"|inside (?:the |a |an |my )?(?:\w+ )?(?:container|CT|LXC)\b"
)

RULES: tuple[Rule, ...] = (
    # ------------------------------------------------------------------ arch_unsupported
    Rule(
        name="arch.torch_capability_not_compatible",
        category="arch_unsupported",
        patterns=(
            r"with CUDA capability sm_\d+[a-z]? is not compatible with the current PyTorch installation",
            r"The current PyTorch install supports CUDA capabilities",
        ),
        confidence=0.95,
        root_cause="The installed PyTorch build has no kernels for {gpu_arch}[; it was built for {archs}].",
        fix="{arch_fix}",
        examples=(
            "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
            "PyTorch installation.\nThe current PyTorch install supports CUDA capabilities sm_50 sm_60 "
            "sm_70 sm_75 sm_80 sm_86 sm_90.",
        ),
    ),
    Rule(
        name="arch.gpu_too_old_for_torch",
        category="arch_unsupported",
        patterns=(
            r"PyTorch no longer supports this GPU because it is too old",
            r"The minimum cuda capability (?:supported|that we support) (?:by this library )?is \d",
            r"Support for Maxwell and Pascal architectures is removed for CUDA",
            r"Found GPU\d+ [^\n]{1,80} which is of (?:cuda|compute) capability",
            r"does not include kernels for this GPU",
            r"The following list shows the CCs this version of PyTorch was built for",
        ),
        confidence=0.9,
        root_cause="The installed PyTorch build does not support {gpu_cc}.",
        fix="{arch_fix}",
        examples=(
            "Found GPU0 NVIDIA GeForce GTX 1080 Ti which is of cuda capability 6.1.\n"
            "PyTorch no longer supports this GPU because it is too old.\n"
            "The minimum cuda capability supported by this library is 7.5.",
            "Your installed torch==2.14.0+cu130 does not include kernels for this GPU.",
        ),
    ),
    Rule(
        name="arch.no_kernel_image",
        category="arch_unsupported",
        patterns=(
            r"no kernel image is available for execution on the device",
            r"cudaErrorNoKernelImageForDevice",
            r"CUDA_ERROR_NO_BINARY_FOR_GPU",
            r"no binary for GPU",
        ),
        confidence=0.75,
        root_cause=(
            "CUDA code was launched on {gpu_arch}, but the binary (PyTorch or an extension) contains no "
            "kernel for its architecture."
        ),
        fix="{arch_fix} Rebuild any custom CUDA extension with TORCH_CUDA_ARCH_LIST including this GPU.",
        examples=(
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
        ),
    ),
    Rule(
        name="arch.invalid_device_function",
        category="arch_unsupported",
        patterns=(r"invalid device function", r"cudaErrorInvalidDeviceFunction"),
        confidence=0.55,
        root_cause="A CUDA kernel was not compiled for this GPU's architecture (invalid device function).",
        fix="{arch_fix}",
        examples=("RuntimeError: CUDA error: invalid device function",),
    ),
    Rule(
        name="arch.toolchain_unknown_arch",
        category="arch_unsupported",
        patterns=(
            r"nvcc fatal\s*: Unsupported gpu architecture 'compute_\d+[a-z]?'",
            r"ptxas fatal\s*: Value 'sm_\d+[a-z]?' is not defined for option 'gpu-name'",
            r"'sm_\d+[a-z]?' is not a recognized processor for this target",
        ),
        confidence=0.8,
        root_cause="The CUDA toolkit used to compile kernels is older than the GPU architecture[ (sm_{sm})].",
        fix=(
            "Use a CUDA toolkit that knows this GPU (12.8+ for Blackwell sm_100/sm_120) or a prebuilt "
            "wheel; set TORCH_CUDA_ARCH_LIST to architectures the toolkit supports."
        ),
        examples=("nvcc fatal   : Unsupported gpu architecture 'compute_120'",),
    ),
    Rule(
        name="arch.feature_needs_newer_gpu",
        category="arch_unsupported",
        patterns=(
            r"requires device with capability [><=]+ \(\d+, ?\d+\) but your GPU has capability \(\d+, ?\d+\)",
            r"too old to be supported by the triton GPU compiler",
            r"Triton only supports devices of CUDA Capability >= \d",
            r"FlashAttention only supports (?:Ampere|Turing) GPUs or newer",
            r"with Cuda compute capability \d+\.\d+\. The minimum required Cuda capability is",
            r"Bfloat16 is only supported on GPUs with compute capability of at least",
        ),
        confidence=0.85,
        root_cause="The GPU is older than this software supports[: {gpu_cc}].",
        fix=(
            "Run on a newer GPU, or disable the feature (e.g. torch.compile/Triton, FlashAttention, bf16) for this "
            "GPU."
        ),
        examples=(
            "NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs: ... "
            "`cutlassF` is not supported because: requires device with capability > (8, 0) but your GPU has "
            "capability (7, 5) (too old)",
            "Found NVIDIA GeForce GTX 1070 which is too old to be supported by the triton GPU compiler, "
            "which is used as the backend. Triton only supports devices of CUDA Capability >= 7.0, but "
            "your device is of CUDA capability 6.1",
            "RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
        ),
    ),
    Rule(
        name="arch.legacy_gpu_dropped_by_driver",
        category="arch_unsupported",
        patterns=(
            r"NVRM: [^\n]{0,120}is supported through the NVIDIA \d+\.xx Legacy drivers",
            r"will ignore this GPU",
        ),
        confidence=0.8,
        root_cause=(
            "The installed driver branch has dropped this (pre-Turing) GPU; it is served only by a legacy branch."
        ),
        fix="Install the legacy driver branch named in the message (e.g. R580) and a cu126 PyTorch build.",
        examples=(
            "NVRM: The NVIDIA GeForce GTX 1050 GPU installed in this system is supported through the NVIDIA 580.xx "
            "Legacy drivers. Please visit http://www.nvidia.com/object/unix.html for more information. "
            "The 595.58.03 NVIDIA driver will ignore this GPU.",
        ),
    ),
    # ------------------------------------------------------------------ driver_too_old
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
    # ------------------------------------------------------------------ driver_lib_mismatch
    Rule(
        name="mismatch.nvml",
        category="driver_lib_mismatch",
        patterns=(
            r"Driver/library version mismatch",
            r"NVML library version:\s*\d+",
            r"nvml error: driver/library version mismatch",
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
        ),
    ),
    Rule(
        name="mismatch.api_mismatch",
        category="driver_lib_mismatch",
        patterns=(
            r"API mismatch: the NVIDIA kernel module has (?:the )?version",
            r"NVRM: API mismatch: the client has the version",
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
    # ------------------------------------------------------------------ no_driver_loaded
    Rule(
        name="nodriver.nvidia_smi_cannot_communicate",
        category="no_driver_loaded",
        patterns=(r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",),
        confidence=0.75,
        root_cause="No NVIDIA kernel module is loaded (or it failed to bind to the GPUs).",
        fix=(
            "Check `lsmod | grep nvidia` and `dmesg | grep -i nvrm`; rebuild/reinstall the module for the "
            "running kernel (DKMS), enroll the MOK or disable Secure Boot, blacklist nouveau, then reboot."
        ),
        examples=(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
            "latest NVIDIA driver is installed and running.",
        ),
    ),
    Rule(
        name="nodriver.probe_conflict",
        category="no_driver_loaded",
        patterns=(
            r"Kernel driver in use: (?:vfio-pci|nouveau)\b",
            r"NVRM: The NVIDIA probe routine was not called for \d+ device",
            r"NVRM: No NVIDIA (?:graphics adapter|GPU|devices) (?:probed|found)",
            r"was loaded and obtained ownership of the NVIDIA device",
            r"NVRM: [^\n]{0,80}is already bound to (?:vfio-pci|nouveau|another driver)",
        ),
        confidence=0.88,
        root_cause=(
            "Another driver (nouveau, a framebuffer driver or vfio-pci) owns the GPUs, so the nvidia module never "
            "bound them."
        ),
        fix=(
            "Blacklist nouveau/nvidiafb (or unbind vfio-pci), rebuild the initramfs and reboot so the nvidia module "
            "claims the GPUs."
        ),
        examples=(
            "41:00.0 VGA compatible controller [0300]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell] "
            "[10de:2bb5]\n	Kernel driver in use: vfio-pci\n	Kernel modules: nvidiafb, nouveau, nvidia_drm, nvidia",
            "NVRM: The NVIDIA probe routine was not called for 3 device(s).\nNVRM: This can occur when a driver "
            "such as: \n"
            "NVRM: nouveau, rivafb, nvidiafb or rivatv \nNVRM: was loaded and obtained ownership of the NVIDIA "
            "device(s).",
        ),
    ),
    Rule(
        name="nodriver.secure_boot",
        category="no_driver_loaded",
        patterns=(
            r"could not insert 'nvidia[\w-]*': Operation not permitted",
            r"Loading of (?:unsigned )?module with unavailable key is rejected",
            r"Loading of unsigned module is rejected",
            r"could not insert 'nvidia[\w-]*': (?:Key was rejected by service|Required key not available)",
            r"Lockdown: [^\n]{0,60}unsigned module loading is restricted",
            r"\bMOK (?:enrollment|management)",
            r"Secure Boot (?:is )?enabled",
            r"kernel module failed to load\. Secure boot",
        ),
        confidence=0.82,
        root_cause="Secure Boot rejects the unsigned (or not-yet-enrolled) NVIDIA kernel module, so it is not loaded.",
        fix=(
            "Enroll the module signing key (MOK) at the next boot console, or disable Secure Boot; then verify with "
            "`lsmod | grep nvidia`."
        ),
        examples=(
            "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service",
            "I did get the MOK enrollment screen same as before",
        ),
    ),
    Rule(
        name="nodriver.module_missing",
        category="no_driver_loaded",
        patterns=(
            r"nvidia(?:_\w+)?: Unknown symbol \w+",
            r"nvidia(?:_\w+)?: disagrees about version of symbol",
            r"NVIDIA kernel module missing",
            r"modprobe: FATAL: Module nvidia\S* not found in directory",
            r"could not insert 'nvidia[\w-]*': (?:No such device|Exec format error|Unknown symbol in module|Invalid "
            r"argument)",
            r"nvml error: driver not loaded",
            r"NVML_ERROR_DRIVER_NOT_LOADED",
        ),
        confidence=0.85,
        root_cause="The NVIDIA kernel module is not available or cannot load for the running kernel.",
        fix=(
            "Rebuild the module for the running kernel (dkms autoinstall / reinstall the driver with kernel headers) "
            "and load it; check dmesg for the reason."
        ),
        examples=(
            "[    4.120113] nvidia: Unknown symbol drm_gem_object_free (err -2)","modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.12-4-pve",),
    ),
    Rule(
        name="nodriver.no_driver_found",
        category="no_driver_loaded",
        patterns=(
            r"Found no NVIDIA driver on your system",
            r"nvidia-container-cli: initialization error: load library failed: libnvidia-ml\.so\.1",
            r"NVIDIA driver is not loaded",
        ),
        confidence=0.88,
        root_cause="No NVIDIA driver is installed or loaded where this ran.",
        fix=(
            "Install the NVIDIA driver on the host (kernel module + userspace) and check `nvidia-smi` works there "
            "first."
        ),
        examples=(
            "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
            "installed a driver from http://www.nvidia.com/Download/index.aspx",
        ),
    ),
    Rule(
        name="nodriver.fabric_manager",
        category="no_driver_loaded",
        patterns=(
            r"system not yet initialized",
            r"cudaErrorSystemNotReady",
            r"nvidia-fabricmanager[^\n]{0,60}(?:failed|inactive|not running)",
        ),
        confidence=0.7,
        root_cause=(
            "On NVSwitch systems the Fabric Manager is not running (or not matching the driver), so CUDA is not "
            "ready."
        ),
        fix=(
            "Install nvidia-fabricmanager of exactly the driver version and start it (systemctl enable --now "
            "nvidia-fabricmanager)."
        ),
        examples=(
            "CUDA initialization: Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized",
        ),
    ),
    Rule(
        name="nodriver.no_device_generic",
        category="no_driver_loaded",
        patterns=(
            r"CUDA driver initialization failed, you might not have a CUDA gpu",
            r"no CUDA-capable device is detected",
            r"No CUDA GPUs are available",
            r"CUDA_ERROR_NO_DEVICE",
            r"cudaErrorNoDevice",
            r"^No devices were found",
            r"Torch is not able to use GPU",
        ),
        confidence=0.4,
        generic=True,
        unless=CONTAINER_CONTEXT,
        root_cause="CUDA sees no GPU: the driver is not loaded, or the GPUs are hidden (CUDA_VISIBLE_DEVICES).",
        fix="Check `nvidia-smi` and `lsmod | grep nvidia` on the machine, and that CUDA_VISIBLE_DEVICES is not empty.",
        examples=("RuntimeError: No CUDA GPUs are available",),
    ),
    # ------------------------------------------------------------------ container_device_missing
    Rule(
        name="container.nvidia_container_cli_cgroup",
        category="container_device_missing",
        patterns=(
            r"bpf_prog_query\(BPF_CGROUP_DEVICE\) failed",
            r"nvidia-container-cli: mount error",
            r"failed to add device rules",
            r"nvidia-container-cli: device error",
        ),
        confidence=0.88,
        root_cause=(
            "The NVIDIA container runtime could not set up the GPU devices for the container (device cgroup/mount)."
        ),
        fix=(
            "In nested setups (Docker in LXC) set no-cgroups = true in /etc/nvidia-container-runtime/config.toml "
            "and pass /dev/nvidia* explicitly (or use CDI); otherwise check the toolkit version and cgroup driver."
        ),
        examples=(
            "nvidia-container-cli: mount error: failed to add device rules: unable to find any existing device "
            "filters attached to the cgroup: bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not permitted: "
            "unknown.",
        ),
    ),
    Rule(
        name="container.uvm_missing",
        category="container_device_missing",
        patterns=(
            r"/dev/nvidia-uvm(?:-tools)?[\"']?:? (?:No such file or directory|does not exist)",
            r"(?:failed to open|could not open|cannot open|unable to open) [\"']?/dev/nvidia-uvm",
            r"Device /dev/nvidia[\w-]* does not exist",
            r"Could not get mode or device ID of /dev/nvidia",
            r"cudaGetDeviceCount returned 30\b",
            r"Failed to mount [\"']?/dev/nvidia[\w-]*[\"']? onto",
        ),
        confidence=0.85,
        root_cause=(
            "A GPU device node the container needs (typically /dev/nvidia-uvm) is missing, on the host or in the "
            "container."
        ),
        fix=(
            "Create the UVM nodes on the host at boot (`nvidia-modprobe -u -c=0`) and pass /dev/nvidia-uvm and "
            "/dev/nvidia-uvm-tools (plus every /dev/nvidiaN and /dev/nvidiactl) into the container."
        ),
        examples=(
            "cudaGetDeviceCount returned 30\n-> unknown error\nResult = FAIL",
            "TASK ERROR: Could not get mode or device ID of /dev/nvidia-uvm",
        ),
    ),
    Rule(
        name="container.cuda_unknown_error",
        category="container_device_missing",
        patterns=(
            r"CUDA unknown error - this may be due to an incorrectly set up environment",
            r"cudaGetDeviceCount\(\)[^\n]{0,200}Error 999",
            r"cuda runtime error \(999\)",
            r"cuInit\(0\) (?:failed|returned) (?:with )?999",
        ),
        confidence=0.6,
        root_cause=(
            "CUDA initialisation fails with an unknown error while the driver answers: usually /dev/nvidia-uvm is "
            "missing or the uvm module is wedged."
        ),
        fix=(
            "Load/create nvidia-uvm (`nvidia-modprobe -u -c=0`, or reload nvidia_uvm) and make sure /dev/nvidia-uvm* "
            "reach the container."
        ),
        examples=(
            "UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up "
            "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the "
            "available devices to be zero.",
        ),
    ),
    Rule(
        name="container.nvml_unknown_or_permission",
        category="container_device_missing",
        patterns=(
            r"Failed to initialize NVML: Unknown Error",
            r"Failed to initialize NVML: Insufficient Permissions",
            r"/dev/nvidia(?:\d+|ctl)[\"']?:? (?:Operation not permitted|Permission denied)",
        ),
        confidence=0.7,
        root_cause=(
            "The container can see the NVIDIA device nodes but the device cgroup (or permissions) denies opening "
            "them."
        ),
        fix=(
            "Allow the devices: lxc.cgroup2.devices.allow for major 195 and the nvidia-uvm major (or devN lines) "
            "on Proxmox; for Docker keep the cgroup rules across daemon-reload (CDI or systemd cgroup driver fix)."
        ),
        examples=("Failed to initialize NVML: Unknown Error",),
    ),
    Rule(
        name="container.device_file_missing",
        category="container_device_missing",
        patterns=(
            r"cannot access '?/dev/nvidia",
            r"could not open the device file /dev/nvidia(?:\d+|ctl)",
            r"/dev/nvidia(?:\d+|ctl)[\"']?:? No such file or directory",
        ),
        confidence=0.65,
        root_cause="GPU device nodes (/dev/nvidiaN, /dev/nvidiactl) are missing where CUDA runs.",
        fix=(
            "Pass every /dev/nvidiaN plus /dev/nvidiactl and /dev/nvidia-uvm* into the container (devN entries on "
            "PVE >= 8.1)."
        ),
        examples=("NVIDIA: could not open the device file /dev/nvidiactl (No such file or directory).",),
    ),
    Rule(
        name="container.gpu_runtime_missing",
        category="container_device_missing",
        patterns=(
            r"The NVIDIA Driver was not detected\. GPU functionality will not be available",
            r"could not select device driver \"[^\"]*\" with capabilities: \[\[gpu\]\]",
            r"unknown or invalid runtime name: nvidia",
            r"Insufficient nvidia\.com/gpu",
        ),
        confidence=0.85,
        root_cause="The container engine has no GPU runtime configured, so no GPU devices were given to the container.",
        fix=(
            "Install nvidia-container-toolkit, run `nvidia-ctk runtime configure` for the engine and restart it (or "
            "use the device plugin on Kubernetes)."
        ),
        examples=(
            "WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.\n   Use the "
            "NVIDIA Container Toolkit to start this container with GPU support; see\n   "
            "https://docs.nvidia.com/datacenter/cloud-native/ .",
            'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
        ),
    ),
    Rule(
        name="container.driver_unreachable_in_container",
        category="container_device_missing",
        patterns=(
            r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
            r"NVIDIA-SMI couldn't find libnvidia-ml\.so library",
        ),
        confidence=0.78,
        context=IN_CONTAINER,
        root_cause=(
            "Inside the container nvidia-smi cannot reach the driver: the /dev/nvidia* nodes (or the driver "
            "libraries) were not passed in, or the host driver itself is not loaded."
        ),
        fix=(
            "Check `nvidia-smi` on the host first; then pass /dev/nvidiactl, every /dev/nvidiaN and /dev/nvidia-uvm* "
            "into the container and install the userspace driver at exactly the host's version."
        ),
        examples=(
            "root@pve:~# pct exec 101 -- nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with "
            "the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
        ),
    ),
    Rule(
        name="nodriver.userspace_missing",
        category="no_driver_loaded",
        patterns=(r"NVIDIA-SMI couldn't find libnvidia-ml\.so library",),
        confidence=0.7,
        unless=IN_CONTAINER,
        root_cause="The NVIDIA driver's userspace (libnvidia-ml.so) is not installed.",
        fix="Install the NVIDIA driver (kernel module and userspace of the same version) and check `nvidia-smi`.",
        examples=(
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA "
            "Display Driver is properly installed and present in your system.",
        ),
    ),
    Rule(
        name="container.no_device_in_container",
        category="container_device_missing",
        patterns=(
            r"no CUDA-capable device is detected",
            r"No CUDA GPUs are available",
            r"CUDA_ERROR_NO_DEVICE",
            r"cudaErrorNoDevice",
            r"^No devices were found",
        ),
        confidence=0.45,
        generic=True,
        context=CONTAINER_CONTEXT,
        root_cause="CUDA sees no GPU inside the container: the device nodes were not passed through.",
        fix=(
            "Pass /dev/nvidiaN, /dev/nvidiactl and /dev/nvidia-uvm* into the container and allow them in the device "
            "cgroup."
        ),
        examples=(
            "root@ct101:~# nvidia-smi\nNo devices were found\nroot@ct101:~# cat /etc/pve/lxc/101.conf  # lxc container",
        ),
    ),
    # ------------------------------------------------------------------ cpu_only_wheel
    Rule(
        name="cpu.torch_not_compiled_with_cuda",
        category="cpu_only_wheel",
        patterns=(r"Torch not compiled with CUDA enabled",),
        confidence=0.95,
        root_cause="The installed torch[ ({torch_version})] is a CPU-only build.",
        fix=(
            "Reinstall torch from a CUDA index (e.g. --index-url https://download.pytorch.org/whl/cu128, "
            "or the variant `provisioner resolve` picks) and check that torch.version.cuda is not None."
        ),
        examples=(
            'raise AssertionError("Torch not compiled with CUDA enabled")\n'
            "AssertionError: Torch not compiled with CUDA enabled",
        ),
    ),
    Rule(
        name="cpu.build_reports_no_cuda",
        category="cpu_only_wheel",
        patterns=(
            r"CUDA used to build PyTorch: (?:None|Could not collect)",
            r"torch\.version\.cuda\)?[^\n]{0,20}\n\s*None\b",
            r"torch\.version\.cuda\s*(?:=|:|is)\s*None",
            r"\b\d+\.\d+(?:\.\d+)?(?:\.dev\d+)?\+cpu\b",
            r"\bpy3\d*_cpu_\d+\b",
            r"pytorch-mutex[^\n]{0,40}\bcpu\b",
            r"^\s*cpuonly\s",
        ),
        confidence=0.85,
        root_cause="The installed PyTorch[ ({torch_version})] was built without CUDA (CPU-only variant).",
        fix=(
            "Install the CUDA variant explicitly (pip/uv: --index-url https://download.pytorch.org/whl/cu128; "
            "conda: pin pytorch=*=*cuda*) and verify torch.version.cuda."
        ),
        examples=(
            "PyTorch version: 2.1.0.dev20230905\nCUDA used to build PyTorch: Could not collect\nIs CUDA available: "
            "False",
            "Successfully installed torch-2.5.1+cpu torchvision-0.20.1+cpu",
        ),
    ),
    Rule(
        name="cpu.cpu_index",
        category="cpu_only_wheel",
        patterns=(r"download\.pytorch\.org/whl/cpu\b", r"--torch-backend[= ]cpu\b"),
        confidence=0.6,
        root_cause="torch was installed from the CPU-only index.",
        fix="Install from the CUDA index matching the GPU and driver (e.g. https://download.pytorch.org/whl/cu128).",
        examples=("Looking in indexes: https://download.pytorch.org/whl/cpu",),
    ),
    Rule(
        name="cpu.cuda_unavailable_generic",
        category="cpu_only_wheel",
        patterns=(
            r"torch\.cuda\.is_available\(\)\)?[^\n]{0,20}\n?\s*False",
            r"Is CUDA available: False",
            r"User provided device_type of 'cuda', but CUDA is not available",
        ),
        confidence=0.35,
        generic=True,
        root_cause="torch reports CUDA unavailable; the most common cause is a CPU-only torch build.",
        fix=(
            "Print torch.__version__ and torch.version.cuda; if it is +cpu/None reinstall from a CUDA index, else "
            "check the driver."
        ),
        examples=(">>> torch.cuda.is_available()\nFalse",),
    ),
    # ------------------------------------------------------------------ missing_shared_lib
    Rule(
        name="lib.cannot_open_shared_object",
        category="missing_shared_lib",
        patterns=(
            r"not found in any environmental path",
            r"CUDA Setup failed despite GPU being available",
            r"cuDNN version incompatibility: PyTorch was compiled against",
            r"Could not load symbol \w+ from lib",
            r"lib[\w.+-]*\.so[\d.]*: cannot open shared object file",
            r"error while loading shared libraries",
            r"Could not load (?:dynamic )?library '?lib[\w.+-]*\.so",
            r"Unable to load any of \{lib",
            r"Could not load library lib[\w.+-]*\.so",
        ),
        confidence=0.85,
        root_cause="A required shared library[ ({library})] is not installed or not on the loader path.",
        fix=(
            "Install the package that provides the missing library[ ({library})] in the same CUDA major as the rest "
            "of the stack "
            "(e.g. the nvidia-*-cu12 wheels, or the matching cu12x/cu11x build of the extension), or fix "
            "LD_LIBRARY_PATH."
        ),
        examples=("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",),
    ),
    Rule(
        name="lib.symbol_version_not_found",
        category="missing_shared_lib",
        patterns=(r"version `(?:GLIBCXX|GLIBC|CXXABI)_[\d.]+' not found",),
        confidence=0.88,
        root_cause="The loader picked a libstdc++/glibc older than the one the binary needs[ ({library})].",
        fix=(
            "Use the environment's own newer libstdc++ (conda: reinstall libstdcxx-ng / fix the libstdc++.so.6 "
            "symlink) or a newer distro/glibc."
        ),
        examples=(
            "ImportError: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by "
            ".../libtorch_python.so)",
        ),
    ),
    Rule(
        name="lib.undefined_symbol",
        category="missing_shared_lib",
        patterns=(r"\.so[\d.]*: undefined symbol: \S+", r"undefined symbol: __nvJitLink", r"version libnvJitLink\.so"),
        confidence=0.7,
        root_cause=(
            "A compiled library was built against a different version of torch/CUDA than the one installed "
            "(undefined symbol)."
        ),
        fix=(
            "Reinstall the extension built for the installed torch and CUDA (or pin torch to the version it was "
            "built for)."
        ),
        examples=(
            "ImportError: "
            "/usr/local/lib/python3.10/dist-packages/torch/lib/../../nvidia/cusparse/lib/libcusparse.so.12: "
            "undefined symbol: __nvJitLinkComplete_12_4, version libnvJitLink.so.12",
        ),
    ),
    Rule(
        name="lib.libcuda_link",
        category="missing_shared_lib",
        patterns=(
            r"cannot find -lcuda\b",
            r"libcuda\.so cannot found",
            r"CUDA driver is a stub library",
            r"cudaErrorStubLibrary",
        ),
        confidence=0.75,
        root_cause=(
            "libcuda.so (the driver's userspace library) is not where the build/JIT expects it, or only the "
            "toolkit's stub is found."
        ),
        fix=(
            "Install the driver userspace (libcuda.so.1) and make sure libcuda.so is on the library path (ldconfig "
            "-p | grep libcuda)."
        ),
        examples=("/usr/bin/ld: cannot find -lcuda: No such file or directory",),
    ),
    Rule(
        name="lib.windows_dll",
        category="missing_shared_lib",
        patterns=(
            r"\[WinError 127\] The specified procedure could not be found",
            r'Error loading \"[^\"\n]+\.dll\" or one of its dependencies',r"DLL load failed while importing", r"\[WinError 126\] The specified module could not be found"),
        confidence=0.7,
        root_cause="A DLL the module depends on could not be loaded.",
        fix="Reinstall torch and its CUDA runtime packages consistently and install the MSVC runtime.",
        examples=("ImportError: DLL load failed while importing _C: The specified module could not be found.",),
    ),
    # ------------------------------------------------------------------ nccl_failure
    Rule(
        name="nccl.shm_exhausted",
        category="nccl_failure",
        patterns=(
            r"Error while creating shared memory segment",
            r"Call to shm_open failed",
            r"failed to extend /dev/shm/nccl-",
            r"Error while creating shared memory segment /dev/shm/nccl",
            r"shm\.h:\d+ NCCL WARN Call to posix_fallocate failed",
            r"NCCL WARN Call to posix_fallocate failed",
            r"NCCL WARN[^\n]{0,120}No space left on device",
        ),
        confidence=0.92,
        root_cause="NCCL cannot create its shared-memory buffers in /dev/shm (too small, or not writable).",
        fix=(
            "Give the container a larger /dev/shm (Docker --shm-size=1g or --ipc=host; LXC: a tmpfs /dev/shm of "
            "several GiB)."
        ),
        examples=(
            "include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
            "misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-WU88OE to 9637892 bytes, error: No "
            "space left on device (28)",
        ),
    ),
    Rule(
        name="nccl.p2p_broken",
        category="nccl_failure",
        patterns=(
            r"(?:works?|working|fine|runs|succeeds?|passes|fixe[sd]|helps?|solves?)(?: \S+){0,4} (?:with|when "
            r"setting|after setting|by setting) `?NCCL_P2P_DISABLE",
            r"NCCL_P2P_DISABLE=1`?(?: \S+){0,3} (?:works|fixes|fixed|helps|solves|resolves)",
            r"peer access is not supported between these two devices",
            r"peer mapping resources exhausted",
            r"Peer GPU \d+ is not accessible",
            r"building transport map failed",
        ),
        confidence=0.8,
        root_cause=(
            "GPU peer-to-peer (P2P) transport does not work on this machine (ACS/IOMMU, virtualisation, or GPUs "
            "without P2P)."
        ),
        fix=(
            "Disable ACS/IOMMU redirection (BIOS, iommu=pt, setpci ACS) or, for GPUs without working P2P, "
            "set NCCL_P2P_DISABLE=1; verify with nccl-tests all_reduce_perf."
        ),
        examples=(
            "It works with NCCL_P2P_DISABLE=1, but ideally would like to figure out why normal P2P is not working.",
        ),
    ),
    Rule(
        name="nccl.error",
        category="nccl_failure",
        patterns=(
            r"Distributed package doesn't have NCCL built in",
            r"is setting up NCCL communicator and retrieving ncclUniqueId",
            r"NCCL Error \d+: (?:unhandled|internal|invalid|remote|system)",
            r"Test NCCL failure",
            r"Bootstrap : no socket interface found",
            r"NCCL error in: ",
            r"\bncclUnhandledCudaError\b",
            r"\bncclSystemError\b",
            r"\bncclInternalError\b",
            r"\bncclRemoteError\b",
            r"\bncclInvalidUsage\b",
            r"DistBackendError: NCCL",
            r"NCCL communicator was aborted",
            r"ncclCommInitRank failed",
            r"NCCL error: (?:unhandled|internal|remote|invalid)",
        ),
        confidence=0.72,
        root_cause="An NCCL collective or communicator setup failed.",
        fix=(
            "Re-run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV to see the transport that fails; check /dev/shm "
            "size, P2P/ACS and network interfaces."
        ),
        examples=(
            "torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        ),
    ),
    Rule(
        name="nccl.collective_timeout",
        category="nccl_failure",
        patterns=(
            r"Watchdog caught collective operation timeout",
            r"WorkNCCL\([^\n]{0,200}\) ran for \d+ milliseconds before timing out",
            r"Some NCCL operations have failed or timed out",
        ),
        confidence=0.75,
        root_cause="An NCCL collective hung until the watchdog timeout (often a broken P2P path or a rank that died).",
        fix=(
            "Run nccl-tests with and without NCCL_P2P_DISABLE=1 to isolate P2P; check ACS/IOMMU and that every rank "
            "reached the collective."
        ),
        examples=(
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600039 milliseconds before timing out.",
        ),
    ),
    Rule(
        name="nccl.warn",
        category="nccl_failure",
        patterns=(
            r"\bNCCL WARN\b",
            r"socketStartConnect: Connect to [^\n]{0,60} failed",
            r"\[Proxy Service\][^\n]{0,40}Failed",
        ),
        confidence=0.55,
        root_cause="NCCL reported a warning during communication setup or a collective.",
        fix="Read the NCCL WARN line; re-run with NCCL_DEBUG=INFO to see the failing transport.",
        examples=("node1:123:456 [0] NCCL WARN Call to connect returned Connection refused, retrying",),
    ),
    Rule(
        name="nccl.hang",
        category="nccl_failure",
        patterns=(r"\b(?:hangs?|hanging|hung|freez(?:es|ing)|frozen|stuck|deadlock)\b",),
        confidence=0.5,
        generic=True,
        context=r"\bNCCL\b|all_reduce_perf|nccl-tests",
        root_cause="Multi-GPU communication hangs after NCCL initialisation (typical of a broken P2P path).",
        fix="A/B test with NCCL_P2P_DISABLE=1; if that works, fix ACS/IOMMU or keep P2P disabled on GPUs without P2P.",
        examples=("NCCL INFO Bootstrap : Using eno2:10.1.10.95<0>\nit hangs/freezes right after initialization",),
    ),
    Rule(
        name="nccl.context",
        category="nccl_failure",
        patterns=(r"\bNCCL INFO\b", r"\bNCCL_P2P_DISABLE\b", r"\bNCCL_SHM_DISABLE\b", r"\bNCCL version \d"),
        confidence=0.3,
        supporting=True,
        root_cause="NCCL was in use.",
        fix="",
        examples=("worker2:182125:182125 [0] NCCL INFO Bootstrap : Using eno2:10.1.10.95<0>",),
    ),
    # ------------------------------------------------------------------ installer_failure
    Rule(
        name="installer.module_already_loaded",
        category="installer_failure",
        patterns=(r"An NVIDIA kernel module '[\w-]+' appears to already be loaded in your kernel",),
        confidence=0.9,
        root_cause=(
            "The .run installer tried to install kernel modules while NVIDIA modules were already loaded (e.g. "
            "inside a container sharing the host kernel)."
        ),
        fix=(
            "Inside a container install only the userspace, at exactly the host's version: "
            "`NVIDIA-Linux-x86_64-<host version>.run --no-kernel-modules --silent`; on a host, stop GPU users and "
            "unload the modules first."
        ),
        examples=(
            "ERROR: An NVIDIA kernel module 'nvidia-drm' appears to already be loaded in your kernel.  This may be "
            "because it is in use (for example, by an X server, a CUDA program, or the NVIDIA Persistence Daemon),",
        ),
    ),
    Rule(
        name="installer.kernel_build_failed",
        category="installer_failure",
        patterns=(
            r"Unable to load the '?nvidia[\w-]*'? kernel module",
            r"/nvidia[\w-]*/[\w/.-]+\.[ch]:\d+:\d+: error:",
            r"trying to overwrite '[^']*nvidia[^']*', which is also in package",
            r"Failed to verify gcc version",
            r"Failed CC version check",
            r"Compiler version check failed",
            r"Unable to find the kernel source tree for the currently running kernel",
            r"(?:Unable|Failed) to build the NVIDIA kernel module",
            r"An error occurred while performing the step: \"Building kernel modules\"",
            r"Bad return status for module build on kernel",
            r"Consult /var/lib/dkms/nvidia[^\n]*make\.log for more information",
            r"dpkg: error processing package nvidia-[\w.-]+",
            r"Error! [^\n]{0,80}nvidia",
            r"\[/var/lib/dkms/nvidia/[^\]]*\] Error \d",
            r"Kernel headers for kernel [^\n]{1,60} cannot be found",
            r"Unable to load the kernel module '?nvidia\.ko'?",
        ),
        confidence=0.85,
        root_cause="Building or loading the NVIDIA kernel module failed during the driver installation.",
        fix=(
            "Install the headers matching the running kernel (PVE: proxmox-headers-$(uname -r)) and the kernel's "
            "compiler, or use a driver branch that supports this kernel; read the make.log / nvidia-installer.log."
        ),
        examples=(
            "/var/lib/dkms/nvidia/550.54.14/build/nvidia-drm/nvidia-drm-drv.c:1621:9: error: implicit declaration "
            "of function 'drm_fbdev_generic_setup'",
            "*** Failed CC version check. Bailing out! ***\nmake[2]: *** "
            "[/var/lib/dkms/nvidia/495.46/build/Kbuild:194: cc_version_check] Error 1",
            "ERROR: Unable to find the kernel source tree for the currently running kernel.",
        ),
    ),
    Rule(
        name="installer.environment_blocker",
        category="installer_failure",
        patterns=(
            r"The distribution-provided pre-install script failed",
            r"The Nouveau kernel driver is currently in use by your system",
            r"You appear to be running an X server",
            r"Unable to find the (?:development tool|system utility|module utility) `?\w+",
            r"Verifying archive integrity\.\.\. Error",
            r"The archive is corrupted|corrupt(?:ed)? archive",
            r"Existing package manager installation of the driver found",
            r"Unable to locate package nvidia-",
            r"nvidia-[\w.-]+ : Depends: [^\n]+ but (?:it is not going to be installed|[\w.~-]+ is to be installed)",
        ),
        confidence=0.8,
        root_cause=(
            "The driver installer could not run in this environment (missing tools, conflicting driver or packages, "
            "corrupt download)."
        ),
        fix=(
            "Fix the named blocker (install kmod/binutils/gcc, remove distro NVIDIA packages, re-download the .run "
            "and check its sha256) and re-run the installer."
        ),
        examples=(
            "ERROR: Unable to find the module utility `modprobe`; please make sure you have the package "
            "'module-init-tools' or 'kmod' installed.",
        ),
    ),
    Rule(
        name="installer.failed_generic",
        category="installer_failure",
        patterns=(
            r"Could not install packages due to an OSError",
            r"Failed to prepare distributions",
            r"Failed to build `[^`]+`",
            r"subprocess-exited-with-error",
            r"ERROR: Installation has failed",
            r"Installation failed\. See log at /var/log/(?:cuda|nvidia)-installer\.log",
            r"Sub-process /usr/bin/dpkg returned an error code",
            r"you have held broken packages",
            r"Failed building wheel for \S+",
            r"Failed to build installable wheels",
            r"CUDA_HOME environment variable is not set",
            r"(?:OSError: \[Errno 28\] )?No space left on device",
            r"THESE PACKAGES DO NOT MATCH THE HASHES",
            r"error: Failed to (?:download|fetch|extract)",
        ),
        confidence=0.62,
        root_cause="The installation step failed.",
        fix=(
            "Read the installer log named in the output for the first error; fix it (disk space, network, build "
            "tools) and re-run."
        ),
        examples=(
            "ERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log' for details.",
            "ERROR: Failed building wheel for flash-attn",
        ),
    ),
    # ------------------------------------------------------------------ resolver_failure
    Rule(
        name="resolver.no_matching_distribution",
        category="resolver_failure",
        patterns=(
            r"No matching distribution found for \S+",
            r"Could not find a version that (?:satisfies|matches) the requirement",
            r"is not a supported wheel on this platform",
            r"Unable to find installation candidates for",
        ),
        confidence=0.88,
        root_cause=(
            "No wheel[ of {package}] exists for this Python/platform on the configured indexes (local +cuXXX "
            "versions only exist on the PyTorch index)."
        ),
        fix=(
            "Use a Python version the release supports and add the PyTorch index for the CUDA variant "
            "(--index-url https://download.pytorch.org/whl/cuXXX, or a named explicit index in uv)."
        ),
        examples=(
            "ERROR: Could not find a version that satisfies the requirement torch==1.9.1+cu111 (from versions: "
            "0.1.2, 0.1.2.post1)\n"
            "ERROR: No matching distribution found for torch==1.9.1+cu111",
        ),
    ),
    Rule(
        name="resolver.unsatisfiable",
        category="resolver_failure",
        patterns=(
            r"Ignored the following versions that require a different python version",
            r"ResolutionFailure",
            r"No solution found when resolving dependencies",
            r"we can conclude that [^\n]{0,200}(?:unsatisfiable|cannot be used)",
            r"ResolutionImpossible",
            r"conflicting dependencies",
            r"The conflict is caused by:",
            r"doesn't have a source distribution or wheel for the current platform",
            r"requires a different Python: [\d.]+ not in",
            r"version solving failed",
            r"SolverProblemError",
            r"PackagesNotFoundError: The following packages are not available from current channels",
            r"UnsatisfiableError",
            r"LibMambaUnsatisfiableError",
            r"Could not solve for environment specs",
            r"was found on https?://\S+, but not at the requested version",
        ),
        confidence=0.88,
        root_cause="The package resolver found no set of versions satisfying the requirements[ ({package})].",
        fix=(
            "Relax or align the pins (torch, torchvision, torchaudio from the same release and CUDA variant), "
            "check the Python version, and declare the PyTorch index as an explicit named index for torch only."
        ),
        examples=(
            "  × No solution found when resolving dependencies:\n  ╰─▶ Because there is no version of "
            "torch==2.7.0+cu126 "
            "and your project depends on torch==2.7.0+cu126, we can conclude that your project's requirements are "
            "unsatisfiable.",
        ),
    ),
    Rule(
        name="resolver.pip_conflict_warning",
        category="resolver_failure",
        patterns=(
            r"pip's dependency resolver does not currently take into account all the packages that are installed",
            r"requires torch==[\d.]+[^\n]{0,40}, but you have torch [\S]+ which is incompatible",
        ),
        confidence=0.45,
        generic=True,
        root_cause=(
            "pip installed a set of packages with conflicting requirements (e.g. torchvision built for another "
            "torch)."
        ),
        fix="Install torch, torchvision and torchaudio together from the same release and index.",
        examples=("torchvision 0.16.0 requires torch==2.1.0, but you have torch 2.3.1 which is incompatible.",),
    ),
    # ------------------------------------------------------------------ oom_or_hw
    Rule(
        name="hw.ecc_xid_fallen_off",
        category="oom_or_hw",
        patterns=(
            r"GPU does not have the necessary power cables connected",
            r"Detected Critical Xid Error",
            r"uncorrectable ECC error encountered",
            r"cudaErrorECCUncorrectable",
            r"CUDA_ERROR_ECC_UNCORRECTABLE",
            r"GPU has fallen off the bus",
            r"GPU is lost\. Reboot the system",
            r"NVRM: Xid \(PCI:[^\n]{0,40}\): (?:48|63|64|74|79|92|94|95|119|120)\b",
            r"Unable to determine the device handle for GPU[\w:.]*: (?:Unknown Error|GPU is lost)",
            r"row remapping (?:failure|pending)|Row Remapper Failure",
            r"double bit ECC error",
        ),
        confidence=0.9,
        root_cause="A GPU hardware fault (ECC memory error, GPU fell off the bus, or the device stopped responding).",
        fix=(
            "Drain the GPU: check `nvidia-smi -q -d ECC,ROW_REMAPPER`, dmesg Xid codes, power/cooling and PCIe "
            "seating; "
            "reset or power-cycle, and replace the card if it recurs."
        ),
        examples=(
            "CUDA error: uncorrectable ECC error encountered Search for `cudaErrorECCUncorrectable' in "
            "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.",
            "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        ),
    ),
    Rule(
        name="hw.xid_other",
        category="oom_or_hw",
        patterns=(
            r"NVRM: Xid \(PCI:[^\n]{0,40}\): \d+",
            r"RmInitAdapter failed",
            r"PCIe Bus Error: severity=(?:Uncorrected|Fatal)",
        ),
        confidence=0.65,
        root_cause="The driver logged GPU errors (Xid / adapter init failure / PCIe errors).",
        fix="Look the Xid up in NVIDIA's Xid catalog; check power, cooling, PCIe link and firmware; re-run a burn-in.",
        examples=("NVRM: Xid (PCI:0000:01:00): 13, pid=2871, Graphics Exception: ESR 0x504648=0x1000e",),
    ),
    Rule(
        name="hw.cuda_oom",
        category="oom_or_hw",
        patterns=(
            r"OOM when allocating tensor",
            r"ran out of memory trying to allocate",
            r"cudaMalloc failed: out of memory",
            r"CUDA out of memory",
            r"torch\.(?:cuda\.)?OutOfMemoryError",
            r"CUDA error: out of memory",
            r"Cuda failure '?out of memory",
            r"CUBLAS_STATUS_ALLOC_FAILED",
            r"cudaErrorMemoryAllocation",
            r"CUDA_ERROR_OUT_OF_MEMORY",
            r"RESOURCE_EXHAUSTED: Out of memory while trying to allocate",
        ),
        confidence=0.88,
        root_cause="The GPU ran out of memory.",
        fix="Reduce batch size/sequence length, free other processes on the GPU (nvidia-smi), or use more/larger GPUs.",
        examples=(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "23.55 GiB",
        ),
    ),
    Rule(
        name="hw.host_oom_or_shm",
        category="oom_or_hw",
        patterns=(
            r"Out of memory: Killed process \d+",
            r"oom-kill(?:er)?\b",
            r"insufficient shared memory \(shm\)",
            r"Unexpected bus error encountered in worker",
        ),
        confidence=0.75,
        root_cause="The host (or container) ran out of RAM or shared memory and killed/aborted the process.",
        fix="Raise the container's memory and /dev/shm limits, reduce DataLoader workers/batch size, or add RAM.",
        examples=(
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
            "(shm).",
        ),
    ),
    Rule(
        name="hw.thermal_or_power",
        category="oom_or_hw",
        patterns=(
            r"HW (?:Thermal )?Slowdown\s*:\s*Active",
            r"GPU (?:over|exceeded) temperature",
            r"thermal (?:shutdown|violation)",
            r"\| ERR! ",
            r"unspecified launch failure",
        ),
        confidence=0.6,
        root_cause="The GPU is throttling, overheating, or failing mid-kernel (power/thermal/hardware).",
        fix=(
            "Check airflow, power cables and limits (`nvidia-smi -q -d TEMPERATURE,POWER,PERFORMANCE`) and dmesg Xid "
            "codes."
        ),
        examples=("    HW Slowdown                       : Active",),
    ),
    # ------------------------------------------------------------------ proxmox_lxc
    Rule(
        name="pve.container_start_failed",
        category="proxmox_lxc",
        patterns=(
            r'Failed to initialize container \"?\d+',
            r"Failed to set up id mapping",
            r"container '\d+' not running",
            r"startup for container '\d+' failed",
            r"Failed to spawn container \"?\d+",
            r"Failed to setup container \"?\d+",
            r"Failed to run mount hooks",
            r"lxc_start: [^\n]{0,80}The container failed to start",
            r"command 'lxc-start (?:-F )?-n \d+[^']*' failed",
        ),
        confidence=0.78,
        root_cause="Proxmox could not start container[ {vmid}]; an LXC hook or mount in its config fails.",
        fix=(
            "Run `pct start {vmid} --debug` (or lxc-start -n {vmid} -F -l DEBUG) to see the failing line; "
            "remove or fix the hook/mount entry (NVIDIA hooks need an unprivileged CT, bind mounts need existing "
            "host paths)."
        ),
        examples=(
            "run_buffer: 314 Script exited with status 1\nlxc_setup: 3388 Failed to run mount hooks\n"
            "__lxc_start: 1999 Failed to spawn container \"102\"\nTASK ERROR: startup for container '102' failed",
        ),
    ),
    Rule(
        name="pve.idmap",
        category="proxmox_lxc",
        patterns=(
            r"newuidmap failed",
            r"newgidmap failed",
            r"uid range \[[\d-]+\) -> \[[\d-]+\) not allowed",
            r"gid range \[[\d-]+\) -> \[[\d-]+\) not allowed",
            r"Failed to write mapping",
            r"lxc_map_ids: ",
            r"^lxc\.idmap\s*[:=]\s*[ug] \d+ \d+ \d+",
        ),
        confidence=0.7,
        root_cause=(
            "The container's lxc.idmap is incomplete or not allowed by /etc/subuid and /etc/subgid (once any "
            "lxc.idmap line is set Proxmox adds no default mapping)."
        ),
        fix=(
            "Map both uids and gids over the full 0-65535 range (e.g. `lxc.idmap: u 0 100000 65536` next to the g "
            "lines) "
            "and allow every mapped host id in /etc/subuid and /etc/subgid (root:100000:65536, root:44:1, ...)."
        ),
        examples=(
            "lxc.idmap: g 0 100000 44\nlxc.idmap: g 44 44 1\nlxc.idmap: g 45 100045 61",
            "newuidmap: uid range [0-65536) -> [100000-165536) not allowed",
        ),
    ),
    Rule(
        name="pve.api_permission",
        category="proxmox_lxc",
        patterns=(
            r"Parameter verification failed",
            r"unsupported (?:debian|ubuntu|centos|fedora|alpine|archlinux) version",
            r"unable to create CT \d+",
            r'apparmor=\"DENIED\"[^\n]{0,200}profile=\"lxc-',
            r"configuring device passthrough is only allowed for root@pam",
            r"property is not defined in schema and the schema does not allow additional properties",
            r"Permission check failed \(",
            r"CT is locked",
            r"can't lock file '/run/lock/lxc/pve-config-\d+\.lock'",
            r"unable to parse (?:config|value of) [^\n]{0,60}lxc",
        ),
        confidence=0.85,
        root_cause=(
            "The Proxmox API or config refused the change (device passthrough needs root@pam; raw lxc.* keys are not "
            "API-settable; locked CT)."
        ),
        fix=(
            "Set devN entries as root@pam with a password ticket or `pct set` over SSH (API tokens cannot), and "
            "write raw "
            "lxc.* lines to /etc/pve/lxc/<vmid>.conf as root."
        ),
        examples=(
            "unable to create CT 105 - unsupported debian version '13.1'",
            "403 Forbidden: Permission check failed (configuring device passthrough is only allowed for root@pam)",
        ),
    ),
    Rule(
        name="pve.cgroup_v1_keys",
        category="proxmox_lxc",
        patterns=(r"^lxc\.cgroup\.devices\.allow\s*[:=]", r"cgroup v1 (?:keys|configuration) [^\n]{0,40}ignored"),
        confidence=0.5,
        root_cause=(
            "The container config uses cgroup v1 keys (lxc.cgroup.devices.allow) on a cgroup v2 host (PVE >= 7), "
            "where they are ignored."
        ),
        fix="Use lxc.cgroup2.devices.allow lines (or devN entries on PVE >= 8.1).",
        examples=("lxc.cgroup.devices.allow: c 195:* rwm",),
    ),
    Rule(
        name="pve.container_does_not_start",
        category="proxmox_lxc",
        patterns=(
            r"(?:LXC|CT|container)(?: \S+){0,2} (?:does not|doesn't|won't|will not|fails to|failed to|can't|cannot) "
            r"start",
            r"TASK ERROR: ",
        ),
        confidence=0.45,
        generic=True,
        root_cause="The Proxmox container fails to start (or a Proxmox task failed).",
        fix=(
            "Run `pct start <vmid> --debug` and read the first ERROR line; check the lxc.* lines added to "
            "/etc/pve/lxc/<vmid>.conf."
        ),
        examples=("But my LXC Container does not start.",),
    ),
    Rule(
        name="container.nvidia_container_cli_error",
        category="container_device_missing",
        patterns=(
            r"nvidia-container-cli: [\w ]*error",
            r"error running hook #\d+: error running hook: exit status \d+",
        ),
        confidence=0.6,
        root_cause="The NVIDIA container runtime hook failed, so the container got no GPU devices.",
        fix="Read the nvidia-container-cli message; check `nvidia-container-cli -k -d /dev/tty info` on the host.",
        examples=(
            "docker: Error response from daemon: failed to create task for container: failed to create shim task: "
            "OCI runtime create failed: runc create failed: unable to start container process: error during "
            "container init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
            "nvidia-container-cli: initialization error: open failed: /proc/sys/kernel/overflowuid: permission "
            "denied: unknown",
        ),
    ),
    Rule(
        name="nccl.wrong_results",
        category="nccl_failure",
        patterns=(
            r"Out of bounds values\s*:\s*[1-9]\d*\s+FAILED",
            r"Avg bus bandwidth\s*:\s*[\d.]+\s+FAILED",
        ),
        confidence=0.8,
        root_cause="The collective test produced wrong values (or bandwidth below the threshold).",
        fix=(
            "Treat as a hardware/transport fault: rerun with NCCL_P2P_DISABLE=1 and per GPU pair to isolate the "
            "link; check PCIe/NVLink errors and Xid codes in dmesg."
        ),
        examples=("# Out of bounds values : 32 FAILED\n# Avg bus bandwidth    : 21.0832",),
    ),
    Rule(
        name="hw.illegal_memory_access",
        category="oom_or_hw",
        patterns=(r"an illegal memory access was encountered", r"cudaErrorIllegalAddress", r"CUDA_ERROR_ILLEGAL_ADDRESS"),
        confidence=0.45,
        generic=True,
        root_cause="A kernel faulted on an illegal address: a software bug, or memory/hardware instability.",
        fix=(
            "Re-run with CUDA_LAUNCH_BLOCKING=1 to locate the kernel; if it recurs on one GPU only, check Xid codes "
            "and ECC."
        ),
        examples=("RuntimeError: CUDA error: an illegal memory access was encountered",),
    ),
    Rule(
        name="pve.lxc_cgroup_setup",
        category="proxmox_lxc",
        patterns=(
            r"cgfsng_\w+: \d+ [^\n]{0,120}(?:Failed|Permission denied)",
            r"Failed to (?:create|setup|set up) (?:cgroup|limits)",
            r"lxc\.hook\.\w+ [^\n]{0,60}failed",
        ),
        confidence=0.7,
        root_cause="LXC could not set up the container's cgroup limits or hooks from its config.",
        fix=(
            "Check the lxc.cgroup2.* and lxc.hook.* lines in /etc/pve/lxc/<vmid>.conf (cgroup v2 keys only on PVE >= "
            "7)."
        ),
        examples=('cgfsng_setup_limits: 3251 No such file or directory - Failed to setup limits for the "devices" controller',),
    ),
)
