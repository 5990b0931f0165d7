"""Issue #35, diagnosis from the emitters' own words (session 24): set q's read half.

pacman's refusal of a transaction that breaks a versioned dependency between NVIDIA packages, the GPU check of NVIDIA's
NGC images, pip's and uv's warning about a GPU extra the version does not define, conda 4.8's UnsatisfiableError
section that lists only the __cuda virtual package, a CUDA driver API or NVML entry point missing from the driver's
library, NixOS's driver path, Anaconda's `_pytorch_select` CPU variant, PyTorch Lightning's "only has: []", and a short
message no longer read across two lines. Each case is a real report's paste; the URL is beside it."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from tests.support.diagnosis import all_rules, top_and_rules

# --- pacman ------------------------------------------------------------------------------------------------------------

# CachyOS/linux-cachyos#1034: the repository's nvidia-utils moved to 615 before the prebuilt module package was rebuilt
PACMAN_PIN = ("error: failed to prepare transaction (could not satisfy dependencies)\n"
              ":: installing nvidia-utils (615.71.09-1) breaks dependency 'nvidia-utils=610.57.04' required by "
              "linux-cachyos-bore-nvidia-open\n"
              " -> error installing repo packages")


def test_pacman_breaking_a_pinned_nvidia_dependency_is_the_install() -> None:
    category, rules = top_and_rules(PACMAN_PIN)
    assert category == "installer_failure" and "installer.pacman_nvidia_dependency" in rules, rules
    removing = ":: removing nvidia-utils breaks dependency 'nvidia-utils=610.57.04' required by nvidia-open-dkms"
    assert "installer.pacman_nvidia_dependency" in all_rules("error: failed to prepare transaction\n" + removing)
    # (the review's cases) a kernel pinned by its module package; libalpm leaving a package out of an upgrade
    # (CachyOS/distribution#301)
    kernel = ":: installing linux-cachyos (6.12.2-1) breaks dependency 'linux-cachyos=6.12.1-2' required by " \
             "linux-cachyos-nvidia-open"
    assert top_and_rules(kernel)[0] == "installer_failure"
    unresolved = 'warning: cannot resolve "nvidia-utils=580.105.08", a dependency of "linux-cachyos-hardened-nvidia-open"'
    assert "installer.pacman_nvidia_dependency" in all_rules(unresolved)
    # the same refusal between packages that are not the GPU stack's, even where an NVIDIA package was installed
    # earlier in the same log
    python = ("(1/1) installing nvidia-utils\n"
              "error: failed to prepare transaction (could not satisfy dependencies)\n"
              ":: installing python (3.13.1-1) breaks dependency 'python<3.13' required by python-pyqt5")
    assert "installer.pacman_nvidia_dependency" not in all_rules(python)
    # the fix never claims a DKMS package takes any nvidia-utils (Arch's pins its own release)
    assert "any nvidia-utils" not in diagnose(PACMAN_PIN)[0].fix


# --- NGC images' GPU check ---------------------------------------------------------------------------------------------

# NVIDIA-NeMo/Speech#346: a Tesla K80 (sm_37) in a NeMo image
NGC_K80 = ("RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
           "ERROR: Detected NVIDIA Tesla K80 GPU, which is not supported by this container\n"
           "ERROR: No supported GPU(s) detected to run this container")


def test_the_ngc_entrypoint_refusing_the_gpu_is_its_architecture() -> None:
    found = diagnose(NGC_K80)
    assert found[0].category == "arch_unsupported" and found[0].rule == "arch.ngc_image_gpu_unsupported"
    # a Triton 24.05 image on a Quadro M1200 (Maxwell), as a write-up quotes it
    triton = ("ERROR: Detected Quadro M1200 GPU, which is not supported by this container\n"
              "ERROR: No supported GPU(s) detected to run this container")
    assert top_and_rules(triton)[0] == "arch_unsupported"
    # a GPU newer than the image (ChenRocks/UNITER#90) or the summary alone (fauxpilot/fauxpilot#104, fixed by a
    # system upgrade): the image did not count the GPU, a weak signal, not "no kernels"
    for weak in ("WARNING: Detected NVIDIA NVIDIA A100-PCIE-40GB GPU, which is not yet supported in this version of the "
                 "container", "ERROR: No supported GPU(s) detected to run this container",
                 "ERROR: No NVIDIA supported GPU(s) detected to run this container"):
        found = diagnose(weak)
        assert found[0].rule == "arch.ngc_image_gpu_not_counted" and found[0].confidence < 0.6, weak
    newer = "WARNING: Detected NVIDIA H200 GPU, which may not yet be supported in this version of the container"
    assert not {"arch.ngc_image_gpu_unsupported", "arch.ngc_image_gpu_not_counted"} & all_rules(newer)


def test_a_short_message_is_not_read_across_two_lines() -> None:
    """"device error: %s" (nvidia-container-cli's) is not "…on the device" ending a line and "ERROR: …" the next."""
    two_lines = ("RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
                 "ERROR: something else entirely went wrong")
    assert "container.nvidia_container_cli_cgroup" not in all_rules(two_lines)
    assert top_and_rules(two_lines)[0] == "arch_unsupported"
    # nvidia-container-cli's own line still reads, prefix or none
    real = ("docker: Error response from daemon: failed to create shim task: OCI runtime create failed: "
            "nvidia-container-cli: device error: GPU-5e5e3a6b: unknown device: unknown.")
    assert "container.nvidia_container_cli_cgroup" in all_rules(real)


# --- a GPU extra the version does not define ---------------------------------------------------------------------------

# cloudhan/jax-windows-builder#5: jax 0.3.4 had dropped the cuda111 extra; pip installed jax alone
JAX_EXTRA = ("Looking in links: https://whls.blob.core.windows.net/unstable/index.html\n"
             "Processing c:\\users\\myname\\appdata\\local\\pip\\cache\\wheels\\09\\88\\75\\b38c1c9382c2a6e9d3ab993f7b\\"
             "jax-0.3.4-py3-none-any.whl\n"
             "  WARNING: jax 0.3.4 does not provide the extra 'cuda111'\n"
             "Requirement already satisfied: absl-py in ... (from jax[cuda111]) (1.0.0)\n"
             "Installing collected packages: jax\n"
             "Successfully installed jax-0.3.4")


def test_a_gpu_extra_the_version_lacks_is_the_cuda_part_not_installed() -> None:
    found = diagnose(JAX_EXTRA)
    assert found[0].category == "resolver_failure" and found[0].rule == "resolver.gpu_extra_not_provided"
    assert "cuda111" in found[0].root_cause
    uv = "warning: The package `jax==0.4.1` does not have an extra named `cuda12`"
    assert top_and_rules(uv) == ("resolver_failure", {"resolver.gpu_extra_not_provided"})
    # TensorFlow's own GPU extra
    assert top_and_rules("WARNING: tensorflow 2.13.1 does not provide the extra 'and-cuda'")[0] == "resolver_failure"
    # an extra that is not the GPU stack's (a published package without its `pdf` extra) is no GPU finding
    pdf = "WARNING: bbook-maker 1.2.1 does not provide the extra 'pdf'\nSuccessfully installed bbook-maker-1.2.1"
    assert "resolver.gpu_extra_not_provided" not in all_rules(pdf)
    # (the review's cases) the CUDA part installed anyway: pip backtracked to a version with it, or the package is
    # itself the CUDA build
    backtracked = ("WARNING: jax 0.4.31 does not provide the extra 'cuda12-pip'\n"
                   "Successfully installed jax-0.4.30 jaxlib-0.4.30+cuda12.cudnn89 nvidia-cublas-cu12-12.6.4.1")
    itself = "warning: The package `torch==2.3.1+cu121` does not have an extra named `cuda`"
    for log in (backtracked, itself):
        assert "resolver.gpu_extra_not_provided" not in all_rules(log), log


# --- conda 4.8's __cuda section ----------------------------------------------------------------------------------------

# KevinMusgrave/pytorch-metric-learning#97: the recipe was wrong; the CUDA section names only the virtual package
CONDA_ONLY_VIRTUAL = ("Output in format: Requested package -> Available versionsThe following specifications were found "
                      "to be incompatible with your CUDA driver:\n\n"
                      "  - feature:/win-64::__cuda==8.0=0\n\n"
                      "Your installed CUDA driver is: 8.0")


def test_conda_listing_only_the_virtual_package_is_the_solve_not_the_driver() -> None:
    found = diagnose(CONDA_ONLY_VIRTUAL)
    assert found[0].category == "resolver_failure"
    assert found[0].rule == "resolver.conda_cuda_section_without_constraint"
    # conda's duplicate `feature:|@/…` line and the later wording ("incompatible with your system")
    later = ("UnsatisfiableError: The following specifications were found to be incompatible with your system:\n\n"
             "  - feature:/linux-64::__cuda==11.4=0\n  - feature:|@/linux-64::__cuda==11.4=0\n\n"
             "Your installed version is: 11.4")
    assert top_and_rules(later)[0] == "resolver_failure"
    # a package that constrains __cuda is the driver's finding (conda 4.8's wording of it too)
    constrained = ("The following specifications were found to be incompatible with your CUDA driver:\n\n"
                   "  - pytorch=2.0 -> pytorch-cuda=11.8 -> __cuda[version='>=11.8']\n\n"
                   "Your installed CUDA driver is: 11.4")
    found = diagnose(constrained)
    assert found[0].category == "driver_too_old" and found[0].rule == "driver.conda_cuda_virtual_package"
    assert "resolver.conda_cuda_section_without_constraint" not in all_rules(constrained)
    # (the review's case) a driver error elsewhere in the log still leads
    torch_old = CONDA_ONLY_VIRTUAL + ("\nRuntimeError: The NVIDIA driver on your system is too old (found version "
                                      "10010). Please update your GPU driver")
    assert diagnose(torch_old)[0].category == "driver_too_old"
    # NVIDIA/cudf#5830: a paste cut at the section's head
    cut = ("cations were found to be incompatible with your CUDA driver:\n\n  - feature:/linux-64::__cuda==11.0=0\n\n"
           "Your installed CUDA driver is: 11.0")
    assert top_and_rules(cut)[0] == "resolver_failure"


# --- the driver's library without the entry point a program needs -------------------------------------------------------

# trexminer/T-Rex#95: a CUDA 11.1 build of the miner on driver 440.100
TREX = ("T-Rex NVIDIA GPU miner v0.18.9  -  [CUDA v11.10]\n"
        " NVIDIA Driver v440.100\n"
        " CUDA devices available: 1\n"
        "/home/rik/Downloads/trex/t-rex: symbol lookup error: /home/rik/Downloads/trex/t-rex: undefined symbol: "
        "cuDevicePrimaryCtxSetFlags_v2\n"
        " WARN: WATCHDOG: T-Rex does not exist anymore, restarting...")


def test_a_driver_api_entry_point_missing_is_a_driver_older_than_the_build() -> None:
    found = diagnose(TREX)
    assert found[0].category == "driver_too_old" and found[0].rule == "driver.cuda_driver_symbol_missing"
    assert "cuDevicePrimaryCtxSetFlags_v2" in found[0].root_cause
    nvml = "nvidia-smi-exporter: symbol lookup error: nvidia-smi-exporter: undefined symbol: nvmlDeviceGetPciInfo_v3"
    assert top_and_rules(nvml)[0] == "driver_too_old"
    # Windows names the driver's DLL itself (trexminer/T-Rex#118; NVlabs/instant-ngp#1132)
    for line in ("The procedure entry point cuDevicePrimaryCtxReset_v2 could not be located in the dynamic link "
                 "library nvcuda.dll.",
                 "The procedure entry point cuMemSetAccess could not be located in the dynamic link library "
                 "C:\\WINDOWS\\SYSTEM32\\nvcuda.dll."):
        assert top_and_rules(line)[0] == "driver_too_old", line
    # not the runtime's, cuBLAS's, cuFile's, cuOpt's or a C++ extension's symbols (a mixed build); not an entry point
    # every driver has (owl-project/NVISII#104: cuLaunchKernel, a wheel that no longer linked libcuda; CUDA 3.2's
    # cuMemcpyHtoD_v2); not ZLUDA's libcuda
    for symbol in ("cudaGetDeviceCount", "cublasLtMatmul", "cuFileDriverOpen", "_ZN3c104cuda9SetDeviceEi",
                   "CUDNN_STATUS_x", "cuOptCreateProblem", "cuLaunchKernel", "cuDriverGetVersion", "cuMemcpyHtoD_v2"):
        line = f"ImportError: /usr/lib/x.so: undefined symbol: {symbol}"
        assert "driver.cuda_driver_symbol_missing" not in all_rules(line), symbol
        assert top_and_rules(line)[0] == "missing_shared_lib", symbol
    zluda = "/opt/zluda/libcuda.so.1: undefined symbol: cuGraphInstantiateWithParams"
    assert "driver.cuda_driver_symbol_missing" not in all_rules(zluda)


# --- NixOS's driver path -----------------------------------------------------------------------------------------------

# NixOS/nixpkgs#209416: atop's GPU daemon (through nixpkgs' pynvml) could not load libnvidia-ml
ATOP_NIXOS = (
    "$ systemctl status atopgpu.service\n"
    "     Process: 771782 ExecStart=/nix/store/arn1wq05k8is8j99kfflp20vvhwbvb2b-atop-2.7.1/bin/atopgpud "
    "(code=exited, status=0/SUCCESS)\n"
    "Jan 06 21:52:42 faolin systemd[1]: Starting Atop GPU stats daemon...\n"
    "Jan 06 21:52:42 faolin .atopgpud-wrapp[771782]: atopgpud ERROR: Shared lib 'libnvidia-ml' probably not installed!\n"
    "Jan 06 21:52:42 faolin systemd[1]: Finished Atop GPU stats daemon.")


def test_nixos_driver_libraries_outside_the_loader_path() -> None:
    found = diagnose(ATOP_NIXOS)
    assert found[0].category == "missing_shared_lib" and found[0].rule == "lib.nixos_driver_runpath"
    assert "/run/opengl-driver/lib" in found[0].fix
    nix_shell = ("[nix-shell:~/nvtop/build]$ ./src/nvtop\n"
                 "libnvidia-ml.so.1: cannot open shared object file: No such file or directory")
    assert top_and_rules(nix_shell)[0] == "missing_shared_lib"
    # NixOS/nixpkgs#77834: ffmpeg from nix on another distribution; the fix names the host's libraries, not only NixOS's
    ffmpeg = ("$ nix-shell -p ffmpeg-full\n[AVHWDeviceContext @ 0x1c4e5c0] Cannot load libcuda.so.1\n"
              "Device creation failed: -1.")
    found = diagnose(ffmpeg)
    assert found[0].rule == "lib.nixos_driver_runpath" and "nixGL" in found[0].fix
    # (the review's cases) no driver on the machine is that finding, NixOS or not
    for no_driver in ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                      "latest NVIDIA driver is installed and running.",
                      "modprobe: FATAL: Module nvidia not found in directory /run/booted-system/kernel-modules/lib/"
                      "modules/6.6.30"):
        log = ATOP_NIXOS + "\n" + no_driver
        assert top_and_rules(log)[0] == "no_driver_loaded" and "lib.nixos_driver_runpath" not in all_rules(log)
    # the same daemon's line on another distribution: NVML could not start (atopgpud says so for any nvmlInit failure)
    plain = ATOP_NIXOS.replace("/nix/store/arn1wq05k8is8j99kfflp20vvhwbvb2b-atop-2.7.1/bin/", "/usr/sbin/")
    found = diagnose(plain)
    assert found[0].category == "no_driver_loaded" and found[0].confidence < 0.6


# --- Anaconda's CPU variant, Lightning's empty GPU list ----------------------------------------------------------------

# Lightning-AI/pytorch-lightning#899: an update left the environment with the defaults channel's CPU variant
LIGHTNING_CPU = (
    "    raise MisconfigurationException(message)\n"
    "pytorch_lightning.utilities.debugging.MisconfigurationException: \n"
    "            You requested GPUs: [0]\n"
    "            But your machine only has: []\n"
    "# Name                    Version                   Build  Channel\n"
    "_libgcc_mutex             0.1                        main  \n"
    "_pytorch_select           0.1                       cpu_0  ")


def test_the_defaults_channels_cpu_variant_and_lightnings_empty_gpu_list() -> None:
    found = diagnose(LIGHTNING_CPU)
    assert found[0].category == "cpu_only_wheel" and found[0].rule == "cpu.conda_cpu_build"
    # the GPU variant's selector is no CPU build, nor is a CPU selector left beside a CUDA build of pytorch
    assert "cpu.conda_cpu_build" not in all_rules(LIGHTNING_CPU.replace("cpu_0", "gpu_0"))
    stale = LIGHTNING_CPU + "\npytorch                   1.4.0           py3.7_cuda10.1.243_cudnn7.6.3_0    pytorch"
    assert "cpu.conda_cpu_build" not in all_rules(stale)
    # Lightning's message alone: torch sees no GPU (1.x's wording too)
    alone = "lightning_fabric.utilities.exceptions.MisconfigurationException: You requested gpu: [0]\n" \
            "But your machine only has: []"
    assert top_and_rules(alone)[0] == "no_driver_loaded" and "CPU-only build" in diagnose(alone)[0].root_cause
    accel = ("lightning_fabric.utilities.exceptions.MisconfigurationException: `CUDAAccelerator` can not run on your "
             "system since the accelerator is not available. The following accelerator(s) is available and can be "
             "passed into `accelerator` argument of `Trainer`: ['cpu'].")
    assert top_and_rules(accel)[0] == "no_driver_loaded"
    # fewer GPUs than asked for (a job's own setting) is not "no GPU"
    fewer = "MisconfigurationException: You requested gpu: [0, 1]\nBut your machine only has: [0]"
    assert "nodriver.no_device_generic" not in all_rules(fewer)


# --- set s's read half: Windows, apt's repository errors, CMake's CUDA toolset, NVHPC -----------------------------------

# oatsu-gh/enunu_training_kit#8: importing torch on Windows with too small a paging file
WIN_1455 = ('OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading '
            '"C:\\Users\\Nathan\\Desktop\\enunu_training_kit-1.0.0\\python-3.8.10-embed-amd64\\lib\\site-packages\\torch'
            '\\lib\\cudnn_adv_infer64_8.dll" or one of its dependencies.')


def test_the_paging_file_too_small_is_memory_not_a_missing_dll() -> None:
    found = diagnose(WIN_1455)
    assert found[0].category == "oom_or_hw" and found[0].rule == "hw.windows_page_file_too_small"
    # a DLL that is really missing stays a missing library
    missing = ('OSError: [WinError 126] The specified module could not be found. Error loading "C:\\py\\lib\\'
               'site-packages\\torch\\lib\\fbgemm.dll" or one of its dependencies.')
    assert top_and_rules(missing)[0] == "missing_shared_lib"


# wang-xinyu/tensorrtx#472: CUDA 11.2 found, Visual Studio 2019 without its CUDA integration
NO_TOOLSET = ('Found CUDA: C:/Program Files/NVIDIA GPU Computing Toolkit/CUDA/v11.2 (found version "11.2") \n'
              "CMake Error at C:/Program Files/CMake/share/cmake-3.20/Modules/CMakeDetermineCompilerId.cmake:441 "
              "(message):\n  No CUDA toolset found.\nCall Stack (most recent call first):\n  CMakeLists.txt:23 "
              "(enable_language)")


def test_no_cuda_toolset_is_the_visual_studio_integration() -> None:
    found = diagnose(NO_TOOLSET)
    assert found[0].category == "installer_failure" and found[0].rule == "installer.cuda_vs_integration_missing"
    assert "MSBuildExtensions" in found[0].fix


def test_apts_errors_about_nvidias_repositories() -> None:
    # nytimes/rd-blender-docker#41: the key rotation, through NVIDIA's mirror for China, and "no longer signed"
    rotated = ("W: GPG error: https://developer.download.nvidia.cn/compute/cuda/repos/ubuntu1804/x86_64  InRelease: The "
               "following signatures couldn't be verified because the public key is not available: NO_PUBKEY "
               "A4B469963BF863CC\nE: The repository 'https://developer.download.nvidia.com/compute/cuda/repos/ubuntu1804/"
               "x86_64  InRelease' is no longer signed.")
    assert top_and_rules(rotated) == ("installer_failure", {"installer.package_repository_refused"})
    # NVIDIA/ansible-role-nvidia-driver#42: a 404 on the CUDA repository's by-hash index
    fetch = ("fatal: [hogehoge]: FAILED! => changed=false \n  msg: 'Failed to update apt cache: E:Failed to fetch "
             "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2004/x86_64/by-hash/SHA256/751939d95516afc28"
             "9908a19e447f0acc1506367f72ed356431a2b1a469cc8ca  404  Not Found [IP: 152.199.39.144 443], E:Some index files "
             "failed to download. They have been ignored, or old ones used instead.'")
    found = diagnose(fetch)
    assert found[0].category == "installer_failure" and found[0].rule == "installer.nvidia_repository_fetch_failed"
    # another repository's fetch failure in a GPU log is not NVIDIA's
    other = "E: Failed to fetch http://archive.ubuntu.com/ubuntu/pool/main/p/perl/perl_5.30.0.deb  404  Not Found"
    assert "installer.nvidia_repository_fetch_failed" not in all_rules(other)
    # NVIDIA/libnvidia-container#194: the toolkit's repository listed twice
    dup = (" sudo apt-get update\nE: Conflicting values set for option Signed-By regarding source "
           "https://nvidia.github.io/libnvidia-container/stable/ubuntu18.04/amd64/ /: "
           "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg !=\nE: The list of sources could not be read.")
    found = diagnose(dup)
    assert found[0].category == "installer_failure" and found[0].rule == "installer.apt_duplicate_nvidia_source"
    assert "installer.apt_duplicate_nvidia_source" not in all_rules(
        "E: Conflicting values set for option Signed-By regarding source https://download.docker.com/linux/ubuntu/ jammy: "
        "/etc/apt/keyrings/docker.gpg != ")


# TinkerTools/tinker-hp#32: built for cc90 with NVHPC 24.7, run on an RTX 5080
NVHPC_CC120 = ("Accelerator Fatal Error:\nThis file was compiled: -acc=gpu -gpu=cc90\n"
               "Rebuild this file with -gpu=cc120 to use NVIDIA Tesla GPU 0")


def test_the_nvhpc_runtime_without_code_for_the_gpu() -> None:
    found = diagnose(NVHPC_CC120)
    assert found[0].category == "arch_unsupported" and found[0].rule == "arch.nvhpc_no_code_for_gpu"
    application = ("This file was compiled: -acc=gpu -gpu=cc60 -gpu=cc70\n"
                   "Rebuild the application with -gpu=cc86 to use NVIDIA Tesla GPU 0")
    assert top_and_rules(application)[0] == "arch_unsupported"


def test_the_set_s_reviews_cases() -> None:
    """(The second review's cases.) A "Failed to fetch" that is not NVIDIA's repository; apt's warning beside a real
    failure; an expired key; 1455 as cuDNN's loader and a Chinese Windows print it; NVHPC where the file was compiled
    for the capability asked for."""
    for line in ("E: Failed to fetch http://security.ubuntu.com/ubuntu/pool/restricted/n/nvidia-graphics-drivers-515-"
                 "server/libnvidia-cfg1-515-server_515.86.01-0ubuntu0.22.04.1_amd64.deb  404  Not Found",
                 "E: Failed to fetch https://ppa.launchpadcontent.net/graphics-drivers/ppa/ubuntu/pool/main/n/nvidia-"
                 "graphics-drivers-550/nvidia-driver-550_550.54.14-0ubuntu1_amd64.deb  404  Not Found",
                 "Error: INSTALLATION FAILED: failed to fetch https://helm.ngc.nvidia.com/nvidia/charts/gpu-operator-"
                 "v24.6.1.tgz : 401 Unauthorized"):
        assert "installer.nvidia_repository_fetch_failed" not in all_rules(line), line
    warned = ("W: Failed to fetch https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/InRelease  "
              "Connection timed out\nW: Some index files failed to download. They have been ignored, or old ones used "
              "instead.\nRuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert top_and_rules(warned)[0] == "arch_unsupported"
    # Azure/acs-engine#3933: the toolkit repository's key had expired
    expired = ("W: GPG error: https://nvidia.github.io/libnvidia-container/ubuntu16.04/amd64  InRelease: The following "
               "signatures were invalid: KEYEXPIRED 1538166745\nW: Failed to fetch https://nvidia.github.io/"
               "libnvidia-container/ubuntu16.04/amd64/InRelease  The following signatures were invalid: KEYEXPIRED "
               "1538166745")
    assert diagnose(expired)[0].rule == "installer.package_repository_refused"
    for line in ("Could not load library cudnn_cnn_infer64_8.dll. Error code 1455",
                 "ImportError: DLL load failed: 页面文件太小，无法完成操作。"):
        assert top_and_rules(line)[0] == "oom_or_hw", line
    same = ("Accelerator Fatal Error: This file was compiled: -acc=gpu -gpu=cc90\n"
            "Rebuild this file with -gpu=cc90 to use NVIDIA Tesla GPU 0")
    assert "arch.nvhpc_no_code_for_gpu" not in all_rules(same)
