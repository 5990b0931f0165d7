"""no_driver_loaded: no NVIDIA kernel module bound to the GPUs."""

from __future__ import annotations

from provisioner.diagnose.model import Rule
from provisioner.diagnose.rules.common import (
    CONTAINER_CONTEXT,
    GPU_PV_GUEST,
    IN_CONTAINER,
    NOT_WSL,
    WSL_CONTEXT,
)

#: the steps where the GPU is a Windows host's, reached from WSL 2, as a clause other fixes lead into
WSL_STEPS = ("in Windows: install the current NVIDIA driver for the GPU (its WSL support puts libcuda and nvidia-smi in "
             "/usr/lib/wsl/lib), on Windows 11 or Windows 10 21H2 or later, then `wsl --update` and `wsl --shutdown`; "
             "`wsl -l -v` must show VERSION 2 (WSL 1 has no GPU). In WSL, `/usr/lib/wsl/lib/nvidia-smi` must list the "
             "GPU before any container can; never install a Linux NVIDIA driver inside WSL (it hides the Windows "
             "driver's libraries).")
#: the same, as a fix of its own
WSL_FIX = WSL_STEPS[0].upper() + WSL_STEPS[1:]
#: the NVIDIA kernel modules' names as modprobe and insmod print them: nvidia, nvidia_current / nvidia-current (Ubuntu's
#: packaging before 14.04), nvidia_uvm, nvidia-drm, nvidia340 and nvidia-340xx (branch packages) — not nvidiafb, the
#: kernel's framebuffer driver for pre-GeForce FX cards, whose failure to load says nothing about nvidia.ko
NV_MODULE = r"nvidia(?:\d+|[-_][\w-]+)?"
#: NVML's NVML_ERROR_DRIVER_NOT_LOADED in each binding's wording: nvidia-container-cli's "nvml error: driver not
#: loaded", pynvml's "NVMLError_DriverNotLoaded: Driver Not Loaded" (wookayin/gpustat#110), Rust nvml-wrapper's "Failed
#: to initialize nvml: DriverNotLoaded" (damomine/aleominer#14)
NVML_DRIVER_NOT_LOADED = r"\bnvml\w*[^\n]{0,40}?driver[ _]?not[ _]?loaded\b"

#: nodriver.probe_conflict's and nodriver.no_gpu_probed's cause and fix: another driver holds the GPUs
OTHER_DRIVER_OWNS = ("Another driver (nouveau, a framebuffer driver or vfio-pci) owns the GPUs, so the nvidia module never "
                     "bound them")
OTHER_DRIVER_FIX = ("Blacklist nouveau/nvidiafb (or unbind vfio-pci), rebuild the initramfs and reboot so the nvidia "
                    "module claims the GPUs (`lspci -nnk -d 10de:` names the driver in use).")

RULES: tuple[Rule, ...] = (
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
            r"was loaded and obtained ownership of the NVIDIA device",
            r"NVRM: [^\n]{0,80}is already bound to (?:vfio-pci|nouveau|another driver)",
        ),
        confidence=0.88,
        root_cause=OTHER_DRIVER_OWNS + ".",
        fix=OTHER_DRIVER_FIX,
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
        # the module's probe ended with no GPU: another driver (nouveau, vfio-pci) holds them, unless the module said
        # on its own why it passed a GPU by (a legacy GPU, a pre-GSP GPU under the open flavour, a GPU this release
        # does not support): then this line is that refusal's consequence, and the refusal is the finding
        name="nodriver.no_gpu_probed",
        category="no_driver_loaded",
        patterns=(r"NVRM: No NVIDIA (?:graphics adapter|GPU|devices) (?:probed|found)",),
        unless=r"NVRM:[^\n]{0,120}?(?:Legacy\s+drivers|driver\s+will\s+ignore|not\s+supported\s+by\s+(?:open|the))",
        confidence=0.87,  # below the probe-routine lines of probe_conflict, which name the other driver
        root_cause="The nvidia module probed no GPU: " + OTHER_DRIVER_OWNS[0].lower() + OTHER_DRIVER_OWNS[1:] + ".",
        fix=OTHER_DRIVER_FIX,
        examples=("NVRM: No NVIDIA graphics adapter found!",),
    ),
    Rule(
        name="nodriver.secure_boot",
        category="no_driver_loaded",
        patterns=(
            r"could not insert '" + NV_MODULE + "': Operation not permitted",
            r"Loading of (?:unsigned )?module with unavailable key is rejected",
            r"Loading of unsigned module is rejected",
            r"could not insert '" + NV_MODULE + "': (?:Key was rejected by service|Required key not available)",
            r"Lockdown: [^\n]{0,60}unsigned module loading is restricted",
            r"\bMOK (?:enrollment|management)",
            r"Secure Boot (?:is )?enabled",
            r"kernel module failed to load\. Secure boot",
        ),
        confidence=0.82,
        # "Secure boot enabled" / MOK prompts are printed on healthy systems too: only with a load failure
        context=(
            r"couldn't communicate with the NVIDIA driver|could not insert|Unable to load|failed to load|not loaded"
            r"|No devices were found|Operation not permitted|rejected|restricted|modprobe: (?:ERROR|FATAL)"
            r"|(?:do not|don't|does not|doesn't|won't|will not) load"
        ),
        root_cause="Secure Boot rejects the unsigned (or not-yet-enrolled) NVIDIA kernel module, so it is not loaded.",
        fix=(
            "Enroll the module signing key (MOK) at the next boot console, or disable Secure Boot; then verify with "
            "`lsmod | grep nvidia`."
        ),
        examples=(
            "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service",
            "`NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.`\n"
            "I did get the MOK enrollment screen same as before",
        ),
    ),
    Rule(
        name="nodriver.module_missing",
        category="no_driver_loaded",
        patterns=(
            NV_MODULE + r": Unknown symbol \w+",
            NV_MODULE + r": disagrees about version of symbol",
            r"NVIDIA kernel module missing",
            r"modprobe: FATAL: Module " + NV_MODULE + r" not found in directory",
            r"could not insert '" + NV_MODULE + "': (?:No such device|Exec format error|Unknown symbol in module|Invalid "
            r"argument)",
            # module-init-tools' modprobe (before kmod): "FATAL: Error inserting nvidia (/lib/modules/…/nvidia.ko): …"
            r"Error inserting " + NV_MODULE + r" \([^)\n]{0,200}\): (?:Invalid module format|Exec format error|Unknown symbol "
            r"in module|Invalid argument)",
            # module-init-tools' insmod: "insmod: error inserting 'nvidia.ko': -1 Invalid module format"
            r"error inserting [\"'`]?(?:[^\s'\"`]*/)?" + NV_MODULE + r"\.ko[\"'`]?: -1 (?:Invalid module format|Unknown "
            r"symbol in module|Invalid argument|Exec format error)",
            NVML_DRIVER_NOT_LOADED,
        ),
        # the kernel's and modprobe's catalogue wordings name any module ("Module %s not found", "%s: Unknown symbol"):
        # the module on the message's line is an NVIDIA one (not vfio_pci, zfs or nvidiafb), or NVML says it
        requires=(r"(?:^|[\s'\"`/\]\x{2018}\x{201c}])" + NV_MODULE
                  + r"(?:\.ko)?[\"'`\x{2019}\x{201d}]?(?:\s*:|\s+not\s+found|\s+\()"
                  + "|" + NVML_DRIVER_NOT_LOADED + "|NVIDIA kernel module missing",),
        confidence=0.85,
        root_cause="The NVIDIA kernel module is not available or cannot load for the running kernel.",
        fix=(
            "Rebuild the module for the running kernel (dkms autoinstall / reinstall the driver with kernel headers) "
            "and load it; check dmesg for the reason."
        ),
        examples=(
            "[    4.120113] nvidia: Unknown symbol drm_gem_object_free (err -2)",
            "modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.12-4-pve",
            "pynvml.NVMLError_DriverNotLoaded: Driver Not Loaded",
            "thread 'main' panicked at 'Failed to initialize nvml: DriverNotLoaded', src/environment/mod.rs:37:31",
            "nvidia-container-cli: initialization error: nvml error: driver not loaded",
        ),
    ),
    Rule(
        name="nodriver.no_driver_found",
        category="no_driver_loaded",
        patterns=(
            r"Found no NVIDIA driver on your system",
            r"nvidia-container-cli(?:\.real)?: initialization error: load library failed: libnvidia-ml\.so\.1",
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
        # nvidia-docker 1.x and its plugin ran `nvidia-modprobe -u -c=0` before every GPU container; its error is the
        # module's load failing on the host (a driver without a module for the running kernel, often after a kernel
        # update or a VM's restart) or nvidia-modprobe missing
        name="nodriver.uvm_module_load_failed",
        category="no_driver_loaded",
        patterns=(),  # the catalogue's wordings (rules/citations.py)
        confidence=0.85,
        root_cause=("The nvidia-uvm kernel module could not be loaded on the host (`nvidia-modprobe -u -c=0` failed): "
                    "the NVIDIA driver has no module for the running kernel, or nvidia-modprobe is not installed."),
        fix=("On the host, run `sudo modprobe nvidia-uvm` and read `dmesg`: rebuild the driver's modules for the running "
             "kernel (DKMS, or reinstall the driver with the kernel's headers) and install nvidia-modprobe; then "
             "`nvidia-smi` and the container again."),
        examples=("nvidia-docker | 2016/07/13 23:40:32 Error: Could not load UVM kernel module",),
    ),
    Rule(
        # libnvidia-container's nvc_init (src/nvc.c): WSL 2's libdxcore.so loaded, but no adapter kept (src/dxcore.c
        # dxcore_add_adapter skips a driver older than WDDM 2.8 and one whose driver store holds none of NVIDIA's
        # libraries): the GPU is Windows', and Windows does not expose it to the VM
        name="nodriver.wsl_no_gpu_adapter",
        category="no_driver_loaded",
        patterns=(),
        messages=("nvc.wsl_no_adapters",),
        confidence=0.92,
        demotes=("container_device_missing",),
        root_cause=("WSL has no NVIDIA GPU to give the container: Windows exposes no adapter with an NVIDIA driver "
                    "that supports WSL (WDDM 2.8 or later, with its CUDA libraries), so nvidia-container-cli finds none "
                    "(a machine without an NVIDIA GPU, WSL 1, or a Windows driver or build without WSL GPU support). "
                    "The container toolkit is not the cause."),
        fix=("Without an NVIDIA GPU in the machine, run the image without the GPU (drop `--gpus` or the compose "
             "`devices` reservation). Otherwise: " + WSL_STEPS),
        examples=("docker: Error response from daemon: failed to create task for container: failed to create shim task: "
                  "OCI runtime create failed: runc create failed: unable to start container process: error during "
                  "container init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
                  "nvidia-container-cli: initialization error: WSL environment detected but no adapters were found: "
                  "unknown",),
    ),
    Rule(
        # NVML's NVML_ERROR_OPERATING_SYSTEM (nvml.h: "blocked by the operating system/cgroups") outside a container: the
        # words nvidia-smi prints under WSL 2 where Windows gives the VM no GPU (microsoft/WSL#10289, #14339); inside a
        # container that started, the toolkit found the GPU and it is the container's (container.nvml_blocked_in_container)
        name="nodriver.wsl_gpu_unreachable",
        category="no_driver_loaded",
        patterns=(),
        messages=("nvml.operating_system",),
        # a Hyper-V GPU-PV guest (not WSL) says the same: lib.gpu_pv_userspace_incomplete
        unless=CONTAINER_CONTEXT + "|" + NOT_WSL + "|" + GPU_PV_GUEST,
        confidence=0.8,
        root_cause=("NVML says the operating system blocks the GPU: the words of WSL 2, where the GPU driver is the "
                    "Windows host's and it gives this VM no GPU (a Windows driver or build without WSL GPU support, "
                    "WSL 1, or a Linux driver installed inside WSL over the Windows driver's libraries)."),
        fix=WSL_FIX + " On a Linux host (not WSL), the device cgroup denies the GPU's control device: check the "
                      "cgroup's device rules for major 195.",
        examples=("$ nvidia-smi\nFailed to initialize NVML: GPU access blocked by the operating system\n"
                  "Failed to properly shut down NVML: GPU access blocked by the operating system",),
    ),
    Rule(
        # nvidia-container-cli's driver service failing (src/driver.c driver_init runs NVML in an RPC service) where the
        # log shows WSL: Windows giving the VM no GPU (docker/for-win#10379), or a toolkit/Docker Desktop release that
        # broke WSL (docker/for-win#11309, NVIDIA/nvidia-docker#1496): both named, the toolkit's finding beside it
        name="nodriver.wsl_driver_service_failed",
        category="no_driver_loaded",
        patterns=(r"nvidia-container-cli(?:\.real)?: initialization error: driver (?:rpc )?error: failed to process "
                  r"request",),
        context=WSL_CONTEXT,
        unless=NOT_WSL,
        confidence=0.7,
        root_cause=("Under WSL 2 nvidia-container-cli could not start the driver (NVML from the Windows driver's "
                    "libraries): Windows gives the VM no GPU, or the container toolkit or Docker Desktop release does "
                    "not work with this WSL."),
        fix=("First `/usr/lib/wsl/lib/nvidia-smi` in WSL: if it fails too, " + WSL_STEPS
             + " If it lists the GPU, the container stack is at fault: update (or go back one release of) the NVIDIA "
               "container toolkit and Docker Desktop."),
        examples=("root@DESKTOP-5A67SBM:/home/anurag# docker run --rm --gpus all nvidia/cuda:11.0-base nvidia-smi\n"
                  "docker: Error response from daemon: OCI runtime create failed: container_linux.go:370: starting "
                  "container process caused: process_linux.go:459: container init caused: Running hook #0:: error "
                  "running hook: exit status 1, stdout: , stderr: nvidia-container-cli: initialization error: driver "
                  "error: failed to process request: unknown.",),
    ),
    Rule(
        # the driver's "not loaded"/"cannot communicate" words where the log shows WSL 2: there is no NVIDIA kernel module
        # to load or rebuild in WSL (the GPU is reached through dxcore and the Windows driver's libraries), so the Linux
        # fixes of nodriver.module_missing and nodriver.nvidia_smi_cannot_communicate do not apply
        # (NVIDIA/k8s-device-plugin#219: "nvml error: driver not loaded" on WSL 2)
        name="nodriver.wsl_driver_not_reached",
        category="no_driver_loaded",
        patterns=(NVML_DRIVER_NOT_LOADED,),
        messages=("smi.cannot_communicate", "nvml.driver_not_loaded"),
        context=WSL_CONTEXT,
        # a Linux driver being installed inside WSL: the install's own failure leads (installer_failure)
        unless=NOT_WSL + r"|\bdkms\b|nvidia-installer|NVIDIA-Linux-x86_64",
        confidence=0.9,
        root_cause=("Under WSL 2 there is no NVIDIA kernel module to load: the GPU is the Windows host's, reached "
                    "through WSL's dxcore and the Windows driver's libraries in /usr/lib/wsl/lib, and they do not reach "
                    "it here."),
        fix=WSL_FIX,
        examples=("$ uname -r\n5.15.153.1-microsoft-standard-WSL2\n$ nvidia-smi\nNVIDIA-SMI has failed because it "
                  "couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
                  "and running.",),
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
        root_cause=("CUDA sees no GPU: the driver is not loaded, the GPUs are hidden (CUDA_VISIBLE_DEVICES), or the "
                    "framework is a CPU-only build."),
        fix=("Check `nvidia-smi` and `lsmod | grep nvidia` on the machine, that CUDA_VISIBLE_DEVICES is not empty, and "
             "that the framework is a CUDA build (`python -c 'import torch; print(torch.version.cuda)'` is not None)."),
        examples=("RuntimeError: No CUDA GPUs are available",),
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
        name="nodriver.module_flavour_refuses_gpu",
        category="no_driver_loaded",
        patterns=(
            r"not supported by open nvidia\.ko",
            r"does not include the required GPU (?:NVRM: )?System Processor",
            r"Open nvidia\.ko is only ready for use on Data Center GPUs",
            r"OpenRmEnableUnsupportedGpus",
            r"requires use of the NVIDIA open kernel modules",
            r"only supported by the (?:NVIDIA )?open kernel modules",
            r"Blackwell [^\n]{0,60}(?:requires?|needs?|only (?:works|supported)) [^\n]{0,30}open (?:kernel )?modules?",
            r"\bproprietary\b[^\n]{0,40}modules?[^\n]{0,60}(?:never initiali[sz]es|fails? to (?:bind|initiali[sz]e))",
        ),
        confidence=0.88,
        demotes=("oom_or_hw", "installer_failure"),
        root_cause=(
            "The installed kernel-module flavour refuses this GPU, so no GPU is bound: the open modules need a "
            "Turing-or-newer GPU with GSP (and before R560 a data-center GPU), and Blackwell needs the open modules."
        ),
        fix=(
            "Install the flavour the GPU needs: open kernel modules for Turing+ and mandatory for Blackwell (.run "
            "`-m=kernel-open`, distro `*-open` packages); the proprietary flavour for Maxwell/Pascal/Volta (or "
            "NVreg_OpenRmEnableUnsupportedGpus=1 for GeForce on R515-R555); reboot and check `nvidia-smi`."
        ),
        examples=(
            "NVRM: The NVIDIA GPU 0000:af:00.0 (PCI ID: 10de:1db5)\nNVRM: installed in this system is not supported by "
            "open\nNVRM: nvidia.ko because it does not include the required GPU\nNVRM: System Processor (GSP).",
            "NVRM: Open nvidia.ko is only ready for use on Data Center GPUs.\nNVRM: GPU 0000:04:00.0: RmInitAdapter "
            "failed! (0x63:0x0:1905)",
        ),
    ),
    Rule(
        name="nodriver.rm_init_adapter",
        category="no_driver_loaded",
        patterns=(
            r"RmInitAdapter failed",
            r"rm_init_adapter failed",
            r"RmInitAdapter: Cannot initialize GSP firmware RM",
            r"kgspInitRm_IMPL: cannot bootstrap",
        ),
        confidence=0.64,
        root_cause=(
            "The nvidia module loaded but could not initialise the GPU (RmInitAdapter failed), so no device is usable: "
            "a module flavour/firmware (GSP) that does not fit the GPU, or a GPU that does not come up."
        ),
        fix=(
            "Read the NVRM lines before RmInitAdapter: install the module flavour and branch the GPU supports (open "
            "for Blackwell), try NVreg_EnableGpuFirmware=0 on GSP errors with the proprietary flavour, and reseat/RMA "
            "if the GPU fails with every driver."
        ),
        examples=(
            "[  903.609564] NVRM: RmInitAdapter: Cannot initialize GSP firmware RM\n[  903.610907] NVRM: GPU "
            "0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)",
        ),
    ),
    Rule(
        # the X driver's own line when it cannot open the kernel module at X start: the module not loaded (a prebuilt
        # package for another kernel, archzfs/archzfs#548; refused; absent) or not yet initialised (a display manager
        # started before it, the Arch wiki's early-KMS advice). Below the lines that say why (Secure Boot, an API
        # mismatch, a module built for another kernel, RmInitAdapter), which the kernel log beside it often holds
        name="nodriver.x_driver_cannot_use_module",
        category="no_driver_loaded",
        patterns=(),
        unless=r"RmInitAdapter failed|rm_init_adapter failed|probe routine failed|None of the NVIDIA devices were initiali",
        confidence=0.6,
        root_cause=("The NVIDIA X driver could not use the NVIDIA kernel module: the module was not loaded (not built "
                    "for the running kernel, or refused at load) or not yet initialised when X started."),
        fix=("Check `lsmod | grep nvidia` and `dmesg | grep -iE 'nvrm|nvidia'`: if no module is loaded, install it for "
             "the running kernel — the distribution's DKMS package (nvidia-dkms, akmod-nvidia) rather than one "
             "prebuilt for another kernel — and enroll the MOK if Secure Boot is on; if it loads only after X starts, "
             "load it early (the initramfs, `nvidia_drm.modeset=1`); then reboot."),
        examples=("[     9.393] (EE) NVIDIA: Failed to initialize the NVIDIA kernel module. Please see the\n"
                  "[     9.393] (EE) NVIDIA:     system's kernel log for additional error messages and\n"
                  "[     9.393] (EE) NVIDIA:     consult the NVIDIA README for details.",),
    ),
    Rule(
        name="nodriver.secure_boot_refused_load",
        category="no_driver_loaded",
        patterns=(
            r"Unable to load the (?:kernel module )?'?nvidia[\w-]*(?:\.ko)?'?(?: kernel module)?",
            r"could not insert '" + NV_MODULE + "'",
            r"(?:nvidia|nvidia-open)? ?modules?(?: keys?)? (?:are|is|were|was|got) rejected",
            r"Key was rejected by service",
            r"Required key not available",
            r"not signed by a key that is trusted by the kernel",
            r"Kernel module load error: (?:Operation not permitted|Key was rejected)",
        ),
        # above a GPU the driver branch dropped (0.92 with its consequences): the kernel refuses the module before the
        # driver looks at any GPU, so the refusal is what to fix first
        confidence=0.9,
        context=r"secure ?boot|sig_enforce|\bMOK\b|mokutil|Key was rejected by service|Required key not available",
        demotes=("installer_failure",),
        root_cause=(
            "Secure Boot (module signature enforcement) refuses to load the NVIDIA kernel module: it is unsigned or "
            "signed with a key that is not enrolled, so the installer/modprobe cannot load it."
        ),
        fix=(
            "Sign the module with a key and enroll it (`mokutil --import`, confirm in the MOK manager at the next "
            "boot; DKMS signs with /var/lib/dkms/mok.pub), or disable Secure Boot; then `modprobe nvidia` and check "
            "`lsmod | grep nvidia`."
        ),
        examples=(
            "Secure boot - Unable to load the kernel module 'nvidia.ko'\nERROR: Unable to load the kernel module "
            "'nvidia.ko'.  This happens most frequently when this kernel module was built against the wrong or "
            "improperly configured kernel sources",
            "After a clean install, when using `module.sig_enforce=1`, the Nvidia module keys are rejected.",
        ),
    ),
    Rule(
        name="nodriver.module_aliased_off",
        category="no_driver_loaded",
        # kmod resolves `modprobe nvidia` through the modprobe.d aliases: `alias nvidia off` (what nvidia-prime's
        # `prime-select intel` writes to /lib/modprobe.d/blacklist-nvidia.conf, and what "disable the dGPU" guides
        # add) turns the request into the module "off", which kmod then reports as it reports any module:
        # "could not insert 'off'" / "Module off not found"
        patterns=(r"could not insert [\"'`]?off[\"'`]?", r"\bModule off not found\b"),
        # kmod's messages it cites name any module: only the module "off" is the alias
        requires=(r"could not insert [\"'`]?off[\"'`]?|\bModule off not found\b",),
        confidence=0.88,
        root_cause=(
            "The nvidia module is aliased to `off` in modprobe.d (nvidia-prime's `prime-select intel` writes `alias "
            "nvidia off` to /lib/modprobe.d/blacklist-nvidia.conf), so `modprobe nvidia` loads nothing and nvidia-smi "
            "finds no driver."
        ),
        fix=(
            "Select a profile that loads the driver (`prime-select on-demand` or `prime-select nvidia`), or remove the "
            "`alias nvidia off` / `blacklist nvidia` lines (`grep -r nvidia /etc/modprobe.d /lib/modprobe.d`), run "
            "`update-initramfs -u`, then `modprobe nvidia` or reboot."
        ),
        examples=("modprobe: ERROR: could not insert 'off': Unknown symbol in module, or unknown parameter (see dmesg)",),
    ),
    Rule(
        # the kernel's ENODEV from the module's init: nvidia.ko's PCI probe found no GPU it drives. modprobe prints
        # it in module-init-tools' words ("FATAL: Error inserting nvidia_current (…nvidia-current.ko): No such
        # device") or kmod's ("could not insert 'nvidia': No such device"); the messages name any module
        name="nodriver.module_found_no_device",
        category="no_driver_loaded",
        patterns=(),
        messages=("kernel.insert_no_device",),
        # nvidia.ko and its companions, named or as a path (kmod's insmod names the file); not nvidiafb (the kernel's
        # framebuffer driver for pre-GeForce FX cards)
        requires=(r"(?:Error inserting|could not insert(?: module)?) [\"'`]?(?:[^\s'\"`]*/)?" + NV_MODULE +
                  r"(?:\.ko)?[\"'`]?\s*[:(]",),
        confidence=0.86,
        root_cause=("The nvidia kernel module refused to load because it found no GPU it can drive: the discrete GPU "
                    "is powered off (an Optimus/hybrid laptop's switch — bbswitch, ironhide, prime — or the BIOS), "
                    "another driver (nouveau, vfio-pci) holds it, this driver branch does not support it, or no NVIDIA "
                    "GPU is visible (a VM without passthrough)."),
        fix=("Read the kernel log right after `modprobe nvidia` (`dmesg | grep -iE 'nvrm|nvidia|nouveau'`): power the "
             "discrete GPU on in the switcher's settings (or `prime-select`), blacklist nouveau and rebuild the "
             "initramfs, or install the branch that supports the GPU (`lspci -nn | grep -i nvidia` names it); then "
             "`modprobe nvidia`."),
        examples=("FATAL: Error inserting nvidia_current (/lib/modules/3.0.0-12-generic/updates/dkms/nvidia-current.ko): "
                  "No such device",),  # MrMEEE/ironhide#149
    ),
    Rule(
        # nvidia-xconfig --query-gpu-info (query_gpu_info.c): libnvidia-cfg lists no NVIDIA GPU (find_devices(),
        # multiple_screens.c) — the driver is not loaded or broken. prime-select (openSUSE's SUSEPrime) runs it to find
        # the GPU's BusID. In a docker/Kubernetes container the same is the container not given the GPU.
        name="nodriver.xconfig_found_no_gpu",
        category="no_driver_loaded",
        patterns=(),
        messages=("nvxconfig.query_gpu_failed",),
        unless=CONTAINER_CONTEXT,
        generic=True,
        confidence=0.72,
        root_cause=("nvidia-xconfig could not list the NVIDIA GPUs through the driver (libnvidia-cfg): the driver is "
                    "not loaded, its installation is incomplete or broken, or no GPU is bound to it."),
        fix=("Check the driver on the host: `nvidia-smi`, `lsmod | grep nvidia`, `dmesg | grep -i nvrm`; reinstall the "
             "driver packages of one version (module and userspace) and reboot; on a hybrid laptop power the NVIDIA "
             "GPU on first."),
        examples=("TW-WEDC:~ # prime-select nvidia\nERROR: Unable to query GPU information",),  # openSUSE/SUSEPrime#31
    ),    Rule(
        # FreeBSD's kernel linker refusing a module built for another kernel (kern_linker.c); the nvidia-driver
        # package's nvidia.ko (or nvidia-modeset.ko) after a kernel update it was not rebuilt for
        name="nodriver.freebsd_module_for_other_kernel",
        category="no_driver_loaded",
        patterns=(),
        messages=("freebsd.kld_depends_mismatch",),
        # on the kernel itself (linux.ko or agp.ko not loaded, or nvidia-modeset.ko beside another nvidia.ko, are
        # other causes)
        requires=(r"KLD nvidia[\w-]*(?:\.ko)?\s*:\s*depends on kernel\b",),
        confidence=0.86,
        root_cause=("FreeBSD's kernel refused the NVIDIA module: it was built for another kernel version than the one "
                    "running (the kernel was updated, the nvidia-driver package or its kmod port was not), so no NVIDIA "
                    "driver loads."),
        fix=("Rebuild or reinstall the driver for the running kernel (the nvidia-driver port/package built against "
             "this kernel's sources, or `pkg upgrade` when the package repository matches this kernel), or boot the "
             "kernel the module was built for; then `kldload nvidia-modeset`."),
        examples=("$ kldload nvidia\nkldload: an error occurred while loading the module. Please check dmesg(8) for "
                  "more details.\nKLD nvidia.ko: depends on kernel - not available or version mismatch",),
        # trueos/trueos-core#271
    ),
)
