"""Issue #35: where no known message matched, the layer a log's failing lines point at (provisioner/diagnose/layers.py).

Each log is a real paste from the public thread named beside it (bench/heldout-2026-12-06e.jsonl holds them whole,
`set` e-work: read while writing this); the healthy lines are real outputs of working systems.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.diagnose import diagnose
from provisioner.diagnose.engine import fact_text_candidates
from provisioner.diagnose.evidence import log_evidence
from provisioner.diagnose.layers import CONFIDENCE, failing_lines, guess_layer
from provisioner.diagnose.normalize import clean_log
from tests.support.diagnosis import layer_guess

# https://github.com/PaddlePaddle/Paddle/issues/26892 (Paddle's allocator, no rule knows its wording)
PADDLE_OOM = (
    "问题描述：训练过程中提示 GPU 已满，减小 batch size 也无法解决该问题。\n"
    "报错信息：Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0, available memory is only \n"
    "                   416.625000MB.\n"
    "                   Please check whether there is any other process using GPU 0.\n"
)
# https://github.com/ublue-os/bluefin/issues/2845 (the image build's own version guard)
KMOD_SKEW = (
    "  ++ rpm -q --queryformat '%{VERSION}-%{RELEASE}' kmod-nvidia\n"
    "  + KMOD_VERSION=575.64.03-1.fc42\n"
    "  Error: kmod-nvidia version (575.64.03-1.fc42) does not match nvidia-driver version (575.64.05-1.fc42)\n"
    "  error: Recipe `build` failed with exit code 1\n"
)
# https://github.com/void-linux/void-packages/issues/16778 (xbps's DKMS trigger)
DKMS_VOID = (
    "Latest update of the linux5.3 (linux5.3.13_1) fails to build DKMS module for nvidia-390.132\n"
    "linux5.3-5.3.13_1: configuring ...\n"
    "Building DKMS module: nvidia-390.132... FAILED!\n"
)
# https://github.com/ublue-os/aurora/issues/148 (the report's own words, no program's)
PROSE_MISMATCH = ("On aurora-dx-nvidia with stable-daily, the Nvidia drivers have mismatched versions, at least, I think "
                  "so. This is causing the desktop to be rendered only via software, causing slow performance.\n")


@pytest.mark.parametrize(("text", "category", "line"), [
    (PADDLE_OOM, "oom_or_hw", 2),
    (KMOD_SKEW, "driver_lib_mismatch", 3),
    (DKMS_VOID, "installer_failure", 3),
    (PROSE_MISMATCH, "driver_lib_mismatch", 1),
])
def test_unknown_wording_gets_its_layer(text: str, category: str, line: int) -> None:
    found = diagnose(text)
    assert [f.category for f in found] == [category]
    assert found[0].rule == f"layer.{category}" and found[0].confidence == CONFIDENCE
    assert "No message this tool knows matched" in found[0].root_cause
    assert line in [e.line for e in found[0].evidence_lines]


def test_a_known_message_wins_and_the_layer_stays_silent() -> None:
    """The guess is made only where nothing else found a cause."""
    text = PADDLE_OOM + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total)\n"
    found = diagnose(text)
    assert found and found[0].category == "oom_or_hw" and not any(r.startswith("layer.") for r in found[0].rules)


@pytest.mark.parametrize("line", [
    # uv on a healthy install (the healthy set: uv-pip-install-hardlink-warning)
    "warning: Failed to hardlink files; falling back to full copy. This may lead to degraded performance.",
    # nccl-tests on a healthy node (tests/fixtures/logs/clean-nccl-tests-all-reduce.log)
    "ct101:41873:41873 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.",
    "ct101:41873:41873 [0] NCCL INFO NET/IB : No device found.",
    # pip's notice after an install that went on (pip's src/pip/_internal/operations/check.py)
    "ERROR: pip's dependency resolver does not currently take into account all the packages that are installed.",
    # nvidia-installer on a healthy userspace install (tests/fixtures/logs/clean-nvidia-run-userspace.log): hedged
    "WARNING: nvidia-installer was forced to guess the X library path '/usr/lib64' and X module path "
    "'/usr/lib64/xorg/modules'; these paths were not queryable from the system.  If X fails to find the NVIDIA X "
    "driver module, please install the `pkg-config` utility and the X.Org SDK/development package for your "
    "distribution and reinstall the driver.",
    # nvidia-smi -q's section title (tests/fixtures/outputs/smi_q_a100_x2_535.txt)
    "    ECC Errors",
    # this project's own run log: a planned change, not a failure (tests/fixtures/runs/20261203T131151-82a539.jsonl)
    '{"ts":1796303523.2599308,"host":"127.0.0.1:34011","kind":"step.finished","index":4,"step":"lxc.boot_persistence",'
    '"status":"changed","message":"boot unit gpu-provisioner-nvidia-nodes.service is not installed: after a reboot the '
    'passed device nodes are missing before pve-guests starts containers → install it"}',
])
def test_lines_whose_failure_word_counts_nothing(line: str) -> None:
    assert failing_lines([line]) == []


def test_one_weak_word_is_not_a_layer() -> None:
    """inxi on a healthy desktop: "FAILED: nvidia" beside nouveau, repeated (the healthy set's own line)."""
    line = "Display: server: X.Org 1.20.4 driver: nouveau,vesa FAILED: nvidia unloaded: fbdev,modesetting"
    assert diagnose(line) == []
    assert diagnose("\n".join([line] * 50)) == []  # a line repeated weighs once


def test_context_decides_the_container_layers() -> None:
    """The same failing words are the LXC config's in an LXC log and the runtime's in a docker one."""
    lines = ["ls: cannot access '/dev/nvidia-uvm': No such file or directory",
             "Failed to initialize NVML: Unknown Error"]  # nvidia-smi's nvmlErrorString(999)
    lxc = "root@pve:~# pct enter 105\n" + "\n".join(lines)
    docker = "$ docker exec -it jellyfin bash\n" + "\n".join(lines)
    g_lxc = layer_guess(lxc)
    g_docker = layer_guess(docker)
    assert g_lxc is not None and g_lxc.category == "proxmox_lxc"
    assert g_docker is not None and g_docker.category == "container_device_missing"


def test_a_tie_between_layers_is_no_guess() -> None:
    libs = "error: libcudnn.so.9 not found\nerror: libcublas.so.12 not found\n"  # missing_shared_lib: 3 + 3
    nccl = "NCCL failed: unhandled system error\nNCCL WARN Bootstrap failed\n"  # nccl_failure: 3 + 3
    tie = libs + nccl
    assert layer_guess(tie) is None
    more = tie + "error: libcufft.so.11 not found\n"
    g = layer_guess(more)
    assert g is not None and (g.category, g.score, g.runner_up, g.runner_up_score) == ("missing_shared_lib", 9,
                                                                                     "nccl_failure", 6)


def test_a_probes_output_is_never_guessed_at() -> None:
    """The doctor's probes (`grep: /proc/modules: No such file or directory`) are facts, not a failing log."""
    assert fact_text_candidates(PADDLE_OOM) == []
    assert diagnose(PADDLE_OOM)  # the same text as a log does get its layer


def test_a_json_line_that_says_it_failed_is_read() -> None:
    """A JSON event is judged by its own level/status field; docker's json-file lines (`{"log", "stream", "time"}`,
    https://docs.docker.com/engine/logging/drivers/json-file/) have none and are read as text."""
    failed = '{"ts":1796303523.2,"kind":"step.finished","step":"driver.install","status":"failed","message":"nvidia-installer failed"}'
    docker = ('{"log":"RuntimeError: Library libcublas.so.11 is not found or cannot be loaded\\n","stream":"stderr",'
              '"time":"2023-03-01T10:00:00.000000000Z"}')
    assert failing_lines([failed]) == [(0, failed)]
    assert failing_lines([docker]) == [(0, docker)]


# NVIDIA/nvidia-container-toolkit#394: the container runtime reports the host's driver/library mismatch (the
# runtime's lines carry it: its words are the messenger's, not the layer)
RUNTIME_CARRIES_MISMATCH = (
    "$ docker run --rm --gpus all nvidia/cuda:12.3.2-base-ubuntu22.04 nvidia-smi\n"
    "docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime "
    "create failed: runc create failed: unable to start container process: error during container init: error running "
    "hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
    "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown.\n"
)


def test_the_runtime_that_carried_a_version_comparison_is_not_its_layer() -> None:
    guess = layer_guess(RUNTIME_CARRIES_MISMATCH)
    assert guess is not None and guess.category == "driver_lib_mismatch", guess
    # the same runtime's lines with no version comparison beside them are the container's layer
    alone = RUNTIME_CARRIES_MISMATCH.replace("nvml error: driver/library version mismatch", "mount error: stat failed")
    guess = layer_guess(alone)
    assert guess is not None and guess.category == "container_device_missing", guess


# NVIDIA/NVSentinel#155 (dmesg: a GPU fallen off the bus, no Xid) and NVIDIA/open-gpu-kernel-modules#688 (a DGX
# Station's lost GPU): the kernel module's "NVRM:" is on every line it prints, the hardware's words are the layer
FALLEN_OFF_NO_XID = (
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
    "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
    "               NVRM: fallen off the bus and is not responding to commands.\n"
    "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).\n"
    "[ 1843.439669] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
    "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025\n"
)
GPU_LOST_ASSERT = (
    "Feb 17 08:00:34 abggdna-DGX-Station-A100 kernel: NVRM: nvAssertOkFailedNoLog: Assertion failed: GPU lost from the "
    "bus [NV_ERR_GPU_IS_LOST] (0x0000000F) returned from rmStatus @ kernel_ce_gv100.c:106\n"
    "Feb 17 08:00:34 abggdna-DGX-Station-A100 kernel: NVRM: _issueRpcAndWait: rpcSendMessage failed with status "
    "0x0000000f for fn 76!\n"
)


# ray-project/ray#42246 (an image's CUDA 11.8 requirement on an older driver, reported by the container runtime) and
# NVIDIA/nvidia-docker#68 (nvidia-docker 1's own comparison)
RUNTIME_CARRIES_REQUIREMENT = (
    "2023-12-23 03:00:43,078 VINFO command_runner.py:371 -- Running `docker run --rm --name ray_nvidia_docker -d -it  "
    "-e LC_ALL=C.UTF-8 -e LANG=C.UTF-8 --shm-size='2301055426.56b' --runtime=nvidia --net=host "
    "rayproject/ray:latest-gpu bash`\n"
    "docker: Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: "
    "unable to start container process: error during container init: error running hook #0: error running hook: exit "
    "status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
    "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=11.8, please update your driver to a newer "
    "version, or use an earlier cuda container: unknown.\n"
)
NVIDIA_DOCKER1_CUDA = ("$ nvidia-docker run --rm nvidia/cuda nvidia-smi\n"
                       "nvidia-docker | 2016/04/09 00:07:59 Error: unsupported CUDA version: 7.5 < 6.5\n")


# Project-HAMi/HAMi#704: a container started without the NVIDIA runtime (the driver's libcuda is the runtime's to
# mount), and microsoft/WSL#4326 (the .run installer inside WSL 2)
DRIVER_LIB_IN_CONTAINER = (
    "root@xzx-G3-3579:/home/xzx# docker run ${LIBRARY_MOUNTS} ${DEVICE_MOUNTS} -it\n"
    "-e CUDA_DEVICE_MEMORY_LIMIT=2g\n-e LD_PRELOAD=/libvgpu/build/libvgpu.so\ncuda_vmem:tf1.8-cu90\nnvidia-smi\n"
    "/bin/bash: error while loading shared libraries: libcuda.so.1: cannot open shared object file: No such file or "
    "directory\n"
)
INSTALLING_THE_DRIVER = (
    "Installing NVIDIA Driver on WSL 2: unable to find kernel source tree for currently running kernel.\n\n"
    "* When I try to install NVIDIA driver on WSL 2, the driver yields an error: cannot find the current kernel tree.\n"
)


# pytorch/pytorch#108607: a nightly that resolved to a CPU build; the check's answer and collect_env's lines say so,
# and no line holds a failure word
CPU_NIGHTLY = (
    "> mamba install pytorch torchvision torchaudio pytorch-cuda=11.8 -c pytorch-nightly -c nvidia\n"
    "> python\n>>> import torch\n>>> torch.cuda.is_available()\nFalse # should be True, no??\n\n"
    "Collecting environment information...\nPyTorch version: 2.1.0.dev20230905\nIs debug build: False\n"
    "CUDA used to build PyTorch: Could not collect\nROCM used to build PyTorch: N/A\n\n"
    "OS: Ubuntu 22.04.3 LTS (x86_64)\nIs CUDA available: False\nCUDA runtime version: 11.8.89\n"
)


def test_a_check_that_answers_no_is_a_failure_and_collect_env_names_the_cpu_build() -> None:
    lines = clean_log(CPU_NIGHTLY).lines
    assert any("is_available() -> False" in text for _, text in failing_lines(lines))
    guess = guess_layer(lines, log_evidence(CPU_NIGHTLY))
    assert guess is not None and guess.category == "cpu_only_wheel", guess
    # the same check answering yes is no failure
    healthy = ">>> import torch\n>>> torch.cuda.is_available()\nTrue\n>>> torch.cuda.device_count()\n8\n"
    assert failing_lines(clean_log(healthy).lines) == []


# secureblue/secureblue#1043 (a module signature the kernel refuses: a reporter's words) and damomine/aleominer#14
# (a Rust NVML binding's panic): the driver absent or refused, in the words of the layers above it
SIG_REJECTED = ("After a clean install, when using `module.sig_enforce=1`, the Nvidia module keys are rejected. This "
                "happens with both proprietary and open source drivers.\nThe nvidia modules are rejected\n")
RUST_NVML = ("thread 'main' panicked at 'Failed to initialize nvml: DriverNotLoaded', src/environment/mod.rs:37:31\n"
             "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\nAborted (core dumped)\n")


# facebookresearch/detectron2#233 (built on a K80, run on a P100): c10's stack frames name libraries on the way, they
# report no failure of their own
STACK_FRAMES = (
    "RuntimeError: CUDA error: no kernel image is available for execution on the device (ROIAlign_forward_cuda at "
    "/net/mraid11/export/data/Projects/detectron2/detectron2_repo/detectron2/layers/csrc/ROIAlign/ROIAlign_cuda.cu:361)\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string const&) + 0x47 (0x2af4cfc99687 in "
    "/home/data/Software/Anaconda3_2018/envs/detectron2/lib/python3.7/site-packages/torch/lib/libc10.so)\n"
    "frame #1: detectron2::ROIAlign_forward_cuda(at::Tensor const&, at::Tensor const&, float, int, int, int, bool) + "
    "0x9f7 (0x2af4eab00151 in /net/mraid11/export/data/Projects/detectron2/detectron2_repo/detectron2/"
    "_C.cpython-37m-x86_64-linux-gnu.so)\n"
)


def test_stack_frames_are_not_failing_lines() -> None:
    lines = clean_log(STACK_FRAMES).lines
    assert [i for i, _ in failing_lines(lines)] == [0]
    guess = guess_layer(lines, log_evidence(STACK_FRAMES))
    assert guess is not None and guess.category == "arch_unsupported", guess


# NVIDIA/k8s-device-plugin#480: the failure is helm's template; the dmesg beside it is a driver that loaded (unsigned,
# signatures not enforced: "module verification failed … tainting kernel")
HELM_BESIDE_A_LOADED_DRIVER = (
    "$ helm upgrade -i nvdp nvdp/nvidia-device-plugin --namespace nvidia-device-plugin --create-namespace --version "
    "0.14.4\n"
    "Error: parse error at (nvidia-device-plugin/templates/daemonset-device-plugin.yml:154): undefined variable "
    "\"$hasServiceAccount\"\n"
    "sudo dmesg |grep -i nvidia\n"
    "[    2.829492] nvidia: loading out-of-tree module taints kernel.\n"
    "[    2.846803] nvidia: module verification failed: signature and/or required key missing - tainting kernel\n"
    "[    2.961803] nvidia-nvlink: Nvlink Core is being initialized, major device number 239\n"
    "[    3.011519] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  525.147.05  Wed Oct 25 20:27:35 UTC 2023\n"
    "[    3.246521] [drm] Initialized nvidia-drm 0.0.0 20160202 for 0000:01:00.0 on minor 0\n"
)


@pytest.mark.parametrize("text", [
    HELM_BESIDE_A_LOADED_DRIVER,
    # nvidia-smi -q's reset fields on a healthy GPU (R530+; R570+ words the first as deprecated)
    "    GPU Reset Status\n        Reset Required                    : No\n"
    "        Drain and Reset Recommended       : N/A\n",
    "        Reset Required                    : Requested functionality has been deprecated\n",
    # a healthy collect_env (its "Could not collect" fields, conda's included)
    "CUDA used to build PyTorch: 12.1\nIs CUDA available: True\nCUDA runtime version: Could not collect\n"
    "cuDNN version: Could not collect\n[pip3] torch==2.3.0\n[conda] Could not collect\n",
    # pytest skipping what the runner has not got; another backend's check answering no
    "SKIPPED [2] tests/test_distributed.py:14: NCCL is not available\n",
    "In [4]: torch.backends.mps.is_available()\nOut[4]: False\n",
])
def test_what_is_not_a_failure_gets_no_layer(text: str) -> None:
    assert layer_guess(text) is None
    assert diagnose(text) == []


def test_a_successful_nvidia_installer_log_gets_no_finding() -> None:
    # the reference host's userspace install (tests/fixtures/outputs, README there): its "-> " lines are the installer's
    # progress ("-> Unable to scan initramfs: no tool found" included); it ends "… is now complete."
    text = (Path(__file__).parent / "fixtures/outputs/nvidia_installer_success_userspace.log").read_text()
    assert "-> Unable to scan initramfs" in text
    assert diagnose(text) == []


# pytorch/pytorch#41005 (a 32-bit Python) and ByteDance-Seed/VeOmni#147 (uv on aarch64): the `+cpu` in a resolver's
# failure is the version asked for, not a CPU build installed
PIP_ASKED_FOR_CPU = (
    "C:\\Python\\Python37-32\\Scripts>pip install torch==1.5.1+cpu torchvision==0.6.1+cpu -f "
    "https://download.pytorch.org/whl/torch_stable.html\n"
    "ERROR: Could not find a version that satisfies the requirement torch==1.5.1+cpu (from versions: 0.1.2, 0.1.2.post1, "
    "0.1.2.post2)\nERROR: No matching distribution found for torch==1.5.1+cpu\n"
)
UV_ASKED_FOR_CPU = (
    "error: Distribution `torchaudio==2.6.0+cpu @ registry+https:/download.pytorch.org/whl/` can't be installed because "
    "it doesn't have a source distribution or wheel for the current platform\n"
)


@pytest.mark.parametrize(("text", "category"), [
    # the kernel module's "NVRM:" is on every line it prints: the hardware's words are the layer
    pytest.param(FALLEN_OFF_NO_XID, "oom_or_hw", id="fallen-off-the-bus-no-xid"),
    pytest.param(GPU_LOST_ASSERT, "oom_or_hw", id="gpu-lost-assert"),
    # a CUDA requirement the container runtime reports is the driver's version
    pytest.param(RUNTIME_CARRIES_REQUIREMENT, "driver_too_old", id="runtime-carries-a-cuda-requirement"),
    pytest.param(NVIDIA_DOCKER1_CUDA, "driver_too_old", id="nvidia-docker-1-cuda-version"),
    # whose library, whose install: the driver's libcuda in a container is the runtime's to mount, a toolkit library is
    # the image's; installing the driver is the installer's layer
    pytest.param(DRIVER_LIB_IN_CONTAINER, "container_device_missing", id="driver-library-in-a-container"),
    pytest.param(DRIVER_LIB_IN_CONTAINER.replace("libcuda.so.1", "libcublas.so.9.0"), "missing_shared_lib",
                 id="toolkit-library-in-a-container"),
    pytest.param(INSTALLING_THE_DRIVER, "installer_failure", id="installing-the-driver"),
    # the driver absent or refused in the words of the layers above it
    pytest.param(SIG_REJECTED, "no_driver_loaded", id="module-key-rejected"),
    pytest.param(RUST_NVML, "no_driver_loaded", id="nvml-driver-not-loaded"),
    # a `+cpu` a resolver cannot find is the version asked for
    pytest.param(PIP_ASKED_FOR_CPU, "resolver_failure", id="pip-asked-for-cpu"),
    pytest.param(UV_ASKED_FOR_CPU, "resolver_failure", id="uv-asked-for-cpu"),
])
def test_the_layer_of_wordings_no_rule_knows(text: str, category: str) -> None:
    guess = layer_guess(text)
    assert guess is not None and guess.category == category, guess

