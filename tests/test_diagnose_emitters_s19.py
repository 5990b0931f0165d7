"""Issue #35, diagnosis from the emitters' own words (session 19): FFmpeg's NVENC/NVDEC loader and driver check, the
GPU Operator's driver container, JAX's backend warning, libsolv's constraint conflict (conda/mamba) and conda's
__cuda virtual package, conda build strings, runc's mount request, and where a log ran (enroot/pyxis, Apptainer).
Each case is the program's wording (its source cited in provisioner/diagnose/catalogue.json) as a real report pasted
it; the URL is beside each."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from provisioner.diagnose.evidence import log_evidence
from tests.support.diagnosis import all_rules, top_and_rules


def _also(text: str) -> set[str]:
    found = diagnose(text)
    return {r.category for r in found[0].also_possible} if found else set()


# --- FFmpeg (libavcodec/nvenc.c, nv-codec-headers dynlink_loader.h) ---------------------------------------------------

# jvdillon/netv#42: the app prints FFmpeg's NVENC requirement in its own words
NETV = ("NVIDIA driver: 550.163.01\nLogs\n```NVENC (h264_nvenc): unavailable\nRequired: NVENC API 13.0\nFound: 12.2\n"
        "Minimum required Nvidia driver is 570.0 or newer\n```")
# jellyfin/jellyfin#2395: the host has no libnvidia-encode; FFmpeg then prints the driver requirement too
JELLYFIN_HOST = ("root@openmediavault:~# nvidia-smi\n| NVIDIA-SMI 418.74       Driver Version: 418.74       CUDA Version: 10.1 "
                 "    |\n`h264_nvenc @ 0x55855d101140] Cannot load libnvidia-encode.so.1\n[h264_nvenc @ 0x55855d101140] "
                 "The minimum required Nvidia driver for nvenc is 418.30 or newer`")
# jellyfin-archive/jellyfin-metapackages#2: on Kubernetes, the image stopped asking for the video capability
JELLYFIN_K8S = ("Congrats for the 10.6.0 release! I upgraded from 10.5.5 on Kubernetes almost flawlessly,except for one "
                "bit!\n```\nStream mapping:\n  Stream #0:0 -> #0:0 (hevc (hevc_cuvid) -> h264 (h264_nvenc))\n...\n"
                "Cannot load libnvcuvid.so.1\n[h264_cuvid @ 0xdeadbeef] Failed loading nvcuvid.\n```")


def test_nvenc_minimum_driver_is_driver_too_old() -> None:
    cat, rules = top_and_rules(NETV)
    assert cat == "driver_too_old" and "driver.nvenc_needs_newer_driver" in rules


def test_nvenc_library_missing_on_the_host_explains_the_driver_line() -> None:
    """FFmpeg prints the driver requirement whenever the library does not load: the library is the cause."""
    cat, rules = top_and_rules(JELLYFIN_HOST)
    assert cat == "missing_shared_lib" and "libs.video_codec_library_missing" in rules
    assert "driver_too_old" in _also(JELLYFIN_HOST)


def test_nvdec_library_missing_in_a_kubernetes_pod_is_the_video_capability() -> None:
    found = diagnose(JELLYFIN_K8S)
    assert found[0].category == "container_device_missing" and found[0].rule == "container.video_capability_missing"
    assert "NVIDIA_DRIVER_CAPABILITIES" in found[0].fix


# --- the GPU Operator's driver container (NVIDIA/gpu-driver-container nvidia-driver) ------------------------------------

# NVIDIA/gpu-operator#126
GPU_OPERATOR = ("========== NVIDIA Software Installer ==========\n\nStarting installation of NVIDIA driver version 450.80.02 "
                "for Linux kernel version 5.4.0-1034-aws\n\nStopping NVIDIA persistence daemon...\nUnloading NVIDIA driver "
                "kernel modules...\nCould not unload NVIDIA driver kernel modules, driver is in use\n")


def test_driver_container_cannot_replace_a_host_driver() -> None:
    found = diagnose(GPU_OPERATOR)
    assert found[0].category == "installer_failure" and found[0].rule == "installer.driver_container_driver_in_use"
    assert "driver.enabled=false" in found[0].fix


# --- JAX (jax/_src/xla_bridge.py) ----------------------------------------------------------------------------------------

# conda-forge/jaxlib-feedstock#285
JAX = ("$ python -c \"import jax; jax.print_environment_info()\"\nAn NVIDIA GPU may be present on this machine, but a "
       "CUDA-enabled jaxlib is not installed. Falling back to cpu.\njax:    0.4.32\njaxlib: 0.4.32\n"
       "jax.devices (1 total, 1 local): [CpuDevice(id=0)]\n")


def test_jax_without_a_cuda_backend_is_a_cpu_build() -> None:
    cat, rules = top_and_rules(JAX)
    assert cat == "cpu_only_wheel" and "cpu.jax_without_cuda" in rules


# --- conda / mamba (libsolv src/problems.c; conda's __cuda virtual package; build strings) -------------------------------

# MPI-Dortmund/tomotwin-cryoet#3
CUDA_VIRTUAL = ("Encountered problems while solving:\n  - package cudatoolkit-11.6.0-habf752d_9 has constraint __cuda >=11.6.0 "
                "conflicting with __cuda-10.2-0\n \nThis happens no matter I use cuda-10.1 or cuda-11.8 in my shell "
                "(checked by nvcc --version)")
# mamba-org/mamba#654
PLAIN_CONFLICT = ("$ mamba create -n deleteme prompt_toolkit=1.0.15 prompt-toolkit=3.0.10\nProblem: package "
                  "prompt-toolkit-3.0.10-pyha770c72_0 has constraint prompt_toolkit 3.0.10 conflicting with "
                  "prompt_toolkit-1.0.15-py27_0")
# mamba-org/mamba#1349
CONDA_CPU = ("This is the exact opposite case, Mamba only installs the CPU version of PyTorch. See below log, Mamba "
             "attempts to install PyTorch \"cpu_py310h2272b30_0\".\n> mamba install pytorch torchvision torchaudio "
             "cudatoolkit=11.3 -c pytorch")


def test_cuda_virtual_package_conflict_is_the_driver() -> None:
    cat, rules = top_and_rules(CUDA_VIRTUAL)
    assert cat == "driver_too_old" and "driver.conda_cuda_virtual_package" in rules
    assert "resolver_failure" in _also(CUDA_VIRTUAL)


def test_any_other_constraint_conflict_is_the_resolver() -> None:
    cat, rules = top_and_rules(PLAIN_CONFLICT)
    assert cat == "resolver_failure" and "resolver.conda_constraint_conflict" in rules
    assert "driver.conda_cuda_virtual_package" not in rules


def test_a_cpu_build_string_is_a_cpu_build() -> None:
    cat, rules = top_and_rules(CONDA_CPU)
    assert cat == "cpu_only_wheel" and "cpu.conda_cpu_build" in rules
    assert top_and_rules("  + pytorch  1.13.1  cuda112py310he33e0d6_200  conda-forge/linux-64")[0] != "cpu_only_wheel"


# --- runc (libcontainer/process_linux.go): a driver file the runtime's mount list names is gone ---------------------------

# HaveAGitGat/Tdarr#1423
TDARR = ("Tdarr will not start after NVIDIA driver for Linux is updated to the latest version (580.178.04)\n"
         "Starting the container via Docker Compose causes it to crash out with the error \"Error response from daemon: "
         "failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: "
         "unable to start container process: error during container init: failed to fulfil mount request: open "
         "/usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.580.159.04: no such file or directory\"\n"
         "**Screenshots**\nN/A; container won't start\n")


def test_runc_mount_of_a_vanished_driver_file_is_a_stale_spec() -> None:
    found = diagnose(TDARR)
    assert found[0].category == "container_device_missing" and found[0].rule == "container.stale_driver_mounts"
    assert "nvidia-ctk cdi generate" in found[0].fix
    # "container won't start" in a docker log is not a Proxmox container's
    assert "proxmox_lxc" not in {f.category for f in found} | _also(TDARR)


def test_runc_mount_of_any_other_file_is_not_the_gpu() -> None:
    line = "failed to fulfil mount request: open /mnt/media/library: no such file or directory"
    assert top_and_rules(line)[0] != "container_device_missing"


# --- where it ran: HPC container runtimes --------------------------------------------------------------------------------


def test_pyxis_and_apptainer_are_containers() -> None:
    # NVIDIA/pyxis users (bench set d: i-pyxis-optix-library-not-found) and Apptainer's --nv
    for line in ("So recently we realized that we cannot run OptiX jobs through Pyxis.",
                 "$ apptainer exec --nv pytorch_24.01.sif python train.py"):
        ev = log_evidence(line)
        assert "hpc" in ev.places and ev.in_container, line


# --- docker's daemon (moby daemon/errors.go): "could not select device driver %q with capabilities: %v" --------------------


def test_no_gpu_driver_with_any_capability_set() -> None:
    """Go prints the requested capability sets as `[][]string` (%v): `[[gpu]]` for `--gpus`, and compose's
    `capabilities: [gpu, compute, utility]` as `[[gpu compute utility]]`; the driver is `%q` (empty for --gpus)."""
    for caps, driver in (("[[gpu]]", '""'), ("[[gpu compute utility]]", '"nvidia"'), ("[[compute video]]", '""')):
        line = f"Error response from daemon: could not select device driver {driver} with capabilities: {caps}"
        cat, rules = top_and_rules(line)
        assert cat == "container_device_missing" and "container.gpu_runtime_missing" in rules, line


# --- glibc's loader (elf/dl-load.c open_verify) and dnf's depsolve hints (dnf/cli/main.py, dnf5/main.cpp) ----------------

# Jip-Hop/jailmaker#127: the soname link in the jail is an empty placeholder
JAIL = ("in Dragonfish 24.04.0, Nvidia passthrough seems to be broken -- ```nvidia-smi``` working fine on host, but "
        "inside container it gives:\n```\nnvidia-container-cli: initialization error: load library failed: "
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1: file too short\n```")
# stackhpc/ansible-slurm-appliance#685: `dnf module install nvidia-driver` cannot resolve (an old dkms)
DNF = ('    openstack.openhpc: TASK [cuda : Install nvidia drivers] *****\n    openstack.openhpc: fatal: [default]: FAILED! => {\n'
       '    openstack.openhpc:         "dnf",\n    openstack.openhpc:         "module",\n'
       '    openstack.openhpc:         "install",\n    openstack.openhpc:         "nvidia-driver"\n'
       "    openstack.openhpc: (try to add '--skip-broken' to skip uninstallable packages or '--nobest' to use not only "
       "best candidate packages)\n")


def test_a_library_that_is_no_elf_object_is_the_library() -> None:
    found = diagnose(JAIL)
    assert found[0].category == "missing_shared_lib" and found[0].rule == "libs.library_file_broken"
    assert "container_device_missing" in _also(JAIL)  # the toolkit's "load library failed" only passed it on


def test_dnf_cannot_resolve_the_driver_packages() -> None:
    cat, rules = top_and_rules(DNF)
    assert cat == "installer_failure" and "installer.dnf_cannot_resolve_nvidia" in rules
    other = DNF.replace("cuda : Install nvidia drivers", "docker : Install docker").replace("nvidia-driver", "docker-ce")
    assert "installer.dnf_cannot_resolve_nvidia" not in all_rules(other)


# --- ggml's CUDA backend, CTranslate2's loader, ptxas/nvcc, the Windows loader, a package's Python guard ---------------


def test_ggml_without_device_code_for_the_gpu_is_arch() -> None:
    # LostRuins/koboldcpp#610 (ggml-cuda.cu's bad_arch(), the wording before ggml's no_device_code)
    text = ("Since updating from 1.54 to 1.55 I've been getting `ERROR: ggml-cuda was compiled without support for the "
            "current GPU architecture.` errors, This only happens with 1.55 and not 1.54, running on Windows 11, GPU: "
            "NVIDIA GeForce GTX 1070 Ti (8GB, Pascal), Drivers: 546.33 (latest currently).")
    cat, rules = top_and_rules(text)
    assert cat == "arch_unsupported" and "arch.ggml_no_device_code" in rules


def test_ctranslate2_cannot_load_its_cuda_library() -> None:
    # SYSTRAN/faster-whisper#47
    text = ("  File \"faster_whisper/transcribe.py\", line 207, in transcribe\n"
            "    results = self.model.detect_language(input)\n"
            "RuntimeError: Library libcublas.so.11 is not found or cannot be loaded")
    found = diagnose(text)
    assert found[0].category == "missing_shared_lib" and found[0].rule == "libs.ctranslate2_cuda_library"
    assert "libcublas.so.11" in found[0].root_cause


def test_ptx_newer_than_the_drivers_jit_is_the_driver() -> None:
    # numba/numba#8961
    text = ("numba.cuda.cudadrv.driver.LinkerError: [222] Call to cuLinkAddData results in UNKNOWN_CUDA_ERROR\n"
            "ptxas application ptx input, line 9; fatal   : Unsupported .version 8.1; current version is '8.0'")
    cat, rules = top_and_rules(text)
    assert cat == "driver_too_old" and "driver.ptx_toolchain_newer" in rules


def test_nvcc_without_the_gpus_arch_is_arch() -> None:
    # inducer/pycuda#272: CUDA 11's nvcc dropped sm_30
    text = ("[command: nvcc --cubin -arch sm_30 -I/home/vlad/.local/lib/python3.8/site-packages/pycuda/cuda kernel.cu]\n"
            "[stderr:\nnvcc fatal   : Value 'sm_30' is not defined for option 'gpu-architecture'\n]`")
    cat, rules = top_and_rules(text)
    assert cat == "arch_unsupported" and "arch.toolchain_unknown_arch" in rules


def test_windows_entry_point_missing_is_a_library_version() -> None:
    # PaddlePaddle/PaddleOCR#8829 (the dialog retyped, "动态接库" as the reporter wrote it)
    text = ("- 完整报错/Complete Error Message：\npython.exe- 无法找到入口\n无法定位程序输入点 于动态接库\n"
            "D: PaddlePaddleDeepLerning/Anaconda3/envs/paddle/Librany/bin/cudnn_adv_infer64_8.dll 上\n")
    cat, rules = top_and_rules(text)
    assert cat == "missing_shared_lib" and "libs.windows_entry_point_missing" in rules


def test_a_packages_python_guard_is_the_resolver() -> None:
    # coqui-ai/TTS#3627
    text = ("RuntimeError: TTS requires python >= 3.9 and < 3.12 but your Python version is 3.12.0 (tags/v3.12.0:0fb18b0, "
            "Oct  2 2023, 13:03:39) [MSC v.1935 64 bit (AMD64)]\n\nThis happens even with trying to install using \n"
            "pip3 install --ignore-requires-python TTS")
    cat, rules = top_and_rules(text)
    assert cat == "resolver_failure" and "resolver.package_needs_other_python" in rules


def test_windows_drives_under_mnt_mean_wsl() -> None:
    # NVIDIA/cuml#6218
    line = ('  File "/mnt/c/Users/Hongb/Documents/Git/hongbomiao.com/machine-learning/hm-cuml/.venv/lib/python3.12/'
            'site-packages/numba_cuda/numba/cuda/cudadrv/driver.py", line 258, in ensure_initialized')
    assert "wsl" in log_evidence(line).places
    assert "wsl" not in log_evidence("/mnt/data/models/llama-3-8b.gguf").places


def test_a_docker_path_inside_a_proxmox_container_is_still_proxmox() -> None:
    """The generic "does not start" rule stands aside only where a docker/podman/Kubernetes container is started,
    not where a path names docker (a DietPi template's docker-data volume, shared corpus regression set)."""
    text = ("tar: ./mnt/dietpi_userdata/docker-data/volumes/backingFsBlockDev: Cannot mknod: Operation not permitted\n"
            "tar: Exiting with failure status due to previous errors\n"
            "unable to create CT 101 - command 'lxc-usernsexec -m u:0:100000:65536 -m g:0:100000:65536 -- tar xpf - -z' "
            "failed: exit code 2\n")
    assert top_and_rules(text)[0] == "proxmox_lxc"
