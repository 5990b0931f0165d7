"""Issue #35, diagnosis from the emitters' own words (session 22): the GPU under WSL 2 is the Windows host's.
libnvidia-container's nvc_init (src/nvc.c) says "WSL environment detected but no adapters were found" where WSL's
dxcore holds no adapter with an NVIDIA driver that supports WSL (src/dxcore.c); NVML says NVML_ERROR_OPERATING_SYSTEM
("GPU access blocked by the operating system") and nvidia-container-cli's driver service fails where Windows gives the
VM no GPU. Neither is the container toolkit's plumbing. Each case is a real report's paste; the URL is beside it."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from provisioner.diagnose.catalogue import entry
from tests.support.diagnosis import top_and_rules

# AbdBarho/stable-diffusion-webui-docker#117 (WSL 1: "WSL2 has GPU support, WSL1 doesn't")
NO_ADAPTERS = (
    "docker compose --profile hlky up --build\n"
    "Attaching to webui-docker-hlky-1\n"
    "Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to "
    "start container process: error during container init: error running hook #0: error running hook: exit status 1, "
    "stdout: , stderr: Auto-detected mode as 'legacy'\n"
    "nvidia-container-cli: initialization error: WSL environment detected but no adapters were found: unknown")

# docker/for-win#10379: a Windows build without GPU paravirtualization (only Insider builds had it then)
WSL_DRIVER_SERVICE_FAILED = (
    "root@DESKTOP-5A67SBM:/home/anurag# docker run --rm -it --gpus=all nvcr.io/nvidia/k8s/cuda-sample:nbody nbody "
    "-gpu -benchmark\n"
    "docker: Error response from daemon: OCI runtime create failed: container_linux.go:370: starting container process "
    "caused: process_linux.go:459: container init caused: Running hook #0:: error running hook: exit status 1, stdout: "
    ", stderr: nvidia-container-cli: initialization error: driver error: failed to process request: unknown.")


def test_wsl_without_an_adapter_is_the_windows_gpu_not_the_container_toolkit() -> None:
    found = diagnose(NO_ADAPTERS)
    assert found[0].rule == "nodriver.wsl_no_gpu_adapter" and found[0].category == "no_driver_loaded", found[0]
    assert "wsl --update" in found[0].fix and "without the GPU" in found[0].fix
    assert any("no adapters were found" in e for e in found[0].evidence)
    # the toolkit's generic hook failure (container.nvidia_container_cli_error) is what it explains: not a finding of
    # its own beside it
    assert all(f.category != "container_device_missing" for f in found), [f.rule for f in found]
    without = NO_ADAPTERS.replace("WSL environment detected but no adapters were found", "load library failed: x")
    assert diagnose(without)[0].category == "container_device_missing"
    assert entry("nvc.wsl_no_adapters").source_url.endswith("/src/nvc.c")


def test_the_driver_service_failing_under_wsl_is_the_windows_gpu() -> None:
    category, rules = top_and_rules(WSL_DRIVER_SERVICE_FAILED)
    assert category == "no_driver_loaded" and "nodriver.wsl_gpu_unreachable" in rules
    # the same failure on a Linux host (no WSL, no Windows machine name) stays the toolkit's
    linux = WSL_DRIVER_SERVICE_FAILED.replace("root@DESKTOP-5A67SBM:/home/anurag#", "root@gpu01:~#")
    category, rules = top_and_rules(linux)
    assert category == "container_device_missing" and "nodriver.wsl_gpu_unreachable" not in rules


def test_nvml_blocked_by_the_operating_system_under_wsl_and_in_a_container() -> None:
    blocked = "$ nvidia-smi\nFailed to initialize NVML: GPU access blocked by the operating system\n"
    wsl = blocked + "$ uname -r\n5.15.153.1-microsoft-standard-WSL2\n"
    category, rules = top_and_rules(wsl)
    assert category == "no_driver_loaded" and "nodriver.wsl_gpu_unreachable" in rules
    # nvml.h: "blocked by the operating system/cgroups": in a Linux container it is the device cgroup
    docker = "$ docker exec -it ollama nvidia-smi\n" + blocked
    category, rules = top_and_rules(docker)
    assert category == "container_device_missing" and "container.nvml_unknown_or_permission" in rules
    assert "nodriver.wsl_gpu_unreachable" not in rules


def test_a_windows_machine_name_is_wsl_only_as_a_prompt() -> None:
    # a hostname that merely starts with DESKTOP in prose, or a longer name, is not Windows' generated one
    prose = WSL_DRIVER_SERVICE_FAILED.replace("root@DESKTOP-5A67SBM:/home/anurag#", "my DESKTOP-5A67SBM box:")
    assert "nodriver.wsl_gpu_unreachable" not in top_and_rules(prose)[1]
    longer = WSL_DRIVER_SERVICE_FAILED.replace("DESKTOP-5A67SBM", "DESKTOP-5A67SBMX2")
    assert "nodriver.wsl_gpu_unreachable" not in top_and_rules(longer)[1]


# jax-ml/jax#15361 (a comment: jaxlib built with cuDNN 8.6 finding 8.5; "reinstall with the cuda11_pip/cuda12_pip extras")
CUDNN_OLDER_XLA = (
    "2023-07-31 01:53:45.016563: E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:427] Loaded runtime CuDNN library: "
    "8.5.0 but source was compiled with: 8.6.0.  CuDNN library needs to have matching major version and equal or higher "
    "minor version. If using a binary install, upgrade your CuDNN library.  If building from sources, make sure the "
    "library loaded at runtime is compatible with the version specified during compile configuration.\n"
    "XlaRuntimeError                           Traceback (most recent call last)\n"
    "XlaRuntimeError: FAILED_PRECONDITION: DNN library initialization failed. Look at the errors above for more details.")


def test_xla_refusing_an_older_cudnn_is_the_library_not_the_driver() -> None:
    category, rules = top_and_rules(CUDNN_OLDER_XLA)
    assert category == "missing_shared_lib" and "lib.cudnn_older_than_build" in rules
    # TensorFlow 1.x's wording of the same check (tensorflow/stream_executor/cuda/cuda_dnn.cc)
    tf1 = ("E tensorflow/stream_executor/cuda/cuda_dnn.cc:343] Loaded runtime CuDNN library: 7.0.5 but source was "
           "compiled with: 7.2.1.  CuDNN library major and minor version needs to match or have higher minor version "
           "in case of CuDNN 7.0 or later version. If using a binary install, upgrade your CuDNN library.")
    assert top_and_rules(tf1) == ("missing_shared_lib", {"lib.cudnn_older_than_build"})
    # cuDNN failing to create its handle (often memory) is another failure: not this rule
    handle = ("E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:439] Could not create cudnn handle: "
              "CUDNN_STATUS_INTERNAL_ERROR\njaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library "
              "initialization failed.")
    assert "lib.cudnn_older_than_build" not in top_and_rules(handle)[1]
