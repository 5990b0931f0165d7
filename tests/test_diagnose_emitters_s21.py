"""Issue #35, diagnosis from the emitters' own words (session 21): nvidia-docker 1.x's own errors (read in
NVIDIA/nvidia-docker at v1.0.0 and v1.0.1, with the beta tags' shorter wordings), ONNX Runtime's execution providers
(the CPU package against onnxruntime-gpu, onnxruntime_inference_collection.py), and a hang told as a stall. Each case
is the program's wording as a real report pasted it; the URL is beside each."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from provisioner.diagnose.catalogue import entry
from provisioner.diagnose.layers import failing_lines
from tests.support.diagnosis import all_rules, top_and_rules

# NVIDIA/nvidia-docker#137: after the EC2 instance restarted on another kernel, nvidia-modprobe could not load nvidia-uvm
UVM_NOT_LOADED = (
    "Then I stop the instance ``docker-machine stop aws01`` and start it again and test again:\n"
    "ubuntu@aws04:~$ nvidia-docker run --rm nvidia/cuda nvidia-smi\n"
    "nvidia-docker | 2016/07/13 23:40:32 Error: Could not load UVM kernel module\n"
    "This time it fails. Is this expected behavior?")

# NVIDIA/nvidia-docker#68: the nvidia/cuda image of CUDA 7.5 on a driver for CUDA 6.5 (the beta's wording)
IMAGE_NEWER_THAN_DRIVER = (
    "$ nvidia-docker run --rm nvidia/cuda nvidia-smi \n"
    "nvidia-docker | 2016/04/09 00:07:59 Error: unsupported CUDA version: 7.5 < 6.5")


def test_nvidia_docker_1_could_not_load_uvm_is_the_kernel_module_not_the_container() -> None:
    found = diagnose(UVM_NOT_LOADED)
    assert found[0].category == "no_driver_loaded" and found[0].rule == "nodriver.uvm_module_load_failed"
    assert any("Could not load UVM kernel module" in e for e in found[0].evidence)
    # the later wording asks about nvidia-modprobe: the same finding
    later = UVM_NOT_LOADED.replace("kernel module\n", "kernel module. Is nvidia-modprobe installed?\n")
    assert diagnose(later)[0].rule == "nodriver.uvm_module_load_failed"


def test_nvidia_docker_1_unsupported_cuda_version_is_a_driver_too_old_for_the_image() -> None:
    category, rules = top_and_rules(IMAGE_NEWER_THAN_DRIVER)
    assert category == "driver_too_old" and "driver.container_requirement" in rules
    category, rules = top_and_rules("nvidia-docker | Error: unsupported CUDA version: driver 8.0 < image 9.0")
    assert category == "driver_too_old" and "driver.container_requirement" in rules


def test_nvidia_docker_1_entries_carry_the_releases_that_print_them() -> None:
    uvm = entry("nvdocker1.uvm_load_failed")
    assert uvm.format == "Could not load UVM kernel module. Is nvidia-modprobe installed?"
    assert [w.versions for w in uvm.wordings] == [("v1.0.0", "v1.0.1"), ("recorded",)]
    assert entry("nvdocker1.unsupported_cuda_version").source_url.endswith("/v1.0.1/src/nvidia-docker/utils.go")


# OHF-Voice/microWakeWord (a notebook in its Docker image): torch sees the GPU, onnxruntime offers no CUDA provider
ORT_CPU_LISTED = (
    "🔧 Torch CUDA Available: True\n  • Device count: 1\n  • Device name: NVIDIA GeForce RTX 4060 Ti\n\n"
    "🔧 ONNX Runtime Providers:\n  • ['AzureExecutionProvider', 'CPUExecutionProvider']\n"
    "⚠️  CUDAExecutionProvider not available — ONNX will fall back to CPU.")
# the warning ONNX Runtime 1.16+ prints (a mase-tools notebook's output)
ORT_WARNING = (
    "/root/anaconda3/envs/mase/lib/python3.11/site-packages/onnxruntime/capi/onnxruntime_inference_collection.py:69: "
    "UserWarning: Specified provider 'CUDAExecutionProvider' is not in available provider names.Available providers: "
    "'AzureExecutionProvider, CPUExecutionProvider'\n  warnings.warn(")


def test_onnxruntime_without_a_cuda_provider_is_the_cpu_package() -> None:
    older = ("ValueError: Specified provider 'CUDAExecutionProvider' is unavailable. Available providers: "
             "'CPUExecutionProvider'")  # ORT <= 1.8 raised it
    for log in (ORT_CPU_LISTED, ORT_WARNING, older):
        found = diagnose(log)
        assert found[0].category == "cpu_only_wheel" and found[0].rule == "cpu.onnxruntime_cpu_package", log
    assert "onnxruntime-gpu" in diagnose(ORT_WARNING)[0].fix


def test_onnxruntime_gpu_package_is_not_called_the_cpu_package() -> None:
    # the GPU package lists CUDA: asking for TensorRT from it is not a CPU build
    trt = ("UserWarning: Specified provider 'TensorrtExecutionProvider' is not in available provider names."
           "Available providers: 'CUDAExecutionProvider, AzureExecutionProvider, CPUExecutionProvider'")
    assert "cpu.onnxruntime_cpu_package" not in all_rules(trt)
    # the GPU package whose CUDA provider library failed to load falls back to the CPU: a library, not the package
    fell_back = (
        "[E:onnxruntime:Default, provider_bridge_ort.cc:1480 TryGetProviderInfo_CUDA] Failed to load library "
        "libonnxruntime_providers_cuda.so with error: libcublasLt.so.11: cannot open shared object file: No such "
        "file or directory\nApplied providers: ['CPUExecutionProvider']\n"
        "available: ['AzureExecutionProvider', 'CPUExecutionProvider']")
    category, rules = top_and_rules(fell_back)
    assert "cpu.onnxruntime_cpu_package" not in rules and category == "missing_shared_lib"
    # a session's applied providers alone (['CPUExecutionProvider']) say nothing about the package
    assert "cpu.onnxruntime_cpu_package" not in all_rules("Applied providers: ['CPUExecutionProvider'], with options")


# NVIDIA/nccl#104: nccl-tests on 8 M40s prints its header and stops (PCIe ACS); the report says "stalled"
STALLED = (
    "When i use nccl test on 8xM40 GPU, it will be stalled.\n\n> Using devices\n"
    "   Rank  0 uses device  0 [0x05] Tesla M40 24GB\n   Rank  1 uses device  1 [0x08] Tesla M40 24GB\n"
    ">      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res")


def test_a_stall_is_a_failure_and_nccl_names_the_layer() -> None:
    assert any("stalled" in line for _, line in failing_lines(STALLED.splitlines()))
    found = diagnose(STALLED)
    assert found and found[0].category == "nccl_failure" and found[0].rule == "layer.nccl_failure"
    # Python's healthy notice about frozen modules is not a freeze
    assert not failing_lines(["Debugger warning: It seems that frozen modules are being used"])


# apt and dnf in their own words (Debian/apt, rpm-software-management/dnf, libsolv), about a GPU package
def test_apt_and_dnf_cannot_install_a_gpu_package() -> None:
    cases = (
        # NVIDIA/nvidia-docker#298 (the cudnn5 -dev image's apt step), tensorflow/tensorflow#44300
        "Reading package lists...\nE: Unable to locate package libcudnn7=7.6.5.32-1+cuda10.2",
        "Package cuda-toolkit-12-4 is not available, but is referred to by another package.\n"
        "E: Package 'cuda-toolkit-12-4' has no installation candidate",
        "No match for argument: cuda-toolkit-12-4\nError: Unable to find a match: cuda-toolkit-12-4",
        "Error: \n Problem: package nvidia-driver-3:550.54.15-1.el9.x86_64 requires nvidia-kmod-common = 3:550.54.15, "
        "but none of the providers can be installed\n  - cannot install the best candidate for the job",
    )
    for log in cases[:3]:
        found = diagnose(log)
        assert found[0].category == "installer_failure" and found[0].rule == "installer.gpu_package_not_installable", log
    # libsolv's "none of the providers" is dnf's depsolve problem, whose fix reads the lines under `Problem:`
    category, rules = top_and_rules(cases[3])
    assert category == "installer_failure" and "installer.dnf_cannot_resolve_nvidia" in rules
    # a package whose name only starts like a GPU one
    assert "installer.gpu_package_not_installable" not in all_rules(
        "| NVIDIA-SMI 550.54.15 |\nE: Unable to locate package cudatext\nE: Unable to locate package nppes-tools")
    # apt failing on a package that is not the GPU's, in a GPU log, is not this finding
    other = "| NVIDIA-SMI 550.54.15 |\nE: Unable to locate package python3.12-venv"
    assert "installer.gpu_package_not_installable" not in all_rules(other)


def test_the_cuda_repository_key_refused_by_apt() -> None:
    # the CUDA repositories' key rotation of April 2022, as docker builds of nvidia/cuda images printed it
    log = ("W: GPG error: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu1804/x86_64  InRelease: The "
           "following signatures couldn't be verified because the public key is not available: NO_PUBKEY "
           "A4B469963BF863CC\nE: The repository 'https://developer.download.nvidia.com/compute/cuda/repos/ubuntu1804/"
           "x86_64  InRelease' is not signed.\nThe command '/bin/sh -c apt-get update' returned a non-zero code: 100")
    found = diagnose(log)
    assert found[0].category == "installer_failure" and found[0].rule == "installer.package_repository_refused"
    assert "cuda-keyring" in found[0].fix
    # no GPU anywhere in the log: another repository's key is not this tool's business
    assert "installer.package_repository_refused" not in all_rules(
        "W: GPG error: https://download.docker.com/linux/ubuntu jammy InRelease: The following signatures couldn't be "
        "verified because the public key is not available: NO_PUBKEY 7EA0A9C3F273FCD8")


def test_an_extension_built_with_another_cuda_than_torch() -> None:
    # torch.utils.cpp_extension in both its wordings (a ''' literal over two lines; two literals joined, no space)
    for log in ("RuntimeError: \nThe detected CUDA version (11.8) mismatches the version that was used to compile\n"
                "PyTorch (12.1). Please make sure to use the same CUDA versions.",
                "RuntimeError: The detected CUDA version (12.8) mismatches the version that was used to compilePyTorch "
                "(11.8). Please make sure to use the same CUDA versions."):
        found = diagnose(log)
        assert found[0].category == "installer_failure" and found[0].rule == "installer.extension_cuda_mismatch", log


def test_libraries_that_say_they_are_their_cpu_build() -> None:
    for log in ("ValueError: This CTranslate2 package was not compiled with CUDA support",
                "xgboost.core.XGBoostError: [09:12:33] src/common/common.h:187: XGBoost version not compiled with GPU "
                "support.",
                "lightgbm.basic.LightGBMError: GPU Tree Learner was not enabled in this build.\n"
                "Please recompile with CMake option -DUSE_GPU=1",
                "[LightGBM] [Fatal] CUDA Tree Learner was not enabled in this build.\n"
                "Please recompile with CMake option -DUSE_CUDA=1 (NVIDIA GPUs) or -DUSE_ROCM=1 (AMD GPUs)",
                "dgl._ffi.base.DGLError: Device API cuda is not enabled. Please install the cuda version of dgl."):
        found = diagnose(log)
        assert found[0].category == "cpu_only_wheel" and found[0].rule == "cpu.library_built_without_gpu", log
    # a CUDA build missing a library says both: the library is the cause
    ct2 = ("Could not load library libcudnn_ops_infer.so.8. Error: libcudnn_ops_infer.so.8: cannot open shared object "
           "file: No such file or directory\nValueError: This CTranslate2 package was not compiled with CUDA support")
    assert diagnose(ct2)[0].category == "missing_shared_lib"


BNB_CPU = ("UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, "
           "8-bit multiplication, and GPU quantization are unavailable.")


def test_bitsandbytes_cpu_library_beside_a_gpu() -> None:
    smi = "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |\n"
    category, rules = top_and_rules(smi + BNB_CPU)
    assert category == "cpu_only_wheel" and "cpu.bitsandbytes_cpu_library" in rules
    # an import-time notice on a machine without a GPU, or a CPU run asked for: nothing to fix
    assert not diagnose("$ python finetune.py --device cpu\n" + BNB_CPU + "\nTraining complete.")
    # no library for torch's CUDA version (0.43+ and 0.41 say so first): not the CPU build
    for first in ("Could not find the bitsandbytes CUDA binary at PosixPath('/x/libbitsandbytes_cuda128.so')",
                  "CUDA SETUP: Required library version not found: libbitsandbytes_cuda124.so. Maybe you need to "
                  "compile it from source?\nCUDA SETUP: Defaulting to libbitsandbytes_cpu.so..."):
        assert "cpu.bitsandbytes_cpu_library" not in all_rules(smi + first + "\n" + BNB_CPU)


def test_older_jax_falling_back_to_the_cpu_beside_a_gpu() -> None:
    warning = "WARNING:absl:No GPU/TPU found, falling back to CPU. (Set TF_CPP_MIN_LOG_LEVEL=0 and rerun for more info.)"
    assert "cpu.jax_fell_back_to_cpu" not in all_rules(warning)  # printed on any machine without a GPU
    a100 = "\n|   0  NVIDIA A100-SXM4-40GB  On  | 00000000:07:00.0 Off |"
    category, rules = top_and_rules(warning + a100)
    assert category == "cpu_only_wheel" and "cpu.jax_fell_back_to_cpu" in rules
    # nor on a CPU-only laptop whose pip list names nvidia-ml-py
    assert "cpu.jax_fell_back_to_cpu" not in all_rules(warning + "\nnvidia-ml-py          12.535.77")
    # a CUDA jaxlib whose backend failed says so first: not a CPU build
    failed = ("WARNING:jax._src.xla_bridge:CUDA backend failed to initialize: Found cuBLAS version 11201, but JAX was "
              "built against version 111103, which is newer.\n")
    assert "cpu.jax_fell_back_to_cpu" not in all_rules(failed + warning + a100)


def test_onnxruntime_asked_for_another_vendors_provider_or_the_cpu_is_not_the_cpu_package() -> None:
    for log in ("UserWarning: Specified provider 'DmlExecutionProvider' is not in available provider names."
                "Available providers: 'AzureExecutionProvider, CPUExecutionProvider'",
                "UserWarning: Specified provider 'ROCMExecutionProvider' is not in available provider names."
                "Available providers: 'CPUExecutionProvider'",
                "['OpenVINOExecutionProvider', 'CPUExecutionProvider']",
                ">>> ort.get_available_providers()\n['AzureExecutionProvider', 'CPUExecutionProvider']\n"
                ">>> sess = ort.InferenceSession('m.onnx', providers=['CPUExecutionProvider'])"):
        assert "cpu.onnxruntime_cpu_package" not in all_rules(log), log


def test_the_device_plugins_nvml_load_failure_is_the_runtime_not_the_driver() -> None:
    # NVIDIA/k8s-device-plugin vendored nvidia-docker's nvml bindings: in its pod the runtime did not inject the driver
    log = ("2018/01/01 10:00:00 Loading NVML\n2018/01/01 10:00:00 Failed to initialize NVML: could not load NVML "
           "library.\n2018/01/01 10:00:00 If this is a GPU node, did you set the docker default runtime to `nvidia`?")
    assert diagnose(log)[0].category == "container_device_missing"


def test_the_kernel_freezing_tasks_for_suspend_is_not_a_failure() -> None:
    dmesg = ["[ 81.2] PM: suspend entry (deep)", "[ 81.3] Freezing user space processes",
             "[ 81.3] Freezing user space processes completed (elapsed 0.002 seconds)", "[ 81.3] OOM killer disabled.",
             "[ 81.3] Freezing remaining freezable tasks ... (elapsed 0.001 seconds) done."]
    assert not failing_lines(dmesg) and not diagnose("\n".join(dmesg))
