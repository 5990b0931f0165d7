"""Issue #35, diagnosis from the emitters' own words (session 22).

The GPU under WSL 2 is the Windows host's: libnvidia-container's nvc_init (src/nvc.c) says "WSL environment detected
but no adapters were found" where WSL's dxcore holds no adapter with an NVIDIA driver that supports WSL (src/dxcore.c);
nvidia-smi says NVML_ERROR_OPERATING_SYSTEM ("GPU access blocked by the operating system") where Windows gives the VM no
GPU, while inside a container that started the same words are the container's device cgroup. WSL is read from what its
machines print, never from a mention. XLA's and TensorFlow's cuDNN check (cuda_dnn.cc) in its three wordings. Each case
is a real report's paste; the URL is beside it."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from provisioner.diagnose.catalogue import entry
from provisioner.diagnose.evidence import log_evidence
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
    # the library's own string, without the CLI's prefix (as docker compose shows it after the daemon's refusal)
    bare = ('Error response from daemon: could not select device driver "nvidia" with capabilities: [[gpu]]\n'
            "WSL environment detected but no adapters were found: unknown")
    assert diagnose(bare)[0].rule == "nodriver.wsl_no_gpu_adapter"
    without = NO_ADAPTERS.replace("WSL environment detected but no adapters were found", "load library failed: x")
    assert diagnose(without)[0].category == "container_device_missing"
    assert entry("nvc.wsl_no_adapters").source_url.endswith("/src/nvc.c")


def test_the_driver_service_failing_under_wsl_is_named_beside_the_toolkit() -> None:
    found = diagnose(WSL_DRIVER_SERVICE_FAILED)
    assert found[0].category == "no_driver_loaded" and found[0].rule == "nodriver.wsl_driver_service_failed"
    assert "/usr/lib/wsl/lib/nvidia-smi" in found[0].fix and "container toolkit" in found[0].fix
    # the same failure on a Linux host (no WSL, no Windows machine name) stays the toolkit's
    linux = WSL_DRIVER_SERVICE_FAILED.replace("root@DESKTOP-5A67SBM:/home/anurag#", "root@gpu01:~#")
    category, rules = top_and_rules(linux)
    assert category == "container_device_missing" and "nodriver.wsl_driver_service_failed" not in rules


# libnvidia-container's debug output on any host (`nvidia-container-cli -k -d /dev/tty info`, which NVIDIA's issue
# template asks for): it names WSL while saying the host is not WSL
NOT_WSL_DEBUG = (
    "I0301 10:00:00.000000 1234 nvc.c:389] attempting to load dxcore to see if we are running under Windows Subsystem "
    "for Linux (WSL)\n"
    "I0301 10:00:00.000100 1234 nvc.c:402] dxcore initialization failed, continuing assuming a non-WSL environment\n")


def test_wsl_is_read_from_what_machines_print_not_from_a_mention() -> None:
    host = WSL_DRIVER_SERVICE_FAILED.replace("root@DESKTOP-5A67SBM:/home/anurag#", "root@gpu01:~#")
    for text in (NOT_WSL_DEBUG + host,
                 "Our lab also has Windows machines with WSL; this is the Ubuntu 22.04 server:\n" + host,
                 host.replace("root@gpu01:~#", "root@desktop-server1:~#"),  # Windows generates capitals
                 host.replace("root@gpu01:~#", "my DESKTOP-5A67SBM box:"),  # not a prompt
                 host.replace("root@gpu01:~#", "root@DESKTOP-5A67SBMX2:~#")):  # not Windows' seven characters
        category, rules = top_and_rules(text)
        assert category == "container_device_missing" and not any("wsl" in r for r in rules), (text, rules)
    for marker in ("$ uname -r\n5.15.153.1-microsoft-standard-WSL2\n", "$ ls /usr/lib/wsl/lib\nlibcuda.so\n",
                   "PS C:\\Users\\me> wsl --update\n", "I am getting this when I run it from WSL2.\n"):
        assert top_and_rules(marker + host)[0] == "no_driver_loaded", marker


def test_the_evidence_reads_wsl_where_the_rules_do() -> None:
    """The facts' `wsl` place (which steers the evidence's decisions) and the rules' WSL context are one reading: a
    mention or libnvidia-container's "(WSL)" debug line is not WSL for either."""
    not_wsl = (NOT_WSL_DEBUG, "Our lab also has Windows machines with WSL; this is the server.\n",
               "root@desktop-server1:~# nvidia-smi\n", "my DESKTOP-5A67SBM box:\n")
    wsl = ("$ uname -r\n5.15.153.1-microsoft-standard-WSL2\n", "$ ls /usr/lib/wsl/lib\nlibcuda.so\n",
           "PS C:\\Users\\me> wsl --update\n", "I am getting this when I run it from WSL2.\n",
           "root@DESKTOP-5A67SBM:/home/anurag# nvidia-smi\n", "WSL_DISTRO_NAME=Ubuntu-22.04\n")
    for text in not_wsl:
        assert "wsl" not in log_evidence(text).places, text
    for text in wsl:
        assert "wsl" in log_evidence(text).places, text


def test_nvml_blocked_by_the_operating_system_on_the_host_and_in_a_container() -> None:
    # microsoft/WSL#10289, #14339: nvidia-smi under WSL 2 where Windows gives the VM no GPU
    blocked = ("$ nvidia-smi\nFailed to initialize NVML: GPU access blocked by the operating system\n"
               "Failed to properly shut down NVML: GPU access blocked by the operating system\n")
    for text in (blocked, blocked + "$ uname -r\n5.15.153.1-microsoft-standard-WSL2\n"):
        found = diagnose(text)
        assert found[0].rule == "nodriver.wsl_gpu_unreachable" and found[0].category == "no_driver_loaded", found
        assert all(f.category != "container_device_missing" for f in found), [f.rule for f in found]
    # inside a container that started (NVIDIA/nvidia-container-toolkit#85: WSL 2, `no-cgroups = true`): the runtime
    # found the GPU, the container's device cgroup blocks it
    in_container = ("On WSL2 Ubuntu 22.04:\n$ uname -r\n5.15.90.1-microsoft-standard-WSL2\n"
                    "$ sudo docker run --rm --runtime=nvidia --gpus all ubuntu nvidia-smi\n"
                    "Failed to initialize NVML: GPU access blocked by the operating system\n")
    found = diagnose(in_container)
    assert found[0].rule == "container.nvml_blocked_in_container", [f.rule for f in found]
    assert "no-cgroups" in found[0].fix
    assert top_and_rules("$ docker exec -it ollama nvidia-smi\n" + blocked)[1] >= {"container.nvml_blocked_in_container"}


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
    assert category == "missing_shared_lib" and "lib.cudnn_mismatch_with_build" in rules
    # TensorFlow 1.x's wording of the same check (tensorflow/stream_executor/cuda/cuda_dnn.cc)
    tf1 = ("E tensorflow/stream_executor/cuda/cuda_dnn.cc:343] Loaded runtime CuDNN library: 7.0.5 but source was "
           "compiled with: 7.2.1.  CuDNN library major and minor version needs to match or have higher minor version "
           "in case of CuDNN 7.0 or later version. If using a binary install, upgrade your CuDNN library.")
    assert top_and_rules(tf1) == ("missing_shared_lib", {"lib.cudnn_mismatch_with_build"})
    # early TensorFlow's wording (cuDNN compatibility versions; endernewton/tf-faster-rcnn#436)
    early = ("E tensorflow/stream_executor/cuda/cuda_dnn.cc:396] Loaded runtime CuDNN library: 7201 (compatibility "
             "version 7200) but source was compiled with 7004 (compatibility version 7000).  If using a binary install, "
             "upgrade your CuDNN library to match.")
    assert top_and_rules(early) == ("missing_shared_lib", {"lib.cudnn_mismatch_with_build"})
    # cuDNN failing to create its handle (often memory) is another failure: not this rule
    handle = ("E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:439] Could not create cudnn handle: "
              "CUDNN_STATUS_INTERNAL_ERROR\njaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library "
              "initialization failed.")
    assert "lib.cudnn_mismatch_with_build" not in top_and_rules(handle)[1]


def test_under_wsl_a_driver_not_loaded_gets_the_windows_fix_not_a_module_rebuild() -> None:
    wsl = "$ uname -r\n5.15.153.1-microsoft-standard-WSL2\n"
    for failure in ("$ nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
                    "sure that the latest NVIDIA driver is installed and running.\n",
                    # NVIDIA/k8s-device-plugin#219 on WSL 2
                    "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown\n"):
        found = diagnose(wsl + failure)
        assert found[0].rule == "nodriver.wsl_driver_not_reached" and "wsl --update" in found[0].fix, found[0]
        assert "dkms" not in found[0].fix.lower()
        # on a Linux host the module's own rules keep their fixes
        assert diagnose(failure)[0].rule != "nodriver.wsl_driver_not_reached"
    # a Linux driver being built inside WSL: the install's own failure leads
    dkms = (wsl + "$ sudo apt install nvidia-driver-440\nError! Your kernel headers for kernel 5.15.153.1-microsoft-"
            "standard-WSL2 cannot be found.\nError! Bad return status for module build on kernel: 5.15.153.1-microsoft-"
            "standard-WSL2 (x86_64)\nConsult /var/lib/dkms/nvidia/440.100/build/make.log for more information.\n"
            "$ nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert diagnose(dkms)[0].rule != "nodriver.wsl_driver_not_reached"
