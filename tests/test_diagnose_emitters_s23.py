"""Issue #35, diagnosis from the emitters' own words (session 23): set n's read half.

The resource manager's legacy-GPU refusal as the kernel prints it (one printk per line, "NVRM:  " continuations), NCCL's
plugin loader at INFO (an optional library it did not find is no missing library), containerd's and CRI-O's runtime
handler absent from their configuration, libtorch_cuda.so/libc10_cuda.so (parts of a CUDA build of torch only),
TensorRT's builder refusing the GPU's SM in its three releases' wordings, and a `docker run` that asks for no GPU. Each
case is a real report's paste; the URL is beside it."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from tests.support.diagnosis import all_rules, top_and_rules

# --- the legacy-GPU refusal, as the kernel prints it ------------------------------------------------------------------

# siderolabs/talos#8764: Talos' kernel log prefix, a GT 710 under 535.129.03
TALOS_LEGACY = (
    "kern:     err: [2024-05-20T02:46:53.856596762Z]: NVRM: The NVIDIA GeForce GT 710 GPU installed in this system is"
    "                       \n"
    " NVRM:  supported through the NVIDIA 470.xx Legacy drivers. Please                     \n"
    " NVRM:  visit http://www.nvidia.com/object/unix.html for more                          \n"
    " NVRM:  information.  The 535.129.03 NVIDIA driver will ignore                         \n"
    " NVRM:  this GPU.  Continuing probe...                                                 \n"
    " kern: warning: [2024-05-20T02:46:53.859954762Z]: NVRM: No NVIDIA GPU found.  ")

# an Ubuntu forum thread (310.44, dmesg with timestamps) and a 2026 write-up (610.43.02: the last two lines joined)
DMESG_LEGACY = (
    "[  139.823179] NVRM: The NVIDIA GeForce 6600 GT GPU installed in this system is\n"
    "[  139.823179] NVRM:  supported through the NVIDIA 304.xx Legacy drivers. Please\n"
    "[  139.823179] NVRM:  visit http://www.nvidia.com/object/unix.html for more\n"
    "[  139.823179] NVRM:  information.  The 310.44 NVIDIA driver will ignore\n"
    "[  139.823179] NVRM:  this GPU.  Continuing probe...\n")
LEGACY_610 = (
    "NVRM: The NVIDIA GeForce GT 1030 GPU installed in this system is\n"
    "NVRM:   supported through the NVIDIA 580.xx Legacy drivers. Please\n"
    "NVRM:   visit http://www.nvidia.com/object/unix.html for more\n"
    "NVRM:   information.  The 610.43.02 NVIDIA driver will ignore this GPU.\n")


def test_the_legacy_refusal_as_the_kernel_prints_it_is_the_gpu_dropped() -> None:
    for log in (TALOS_LEGACY, DMESG_LEGACY, LEGACY_610, DMESG_LEGACY.split("\n", 1)[1]):  # a grep from line two
        category, rules = top_and_rules(log)
        assert category == "arch_unsupported" and "arch.legacy_gpu_dropped_by_driver" in rules, (log, rules)


def test_no_gpu_found_after_the_refusal_is_not_another_driver_owning_it() -> None:
    top = diagnose(TALOS_LEGACY)[0]
    assert top.rule == "arch.legacy_gpu_dropped_by_driver"
    # without the refusal, the probe finding nothing is still another driver's (nouveau) or none
    nouveau = ("NVRM: The NVIDIA probe routine was not called for 1 device(s).\n"
               "NVRM: nouveau, rivafb, nvidiafb or rivatv\nNVRM: was loaded and obtained ownership of the NVIDIA "
               "device(s).\nNVRM: No NVIDIA graphics adapter probed!")
    assert top_and_rules(nouveau)[0] == "no_driver_loaded" and diagnose(nouveau)[0].rule == "nodriver.probe_conflict"


def test_a_legacy_gpu_leads_over_what_follows_from_it_and_under_secure_boot() -> None:
    """(The two reviews' cases.) What follows from the only GPU being ignored (modprobe's "No such device", NVML's and
    torch's "no driver") does not lead; Secure Boot refusing the module does; a second GPU that nouveau owns is named
    beside it; prose about legacy drivers does not silence "No NVIDIA GPU found"."""
    refusal = DMESG_LEGACY.replace("[  139.823179] ", "[5.101] ") + "[5.103] NVRM: No NVIDIA GPU found.\n"
    for consequence in ("modprobe: ERROR: could not insert 'nvidia': No such device",
                        "Failed to initialize NVML: Driver Not Loaded",
                        "RuntimeError: Found no NVIDIA driver on your system."):
        assert diagnose(refusal + consequence)[0].rule == "arch.legacy_gpu_dropped_by_driver", consequence
    secure_boot = "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n"
    assert top_and_rules(secure_boot + refusal)[0] == "no_driver_loaded"
    nouveau = ("[5.102] NVRM: The NVIDIA probe routine was not called for 1 device(s).\n[5.102] NVRM: nouveau, rivafb, "
               "nvidiafb or rivatv\n[5.102] NVRM: was loaded and obtained ownership of the NVIDIA device(s).\n")
    found = diagnose(refusal + nouveau)
    assert found[0].rule == "arch.legacy_gpu_dropped_by_driver"
    assert any(f.rule == "nodriver.probe_conflict" for f in found[1:]), [f.rule for f in found]
    prose = "I tried the 470 legacy drivers first, then 535.\nNVRM: No NVIDIA GPU found."
    assert diagnose(prose)[0].rule == "nodriver.no_gpu_probed"


# --- NCCL's plugin loader at INFO -------------------------------------------------------------------------------------

# NVIDIA/nccl#1240: an Azure image's NCCL_GRAPH_FILE naming GPUs the VM does not have; NCCL 2.19's plugin probe above it
NCCL_GRAPH_FILE = (
    "Spotllm:73025:73025 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.4<0>\n"
    "Spotllm:73025:73025 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such "
    "file or directory No plugin found (libnccl-net.so), using internal implementation\n"
    "Spotllm:73025:73025 [0] NCCL INFO cudaDriverVersion 12020\n"
    "NCCL version 2.19.3+cuda12.3\n"
    "Spotllm:73025:73112 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /opt/microsoft/ncv4/graph.xml\n"
    "\n"
    "Spotllm:73025:73112 [0] graph/search.cc:719 NCCL WARN XML Import Channel : dev 1 not found.\n"
    "Spotllm:73025:73112 [0] NCCL INFO graph/search.cc:749 -> 2\n")


def test_nccl_probing_for_its_optional_plugins_is_no_missing_library() -> None:
    category, rules = top_and_rules(NCCL_GRAPH_FILE)
    assert category == "nccl_failure" and "lib.cannot_open_shared_object" not in all_rules(NCCL_GRAPH_FILE), rules
    # the other releases' probe lines (NVIDIA/nccl src/net.cc 2.18, src/tuner.cc 2.21, src/plugin/plugin_open.cc 2.30)
    for probe in ("host:1:1 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: "
                  "cannot open shared object file: No such file or directory",
                  "host:1:1 [0] NCCL INFO TUNER/Plugin: Plugin load returned 2 : libnccl-tuner.so: cannot open shared "
                  "object file: No such file or directory : when loading libnccl-tuner.so"):
        assert "lib.cannot_open_shared_object" not in all_rules(probe), probe
    # a library the program itself needs, beside the probe, is still missing
    needed = probe + "\nImportError: libcudnn.so.8: cannot open shared object file: No such file or directory"
    assert top_and_rules(needed)[0] == "missing_shared_lib"
    # a network plugin asked for (NCCL_NET, src/net.cc's "Error: network %s not found."): the probe's dlerror is the
    # failure (the review's case, from a cluster's documentation)
    asked = ("nid:1:1 [1] NCCL INFO NET/Plugin : Plugin load (libnccl-net-ofi.so) returned 2 : libnccl-net-ofi.so: "
             "cannot open shared object file: No such file or directory\n"
             "nid:1:2 [1] NCCL INFO NCCL_NET set by environment to AWS Libfabric\n"
             "nid:1:2 [1] net.cc:626 NCCL WARN Error: network AWS Libfabric not found.\n")
    assert "lib.cannot_open_shared_object" in all_rules(asked)
    # a built-in transport (IB, Socket) or NCCL_NET_PLUGIN=none asks for no plugin: the probe stays a probe
    for builtin in ("x [0] NCCL INFO NCCL_NET set by environment to IB\n", "export NCCL_NET_PLUGIN=none\n"):
        log = (builtin + "x [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: "
               "cannot open shared object file: No such file or directory\nRuntimeError: NCCL error in: "
               "../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system error")
        assert top_and_rules(log)[0] == "nccl_failure", builtin


# --- the CRI runtime without the nvidia handler -----------------------------------------------------------------------

# canonical/microk8s#2474 (containerd); CRI-O's wording (internal/oci/oci.go) as its log prints it
def test_a_cri_runtime_without_the_nvidia_handler_is_the_runtime_config() -> None:
    containerd = ("Microk8s v.1.21\nError:\nFailed to create pod sandbox: rpc error: code = Unknown desc = failed to "
                  "get sandbox runtime: no runtime for \"nvidia\" is configured")
    crio = ('level=error msg="RunPodSandbox failed" error="failed to find runtime handler nvidia from runtime list '
            'map[crun:0xc000a2e000 runc:0xc000a2e0f0]"')
    for log in (containerd, crio):
        category, rules = top_and_rules(log)
        assert category == "container_device_missing" and "container.cri_runtime_handler_missing" in rules, rules
    assert "nvidia-ctk runtime configure" in diagnose(containerd)[0].fix
    # another handler (kata, gVisor) is not the GPU's
    assert "container.cri_runtime_handler_missing" not in all_rules(containerd.replace('"nvidia"', '"kata"'))
    # containerd's journal quotes the error, escaping the handler's quotes
    journal = ('level=error msg="CreateContainer within sandbox \\"3f2a\\" failed" error="failed to get sandbox '
               'runtime: no runtime for \\"nvidia\\" is configured"')
    assert "container.cri_runtime_handler_missing" in top_and_rules(journal)[1]
    # the GPU Operator registers the runtime once its driver is up: a driver that failed to load comes first
    operator = ("Warning  FailedCreatePodSandBox  kubelet  Failed to create pod sandbox: rpc error: code = Unknown desc "
                "= failed to get sandbox runtime: no runtime for \"nvidia\" is configured\n"
                "nvidia-driver-ctr ERROR: Unable to load the kernel module 'nvidia.ko'.")
    assert top_and_rules(operator)[0] == "installer_failure"


# --- libtorch_cuda.so: a part of a CUDA build of torch ----------------------------------------------------------------

# openmm/openmm-torch#94: conda's cpu_py311 pytorch beside a CUDA build of openmm-torch
OPENMM_TORCH = (
    ">>> import openmmtorch\nTraceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\n"
    "  File \"/export/users/sfarr/miniconda3/envs/test_rc/lib/python3.11/site-packages/openmmtorch.py\", line 15, in "
    "<module>\n    import _openmmtorch\n"
    "ImportError: libtorch_cuda.so: cannot open shared object file: No such file or directory\n")


def test_an_extension_missing_libtorch_cuda_is_a_torch_that_is_not_a_cuda_build() -> None:
    for log in (OPENMM_TORCH, "OSError: libc10_cuda.so: cannot open shared object file: No such file or directory"):
        category, rules = top_and_rules(log)
        assert category == "cpu_only_wheel" and "cpu.torch_cuda_library_absent" in rules, rules
    # torch 1.10-1.12's split libraries, which newer torches lack: the extension and torch differ (a library)
    split = "ImportError: libtorch_cuda_cu.so: cannot open shared object file: No such file or directory"
    assert top_and_rules(split)[0] == "missing_shared_lib"
    assert "cpu.torch_cuda_library_absent" not in all_rules(split)
    # (the review's cases) torch shown as a CUDA or ROCm build: the extension was built for another torch; a LibTorch
    # C++ program's loader is its LD_LIBRARY_PATH
    for other in ("PyTorch version: 2.1.0+cu121\nCUDA used to build PyTorch: 12.1\n" + OPENMM_TORCH,
                  "torch                     2.0.1+cu117\n" + OPENMM_TORCH,
                  "PyTorch version: 2.3.0+rocm6.0\n" + OPENMM_TORCH,
                  "./example-app: error while loading shared libraries: libc10_cuda.so: cannot open shared object "
                  "file: No such file or directory"):
        assert "cpu.torch_cuda_library_absent" not in all_rules(other), other


# --- TensorRT refusing the GPU's SM -----------------------------------------------------------------------------------

def test_tensorrt_refusing_the_sm_is_the_release_not_knowing_the_gpu() -> None:
    for log in (
        # NVIDIA/TensorRT#2332: TensorRT 7.0 on an RTX A6000
        "INTERNAL_ERROR: Assertion failed: Unsupported SM.\n../rtSafe/cuda/caskUtils.cpp:80\nAborting...\n\n"
        "ERROR: ../rtSafe/cuda/caskUtils.cpp (80) - Assertion Error in trtSmToCask: 0 (Unsupported SM.)",
        # TensorRT 8.x on an Ada GPU (a YOLO deployment's FAQ)
        "[caskBuilderUtils.cpp::trtSmToCaskCCV::548] Error Code 1: Internal Error (Unsupported SM: 0x809)",
        # TensorRT 10 on a Pascal GPU
        "[02/15/2026-18:39:01] [TRT] [E] IBuilder::buildSerializedNetwork: Error Code 9: API Usage Error (Target GPU "
        "SM 61 is not supported by this TensorRT release. In checkCurrentSMEnabled at "
        "/_src/optimizer/common/builderHelpers.cpp:718)",
    ):
        category, rules = top_and_rules(log)
        assert category == "arch_unsupported" and "arch.tensorrt_unsupported_sm" in rules, (log, rules)
    # the bracket without its space (NVIDIA/TensorRT#2727's title); "SM" as part of another word is not the SM
    assert "arch.tensorrt_unsupported_sm" in all_rules("Internal Error(Unsupported SM: 0x809)")
    assert "arch.tensorrt_unsupported_sm" not in all_rules("Assertion failed: Unsupported SMEM size 232448")


# --- a docker run that asks for no GPU --------------------------------------------------------------------------------

# floydhub/dockerfiles#3: a GPU image started with plain docker (IPython's Out[n] form)
FLOYDHUB = (
    "$ sudo docker run  -t -i floydhub/pytorch:latest-gpu-py3 ipython\n"
    "Python 3.5.3 (default, Feb 13 2017, 20:35:17) \n"
    "IPython 5.3.0 -- An enhanced Interactive Python.\n\n"
    "In [1]: import torch\n\n"
    "In [2]: torch.cuda.is_available()\n"
    "Out[2]: False\n")


def test_a_docker_run_without_a_gpu_request_is_the_container_not_given_the_gpu() -> None:
    category, rules = top_and_rules(FLOYDHUB)
    assert category == "container_device_missing" and "container.run_without_gpu_request" in rules, rules
    assert "--gpus all" in diagnose(FLOYDHUB)[0].fix
    # asked for the GPU, or a CPU build of torch: not this
    for log in (FLOYDHUB.replace("docker run ", "docker run --gpus all "),
                FLOYDHUB.replace("docker run ", "docker run --runtime=nvidia "),
                FLOYDHUB.replace("docker run ", "podman run --device nvidia.com/gpu=all "),
                FLOYDHUB + "torch 2.1.0+cpu\n",
                FLOYDHUB.replace("$ sudo docker run  -t -i floydhub/pytorch:latest-gpu-py3 ipython\n", "")):
        assert "container.run_without_gpu_request" not in all_rules(log), log


def test_a_docker_run_without_flags_is_not_read_against_other_evidence() -> None:
    """(The review's cases.) A CPU build shown leads whatever the flags; a True answer is a GPU given; the runtime as
    the daemon's default, another vendor's GPU, a Kubernetes pod's log are not a missing request."""
    run = "$ docker run -it --rm myimg bash\n"
    cpu = (run + "root@x:/# python -c 'import torch; print(torch.cuda.is_available())'\nFalse\n"
           "root@x:/# python -m torch.utils.collect_env\nPyTorch version: 2.1.0\nCUDA used to build PyTorch: Could not "
           "collect\n")
    assert top_and_rules(cpu)[0] == "cpu_only_wheel"
    healthy = (run + ">>> torch.cuda.is_available()\nTrue\n>>> torch.cuda.is_bf16_supported()\nFalse\n"
               "RuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert top_and_rules(healthy)[0] == "arch_unsupported"
    answer = ">>> torch.cuda.is_available()\nFalse\n"
    # `python -c` printing other values first; not another call's False after is_available()'s True
    shell = "$ docker run -it --rm pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime bash\nroot@a1b2c3d4e5f6:/workspace# "
    assert "container.run_without_gpu_request" in all_rules(
        shell + "python -c 'import torch; print(torch.__version__); print(torch.cuda.is_available())'\n2.3.0+cu121\nFalse")
    assert "container.run_without_gpu_request" not in all_rules(
        shell + "python -c 'import torch; print(torch.cuda.is_available()); print(torch.cuda.is_bf16_supported())'\n"
        "True\nFalse")
    for log in ('$ cat /etc/docker/daemon.json\n{"default-runtime": "nvidia"}\n$ docker run -it dustynv/l4t-pytorch:r35 '
                "python3\n" + answer,
                "$ docker run -it --device=/dev/kfd --device=/dev/dri --group-add video rocm/pytorch\n" + answer,
                "$ docker run -d --name redis redis:7\n$ kubectl logs trainer-0\n" + answer):
        assert "container.run_without_gpu_request" not in all_rules(log), log


# --- package managers refusing NVIDIA packages; DKMS skipping the module; Nix building the driver ---------------------

def test_a_file_conflict_on_nvidia_packages_is_two_sources_of_the_driver() -> None:
    for log in (
        # rpm (lib/rpmprob.c) as dnf prints it: NVIDIA's CUDA repository beside negativo17's
        "Transaction check error:\n  file /usr/lib64/libnvidia-ml.so.1 from install of "
        "nvidia-driver-NVML-3:550.90.07-1.el9.x86_64 conflicts with file from package "
        "nvidia-driver-cuda-libs-3:550.90.07-1.el9.x86_64",
        # pacman (src/pacman/callback.c)
        "error: failed to commit transaction (conflicting files)\nnvidia-utils: /usr/lib/libEGL_nvidia.so.0 exists in "
        "filesystem\nErrors occurred, no packages were upgraded.",
        # dpkg (src/main/archives.c)
        "dpkg: error processing archive /var/cache/apt/archives/libnvidia-compute-550_550.120-0ubuntu1_amd64.deb "
        "(--unpack):\n trying to overwrite '/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.120', which is also in "
        "package libnvidia-extra-550 550.120-0ubuntu1",
    ):
        category, rules = top_and_rules(log)
        assert category == "installer_failure" and "installer.package_file_conflict" in rules, (log, rules)
    # another package's conflict in the same words is not the driver's
    other = ("error: failed to commit transaction (conflicting files)\npython-pip: "
             "/usr/lib/python3.12/site-packages/pip/__init__.py exists in filesystem")
    assert "installer.package_file_conflict" not in all_rules(other)
    # (the second review's cases) a path holding "cuda" in another package's conflict
    for path_only in ("error: failed to commit transaction (conflicting files)\npython-pytorch: "
                      "/usr/lib/python3.12/site-packages/torch/cuda/__init__.py exists in filesystem",
                      "dpkg: error processing archive /var/cache/apt/archives/ros-humble-opencv_4.5.4_amd64.deb "
                      "(--unpack):\n trying to overwrite '/usr/include/opencv4/opencv2/core/cuda.hpp', which is also "
                      "in package ros-humble-opencv 4.5.4-1"):
        assert "installer.package_file_conflict" not in all_rules(path_only), path_only


def test_dkms_skipping_the_nvidia_module_for_a_kernel_without_headers() -> None:
    debian = ("Setting up nvidia-kernel-dkms (535.216.01-1~deb12u1) ...\nLoading new nvidia-current-535.216.01 DKMS "
              "files...\nBuilding for 6.1.0-31-amd64\nModule build for kernel 6.1.0-31-amd64 was skipped since the\n"
              "kernel headers for this kernel do not seem to be installed.\nSetting up nvidia-driver "
              "(535.216.01-1~deb12u1) ...\n$ nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with "
              "the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.")
    category, rules = top_and_rules(debian)
    assert category == "installer_failure" and "installer.dkms_skipped_no_headers" in rules, rules
    # another module's skip (a Coral TPU's gasket on Proxmox) says nothing about the GPU
    gasket = ("dkms: autoinstall for kernel 6.2.16-19-pve was skipped since the kernel headers for this kernel do not "
              "seem to be installed.")
    assert "installer.dkms_skipped_no_headers" not in all_rules(gasket)
    # (the second review's cases) another module skipped while NVIDIA's installed; NVIDIA's skipped for an old kernel
    # and installed for the new one; Secure Boot refusing the module that was built leads
    zfs = ("Loading new zfs-2.1.11 DKMS files...\nBuilding for 6.1.0-31-amd64\nModule build for kernel 6.1.0-31-amd64 "
           "was skipped since the\nkernel headers for this kernel do not seem to be installed.\nLoading new "
           "nvidia-current-535.216.01 DKMS files...\nBuilding for 6.1.0-31-amd64\nBuilding initial module for "
           "6.1.0-31-amd64\nDone.\nDKMS: install completed.")
    assert "installer.dkms_skipped_no_headers" not in all_rules(zfs)
    secure = debian.split("$ nvidia-smi")[0] + "modprobe: ERROR: could not insert 'nvidia_current': Key was rejected by service"
    assert top_and_rules(secure)[0] == "no_driver_loaded"


def test_nix_failing_to_build_the_driver_derivation_and_libsolv_dep_strings() -> None:
    for log in ("error: builder for '/nix/store/0x4x2hv6xpvq0q2mvgz7fxwq3b1b0zy1-nvidia-x11-550.78-6.9.1.drv' failed "
                "with exit code 2",
                "error: Cannot build '/nix/store/0x4x2hv6xpvq0q2mvgz7fxwq3b1b0zy1-nvidia-x11-565.77-6.13.drv'.\n"
                "       Reason: builder failed with exit code 2."):
        assert top_and_rules(log) == ("installer_failure", {"installer.nix_driver_build_failed"}), log
    assert not all_rules("error: builder for '/nix/store/0x4x2hv6xpvq0q2mvgz7fxwq3b1b0zy1-hello-2.12.drv' failed with "
                         "exit code 2")
    # (the second review's cases) another NVIDIA derivation, and the driver's failing only because the kernel did
    for other in ("error: builder for '/nix/store/abc-nvidia-container-toolkit-1.15.0.drv' failed with exit code 1",
                  "error: Cannot build '/nix/store/aaa-linux-6.9.1.drv'.\n       Reason: builder failed with exit code "
                  "2.\nerror: Cannot build '/nix/store/bbb-nvidia-x11-550.78-6.9.1.drv'.\n       Reason: 1 dependency "
                  "failed."):
        assert "installer.nix_driver_build_failed" not in all_rules(other), other
    zypper = ("| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |\nProblem: 1: nothing "
              "provides 'libavcodec60 = 6.1.1' needed by the to be installed ffmpeg-6-6.1.1-1.1.x86_64")
    assert "installer.dnf_cannot_resolve_nvidia" not in all_rules(zypper)
    # libsolv's dependency is a dep string with spaces (src/problems.c: "nothing provides %s needed by %s")
    dnf = ("Problem: conflicting requests\n  - nothing provides kernel-devel-uname-r = 5.14.0-427.el9.x86_64 needed by "
           "kmod-nvidia-latest-dkms-3:550.54.15-1.el9.x86_64")
    assert top_and_rules(dnf) == ("installer_failure", {"installer.dnf_cannot_resolve_nvidia"})


# --- a Hyper-V GPU-PV guest (not WSL) ----------------------------------------------------------------------------------

# seflerZ/oneclick-gpu-pv#8: dxgkrnl built by DKMS and loaded; the user-mode libraries copied from System32\lxss\lib
GPU_PV = ("[    2.404359] dxgkrnl: loading out-of-tree module taints kernel.\n"
          "[    2.404372] dxgkrnl: module verification failed: signature and/or required key missing - tainting kernel\n"
          "[    2.410266] hv_vmbus: registering driver dxgkrnl\n"
          "Failed to initialize NVML: GPU access blocked by the operating system\n"
          "Failed to properly shut down NVML: GPU access blocked by the operating system\n")


def test_nvml_blocked_in_a_gpu_pv_guest_with_dxgkrnl_loaded_is_its_user_mode_libraries() -> None:
    category, rules = top_and_rules(GPU_PV)
    assert category == "missing_shared_lib" and rules == {"lib.gpu_pv_userspace_incomplete"}, rules
    assert "libdxcore.so" in diagnose(GPU_PV)[0].fix
    # WSL 2's own kernel (dxgkrnl built in, no out-of-tree module): the Windows side, as before
    wsl = ("$ uname -r\n5.15.153.1-microsoft-standard-WSL2\n[    0.512345] hv_vmbus: registering driver dxgkrnl\n"
           "Failed to initialize NVML: GPU access blocked by the operating system\n")
    assert diagnose(wsl)[0].rule == "nodriver.wsl_gpu_unreachable"


# --- TrueNAS apps' GPU selection; the runtime's "insufficient driver" in a container whose host driver is recent -------

def test_a_truenas_app_gpu_selection_without_uuid_is_the_apps_gpu_config() -> None:
    # truenas/apps#785 (library 1.1.x joined "GPU in" "slot" without a space); library 2.x's wording
    for log in ("[EFAULT] Failed to render compose templates: base_v1_1_5.utils.TemplateException: Expected [uuid] to "
                "be set for GPU inslot [0000:02:00.0] in [nvidia_gpu_selection]",
                "[EFAULT] Failed to render compose templates: RenderError: Expected [uuid] to be set for GPU in slot "
                "[0000:01:00.0] in [nvidia_gpu_selection]"):
        assert top_and_rules(log) == ("container_device_missing", {"container.truenas_gpu_uuid_missing"}), log


def test_insufficient_driver_in_a_container_whose_host_driver_runs_that_cuda_major() -> None:
    """CUDA's minor-version compatibility runs a 12.x runtime on any R525+ driver: with the runtime's CUDA named and
    within the host's major, "insufficient" is libcudart finding no libcuda, the container not given the driver."""
    smi = "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |"
    named = ("$ docker run --rm pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime python -c 'import torch; "
             "torch.zeros(1).cuda()'\nRuntimeError: CUDA driver version is insufficient for CUDA runtime version\n"
             "$ nvidia-smi\n" + smi)
    top = diagnose(named)[0]
    assert (top.category, top.rule) == ("container_device_missing", "evidence.insufficient_driver_in_container")
    # SYSTRAN/faster-whisper#1259: the runtime's CUDA not named: the driver finding leads, the container one beside it
    k8s = ("I'm running the linuxserver/faster-whisper:gpu container within my k8s cluster.\nError:\n`RuntimeError: CUDA "
           "failed with error CUDA driver version is insufficient for CUDA runtime version`\n" + smi)
    found = diagnose(k8s)[0]
    assert found.category == "driver_too_old"
    assert "evidence.insufficient_driver_in_container" in {r.rule for r in found.also_possible}
    # a runtime of a newer major (a CUDA 13 image on R550), or no container: the driver is too old indeed
    newer = named.replace("pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", "nvidia/cuda:13.0.0-base-ubuntu24.04")
    for log in (newer, "RuntimeError: CUDA driver version is insufficient for CUDA runtime version\n" + smi):
        named_anywhere = {r for f in diagnose(log) for r in (f.rule, *f.rules, *(a.rule for a in f.also_possible))}
        assert "evidence.insufficient_driver_in_container" not in named_anywhere, log
