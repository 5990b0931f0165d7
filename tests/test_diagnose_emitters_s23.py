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
    assert top_and_rules(nouveau) == ("no_driver_loaded", {"nodriver.probe_conflict"})


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
