"""installer_failure: the driver .run / DKMS / package installation failed."""

from __future__ import annotations

from provisioner.diagnose.model import Rule

#: a package of the NVIDIA driver, CUDA or its libraries, as apt/dnf name it (nvidia-driver-550, cuda-toolkit-12-4,
#: libcudnn8, libnvinfer10, kmod-nvidia, nvidia-container-toolkit)
# NVIDIA's package repositories (CUDA's and its mirror for China, the container toolkit's, the DGX/precompiled one)
_NVIDIA_REPO = r"(?:developer\.download\.nvidia\.(?:com|cn)|nvidia\.github\.io|repo\.download\.nvidia\.com)"
# a package name holding "nvidia" or "cuda" anywhere (a module package: linux-cachyos-nvidia-open, linux61-nvidia), as far
# as its stem (pacman's lines name packages, not paths)
#: an NVIDIA driver package's name after "nvidia" as Arch and the AUR name them (nvidia-dkms, nvidia-utils, nvidia-open,
#: nvidia-lts, nvidia-beta, nvidia-all's *-tkg, the legacy branches' nvidia-470xx-*)
_DRIVER_PKG_SUFFIX = r"-(?:dkms|utils|open|lts|beta|tkg|\d{3}xx)[\w-]*"
_STACK_NAME = r"[\w.+-]*(?:nvidia|cuda)"
_GPU_PKG = (r"(?:lib|kmod-|akmod-)?(?:nvidia|cuda|cudnn|nccl|nvinfer|tensorrt|cublas|cufft|curand|cusolver|cusparse"
            r"|nvrtc|nvjpeg|npp)(?:[-_.\d:=]|\b)")  # the stem ends there: not cudatext, nppes-tools

RULES: tuple[Rule, ...] = (
    Rule(
        # NVIDIA's Windows installer (NVI2) for the CUDA toolkit or the driver, in its own log's words: a component's
        # phase failing (Nsight / Visual Studio Integration, pytorch/pytorch#34821; philferriere/dlwin#47), or the
        # constraint check refusing while Windows Update installs (pytorch/pytorch#64536)
        name="installer.nvidia_windows_installer_failed",
        category="installer_failure",
        patterns=(r"\bCUDA Installer Failed\b", r"\bNVIDIA Installer failed\b"),
        confidence=0.75,  # below the driver installer's own refusal of the machine (windows_driver_refused)
        root_cause=("NVIDIA's Windows installer (the CUDA toolkit's or the driver's setup) failed: one of its components "
                    "did not install, or it refused to start while another installation was running."),
        fix=("Read the installer's log (its NVI2 lines name the failing phase): if it is Visual Studio Integration or "
             "Nsight, run a Custom install without them; \"Constraints blocked install\" means another installation "
             "(Windows Update, an MSI) is running — let it finish or stop it (`sc stop wuauserv`), reboot, and run the "
             "installer again as an administrator."),
        examples=("ERROR: [NVI2.Installation] 1208@CInstallationCheckingBase::CheckConstraints : Constraints blocked "
                  "install.\nERROR: [NVI2.NVInstaller] 240@CNVInstaller::PerformSteps : Installation failed with error "
                  "Exception {0xe4080000; File: InstallThread.cpp; Line: 112}.",),
    ),
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
            r"(?:^|[\s'\"])(?:\./)?(?:kernel-open/)?nvidia[\w-]*/[\w/.-]+\.[ch]:\d+:\d+: (?:fatal )?error:",
            r"Makefile\.build:\d+: [^\n]{0,300}nvidia[^\n]{0,300}\] Error \d+",
            r"Failed to verify gcc version",
            r"Failed CC version check",
            r"Compiler version check failed",
            r"Unable to find (?:the )?kernel source tree for (?:the )?currently running kernel",
            r"(?:Unable|Failed) to build the NVIDIA kernel module",
            r"An error occurred while performing the step: \"Building kernel modules\"",
            r"Bad return status for module build on kernel",
            r"Consult /var/lib/dkms/nvidia[^\n]*make\.log for more information",
            r"dpkg: error processing package nvidia-[\w.-]+",
            r"Error! [^\n]{0,80}nvidia",
            r"\[/var/lib/dkms/nvidia/[^\]]*\] Error \d",
            r"Kernel headers for kernel [^\n]{1,60} cannot be found",
            r"Unable to load the kernel module '?nvidia\.ko'?",
            r"\*\*\* \[[^\]\n]*(?:/var/lib/dkms/nvidia|/nvidia[\w.-]*/build|kernel-open|NVIDIA-Linux-)[^\]\n]*\] Error \d+",
            r"Failed to run `?/usr/s?bin/dkms (?:build|install)",
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
        # modpost refuses a non-GPL module that uses a GPL-only export: a kernel newer than the driver release made a
        # symbol it uses GPL-only (the GPU Operator's driver container, DKMS and the .run installer all print it)
        name="installer.driver_older_than_kernel",
        category="installer_failure",
        patterns=(),
        messages=("kbuild.modpost_gpl_only_symbol",),
        requires=(r"\bnvidia",),  # ZFS and other non-GPL modules print the same
        confidence=0.9,
        root_cause=("The NVIDIA driver release is older than the kernel it is built for: that kernel exports a symbol "
                    "the driver uses as GPL-only, so the module does not link."),
        fix=("Install a driver release that supports this kernel (the branch's newest point release, or a newer "
             "branch; with the GPU Operator, a driver version for the node's kernel), or boot the kernel the driver "
             "supports and hold kernel upgrades until the driver does."),
        examples=(
            # NVIDIA/gpu-operator#729 (AKS node on a newer kernel, driver 535.54.03)
            "ERROR: modpost: GPL-incompatible module nvidia.ko uses GPL-only symbol 'rcu_read_unlock_strict'",
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
            r"Unable to find a match: [^\n]{0,200}kernel-(?:headers|devel)",
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
    Rule(
        # RHEL's precompiled streams: NVIDIA's dnf/yum plugin excludes every kernel that has no kmod-nvidia built for
        # it and the installed driver (NVIDIA/yum-packaging-nvidia-plugin nvidia-dnf.py), so dnf then reports the
        # kernel packages "filtered out by exclude filtering" and the update cannot resolve
        name="installer.no_precompiled_kmod",
        category="installer_failure",
        patterns=(r"kmod-nvidia[^\n]{0,160}could be found",),
        messages=("dnfnv.no_precompiled_kmod", "dnfnv.filtering_kernel"),
        confidence=0.88,
        root_cause=("NVIDIA has not published a precompiled kernel module (kmod-nvidia) for the new kernel and the "
                    "installed driver, so NVIDIA's dnf plugin holds the kernel back and the update skips it or fails "
                    "to resolve."),
        fix=("Stay on the current kernel until the precompiled module for it appears in NVIDIA's repository (`dnf "
             "update --exclude='kernel*'`), or move to the DKMS stream, which builds the module for any kernel "
             "(`dnf module switch-to nvidia-driver:<branch>-dkms`)."),
        examples=("NOTE: Skipping kernel installation since no kernel module package kmod-nvidia-510.47.03-4.18.0-348.23.1 "
                  "for kernel version 4.18.0-348.23.1.el8_5 and NVIDIA driver 510.47.03 could be found",),
    ),
    Rule(
        name="installer.compiler_missing",
        category="installer_failure",
        patterns=(
            # no optional `[\w.]+-` target prefix: a search finds `x86_64-linux-gnu-gcc-12:` from `gcc-12:` on,
            # and that prefix made the pattern quadratic on a long token under a backtracking engine
            r"(?:gcc|g\+\+|cc|c\+\+|clang)(?:-\d+)?: (?:command )?not found",
            r"(?:gcc|g\+\+)(?:-\d+)?: No such file or directory",
        ),
        confidence=0.87,
        context=r"nvidia|dkms|kernel module|linux-headers|kernel-open",
        root_cause=(
            "The compiler the NVIDIA kernel-module build needs is not installed (the kernel's own gcc-N, or g++ for "
            "the open modules), so the module build stops."
        ),
        fix=(
            "Install the compiler the running kernel was built with (`cat /proc/version` names gcc-N; e.g. "
            "`apt install gcc-12 g++-12`, `dnf install gcc-c++`) plus the matching kernel headers, then rebuild "
            "(`dkms autoinstall` or re-run the .run installer)."
        ),
        examples=(
            "/bin/sh: line 1: g++: command not found\nmake[1]: *** [Makefile:219: _out/Linux_x86_64/dp_auxretry.o] "
            "Error 127\ndnf -y install nvidia-open-dkms",
        ),
    ),
    Rule(
        name="installer.kbuild_failed_in_driver_build",
        category="installer_failure",
        # while the .run installer or DKMS builds the NVIDIA module: GNU make's `*** [target] Error N` from Kbuild
        # (its "Error" is translated in the user's locale, e.g. "Chyba 2") and gcc's `file.c:L:C: error:` (the
        # legacy drivers' sources sit in kernel/nv*.c, outside any path naming "nvidia")
        patterns=(
            r"\bmake(?:\[\d+\])?: \*\*\* \[[^\]\n]{0,300}Makefile(?:\.build)?:\d+: [^\]\n]{1,300}\] \S+ \d+",
            r"\.[ch]:\d+:\d+: (?:fatal )?error: ",
        ),
        confidence=0.82,
        context=(
            r"Installing NVIDIA driver version|Kernel source path:|/dkms/nvidia\b|\bdkms\b[^\n]{0,80}\bnvidia"
            r"|\bnvidia[^\n]{0,80}\bdkms\b|NVIDIA-Linux-|nvidia-installer|building the nvidia kernel module"
        ),
        root_cause=(
            "The NVIDIA kernel module did not compile against this kernel's headers (the make/gcc errors of the "
            "module build): the driver branch predates the kernel's API, or the headers/compiler do not match."
        ),
        fix=(
            "Use a driver branch that supports this kernel (a legacy branch needs an older kernel or a maintained "
            "patch set), or boot/pin a kernel that branch supports; install the headers and compiler of the running "
            "kernel and read the make.log / nvidia-installer.log for the first `error:`."
        ),
        examples=(
            "-> Installing NVIDIA driver version 340.108.\n"
            "   /tmp/selfgz1234/kernel/nv-linux.h:2261:23: error: too many arguments to function 'get_user_pages_remote'",
            "DKMS make.log for nvidia-470.239.06\n"
            "make[2]: *** [/usr/src/kernel-headers-6.12.7_1/Makefile:1937: /var/lib/dkms/nvidia/470.239.06/build] Fehler 2",
        ),
    ),
    Rule(
        # NVIDIA/gpu-driver-container's nvidia-driver script (_unload_driver) before it installs its own build
        name="installer.driver_container_driver_in_use",
        category="installer_failure",
        patterns=(r"\bUnloading NVIDIA driver kernel modules\.\.\. Could not unload\b",),
        messages=("gpudriverctr.driver_in_use",),
        demotes=("no_driver_loaded", "driver_lib_mismatch"),
        confidence=0.88,
        root_cause=("NVIDIA's driver container (the GPU Operator's nvidia-driver-daemonset) cannot replace the NVIDIA "
                    "driver already loaded on the node: a driver installed on the host, or processes holding the GPU, "
                    "keep the modules in use."),
        fix=("On nodes with a host-installed driver let the operator use it: install the GPU Operator with "
             "`--set driver.enabled=false`. Otherwise stop what holds the modules (nvidia-persistenced, a display "
             "manager, GPU pods) or remove the host's driver before the driver container runs."),
        examples=("Could not unload NVIDIA driver kernel modules, driver is in use",),
    ),
    Rule(
        # dnf's depsolve failure hints (dnf/cli/main.py; dnf5 main.cpp) in a log about NVIDIA/CUDA packages
        name="installer.dnf_cannot_resolve_nvidia",
        category="installer_failure",
        # libsolv's dependency is a dep string ("kernel-devel-uname-r = 5.14.0-427.el9.x86_64"), spaces and all
        patterns=(r"\bnothing provides [^\n]{1,160}? needed by [^\n]{0,60}?(?:nvidia|cuda)",),
        messages=("dnf.depsolve_failed", "libsolv.requires_uninstallable"),
        context=r"\b(?:nvidia|cuda|kmod-nvidia|akmod-nvidia|dkms)",
        confidence=0.75,
        root_cause=("dnf could not resolve the NVIDIA driver / CUDA packages: a dependency no enabled repository "
                    "provides (dkms from EPEL, kernel-devel or kernel-headers for the running kernel, a newer "
                    "dkms than the repository snapshot has), or NVIDIA packages from two repositories that conflict."),
        fix=("Read the lines under `Problem:`: enable the repository that provides what is missing (EPEL, CRB/"
             "PowerTools), update a pinned repository snapshot, or remove the other repository's NVIDIA packages "
             "(`dnf module reset nvidia-driver` before switching streams); then install again without "
             "--skip-broken."),
        examples=('    openstack.openhpc:         "nvidia-driver"\n    openstack.openhpc: (try to add \'--skip-broken\' to '
                  "skip uninstallable packages or '--nobest' to use not only best candidate packages)",),
    ),
    Rule(
        # rpm's, dpkg's and pacman's refusal of a package whose files another package (or an unpackaged install)
        # owns, on a line naming an NVIDIA/CUDA package: two sources of the driver (NVIDIA's CUDA repository beside
        # the distribution's, negativo17's or RPM Fusion's; a .run install under packages)
        name="installer.package_file_conflict",
        category="installer_failure",
        patterns=(),
        messages=("rpm.file_conflict", "dpkg.trying_to_overwrite", "pacman.exists_in_filesystem"),
        # an NVIDIA/CUDA package where the message names packages, not a path that holds "cuda" (torch/cuda/…): rpm's
        # "from install of P" / "from package P", dpkg's "also in package P" / the archive it was unpacking, pacman's
        # "P: <file> exists in filesystem" / "(owned by P)"
        context=(rf"\bfrom install of {_GPU_PKG}|\bconflicts with file from package {_GPU_PKG}"
                 rf"|\bwhich is also in package {_GPU_PKG}"
                 rf"|\bprocessing archive \S*/{_GPU_PKG}[^\n]*\n[^\n]*trying to overwrite"
                 rf"|(?:^|:\s)\s*{_GPU_PKG}[\w.+-]*\s*:\s*\S+\s+exists in filesystem"
                 rf"|exists in filesystem \(owned by {_GPU_PKG}"),
        confidence=0.8,
        root_cause=("The package manager refuses the NVIDIA packages because another package (or an earlier install "
                    "outside it) already owns their files: two sources of the driver on one host, such as NVIDIA's "
                    "CUDA repository beside the distribution's, negativo17's or RPM Fusion's, or a .run install "
                    "under packages."),
        fix=("Keep one source of the driver: remove the other source's NVIDIA packages (`dnf remove`/`apt purge` them, "
             "`nvidia-uninstall` for a .run install) and disable its repository, then install again; `rpm -qf`/"
             "`dpkg -S`/`pacman -Qo` on the file names its owner. Do not force the overwrite."),
        examples=("  file /usr/lib64/libnvidia-ml.so.1 from install of nvidia-driver-NVML-3:550.90.07-1.el9.x86_64 "
                  "conflicts with file from package nvidia-driver-cuda-libs-3:550.90.07-1.el9.x86_64",),
    ),
    Rule(
        # the driver package installed, DKMS skipped its module for a kernel without headers: the next boot into that
        # kernel has no nvidia module (Debian's nvidia-kernel-dkms: "Module build for kernel 6.1.0-31-amd64 was
        # skipped since the kernel headers for this kernel do not seem to be installed.")
        name="installer.dkms_skipped_no_headers",
        category="installer_failure",
        patterns=(),
        messages=("dkms.headers_missing",),
        # DKMS handling the NVIDIA module in this log ("Loading new nvidia-current-535.216.01 DKMS files..."), and no
        # module install completed (DKMS prints a skip per module and kernel: zfs's or v4l2loopback's skip beside an
        # NVIDIA module that installed says nothing of the GPU)
        requires=(r"\bnvidia[\w.-]*\s[^\n]{0,30}\bDKMS\b|\bDKMS\b[^\n]{0,60}\bnvidia",),
        unless=r"DKMS: install completed|Running module version sanity check",
        # over what follows (the driver that is not loaded), under Secure Boot refusing a module that was built
        confidence=0.92,
        root_cause=("DKMS did not build the NVIDIA kernel module for a kernel whose headers are not installed, so that "
                    "kernel boots without an nvidia module."),
        fix=("Install the headers of that kernel (`linux-headers-$(uname -r)`, Proxmox `proxmox-headers-$(uname -r)`, "
             "`kernel-devel-$(uname -r)`), then `dkms autoinstall` (or reinstall the driver package) and reboot."),
        examples=("Setting up nvidia-kernel-dkms (535.216.01-1~deb12u1) ...\nLoading new nvidia-current-535.216.01 DKMS "
                  "files...\nBuilding for 6.1.0-31-amd64\nModule build for kernel 6.1.0-31-amd64 was skipped since the"
                  "\nkernel headers for this kernel do not seem to be installed.",),
    ),
    Rule(
        # NixOS builds the NVIDIA driver (nvidia-x11, its kernel module) as a derivation: its builder failing is the
        # driver's build failing (a kernel newer than the driver, a patch that does not apply)
        name="installer.nix_driver_build_failed",
        category="installer_failure",
        patterns=(),
        messages=("nix.nvidia_driver_build_failed",),
        # its own builder, not a dependency's (nix 2.24+: "Reason: 1 dependency failed.", the kernel's build above it)
        unless=r"nvidia-(?:x11|open)-[^\n]*\.drv'?\.?\s*\n\s*Reason:\s+\d+\s+dependenc",
        confidence=0.8,
        root_cause=("Nix could not build the NVIDIA driver's derivation (nvidia-x11 and its kernel module) for this "
                    "kernel."),
        fix=("Read the derivation's log (`nix log <drv>`): a kernel newer than the driver release needs a newer "
             "`hardware.nvidia.package` (or an older `boot.kernelPackages`); a legacy branch (470, 390) needs a kernel "
             "it still builds against."),
        examples=("error: builder for '/nix/store/0x4x2hv6xpvq0q2mvgz7fxwq3b1b0zy1-nvidia-x11-550.78-6.9.1.drv' failed "
                  "with exit code 2",),
    ),
    Rule(
        # torch.utils.cpp_extension refuses to build an extension with an nvcc of another CUDA major than torch's
        name="installer.extension_cuda_mismatch",
        category="installer_failure",
        patterns=(),  # the catalogue's wordings (rules/citations.py)
        confidence=0.85,
        root_cause=("Building a CUDA extension failed: the CUDA toolkit found (nvcc under CUDA_HOME) is another "
                    "version than the CUDA the installed torch was built with (another major, on current torch)."),
        fix=("Point CUDA_HOME (and PATH) at a toolkit of torch's CUDA version (`python -c 'import torch; "
             "print(torch.version.cuda)'`), or install the torch build for the toolkit you have, or a prebuilt wheel of "
             "the extension for this torch and CUDA; then build again."),
        examples=("RuntimeError: \nThe detected CUDA version (11.8) mismatches the version that was used to compile\n"
                  "PyTorch (12.1). Please make sure to use the same CUDA versions.",),
    ),
    Rule(
        # apt's and dnf's own errors for a package they cannot find or install (the catalogue: apt.*, dnf.*,
        # libsolv.requires_uninstallable), where the package is the driver's, CUDA's or a CUDA library's
        name="installer.gpu_package_not_installable",
        category="installer_failure",
        patterns=(),  # the catalogue's wordings (rules/citations.py), read where they name a GPU package:
        context=(rf"(?:locate package|package by glob|match for argument\s*:|find a match\.?\s*:)\s*'?[^\n]{{0,200}}?\b{_GPU_PKG}"
                 rf"|\b{_GPU_PKG}[\w.:+~-]*'? has no installation candidate"
                 rf"|\b{_GPU_PKG}[^\n]{{0,200}} requires [^\n]{{0,200}}none of the providers can be installed"
                 rf"|\brequires [^\n]{{0,100}}\b{_GPU_PKG}[^\n]{{0,200}}none of the providers can be installed"),
        confidence=0.78,
        root_cause=("The package manager cannot install an NVIDIA driver or CUDA package: no configured repository "
                    "offers it for this distribution release and architecture (NVIDIA's repository not added, not "
                    "refreshed since it was added, or without that package or version for this release)."),
        fix=("Add NVIDIA's repository for this exact distribution release and architecture (CUDA: the cuda-keyring "
             "package from https://developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>/), refresh it "
             "(`apt-get update` / `dnf makecache`), then install a name and version it offers (`apt-cache policy "
             "<package>`, `dnf list --showduplicates <package>`)."),
        examples=("E: Unable to locate package libcudnn8",
                  "E: Package 'cuda-toolkit-12-4' has no installation candidate",
                  "Error: Unable to find a match: cuda-toolkit-12-4"),
    ),
    Rule(
        # apt's verification of a repository's Release file (methods/gpgv.cc, apt-pkg/acquire-item.cc). NVIDIA
        # rotated the CUDA repositories' signing key on 2022-04-27 (7fa2af80 -> 3bf863cc, "Updating the CUDA Linux
        # GPG Repository Key", developer.nvidia.com/blog): images and hosts with the old key stopped updating
        name="installer.package_repository_refused",
        category="installer_failure",
        patterns=(r"\bNO_PUBKEY (?:A4B469963BF863CC|F60F4B3D7FA2AF80)\b",),
        # apt names the repository on the line of its refusal ("GPG error: <uri> <suite>: …", "The repository '<uri>
        # <suite>' is not signed."): NVIDIA's CUDA or container-toolkit repository, not another one in a GPU log
        # (NVIDIA's mirror for China, developer.download.nvidia.cn, serves the same repositories)
        # (an expired key too: "The following signatures were invalid: KEYEXPIRED …", EXPKEYSIG — Azure/acs-engine#3933)
        context=(rf"{_NVIDIA_REPO}[^\n]{{0,300}}(?:is (?:no longer |not )signed|does not have a Release file|be verified "
                 r"because|public key is not available|NO_PUBKEY|signatures were invalid|EXPKEYSIG|KEYEXPIRED)"),
        confidence=0.75,
        root_cause=("apt refuses a package repository the install needs: its Release file cannot be verified (the "
                    "key that signs it is not installed or has expired; NVIDIA rotated the CUDA repositories' key in "
                    "April 2022), "
                    "or there is no Release file at that URL (no repository for this distribution release)."),
        fix=("For NVIDIA's CUDA repository install its current key with the cuda-keyring package (`dpkg -i "
             "cuda-keyring_1.1-1_all.deb` from https://developer.download.nvidia.com/compute/cuda/repos/<distro>/"
             "<arch>/) and remove the old key (`apt-key del 7fa2af80`) and stale .list entries; for the container "
             "toolkit's repository (nvidia.github.io) fetch its key again from https://nvidia.github.io/"
             "libnvidia-container/gpgkey into the keyring its .list names; for a missing Release file use the path of a "
             "distribution release NVIDIA publishes; then `apt-get update`."),
        examples=("W: GPG error: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu1804/x86_64  InRelease: "
                  "The following signatures couldn't be verified because the public key is not available: NO_PUBKEY "
                  "A4B469963BF863CC",),
    ),
    Rule(
        # pacman's refusal of a transaction that breaks a versioned dependency (src/pacman/sync.c print_broken_dep),
        # on a line naming an NVIDIA/CUDA package: a prebuilt kernel-module package pins the nvidia-utils it was built
        # with, and the repository has moved one of them (CachyOS/linux-cachyos#1034: nvidia-utils 615 against a module
        # package built for 610)
        name="installer.pacman_nvidia_dependency",
        category="installer_failure",
        patterns=(),
        messages=("pacman.broken_dependency",),
        # a package of the GPU stack named on the refusal's own line (a module package such as linux-cachyos-nvidia-open
        # or linux61-nvidia holds "nvidia" inside its name), not anywhere in the log
        requires=(rf"(?:(?:installing|removing) {_STACK_NAME}[\w.+-]*[^\n]*breaks dependency"
                  rf"|(?:breaks|unable to satisfy) dependency '{_STACK_NAME}"
                  rf"|(?:breaks|unable to satisfy) dependency '[^'\n]*' required by {_STACK_NAME}"
                  rf"|cannot resolve \"[^\"\n]*\", a dependency of \"{_STACK_NAME}"
                  rf"|cannot resolve \"{_STACK_NAME}[^\"\n]*\", a dependency of)",),
        confidence=0.8,
        root_cause=("pacman refuses the transaction: a package of the NVIDIA stack and one that depends on it are out of "
                    "step — a package pinned to an exact version (a prebuilt kernel-module package pins nvidia-utils, "
                    "a DKMS package its own nvidia-utils release, a module package its kernel) whose partner the "
                    "repositories already moved, a replacement package that does not `provides` what others need, or "
                    "a dependency in a repository that is not enabled (lib32-* needs [multilib])."),
        fix=("Read the package each line names: wait until the repositories carry matching versions of both (hold the "
             "moved one with `IgnorePkg` meanwhile) or update both together; a replacement package from the AUR needs "
             "`provides=(nvidia-utils=<version>)`; enable [multilib] for lib32-* packages. Do not force it with -dd: a "
             "kernel module and userspace of different versions do not load together."),
        examples=("error: failed to prepare transaction (could not satisfy dependencies)\n:: installing nvidia-utils "
                  "(615.71.09-1) breaks dependency 'nvidia-utils=610.57.04' required by linux-cachyos-bore-nvidia-open",),
    ),
    Rule(
        # CMake's Visual Studio generators with the CUDA language (Modules/CMakeDetermineCompilerId.cmake): VS has no
        # CUDA build customization — the toolkit was installed before VS (or VS repaired/updated since), or the VS
        # release is newer than the CUDA release supports (wang-xinyu/tensorrtx#472: CUDA 11.2 found, VS 2019 without it)
        name="installer.cuda_vs_integration_missing",
        category="installer_failure",
        patterns=(),
        messages=("cmake.no_cuda_toolset",),
        confidence=0.85,
        root_cause=("Visual Studio has no CUDA toolset: the CUDA toolkit's Visual Studio integration is not installed in "
                    "this Visual Studio (the toolkit was installed before it, or this Visual Studio is newer than the "
                    "CUDA release supports), so CMake's Visual Studio generator cannot compile CUDA."),
        fix=("Run the CUDA installer again with \"Visual Studio Integration\" selected (after Visual Studio is "
             "installed), or copy the files of `<CUDA>\\extras\\visual_studio_integration\\MSBuildExtensions` into "
             "`<VS>\\MSBuild\\Microsoft\\VC\\<v160|v170>\\BuildCustomizations`; or configure with the Ninja "
             "generator from a x64 Native Tools prompt (`cmake -G Ninja`), which uses nvcc directly."),
        examples=("CMake Error at C:/Program Files/CMake/share/cmake-3.20/Modules/CMakeDetermineCompilerId.cmake:441 "
                  "(message):\n  No CUDA toolset found.",),
    ),
    Rule(
        # apt's download error (acquire-item.cc) for NVIDIA's CUDA or container-toolkit repository: an index or a
        # package that cannot be fetched (NVIDIA/ansible-role-nvidia-driver#42: the role's http:// base URL, a 404 on
        # a by-hash index; a mirror caught mid-sync, a proxy)
        name="installer.nvidia_repository_fetch_failed",
        category="installer_failure",
        patterns=(),
        messages=("apt.failed_to_fetch",),
        # NVIDIA's own repositories on the line of the error (not an Ubuntu archive's nvidia-* package, a PPA, a mirror,
        # Helm's or a model hub's "failed to fetch"): the CUDA and container-toolkit repositories and their mirror for China
        requires=(rf"Failed to fetch [^\n]*{_NVIDIA_REPO}|{_NVIDIA_REPO}[^\n]*Failed to fetch",),
        # a key problem on the same repository is the refusal's finding (installer.package_repository_refused)
        unless=r"signatures were invalid|EXPKEYSIG|KEYEXPIRED|NO_PUBKEY|is (?:no longer |not )signed",
        # a warning apt went on past ("ignored, or old ones used instead") beside another failure: that failure leads
        generic=True,
        confidence=0.7,
        root_cause=("apt could not download from NVIDIA's package repository (an index or a package: a 404, a hash sum "
                    "mismatch, no answer), so the install could not read or fetch the NVIDIA packages."),
        fix=("Check the repository URL apt uses (`grep -r nvidia /etc/apt/sources.list.d`): https://developer."
             "download.nvidia.com/compute/cuda/repos/<distro>/<arch>/ (https, a distribution release NVIDIA publishes) "
             "or https://nvidia.github.io/libnvidia-container/stable/deb/; `curl -I` it from the host (a proxy, a "
             "firewall); then `apt-get clean && rm -rf /var/lib/apt/lists/* && apt-get update` (a mirror mid-sync "
             "serves stale by-hash indexes for a while: retry)."),
        examples=("E:Failed to fetch https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2004/x86_64/by-hash/"
                  "SHA256/751939d95516afc289908a19e447f0acc1506367f72ed356431a2b1a469cc8ca  404  Not Found",),
    ),
    Rule(
        # apt reading its sources (debmetaindex.cc): NVIDIA's repository listed twice with different options — the
        # container toolkit's old instructions (no signed-by) beside the new (signed-by its keyring), or CUDA's
        # network repository added by hand and by cuda-keyring (NVIDIA/libnvidia-container#194)
        name="installer.apt_duplicate_nvidia_source",
        category="installer_failure",
        patterns=(),
        messages=("apt.conflicting_option",),
        requires=(r"Conflicting values set for option [^\n]*(?:nvidia|cuda)",),
        confidence=0.85,
        root_cause=("apt reads no package list: NVIDIA's repository is listed twice with different options (one entry "
                    "with `signed-by` its keyring, one without or with another key), typically from following the old "
                    "and the new install instructions."),
        fix=("Keep one entry: `grep -rn nvidia /etc/apt/sources.list /etc/apt/sources.list.d/`, remove the duplicate "
             "(the one without `signed-by=/usr/share/keyrings/…`, e.g. an old nvidia-docker.list or cuda.list), then "
             "`apt-get update`."),
        examples=("E: Conflicting values set for option Signed-By regarding source https://nvidia.github.io/"
                  "libnvidia-container/stable/ubuntu18.04/amd64/ /: /usr/share/keyrings/nvidia-container-toolkit-"
                  "keyring.gpg !=",),
    ),
    Rule(
        # MSBuild's MSB4019 for a CUDA build customization a Visual Studio project imports (BuildCustomizations\CUDA
        # x.y.props/.targets): that CUDA release is not installed, or was installed before this Visual Studio (its
        # integration never copied in) (brichard19/BitCrack#234, NVIDIA/cuda-samples#119)
        name="installer.cuda_vs_props_missing",
        category="installer_failure",
        # MSBuild prints the code untranslated in every language ("error MSB4019:", a Visual Studio error list's column)
        patterns=(r"\bMSB4019\b",),
        messages=("msbuild.imported_project_not_found",),
        # the project imports CUDA's .props (imported first); a CUDA .targets that runs (MSBuild's "…\CUDA 12.1.targets
        # (799,9): error MSB3721") shows the integration is there, and another import is the one missing
        requires=(r"\bCUDA \d+(?:\.\d+)?\.props\b",),
        unless=r"\bCUDA \d+(?:\.\d+)?\.targets\(\d+,\d+\)",
        confidence=0.85,
        root_cause=("The Visual Studio project imports a CUDA build customization (CUDA x.y.props) that this "
                    "Visual Studio does not have: that CUDA release is not installed, or its Visual Studio "
                    "integration is not (the toolkit was installed before Visual Studio, or for another Visual Studio)."),
        fix=("Install the CUDA release the project names with \"Visual Studio Integration\" selected (after Visual "
             "Studio), or copy `<CUDA>\\extras\\visual_studio_integration\\MSBuildExtensions\\*` into "
             "`<VS>\\MSBuild\\Microsoft\\VC\\<v160|v170>\\BuildCustomizations`; or retarget the project to the "
             "installed CUDA (Project → Build Dependencies → Build Customizations, or edit the .vcxproj's "
             "`CUDA x.y.props`/`.targets` imports)."),
        examples=('error MSB4019: The imported project "C:\\Program Files (x86)\\Microsoft Visual Studio\\2019\\'
                  'Community\\MSBuild\\Microsoft\\VC\\v160\\BuildCustomizations\\CUDA 10.1.props" was not found.',),
    ),
    Rule(
        # dnf's/yum's metadata download failure for NVIDIA's (or a third party's NVIDIA) RPM repository: a 404 for a
        # release the repository does not publish, a typo in the .repo file, a mirror mid-sync (negativo17/cuda#27,
        # NVIDIA/libnvidia-container#203)
        name="installer.nvidia_rpm_repository_metadata_failed",
        category="installer_failure",
        patterns=(),
        messages=("dnf.metadata_download_failed", "dnf.config_manager_add_repo_failed"),
        # the repository the failure names is NVIDIA's or CUDA's (its id, or NVIDIA's hosts beside repodata), or the
        # .repo file config-manager was adding is NVIDIA's (librepo's "Status code: 404 for URL", "Curl error (22): …")
        requires=(rf"(?:metadata for repo(?:sitory)?|for repository|repomd\.xml from|repositories failed)\s*:?\s*"
                  rf"['\"(]?[^'\"\s)]*(?:nvidia|cuda)"
                  rf"|{_NVIDIA_REPO}[^\n]*repodata|repodata[^\n]*{_NVIDIA_REPO}"
                  rf"|Adding repo from:\s*\S*{_NVIDIA_REPO}|(?:Status code: \d+|Curl error \(\d+\)[^\n]*) for "
                  rf"\S*{_NVIDIA_REPO}",),
        # dnf goes on past a repository it skips ("Ignoring repositories: …"): another failure beside it leads
        generic=True,
        confidence=0.7,
        root_cause=("dnf could not download or verify the metadata (or, adding it, the .repo file) of the NVIDIA/CUDA "
                    "package repository (a 404 for a "
                    "distribution release it does not publish, a wrong URL in the .repo file, no route, a mirror "
                    "mid-sync; or repomd.xml's signature does not verify with the key dnf holds), so the NVIDIA "
                    "packages cannot be read or installed from it."),
        fix=("Check the repository's baseurl (`dnf repolist -v`, `/etc/yum.repos.d/*.repo`) against NVIDIA's: "
             "https://developer.download.nvidia.com/compute/cuda/repos/<rhel9|fedora41|…>/<arch>/ (a release NVIDIA "
             "publishes) or https://nvidia.github.io/libnvidia-container/stable/rpm/; `curl -I` its repodata/"
             "repomd.xml from the host; for a GPG/signature error remove the repository's old key (`rpm -q gpg-pubkey "
             "--qf '%{NAME}-%{VERSION} %{SUMMARY}\\n'`, `rpm -e gpg-pubkey-<id>`) and import its current gpgkey; then "
             "`dnf clean all && dnf makecache`."),
        examples=("Error: Failed to download metadata for repo 'libnvidia-container': Cannot download repomd.xml: "
                  "Cannot download repodata/repomd.xml: All mirrors were tried",),
    ),
    Rule(
        # apt's parse error for NVIDIA's one-line source (apt-pkg/sourcelist.cc): the .list fetched for a distribution
        # the repository does not publish holds an HTML 404 page, or an edit broke `$(ARCH)` (NVIDIA/nvidia-docker#800)
        name="installer.apt_malformed_nvidia_source",
        category="installer_failure",
        patterns=(),
        messages=("apt.malformed_list_entry", "apt.unknown_source_type"),
        requires=(r"(?:Malformed (?:entry|line|stanza) \d+ in (?:list file|source list)|is not known on line \d+ in "
                  r"source list) [^\n]*(?:nvidia|cuda)"
                  # apt's Simplified Chinese messages name the file first (po/zh_CN.po)
                  r"|(?:nvidia|cuda)[^\n]*(?:\x{884c}\x{4e2d}\x{7684}\x{7c7b}\x{522b}|\x{884c}\x{7684}\x{5c0f}\x{8282}"
                  r"\x{683c}\x{5f0f}\x{6709}\x{8bef})",),
        confidence=0.85,
        root_cause=("apt reads no package list: NVIDIA's repository file in /etc/apt/sources.list.d cannot be parsed "
                    "(it holds an HTML error page fetched for a distribution the repository does not publish, or an "
                    "edited entry)."),
        fix=("Look at the file apt names (`cat /etc/apt/sources.list.d/<file>.list`); remove it and write it again from "
             "NVIDIA's current instructions (the container toolkit's generic `stable/deb/$(ARCH)` list, or the "
             "cuda-keyring package for CUDA), then `apt-get update`."),
        examples=("E: Malformed entry 2 in list file /etc/apt/sources.list.d/nvidia-docker.list (Suite)\n"
                  "E: The list of sources could not be read.",),
    ),
    Rule(
        # NVIDIA's Windows driver installer stops at its system check (setup.exe): the package does not list the
        # machine's GPU (its INF's hardware IDs) or this Windows release, or Windows shows it no NVIDIA GPU at all
        name="installer.windows_driver_refused",
        category="installer_failure",
        patterns=(),
        messages=("nvwin.installer_cannot_continue",),
        confidence=0.8,
        root_cause=("NVIDIA's Windows driver installer refused this machine at its system check: the package lists no "
                    "GPU that is in it (a driver for another product line — GeForce, RTX/Quadro, data-center — or form "
                    "factor, or a branch that no longer or not yet supports the GPU), not this Windows release, or "
                    "Windows shows it no NVIDIA GPU at all."),
        fix=("Look the GPU up in Device Manager (Display adapters → Properties → Details → Hardware Ids: "
             "PCI\\VEN_10DE&DEV_xxxx; a GPU missing there is a hardware/BIOS matter: seat it, enable it, Above 4G "
             "decoding for large BARs) and download the driver for exactly that GPU and Windows release from "
             "https://www.nvidia.com/drivers (a notebook's from its maker); remove the old driver (DDU in safe mode) "
             "before installing again."),
        examples=("NVIDIA Installer cannot continue\nThis graphics driver could not find compatible graphics hardware.",),
    ),    Rule(
        # makepkg's error_function: a PKGBUILD function of an NVIDIA driver package failed (the AUR's legacy branches,
        # nvidia-all's nvidia-utils-tkg/nvidia-dkms-tkg)
        name="installer.makepkg_nvidia_package_failed",
        category="installer_failure",
        patterns=(),
        messages=("makepkg.function_failed",),
        # the driver's own packages (nvidia, nvidia-dkms, nvidia-utils, nvidia-470xx-*, nvidia-open, nvidia-all's
        # *-tkg), not nvidia-container-toolkit, nvidia-settings or libva-nvidia-driver; and not where the NVIDIA
        # package finished and another package of the same run failed
        requires=(rf"A failure occurred in (?:package_)?(?:lib32-)?nvidia(?:\d+|{_DRIVER_PKG_SUFFIX})?\(\)"
                  rf"|Making package: (?:lib32-)?nvidia(?:{_DRIVER_PKG_SUFFIX})?\s",),
        unless=rf"Finished making: (?:lib32-)?nvidia(?:{_DRIVER_PKG_SUFFIX})?\s",
        confidence=0.82,
        root_cause=("Building an NVIDIA driver package with makepkg failed in one of its PKGBUILD functions (the "
                    "lines just above name the command that failed), so the driver was not installed."),
        fix=("Read the first error above makepkg's \"A failure occurred\": build from a plain directory (no spaces or "
             "parentheses in its path), with the headers of every installed kernel (`linux-headers`) and an up-to-date "
             "system; for a legacy branch use the PKGBUILD's current version or the distribution's packaged driver."),
        examples=("==> ERROR: A failure occurred in package_nvidia-utils-tkg().\n    Aborting...",),
        # Frogging-Family/nvidia-all#71
    ),
)
