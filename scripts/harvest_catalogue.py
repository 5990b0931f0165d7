"""Regenerate provisioner/diagnose/catalogue.json: the messages diagnose knows, read from the programs that print them.

    uv run --no-sync python scripts/harvest_catalogue.py [--mirror DIR] [--tags N] [--out PATH] [--only PREFIX]... [--check]

Inputs (bare git directories, e.g. what the session tool `fetch github:OWNER/NAME` brings, laid out as
MIRROR/OWNER+NAME/repo; default MIRROR /work/.mirror):

- NVIDIA/open-gpu-kernel-modules   NVRM kernel messages (nv.c, osapi.c, osinit.c, kernel_gsp.c)
- NVIDIA/nvidia-installer          the .run installer's ui_error/ui_warn texts
- NVIDIA/nvidia-container-toolkit  the toolkit, and the NVML header it vendors (go-nvml's nvml.h: the error enum)
- NVIDIA/libnvidia-container       nvidia-container-cli (the snapshot is too large for the fetch tool: give a clone
                                   with --mirror, or the recorded wording (read at the commit in `source`) is kept)
- lxc/lxc                          LXC's start/conf/idmap errors and hooks/nvidia
- proxmox/pve-container            pct / the LXC prestart hook's `die` texts
- NVIDIA/nccl                      NCCL WARN texts
- astral-sh/uv                     the resolver's errors
- cncf-tags/container-device-interface  CDI's errors as podman, docker (>= 25), containerd and CRI-O print them
- NVIDIA/yum-packaging-nvidia-plugin  the dnf/yum plugin that holds back kernels without precompiled NVIDIA modules
- NVIDIA/gpu-driver-container      the GPU Operator's driver container (its nvidia-driver script's messages)
- jax-ml/jax                       JAX's backend warnings (xla_bridge.py)
- ggml-org/ggml                    ggml's CUDA backend (llama.cpp, ollama, koboldcpp, LM Studio vendor it)
- OpenNMT/CTranslate2              its lazy CUDA library loader (faster-whisper, WhisperX)
- prefix-dev/resolvo               the SAT solver of pixi/rattler (conda environments): its conflict report
- Debian/apt                       apt's errors installing packages (the package, the repository's signature)
- rpm-software-management/dnf      dnf's errors for a package it cannot find
- bitsandbytes-foundation/bitsandbytes, dmlc/xgboost, microsoft/LightGBM, dmlc/dgl: their notices of a build
                                   without GPU support (with CTranslate2's and JAX's older one)
- NVIDIA/nvidia-docker             nvidia-docker 1.x (its Go wrapper and plugin, tags v1.0.0-beta..v1.0.1; HEAD holds none)

Each entry of SPECS names a fixed fragment (`locate`) that sits on one source line of the message; the script
greps HEAD and up to --tags release tags spread over the repository's history, reads the whole format string
around each hit (adjacent C literals joined, Perl/Rust/Python interpolations turned into `%s`) and records every
distinct wording with the releases that print it. Messages printed by closed binaries (nvidia-smi, libnvidia-ml's
nvmlErrorString, the CUDA runtime's cudaGetErrorString, PyTorch's Python/C++ texts when no pytorch clone is given,
glibc's loader, pip) carry their wording as documented at `source.url` (kind "documented").

The matcher diagnose builds from an entry (provisioner/diagnose/catalogue.py) reads the format's first sentence
through provisioner.diagnose.normalize.format_regex. Not run in CI: the catalogue is committed. A machine holds the
mirrors of some repositories only: `--only PREFIX` regenerates the entries whose id starts with it and keeps every
other one as it was harvested (a full run without a repository's mirror keeps only its recorded wordings); `--check`
lists the entries the sources at hand word differently.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "provisioner" / "diagnose" / "catalogue.json"


@dataclass(frozen=True)
class Spec:
    id: str
    program: str
    meaning: str
    repo: str | None = None  # owner/name, harvested from its git history
    locate: str = ""  # a fixed fragment on one source line of the message
    paths: tuple[str, ...] = ()  # pathspecs to grep (default: the whole tree, tests excluded)
    wordings: tuple[str, ...] = ()  # documented/recorded wordings (used when the repo is absent, or closed source)
    url: str = ""  # where the wording is documented / the file it was read from
    kind: str = "source"  # source | documented
    extra_programs: tuple[str, ...] = field(default=())
    printed_as: str = ""  # how the program prints the harvested literal ("{}" is the literal), when a macro adds to it
    code: int | None = None  # the numeric error code programs print instead of the text (cudaError_t, nvmlReturn_t)
    tags: tuple[str, ...] = ()  # releases read besides the sampled ones (a program the repository no longer ships)


GH = "https://github.com/"
CUDA_RT = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
CUDA_DRV = "https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html"
# the return codes and their meanings: the NVML header (vendored by the toolkit); the printed texts: nvmlErrorString
NVML_DOC = GH + "NVIDIA/go-nvml/blob/main/pkg/nvml/nvml.h"
LIBNVC = GH + "NVIDIA/libnvidia-container/blob/09df17a2424704c1e4af310d3ce51fe475ba292a/"
TORCH = GH + "pytorch/pytorch/blob/main/"
PIP = GH + "pypa/pip/blob/main/src/pip/_internal/"
GLIBC = "https://sourceware.org/git/?p=glibc.git;a=blob;f=elf/dl-load.c"

OGKM = "NVIDIA/open-gpu-kernel-modules"
INST = "NVIDIA/nvidia-installer"
NCT = "NVIDIA/nvidia-container-toolkit"
NVC = "NVIDIA/libnvidia-container"
LXC = "lxc/lxc"
PVE = "proxmox/pve-container"
NCCL = "NVIDIA/nccl"
UV = "astral-sh/uv"
CDI = "cncf-tags/container-device-interface"
DNFNV = "NVIDIA/yum-packaging-nvidia-plugin"
GDC = "NVIDIA/gpu-driver-container"
GGML = "ggml-org/ggml"
CT2 = "OpenNMT/CTranslate2"
RESOLVO = "prefix-dev/resolvo"
JAX = "jax-ml/jax"
NVDOCKER = "NVIDIA/nvidia-docker"
APT = "Debian/apt"
BNB = "bitsandbytes-foundation/bitsandbytes"
XGB = "dmlc/xgboost"
LGBM = "microsoft/LightGBM"
DGL = "dmlc/dgl"
DNF = "rpm-software-management/dnf"
LIBSOLV = GH + "openSUSE/libsolv/blob/1b580675f4e3107823146c78fe03876cb82bf964/src/problems.c"
NVDOCKER1_SRC = ("src/", "tools/src/")  # v1.0.1 / v1.0.0 (the rc and beta tags: src/)
NVDOCKER1_TAGS = ("v1.0.0", "v1.0.1")  # the 1.x releases, which the tag sample over 2.x misses
ORT = GH + "microsoft/onnxruntime/blob/"
NVCODEC = GH + "FFmpeg/nv-codec-headers/blob/f2fb9b36d5e08d6211f7cf6377971c0570939e65/include/ffnvcodec/dynlink_loader.h"

SPECS: tuple[Spec, ...] = (
    # --- XLA/TensorFlow's stream executor (cuda_dnn.cc, CudnnSupport::Init): the cuDNN loaded at run time against the
    # one the binary was built with, in its three wordings: early TensorFlow's (cuDNN compatibility versions, no colon),
    # TensorFlow's "major and minor version needs to match", XLA's "matching major version and equal or higher minor"
    Spec("xla.cudnn_runtime_mismatch", "XLA / TensorFlow stream executor (cuda_dnn.cc), as JAX and TensorFlow print it",
         "The cuDNN loaded at run time is not one the binary can use: an older minor, or another major, than it was "
         "built with.",
         wordings=("Loaded runtime CuDNN library: %s but source was compiled with: %s.  CuDNN library needs to have "
                   "matching major version and equal or higher minor version.",
                   "Loaded runtime CuDNN library: %s but source was compiled with: %s.  CuDNN library major and minor "
                   "version needs to match or have higher minor version in case of CuDNN 7.0 or later version.",
                   "Loaded runtime CuDNN library: %s (compatibility version %s) but source was compiled with %s "
                   "(compatibility version %s)."),
         url=GH + "openxla/xla/blob/a51b0f552430fd60df6680c84e94219a39c0b459/xla/stream_executor/cuda/cuda_dnn.cc",
         kind="documented", extra_programs=("jaxlib", "tensorflow")),
    # --- NVML: nvmlErrorString (libnvidia-ml.so, closed) as nvidia-smi / the bindings / nvidia-container-cli print it
    Spec("nvml.lib_rm_version_mismatch", "libnvidia-ml (NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18)",
         "The NVML library (userspace) and the loaded kernel module (RM) are different driver versions.",
         wordings=("Failed to initialize NVML: Driver/library version mismatch",
                   "RM has detected an NVML/RM version mismatch", "nvml error: driver/library version mismatch",
                   "NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
         url=NVML_DOC, kind="documented", extra_programs=("nvidia-smi", "nvidia-container-cli", "pynvml"), code=18),
    Spec("nvml.library_not_found", "libnvidia-ml bindings (NVML_ERROR_LIBRARY_NOT_FOUND = 12)",
         "libnvidia-ml.so.1 (the driver's userspace) cannot be found or loaded.",
         wordings=("NVML Shared Library Not Found", "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system"),
         url=NVML_DOC, kind="documented", extra_programs=("nvidia-smi", "pynvml"), code=12),
    Spec("nvml.driver_not_loaded", "libnvidia-ml (NVML_ERROR_DRIVER_NOT_LOADED = 9)", "The NVIDIA kernel module is not loaded.",
         wordings=("Failed to initialize NVML: Driver Not Loaded", "NVIDIA driver is not loaded"),
         url=NVML_DOC, kind="documented", extra_programs=("nvidia-smi", "pynvml"), code=9),
    Spec("nvml.no_permission", "libnvidia-ml (NVML_ERROR_NO_PERMISSION = 4)",
         "The caller cannot open the GPU device nodes (permissions, cgroup device rules).",
         wordings=("Failed to initialize NVML: Insufficient Permissions",), url=NVML_DOC, kind="documented",
         extra_programs=("nvidia-smi",), code=4),
    Spec("nvml.unknown", "libnvidia-ml (NVML_ERROR_UNKNOWN = 999)",
         "NVML failed for an internal reason; in a container most often the device nodes are present but denied "
         "by the cgroup device rules (e.g. after a systemd daemon-reload) or not passed.",
         wordings=("Failed to initialize NVML: Unknown Error",), url=NVML_DOC, kind="documented",
         extra_programs=("nvidia-smi",), code=999),
    # nvml.h: "The GPU control device has been blocked by the operating system/cgroups"; nvidia-smi under WSL 2 prints it
    # where Windows exposes no GPU to the VM (a Windows driver or build without GPU paravirtualization)
    Spec("nvml.operating_system", "libnvidia-ml (NVML_ERROR_OPERATING_SYSTEM = 17)",
         "The operating system blocks access to the GPU: under WSL 2, Windows exposes no GPU to the VM; elsewhere the "
         "device cgroup denies the GPU's control device.",
         wordings=("Failed to initialize NVML: GPU access blocked by the operating system",
                   "GPU access blocked by the operating system"),
         url=NVML_DOC, kind="documented", extra_programs=("nvidia-smi", "nvidia-container-cli", "pynvml"), code=17),
    Spec("nvml.gpu_is_lost", "libnvidia-ml (NVML_ERROR_GPU_IS_LOST = 15)",
         "The GPU has fallen off the bus or has otherwise become inaccessible.",
         wordings=("Unable to determine the device handle for GPU %s: GPU is lost", "GPU is lost"),
         url=NVML_DOC, kind="documented", extra_programs=("nvidia-smi",), code=15),
    Spec("smi.cannot_communicate", "nvidia-smi", "nvidia-smi cannot open /dev/nvidiactl: no kernel module loaded here "
         "(or, in a container, the device nodes were not passed in).",
         wordings=("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                   "latest NVIDIA driver is installed and running.",),
         url="https://docs.nvidia.com/deploy/nvidia-smi/index.html", kind="documented"),
    Spec("smi.no_devices", "nvidia-smi", "nvidia-smi found no GPU it can use.", wordings=("No devices were found",),
         url="https://docs.nvidia.com/deploy/nvidia-smi/index.html", kind="documented"),
    Spec("smi.hw_slowdown", "nvidia-smi -q", "The GPU is throttled by hardware (thermal or power brake).",
         wordings=("HW Slowdown : Active", "HW Thermal Slowdown : Active"),
         url="https://docs.nvidia.com/deploy/nvidia-smi/index.html", kind="documented"),
    # --- CUDA runtime / driver API error strings (closed; documented)
    Spec("cuda.insufficient_driver", "CUDA runtime (cudaErrorInsufficientDriver = 35)",
         "The CUDA runtime is newer than the driver supports.",
         wordings=("CUDA driver version is insufficient for CUDA runtime version", "cudaErrorInsufficientDriver"),
         url=CUDA_RT, kind="documented", code=35),
    Spec("cuda.no_device", "CUDA runtime (cudaErrorNoDevice = 100)", "No CUDA-capable device is visible to the process.",
         wordings=("no CUDA-capable device is detected", "cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE"), url=CUDA_RT,
         kind="documented", code=100),
    Spec("cuda.no_kernel_image", "CUDA runtime (cudaErrorNoKernelImageForDevice = 209)",
         "The binary has no SASS/PTX for this GPU's architecture.",
         wordings=("no kernel image is available for execution on the device", "cudaErrorNoKernelImageForDevice",
                   "CUDA_ERROR_NO_BINARY_FOR_GPU"), url=CUDA_RT, kind="documented", code=209),
    Spec("cuda.invalid_device_function", "CUDA runtime (cudaErrorInvalidDeviceFunction = 98)",
         "The kernel was not built for this device.", wordings=("invalid device function",), url=CUDA_RT,
         kind="documented", code=98),
    Spec("cuda.compat_not_supported", "CUDA runtime (cudaErrorCompatNotSupportedOnDevice = 804)",
         "Forward compatibility (cuda-compat) was tried on a GPU that does not support it.",
         wordings=("forward compatibility was attempted on non supported HW",), url=CUDA_RT, kind="documented", code=804),
    Spec("cuda.system_driver_mismatch", "CUDA runtime (cudaErrorSystemDriverMismatch = 803)",
         "libcuda (userspace) and the kernel module are different driver versions.",
         wordings=("system has unsupported display driver / cuda driver combination",), url=CUDA_RT, kind="documented", code=803),
    Spec("cuda.unsupported_ptx", "CUDA runtime (cudaErrorUnsupportedPtxVersion = 222)",
         "PTX produced by a newer toolchain than the driver's JIT.",
         wordings=("the provided PTX was compiled with an unsupported toolchain",), url=CUDA_RT, kind="documented", code=222),
    Spec("cuda.invalid_kernel_image", "CUDA runtime (cudaErrorInvalidKernelImage = 200)",
         "The driver cannot load the kernel image (e.g. compressed fatbins on an old driver).",
         wordings=("device kernel image is invalid", "a PTX JIT compilation failed"), url=CUDA_RT, kind="documented", code=200),
    Spec("cuda.unknown", "CUDA runtime (cudaErrorUnknown = 999)",
         "cuInit failed for an unknown reason; in containers typically /dev/nvidia-uvm missing or denied.",
         wordings=("CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env "
                   "variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.",),
         url=CUDA_RT, kind="documented", extra_programs=("PyTorch",), code=999),
    Spec("cuda.system_not_ready", "CUDA runtime (cudaErrorSystemNotReady = 802)",
         "The system is not ready (NVSwitch systems: fabric manager not running).",
         wordings=("system not yet initialized",), url=CUDA_RT, kind="documented", code=802),
    Spec("cuda.illegal_address", "CUDA runtime (cudaErrorIllegalAddress = 700)", "A kernel accessed invalid memory.",
         wordings=("an illegal memory access was encountered",), url=CUDA_RT, kind="documented", code=700),
    Spec("cuda.ecc_uncorrectable", "CUDA runtime (cudaErrorECCUncorrectable = 214)",
         "An uncorrectable ECC error was detected in GPU memory.",
         wordings=("uncorrectable ECC error encountered",), url=CUDA_RT, kind="documented", code=214),
    Spec("cuda.launch_failure", "CUDA runtime (cudaErrorLaunchFailure = 719)",
         "A kernel faulted during execution (often hardware, power or thermal).",
         wordings=("unspecified launch failure",), url=CUDA_RT, kind="documented", code=719),
    Spec("cuda.out_of_memory", "CUDA runtime (cudaErrorMemoryAllocation = 2)", "Device memory is exhausted.",
         wordings=("out of memory",), url=CUDA_RT, kind="documented", code=2),
    # a kernel (or device symbol) the loaded modules do not hold: a launch or cudaFuncSetAttribute on a kernel the
    # binary has no code for this GPU in (built for other architectures), as the CUDA runtime and driver word it
    # (NVIDIA/stdexec#888, fatlipp/cuda-tree#1, tensorflow/tensorflow#68711)
    Spec("cuda.symbol_not_found", "CUDA runtime (cudaErrorSymbolNotFound = 500; driver API CUDA_ERROR_NOT_FOUND)",
         "A named symbol (a kernel, a device variable) is not in the loaded modules: for a kernel, usually a binary "
         "built without code for this GPU's architecture.",
         wordings=("named symbol not found", "cudaErrorSymbolNotFound"), url=CUDA_RT, kind="documented", code=500,
         extra_programs=("CUDA driver API (CUDA_ERROR_NOT_FOUND = 500)",)),
    # Julia's CUDAnative.jl comparing the toolkit's release with the driver's: an error in 2.3, a warning from 2.5
    # (src/CUDAnative.jl, then src/compatibility.jl), reworded in 3.2's __runtime_init__ (JuliaGPU/julia-ngc#7: CUDA
    # 10.0 in an NGC-based image on a 384 driver)
    Spec("julia.toolkit_newer_than_driver", "CUDAnative.jl (Julia)",
         "The CUDA toolkit the Julia package uses is newer than the installed driver supports.",
         wordings=("CUDA %s is not supported by your driver (which supports up to %s)",
                   "You are using CUDA toolkit %s with a driver that only supports up to %s."),
         url=GH + "JuliaGPU/CUDAnative.jl/blob/v3.0.3/src/compatibility.jl", kind="documented",
         extra_programs=("CUDAnative.jl 3.2 (src/CUDAnative.jl)",)),
    Spec("cuda.stub_library", "CUDA runtime (cudaErrorStubLibrary = 34)",
         "The process loaded the toolkit's libcuda stub instead of the driver's libcuda.so.1.",
         wordings=("CUDA driver is a stub library",), url=CUDA_RT, kind="documented", code=34),
    # a CUDA minor release's program calling an API the installed (older, same-major) driver lacks: minor-version
    # compatibility covers the runtime, not every new API (CUDA's compatibility guide; ComfyUI's cudaMallocAsync on R450)
    Spec("cuda.call_requires_newer_driver", "CUDA runtime (cudaErrorCallRequiresNewerDriver = 36)",
         "The program calls a CUDA API the installed driver does not have: the driver is older than the CUDA it uses.",
         wordings=("API call is not supported in the installed CUDA driver", "cudaErrorCallRequiresNewerDriver"),
         url=CUDA_RT, kind="documented", code=36),
    Spec("cuda.nvlink_uncorrectable", "CUDA runtime (cudaErrorNvlinkUncorrectable = 220)",
         "An uncorrectable NVLink error was detected during the execution: a link (or NVSwitch) fault.",
         wordings=("uncorrectable NVLink error detected during the execution", "cudaErrorNvlinkUncorrectable",
                   "CUDA_ERROR_NVLINK_UNCORRECTABLE"),
         url=CUDA_RT, kind="documented", code=220),
    # --- PyTorch
    Spec("torch.not_compiled_with_cuda", "PyTorch (torch/cuda/__init__.py)", "A CPU-only torch build is installed.",
         wordings=("Torch not compiled with CUDA enabled",), url=TORCH + "torch/cuda/__init__.py", kind="documented"),
    Spec("torch.capability_not_compatible", "PyTorch (torch/cuda/__init__.py _check_capability)",
         "The installed torch has no kernels for this GPU's compute capability.",
         wordings=("%s with CUDA capability sm_%d is not compatible with the current PyTorch installation.\nThe current "
                   "PyTorch install supports CUDA capabilities %s.",),
         url=TORCH + "torch/cuda/__init__.py", kind="documented"),
    Spec("torch.gpu_too_old", "PyTorch (torch/cuda/__init__.py _check_capability)",
         "The GPU's compute capability is below the minimum this torch build supports.",
         wordings=("Found GPU%d %s which is of cuda capability %d.%d.\nPyTorch no longer supports this GPU because it "
                   "is too old.\nThe minimum cuda capability supported by this library is %d.%d.",
                   "Found GPU%d %s which is of cuda capability %d.%d.\nPyTorch no longer supports this GPU because it "
                   "is too old.\nThe minimum cuda capability that we support is 3.5."),
         url=TORCH + "torch/cuda/__init__.py", kind="documented"),
    Spec("torch.driver_too_old", "PyTorch (c10/cuda/CUDAFunctions.cpp)",
         "The driver's CUDA version is older than the CUDA torch was built with.",
         wordings=("The NVIDIA driver on your system is too old (found version %d). Please update your GPU driver by "
                   "downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",),
         url=TORCH + "c10/cuda/CUDAFunctions.cpp", kind="documented"),
    Spec("torch.no_driver", "PyTorch (c10/cuda/CUDAFunctions.cpp)", "No NVIDIA driver (libcuda) was found.",
         wordings=("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
                   "driver from http://www.nvidia.com/Download/index.aspx",),
         url=TORCH + "c10/cuda/CUDAFunctions.cpp", kind="documented"),
    Spec("torch.driver_init_failed", "PyTorch (c10/cuda/CUDAFunctions.cpp)", "cuInit failed: no usable GPU.",
         wordings=("CUDA driver initialization failed, you might not have a CUDA gpu.",),
         url=TORCH + "c10/cuda/CUDAFunctions.cpp", kind="documented"),
    Spec("torch.no_gpus", "PyTorch (torch/cuda/__init__.py)", "torch sees zero CUDA devices.",
         wordings=("No CUDA GPUs are available",), url=TORCH + "torch/cuda/__init__.py", kind="documented"),
    Spec("torch.cuda_oom", "PyTorch (c10/cuda/CUDACachingAllocator.cpp)", "The caching allocator ran out of device memory.",
         wordings=("CUDA out of memory. Tried to allocate %s", "torch.OutOfMemoryError: CUDA out of memory"),
         url=TORCH + "c10/cuda/CUDACachingAllocator.cpp", kind="documented"),
    # CuPy's memory pool (cupy/cuda/memory.pyx, class OutOfMemoryError): "Out of memory allocating {:,} bytes (allocated
    # so far: {:,} bytes)."
    Spec("cupy.out_of_memory", "CuPy (cupy/cuda/memory.pyx)", "CuPy's memory pool could not allocate device memory.",
         wordings=("OutOfMemoryError: Out of memory allocating %s bytes (allocated so far: %s bytes).",),
         url=GH + "cupy/cupy/blob/main/cupy/cuda/memory.pyx", kind="documented"),
    # PyTorch's dispatcher (aten/src/ATen/core/dispatch/OperatorEntry.cpp reportError): an operator with no kernel for
    # the inputs' backend — for torchvision's/torchaudio's ops and the CUDA backend, a CPU-only build of that package
    # beside a CUDA torch (ksugar/qupath-extension-sam#6: PyPI's torchvision 0.15.2 beside torch 2.0.1+cu118 on Windows)
    Spec("torch.op_missing_for_backend", "PyTorch (OperatorEntry.cpp)",
         "A torchvision/torchaudio operator has no CUDA kernel in the installed build of that package.",
         # the format's instances for torchvision's and torchaudio's operators and the CUDA backend
         wordings=("Could not run 'torchvision::%s' with arguments from the 'CUDA' backend.",
                   "Could not run 'torchaudio::%s' with arguments from the 'CUDA' backend."),
         url=TORCH + "aten/src/ATen/core/dispatch/OperatorEntry.cpp", kind="documented"),
    # PaddlePaddle's CPU package asked for a GPU: paddle/fluid/pybind/place.cc (CUDAPlace without CUDA) and
    # python/paddle/device/__init__.py set_device
    Spec("paddle.cpu_version_installed", "PaddlePaddle (pybind/place.cc, paddle.device)",
         "The installed PaddlePaddle is the CPU package (paddlepaddle, not paddlepaddle-gpu).",
         wordings=("Cannot use GPU because you have installed CPU version PaddlePaddle.",
                   "The device should not be %s, since PaddlePaddle is not compiled with CUDA"),
         url=GH + "PaddlePaddle/Paddle/blob/develop/paddle/fluid/pybind/place.cc", kind="documented"),
    Spec("torch.watchdog_timeout", "PyTorch (ProcessGroupNCCL.cpp)", "A collective did not finish within the timeout.",
         wordings=("Watchdog caught collective operation timeout: WorkNCCL(%s) ran for %d milliseconds before timing out.",),
         url=TORCH + "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", kind="documented"),
    Spec("torch.no_nccl", "PyTorch (torch/distributed)", "This torch build has no NCCL (CPU, Windows or macOS build).",
         wordings=("Distributed package doesn't have NCCL built in",), url=TORCH + "torch/distributed/distributed_c10d.py",
         kind="documented"),
    Spec("torch.collect_env_cuda_none", "PyTorch (torch/utils/collect_env.py)", "The torch build reports no CUDA.",
         wordings=("CUDA used to build PyTorch: None",), url=TORCH + "torch/utils/collect_env.py", kind="documented"),
    # TensorFlow's build information (tf.sysconfig.get_build_info(), generated by tools/build_info/gen_build_info.py):
    # a build without CUDA says so in its `is_cuda_build` key (and `tf.test.is_built_with_cuda()` returns False)
    Spec("tf.build_info_not_cuda", "TensorFlow (tf.sysconfig.get_build_info)",
         "This TensorFlow was built without CUDA: it never uses a GPU, whatever the driver.",
         wordings=("'is_cuda_build': False",),
         url=GH + "tensorflow/tensorflow/blob/master/tensorflow/tools/build_info/gen_build_info.py", kind="documented"),
    Spec("torch.cuda_not_available_device", "PyTorch (torch/amp)", "A CUDA device was asked for where CUDA is unavailable.",
         wordings=("User provided device_type of 'cuda', but CUDA is not available. Disabling",),
         url=TORCH + "torch/amp/autocast_mode.py", kind="documented"),
    # --- NVIDIA kernel module (NVRM)
    Spec("nvrm.api_mismatch", "nvidia.ko (NVRM)", "A userspace component and the loaded kernel module are different versions.",
         repo=OGKM, locate="API mismatch: the client", paths=("src/nvidia/arch/nvalloc/unix/src/osapi.c",)),
    Spec("nvrm.probe_not_called", "nvidia.ko (NVRM)",
         "The kernel module loaded but did not probe the GPU: another driver (nouveau, vfio-pci) owns it.",
         repo=OGKM, locate="probe routine was not called", paths=("kernel-open/nvidia/nv.c",)),
    Spec("nvrm.no_gpu_found", "nvidia.ko (NVRM)", "The kernel module found no GPU it can drive.",
         repo=OGKM, locate="NVRM: No NVIDIA GPU found", paths=("kernel-open/nvidia/nv.c",)),
    Spec("nvrm.rm_init_adapter_failed", "nvidia.ko (NVRM)",
         "The resource manager failed to initialise the GPU: a symptom whose cause other lines name (GSP/firmware "
         "timeout, fallen off the bus, unsupported GPU).",
         repo=OGKM, locate="RmInitAdapter failed!", paths=("src/nvidia/arch/nvalloc/unix/src/osinit.c",)),
    Spec("nvrm.gsp_init_failed", "nvidia.ko (NVRM)", "The GSP firmware did not boot.",
         repo=OGKM, locate="Cannot initialize GSP firmware RM", paths=("src/nvidia/arch/nvalloc/unix/src/osinit.c",)),
    Spec("nvrm.gsp_rpc_timeout", "nvidia.ko (NVRM)", "The GSP firmware stopped answering RPCs (firmware or hardware fault).",
         repo=OGKM, locate="of waiting for RPC response from GPU", paths=("src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c",)),
    Spec("nvrm.gsp_heartbeat", "nvidia.ko (NVRM)", "The GSP firmware's heartbeat stopped.",
         repo=OGKM, locate='"Heartbeat timed out', paths=("src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c",)),
    Spec("nvrm.fallen_off_bus", "nvidia.ko (NVRM)", "The GPU stopped answering on PCIe (power, riser, slot, hardware).",
         repo=OGKM, locate="fallen off the bus and is not responding", paths=("src/nvidia/arch/nvalloc/unix/src/osapi.c",)),
    Spec("nvrm.gpu_off_bus_short", "nvidia.ko (NVRM)", "The GPU stopped answering on PCIe.",
         repo=OGKM, locate='"GPU has fallen off the bus.', paths=("src/nvidia/arch/nvalloc/unix/src/osinit.c",)),
    Spec("nvrm.gsp_firmware_version_mismatch", "nvidia.ko (NVRM, kernel_gsp.c)",
         "The GSP firmware file the module loaded (/lib/firmware/nvidia/<version>/gsp_*.bin) is another driver "
         "version than the module: the module and its firmware come from different releases (a module built from "
         "older sources, or a firmware package updated without the module).",
         repo=OGKM, locate="version mismatch: got version", paths=("src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c",)),
    # NV_STATUS codes the resource manager prints as `<text> [<name>]` (nvstatus.c builds each string as
    # `string " [" #name "]"` from nvstatuscodes.h; NVRM's "Assertion failed: %s (0x%08X) returned from ..." and its
    # RPC/RmInit lines print them): the codes that say the GPU itself needs a reset or failed, not the program
    *(Spec(f"nvrm.status_{name[7:].lower()}", "nvidia.ko (NVRM, nvstatuscodes.h)", meaning, repo=OGKM, locate=text,
           paths=("src/common/sdk/nvidia/inc/nvstatuscodes.h",), printed_as="{} [" + name + "]",
           wordings=(f"{text} [{name}]",))
      for name, text, meaning in (
          ("NV_ERR_RESET_REQUIRED", "Reset required",
           "The GPU is in a state only a reset clears (after a fatal fault): every new allocation on it fails."),
          ("NV_ERR_GPU_IN_FULLCHIP_RESET", "GPU currently in full-chip reset",
           "The GPU is being reset after a fault; work on it fails until the reset completes."),
          ("NV_ERR_ECC_ERROR", "Generic ECC error", "The GPU's memory reported an ECC error."),
          ("NV_ERR_MEMORY_ERROR", "Generic memory error", "The GPU's memory reported an error."),
          ("NV_ERR_BROKEN_FB", "Frame-Buffer broken", "The GPU's memory (frame buffer) is broken."),
          ("NV_ERR_MEMORY_TRAINING_FAILED", "Failed memory training sequence",
           "The GPU's memory failed its training at initialisation (a hardware or power fault)."),
          ("NV_ERR_INSUFFICIENT_POWER", "Generic Error: Low power",
           "The GPU does not get the power it needs (power cables, supply)."),
          ("NV_ERR_GPU_NOT_FULL_POWER", "GPU not in full power",
           "The GPU is not in full power (power cables, supply, or a power state it did not leave)."),
      )),
    Spec("nvrm.xid", "nvidia.ko (NVRM tracepoint / dmesg)", "An Xid error: the code says which GPU or driver fault.",
         repo=OGKM, locate='TP_printk("Xid (PCI', paths=("kernel-open/nvidia/nv-tracepoint.h",),
         wordings=("NVRM: Xid (PCI:%s): %u, %s",)),
    Spec("nvrm.gpu_not_supported_by_release", "nvidia.ko (NVRM)", "The driver release predates (or has dropped) this GPU.",
         repo=OGKM, locate="installed in this system is not supported by the\\n",
         paths=("src/nvidia/arch/nvalloc/unix/src/osapi.c",)),
    Spec("nvrm.open_needs_gsp", "nvidia.ko (NVRM, open flavour)",
         "The open kernel modules need a GPU with GSP (Turing or newer); this GPU needs the proprietary flavour.",
         repo=OGKM, locate="installed in this system is not supported by open\\n",
         paths=("src/nvidia/arch/nvalloc/unix/src/osapi.c",)),
    # The resource manager (closed source) prints it one printk per line, each continuation "NVRM:  ", from 1.0-96xx
    # (2007) to 610.43 (2026, the last two lines joined); the README's joined sentence is how it is documented.
    # Recorded in kernel logs: Ubuntu forums (100.14.09, 195.36.15, 310.14, 310.44), Fedora (430.14), NixOS (340.104),
    # siderolabs/talos#8764 (535.129.03), 565.57.01, 610.43.02.
    Spec("nvrm.legacy_gpu", "nvidia.ko (NVRM, proprietary)", "The GPU is supported only by a legacy driver branch.",
         wordings=("NVRM: The NVIDIA %s GPU installed in this system is supported through the NVIDIA %s.xx Legacy "
                   "drivers. Please visit http://www.nvidia.com/object/unix.html for more information. The %s NVIDIA "
                   "driver will ignore this GPU.",
                   "NVRM: The NVIDIA %s GPU installed in this system is\nNVRM:  supported through the NVIDIA %s "
                   "Legacy drivers. Please\nNVRM:  visit http://www.nvidia.com/object/unix.html for more\nNVRM:  "
                   "information.  The %s NVIDIA driver will ignore\nNVRM:  this GPU.  Continuing probe...",
                   "NVRM: The NVIDIA %s GPU installed in this system is\nNVRM:   supported through the NVIDIA %s "
                   "Legacy drivers. Please\nNVRM:   visit http://www.nvidia.com/object/unix.html for more\nNVRM:   "
                   "information.  The %s NVIDIA driver will ignore this GPU."),
         url="https://download.nvidia.com/XFree86/Linux-x86_64/", kind="documented"),
    # nvidia-xconfig --query-gpu-info (query_gpu_info.c): find_devices() (multiple_screens.c) dlopens libnvidia-cfg.so.1
    # and asks it for the NVIDIA GPUs; NULL (the library missing, the driver not answering, no GPU bound to it) is
    # nv_error_msg("Unable to query GPU information"), a failure inside nv_warning_msg("Unable to use the nvidia-cfg
    # library to query NVIDIA hardware."). prime-select scripts (openSUSE's SUSEPrime) run it to find the BusID
    Spec("nvxconfig.query_gpu_failed", "nvidia-xconfig (query_gpu_info.c, multiple_screens.c)",
         "nvidia-xconfig could not list the NVIDIA GPUs through the driver's libnvidia-cfg: the driver is not loaded "
         "or not installed completely, or no GPU is bound to it.",
         wordings=("ERROR: Unable to query GPU information",),
         url=GH + "NVIDIA/nvidia-xconfig/blob/main/query_gpu_info.c", kind="documented"),
    # NVIDIA's X driver (nvidia_drv.so, closed) when it cannot open the kernel module at X start: the README's chapter
    # "Common Problems" quotes the driver's (EE) lines; the wordings as real Xorg.0.log files show them — the 96.xx-era
    # "…kernel module! Please ensure that there is a supported NVIDIA GPU…" (a 96.43.17 log, pastebin bctRgg64), the
    # current "…kernel module. Please see the system's kernel log…" (archzfs/archzfs#548: the prebuilt `nvidia` package
    # with a pinned older kernel), and "Failed to load the NVIDIA kernel module" when its own modprobe failed (beside
    # Xorg's `Failed to load module "nvidia"`). Each line carries the "(EE) NVIDIA:" / "(EE) NVIDIA(0):" prefix.
    Spec("xdriver.kernel_module_init_failed", "NVIDIA X driver (nvidia_drv.so)",
         "The X driver could not use the NVIDIA kernel module: it is not loaded (not built for the running kernel, "
         "refused, or absent) or its device files are missing.",
         wordings=("Failed to initialize the NVIDIA kernel module. Please see the system's kernel log for additional "
                   "error messages and consult the NVIDIA README for details.",
                   "Failed to initialize the NVIDIA kernel module! Please ensure that there is a supported NVIDIA GPU "
                   "in this system, and that the NVIDIA device files have been created properly.",
                   "Failed to load the NVIDIA kernel module. Please check your system's kernel log for additional "
                   "error messages."),
         url="https://download.nvidia.com/XFree86/Linux-x86_64/455.38/README/commonproblems.html", kind="documented"),
    # the same driver when the kernel module is loaded but cannot bring the GPU up (the kernel log's RmInitAdapter
    # failure): "(EE) NVIDIA(GPU-0): Failed to initialize the NVIDIA GPU at PCI:1:0:0.  Please check your system's kernel
    # log…" and, after it, "Failed to initialize the NVIDIA graphics device!" (Bumblebee-Project/Bumblebee#432, #542,
    # #615; ewagner12/all-ways-egpu#58)
    Spec("xdriver.gpu_init_failed", "NVIDIA X driver (nvidia_drv.so)",
         "The kernel module is loaded but could not initialise the GPU (the kernel log says why: RmInitAdapter).",
         wordings=("Failed to initialize the NVIDIA GPU at PCI:%d:%d:%d. Please check your system's kernel log for "
                   "additional error messages and refer to Chapter 8: Common Problems in the README for additional "
                   "information.",
                   "Failed to initialize the NVIDIA graphics device!"),
         url="https://download.nvidia.com/XFree86/Linux-x86_64/455.38/README/commonproblems.html", kind="documented"),
    # Arch's makepkg (scripts/makepkg.sh.in error_function): a PKGBUILD function (prepare, build, package_*) failed;
    # its "==> ERROR: " prefix and "Aborting..." after it. NVIDIA's driver packages are built so on Arch and its
    # derivatives (the AUR's legacy branches, Frogging-Family/nvidia-all)
    Spec("makepkg.function_failed", "makepkg (pacman)",
         "Building a package failed in one of its PKGBUILD functions; the lines before it say why.",
         wordings=("==> ERROR: A failure occurred in %s().",),
         url="https://gitlab.archlinux.org/pacman/pacman/-/blob/master/scripts/makepkg.sh.in", kind="documented"),
    Spec("kernel.pcie_aer", "Linux kernel (drivers/pci/pcie/aer.c)", "A PCIe Advanced Error Reporting event.",
         wordings=("PCIe Bus Error: severity=%s, type=%s, (%s)",),
         url=GH + "torvalds/linux/blob/master/drivers/pci/pcie/aer.c", kind="documented"),
    Spec("kernel.module_not_found", "kmod (modprobe)", "No nvidia module for the running kernel.",
         # kmod >= 22 names the directory (kmod b87d01d, "modprobe: Update error message when path is missing");
         # kmod <= 21 prints `LOG("Module %s not found.\n", alias)` (tools/modprobe.c; CentOS/RHEL 7 ship kmod 20)
         wordings=("modprobe: FATAL: Module %s not found in directory /lib/modules/%s",
                   "modprobe: FATAL: Module %s not found."),
         url="https://git.kernel.org/pub/scm/utils/kernel/kmod/kmod.git/tree/tools/modprobe.c", kind="documented"),
    Spec("kernel.insmod_not_permitted", "kmod (modprobe)", "The kernel refused the module (Secure Boot, lockdown).",
         wordings=("modprobe: ERROR: could not insert '%s': Operation not permitted",
                   "modprobe: ERROR: could not insert '%s': Key was rejected by service"),
         url="https://git.kernel.org/pub/scm/utils/kernel/kmod/kmod.git/tree/tools/modprobe.c", kind="documented"),
    # module-init-tools' modprobe (kmod's predecessor: RHEL/CentOS 5-6, Ubuntu to 11.10), modprobe.c insmod():
    # `error("Error inserting %s (%s): %s\n", mod->modname, mod->filename, insert_moderror(errno))`, its error()
    # printing "FATAL: "; kmod prints the same refusal as "could not insert '%s': %s" (tools/modprobe.c)
    Spec("kernel.insert_no_device", "module-init-tools / kmod (modprobe)",
         "The module's init returned ENODEV: the driver found no device it drives.",
         wordings=("FATAL: Error inserting %s (%s): No such device",
                   "modprobe: ERROR: could not insert '%s': No such device",
                   # the insmod of each: module-init-tools' (insmod.c, "-1" and strerror) and kmod's (tools/insmod.c)
                   "insmod: error inserting '%s': -1 No such device",
                   "insmod: ERROR: could not insert module %s: No such device"),
         url=GH + "vadmium/module-init-tools/blob/master/modprobe.c", kind="documented"),
    # FreeBSD's (and DragonFly's) kernel linker, sys/kern/kern_linker.c linker_load_dependencies(): a module built
    # against another kernel (its MODULE_DEPEND on "kernel" unmet); kldload then says "an error occurred while loading
    # the module" (trueos/trueos-core#271: nvidia.ko after a kernel update)
    Spec("freebsd.kld_depends_mismatch", "FreeBSD kernel linker (kern_linker.c)",
         "A kernel module was built for another kernel version than the running one: it does not load.",
         # the instance for the kernel itself (the format's second %s is the module depended on: "kernel")
         wordings=("KLD %s: depends on kernel - not available or version mismatch",),
         url=GH + "freebsd/freebsd-src/blob/main/sys/kern/kern_linker.c", kind="documented"),
    Spec("kernel.unsigned_module", "Linux kernel (module signing)", "Secure Boot rejected an unsigned module.",
         wordings=("Loading of unsigned module is rejected", "Loading of module with unavailable key is rejected"),
         url=GH + "torvalds/linux/blob/master/kernel/module/signing.c", kind="documented"),
    Spec("kernel.unknown_symbol", "Linux kernel (module loader)", "The module was built for another kernel.",
         wordings=("%s: Unknown symbol %s (err %d)", "%s: disagrees about version of symbol %s"),
         url=GH + "torvalds/linux/blob/master/kernel/module/main.c", kind="documented"),
    Spec("kernel.oom_kill", "Linux kernel (mm/oom_kill.c)", "The host ran out of RAM and killed a process.",
         wordings=("Out of memory: Killed process %d (%s)",), url=GH + "torvalds/linux/blob/master/mm/oom_kill.c",
         kind="documented"),
    # --- nvidia-installer
    Spec("installer.module_already_loaded", "nvidia-installer", "An NVIDIA module is loaded while installing a driver.",
         repo=INST, locate="kernel module '%s' appears to be already", paths=("kernel.c",),
         wordings=("An NVIDIA kernel module '%s' appears to already be loaded in your kernel.",)),
    Spec("installer.load_module_failed", "nvidia-installer", "The freshly built module did not load.",
         repo=INST, locate="Unable to load the kernel module '%s'", paths=("kernel.c",)),
    Spec("installer.no_kernel_source", "nvidia-installer", "No headers for the running kernel.",
         repo=INST, locate="Unable to find the kernel source tree for the", paths=("kernel.c",)),
    Spec("installer.nouveau_in_use", "nvidia-installer", "nouveau is bound to the GPU.",
         repo=INST, locate="The Nouveau kernel driver is currently in use", paths=("misc.c",)),
    Spec("installer.x_running", "nvidia-installer", "An X server is running.",
         repo=INST, locate="You appear to be running an X server", paths=("misc.c",)),
    Spec("installer.preinstall_failed", "nvidia-installer", "The distribution's pre-install hook refused the install.",
         repo=INST, locate="The distribution-provided pre-install script", paths=("install-from-cwd.c",)),
    Spec("installer.missing_dev_tool", "nvidia-installer", "A build tool (gcc, make, ld) is missing.",
         repo=INST, locate="Unable to find the development tool", paths=("misc.c",)),
    Spec("installer.failed", "nvidia-installer", "The .run installer failed (the log says at which step).",
         repo=INST, locate="Installation has failed.  Please see the file", paths=("install-from-cwd.c",)),
    # --- libnvidia-container (nvidia-container-cli)
    Spec("nvc.load_library_failed", "nvidia-container-cli", "The host's driver libraries (libnvidia-ml.so.1) cannot be loaded.",
         repo=NVC, locate="load library failed", wordings=("initialization error: load library failed: %s",),
         url=LIBNVC + "src/dxcore.c"),
    # nvc_init (src/nvc.c, read at f35f091): libdxcore.so loaded (WSL 2) but dxcore_enum_adapters kept no adapter:
    # none with a WDDM >= 2.8 driver whose driver store holds NVIDIA's libraries (src/dxcore.c dxcore_add_adapter)
    Spec("nvc.wsl_no_adapters", "nvidia-container-cli (libnvidia-container, WSL 2)",
         "libnvidia-container found WSL 2's dxcore but no GPU adapter with an NVIDIA driver that supports WSL (WDDM 2.8 "
         "or later, its libraries in the driver store): Windows exposes no NVIDIA GPU to the VM.",
         repo=NVC, locate="WSL environment detected but no adapters were found",
         wordings=("WSL environment detected but no adapters were found",),  # the CLI prefixes "initialization error: "
         url=GH + "NVIDIA/libnvidia-container/blob/f35f091c6261496cef48f408dffa84c68e49e199/src/nvc.c"),
    Spec("nvc.initialization_error", "nvidia-container-cli", "nvidia-container-cli could not initialise (driver, NVML).",
         repo=NVC, locate="initialization error: %s", wordings=("initialization error: %s",),
         url=LIBNVC + "src/cli/configure.c"),
    Spec("nvc.nvml_error", "nvidia-container-cli", "An NVML call failed inside nvidia-container-cli.",
         repo=NVC, locate="nvml error: %s", wordings=("initialization error: nvml error: %s",),
         url=LIBNVC + "src/driver.c"),
    Spec("nvc.mount_error", "nvidia-container-cli", "Mounting the driver or devices into the container failed.",
         repo=NVC, locate="mount error: %s", wordings=("mount error: %s",), url=LIBNVC + "src/cli/configure.c"),
    Spec("nvc.device_error", "nvidia-container-cli", "A requested GPU could not be selected.",
         repo=NVC, locate="device error: %s", wordings=("device error: %s",), url=LIBNVC + "src/cli/configure.c"),
    Spec("nvc.requirement_error", "nvidia-container-cli", "The image's requirement (cuda>=X, driver>=Y) is not met.",
         repo=NVC, locate="requirement error: %s",
         wordings=("requirement error: unsatisfied condition: %s",), url=LIBNVC + "src/cli/configure.c"),
    Spec("nvc.ldcache_error", "nvidia-container-cli", "Updating the container's ld cache failed.",
         repo=NVC, locate="ldcache error: %s", wordings=("ldcache error: %s",), url=LIBNVC + "src/cli/configure.c"),
    Spec("nvc.detection_error", "nvidia-container-cli", "Driver/device detection failed.",
         repo=NVC, locate="detection error: %s", wordings=("detection error: %s",), url=LIBNVC + "src/cli/configure.c"),
    Spec("nvc.bpf_prog_query", "nvidia-container-cli (nvcgo, cgroup v2)",
         "The cgroup-v2 device filter cannot be read (unprivileged/nested container, LXC without the permission).",
         repo=NVC, locate="bpf_prog_query(BPF_CGROUP_DEVICE) failed",
         wordings=("bpf_prog_query(BPF_CGROUP_DEVICE) failed: %s",), url=LIBNVC + "src/nvcgo/internal/cgroup/ebpf.go"),
    Spec("nvc.add_device_rules", "nvidia-container-cli (nvcgo, cgroup v2)", "The GPU device rules could not be added.",
         repo=NVC, locate="failed to add device rules",
         wordings=("mount error: failed to add device rules: %s",), url=LIBNVC + "src/nvcgo/internal/cgroup/v2.go"),
    # --- NVIDIA's dnf/yum plugin (precompiled kmod streams on RHEL): it filters out kernels that have no precompiled
    # module for the installed driver, so an update either skips the kernel or fails to resolve
    Spec("dnfnv.no_precompiled_kmod", "dnf-plugin-nvidia / yum-plugin-nvidia",
         "No precompiled NVIDIA kernel module package exists yet for the new kernel and the installed driver: the "
         "plugin holds the kernel back (the update skips it or cannot resolve).",
         repo=DNFNV, locate="Skipping kernel installation since no"),
    Spec("dnfnv.filtering_kernel", "dnf-plugin-nvidia (>= 2.x)",
         "The plugin filters out a kernel that has no precompiled NVIDIA module for the installed driver.",
         repo=DNFNV, locate="no precompiled modules available for version"),
    # --- CDI (the Container Device Interface library the runtimes vendor: podman, docker >= 25, containerd, CRI-O)
    Spec("cdi.unresolvable_devices", "CDI (pkg/cdi cache.go), as podman/docker/containerd print it",
         "The runtime was asked for CDI devices (nvidia.com/gpu=...) that no CDI spec it could load defines: no spec "
         "generated, a stale spec, or a spec it cannot read (a cdiVersion newer than the runtime's CDI library).",
         repo=CDI, locate="unresolvable CDI devices", paths=("pkg/cdi",)),
    Spec("cdi.host_device_missing", "CDI (pkg/cdi container-edits_unix.go)",
         "A device node the CDI spec names does not exist on the host (the spec was generated for nodes that are "
         "gone or not yet created).",
         repo=CDI, locate="failed to stat CDI host device", paths=("pkg/cdi",)),
    Spec("cdi.load_spec_failed", "CDI (pkg/cdi cache.go)",
         "A CDI spec file could not be read or parsed (invalid, or a spec version this runtime's CDI library does not "
         "know).",
         repo=CDI, locate="failed to load CDI Spec", paths=("pkg/cdi",)),
    # --- the NVIDIA container toolkit (runtime hook), docker/runc around it
    Spec("toolkit.hook_failed", "runc (prestart hook) / docker", "The NVIDIA prestart hook (nvidia-container-cli) failed.",
         wordings=("error running hook #%d: error running hook: exit status %d, stdout: %s, stderr: %s",
                   "error running prestart hook #%d: exit status %d"),
         url=GH + "opencontainers/runc/blob/main/libcontainer/configs/config.go", kind="documented"),
    Spec("toolkit.no_gpu_driver", "docker (daemon)", "Docker has no GPU device driver: the NVIDIA toolkit is not configured.",
         # daemon/errors.go incompatibleDeviceRequest: "could not select device driver %q with capabilities: %v" (the
         # driver quoted, empty for --gpus; the capability sets as Go prints [][]string: [[gpu]], [[gpu compute utility]])
         wordings=("could not select device driver %s with capabilities: %s",),
         url=GH + "moby/moby/blob/master/daemon/errors.go", kind="documented"),
    Spec("toolkit.unknown_runtime", "docker (daemon)", "The nvidia runtime is not registered with docker.",
         wordings=("unknown or invalid runtime name: nvidia",), url=GH + "moby/moby/blob/master/daemon/runtime_unix.go",
         kind="documented"),
    # Kubernetes' RuntimeClass handler (`runtimeClassName: nvidia`, or the GPU Operator's default runtime) that the
    # node's CRI runtime has no entry for: the toolkit never wrote it (`nvidia-ctk runtime configure`) or the runtime
    # was not restarted. containerd's CRI plugin (v1.2 vendor/…/cri/pkg/server/sandbox_run.go, v1.6 pkg/cri/server,
    # HEAD internal/cri/config/config.go; wrapped "failed to get sandbox runtime: %w"); CRI-O's (oci/oci.go 1.14,
    # internal/oci/oci.go 1.20-HEAD).
    # docker-compose 1.x's schema validation (compose/config/validation.py, jsonschema's "Additional properties are not
    # allowed (%s was unexpected)" and Compose's "Unsupported config option for %s: %s"): a GPU request the installed
    # Compose or the file's format version cannot express — `deploy.resources.reservations.devices` before 1.28.0
    # (docker/compose#6691 added it; a distribution's 1.17.1 refuses it), `runtime:` outside file formats 2.3/2.4
    Spec("compose.gpu_key_rejected", "docker-compose 1.x (compose/config/validation.py)",
         "The installed docker-compose (or the Compose file's format version) has no key for the GPU request: the "
         "file is refused and no container gets a GPU.",
         wordings=("%s value Additional properties are not allowed ('devices' was unexpected)",
                   "Unsupported config option for %s: 'runtime'", "Unsupported config option for %s: 'gpus'"),
         url=GH + "docker/compose/blob/1.29.2/compose/config/validation.py", kind="documented"),
    Spec("cri.containerd_no_runtime", "containerd (CRI plugin)",
         "The pod's runtime handler (e.g. nvidia) is not configured in containerd's CRI runtimes.",
         repo="containerd/containerd", locate="no runtime for %q is configured",
         wordings=("no runtime for %s is configured",),
         url=GH + "containerd/containerd/blob/301026e58c619e63d09c0ec411012e54c0124b03/internal/cri/config/config.go"),
    Spec("cri.crio_no_runtime_handler", "CRI-O", "The pod's runtime handler (e.g. nvidia) is not configured in CRI-O.",
         repo="cri-o/cri-o", locate="failed to find runtime handler %s from runtime list",
         wordings=("failed to find runtime handler %s from runtime list %s",),
         url=GH + "cri-o/cri-o/blob/f954a17e505f8931e91004403b5f5eac71ab6085/internal/oci/oci.go"),
    # TrueNAS SCALE's apps library rendering an app's compose file with its NVIDIA GPU (library/<v>/resources.py
    # _auto_add_gpus_from_values): library 1.1.x joined two literals without a space ("GPU in" "slot": "GPU inslot",
    # raised as utils.TemplateException), 2.x says "GPU in slot" (RenderError); read in truenas/apps at 5a5f8aa
    Spec("truenas.gpu_uuid_missing", "TrueNAS SCALE apps library (library/<version>/resources.py)",
         "The app's GPU selection holds a PCI slot without the GPU's UUID: its compose file cannot be rendered.",
         wordings=("Expected [uuid] to be set for GPU inslot [%s] in [nvidia_gpu_selection]",
                   "Expected [uuid] to be set for GPU in slot [%s] in [nvidia_gpu_selection]"),
         url=GH + "truenas/apps/blob/5a5f8aa813f103f38ab66e25e8867447a1dc50c0/library/2.3.11/resources.py",
         kind="documented"),
    # pacman's refusal of a transaction that breaks a versioned dependency (src/pacman/sync.c print_broken_dep,
    # under libalpm's "failed to prepare transaction (could not satisfy dependencies)"): a distribution's prebuilt
    # NVIDIA module package pins the nvidia-utils it was built with (CachyOS/linux-cachyos#1034)
    Spec("pacman.broken_dependency", "pacman (src/pacman/sync.c)",
         "pacman refuses the transaction: a package it would install or remove breaks another package's versioned "
         "dependency, or a dependency no repository satisfies.",
         wordings=("installing %s (%s) breaks dependency '%s' required by %s",
                   "removing %s breaks dependency '%s' required by %s",
                   "unable to satisfy dependency '%s' required by %s",
                   # libalpm's sync.c when it leaves a package out of an upgrade (pacman -Syu prints the list after it)
                   'cannot resolve "%s", a dependency of "%s"'),
         url="https://gitlab.archlinux.org/pacman/pacman/-/blob/master/src/pacman/sync.c", kind="documented"),
    # the GPU check of NVIDIA's NGC framework images at container start (entrypoint.d: deviceQuery's SM of each GPU
    # against the oldest SM the image supports and the newest it was built for), as nvcr.io's PyTorch, NeMo and Triton
    # images print it (NVIDIA-NeMo/Speech#346, a Tesla K80; a Triton 24.05 image on a Quadro M1200)
    Spec("ngc.gpu_not_supported", "NVIDIA NGC images (entrypoint GPU check)",
         "The GPU's compute capability is outside what the image's frameworks were built for: it has no kernels for "
         "this GPU.",
         wordings=("ERROR: Detected %s GPU, which is not supported by this container",),
         url="https://docs.nvidia.com/deeplearning/frameworks/support-matrix/", kind="documented"),
    # the same check on a GPU newer than the image supports (PTX may still run it), and its summary where no GPU passed
    # (printed alone where deviceQuery listed no GPU it could read); DIGITS 18.02's "No NVIDIA supported GPU(s)"
    Spec("ngc.gpu_not_counted", "NVIDIA NGC images (entrypoint GPU check)",
         "The image's GPU check counted no GPU as supported: one newer than the image, or none it could read.",
         wordings=("WARNING: Detected %s GPU, which is not yet supported in this version of the container",
                   "ERROR: No supported GPU(s) detected to run this container",
                   "ERROR: No NVIDIA supported GPU(s) detected to run this container"),
         url="https://docs.nvidia.com/deeplearning/frameworks/support-matrix/", kind="documented"),
    # pip's resolver on an extra the chosen version does not define (it warns and installs the package without it:
    # pip 20.3+ "%s %s does not provide the extra '%s'"), uv's diagnostic for the same (uv-resolver MissingExtra)
    Spec("pip.extra_not_provided", "pip (resolver)",
         "The requested extra is not defined by the version installed: what it would have added (a CUDA build, a GPU "
         "plugin) is not installed, and the install still succeeds.",
         wordings=("%s %s does not provide the extra '%s'",),
         url=PIP + "resolution/resolvelib/factory.py", kind="documented"),
    Spec("uv.extra_not_provided", "uv (uv-resolver, ResolutionDiagnostic::MissingExtra)",
         "The requested extra is not defined by the version installed: what it would have added is not installed.",
         wordings=("The package `%s` does not have an extra named `%s`.",),
         url=GH + "astral-sh/uv/tree/main/crates/uv-resolver/src/resolution", kind="documented"),
    # conda 4.8-4.9's UnsatisfiableError section for the __cuda virtual package (conda/exceptions.py, the "cuda"
    # class; later conda says "incompatible with your system" / "Your installed version is"): it lists every chain that
    # reaches __cuda, and the virtual package alone where no package constrained it
    Spec("conda.incompatible_with_cuda_driver", "conda 4.8-4.9 (conda/exceptions.py UnsatisfiableError)",
         "conda's solve failed; the specifications listed under it reach the __cuda virtual package (the driver's CUDA "
         "version). Listed alone (`feature:/<subdir>::__cuda==X=0`), no package constrained it.",
         wordings=("The following specifications were found to be incompatible with your CUDA driver:",),
         url=GH + "conda/conda/blob/4.9.2/conda/exceptions.py", kind="documented"),
    # PyTorch Lightning's GPU-id check (0.x utilities/distributed parse_gpu_ids, 1.x-2.x CUDAAccelerator
    # _sanitize_gpu_ids): the list of GPUs torch sees printed empty
    Spec("lightning.requested_gpus_unavailable", "PyTorch Lightning (MisconfigurationException)",
         "The trainer asked for GPUs and torch sees none (`torch.cuda.device_count()` is 0).",
         wordings=("You requested GPUs: %s\n But your machine only has: []",
                   "You requested gpu: %s\nBut your machine only has: []",
                   # 1.7+: the accelerator check before the device ids; the connector's own
                   "`%s` can not run on your system since the accelerator is not available.",
                   "No supported gpu backend found!"),
         url=GH + "Lightning-AI/pytorch-lightning/blob/master/src/lightning/fabric/accelerators/cuda.py",
         kind="documented"),
    # atop's GPU daemon on any failure of pynvml's nvmlInit (atopgpud main(), logging.error)
    Spec("atop.nvml_init_failed", "atopgpud (atop's GPU daemon)",
         "NVML could not be initialised: atopgpud says the library is probably not installed (or not found).",
         wordings=("Shared lib 'libnvidia-ml' probably not installed!",),
         url=GH + "Atoptool/atop/blob/1a226186868d806809cc8486eae46f5df28290b6/atopgpud", kind="documented"),
    # apt's refusal of a repository whose Release file was signed before and is not verifiable now (acquire-item.cc:
    # the key that signed it was rotated, NVIDIA's CUDA repositories in April 2022: nytimes/rd-blender-docker#41)
    Spec("apt.repository_no_longer_signed", "apt (apt-pkg/acquire-item.cc)",
         "apt refuses a repository it had verified before: its Release file can no longer be verified (the signing "
         "key changed).",
         wordings=("The repository '%s' is no longer signed.",),
         url="https://salsa.debian.org/apt-team/apt/-/blob/main/apt-pkg/acquire-item.cc", kind="documented"),
    # apt's verification of a Release file whose signature is bad or whose key expired (methods/gpgv.cc: KEYEXPIRED,
    # EXPKEYSIG, BADSIG after it; Azure/acs-engine#3933, the container toolkit's repository key in 2018)
    Spec("apt.signatures_invalid", "apt (methods/gpgv.cc)",
         "apt cannot verify the repository's Release file: its signature is invalid or the key that made it has "
         "expired.",
         wordings=("The following signatures were invalid:",),
         url="https://salsa.debian.org/apt-team/apt/-/blob/main/methods/gpgv.cc", kind="documented"),
    # apt's download error for an index or a package (apt-pkg/acquire-item.cc, "E:Failed to fetch <uri>  <reason>")
    Spec("apt.failed_to_fetch", "apt (apt-pkg/acquire-item.cc)",
         "apt could not download a repository index or a package from that URL (404, hash mismatch, unreachable).",
         wordings=("Failed to fetch %s  %s",),
         url="https://salsa.debian.org/apt-team/apt/-/blob/main/apt-pkg/acquire-item.cc", kind="documented"),
    # apt reading sources.list(.d): one repository listed twice with different options (debmetaindex.cc; newer apt
    # adds ": <value> != <value>"), as after following NVIDIA's old and new instructions (NVIDIA/libnvidia-container#194)
    Spec("apt.conflicting_option", "apt (apt-pkg/deb/debmetaindex.cc)",
         "The same repository is listed more than once with different options (Signed-By, Trusted): apt reads no "
         "source list.",
         wordings=("Conflicting values set for option %s regarding source %s %s",),
         url="https://salsa.debian.org/apt-team/apt/-/blob/main/apt-pkg/deb/debmetaindex.cc", kind="documented"),
    # CMake's Visual Studio generators when the CUDA language is enabled and VS has no CUDA build customization
    # (Modules/CMakeDetermineCompilerId.cmake): CUDA installed before VS, or a VS newer than the CUDA release supports
    Spec("cmake.no_cuda_toolset", "CMake (Modules/CMakeDetermineCompilerId.cmake, Visual Studio generators)",
         "Visual Studio has no CUDA toolset: the CUDA toolkit's Visual Studio integration is not installed in it.",
         wordings=("No CUDA toolset found.",),
         url=GH + "Kitware/CMake/blob/master/Modules/CMakeDetermineCompilerId.cmake", kind="documented"),
    # MSBuild's MSB4019 when a project imports a CUDA build customization (BuildCustomizations\CUDA x.y.props/.targets)
    # that this Visual Studio lacks: that CUDA release, or its Visual Studio integration, is not installed
    # (brichard19/BitCrack#234, NVIDIA/cuda-samples#119; newer MSBuild names the Import's expression, older its path;
    # a Chinese Visual Studio prints its translation, dlunion/tensorRTIntegrate#15)
    Spec("msbuild.imported_project_not_found", "MSBuild (MSB4019, Microsoft.Build Strings.resx)",
         "A project imports a file that does not exist: for CUDA x.y.props/.targets, that CUDA release's Visual Studio "
         "integration is not in this Visual Studio.",
         wordings=('The imported project "%s" was not found. Confirm that the expression in the Import declaration '
                   '"%s" is correct, and that the file exists on disk.',
                   'The imported project "%s" was not found. Confirm that the path in the <Import> declaration is '
                   'correct, and that the file exists on disk.',
                   "\u672a\u627e\u5230\u5bfc\u5165\u7684\u9879\u76ee\u201c%s\u201d\u3002"),
         url=GH + "dotnet/msbuild/blob/main/src/Build/Resources/Strings.resx", kind="documented"),
    # dnf's (and yum's) failure to download a repository's metadata (dnf/base.py, libdnf; dnf5 libdnf5/repo): a 404
    # for a distribution release the repository does not publish, a typo in the .repo file, no route (negativo17/cuda#27,
    # NVIDIA/libnvidia-container#203, opendatahub-io/notebooks#1188)
    Spec("dnf.metadata_download_failed", "dnf 4 / dnf5 / yum (repository metadata download)",
         "dnf could not download a repository's metadata (repomd.xml or the files it lists): the repository URL is "
         "wrong for this release, unreachable, or the mirror is mid-sync.",
         wordings=("Failed to download metadata for repo '%s': %s",
                   "Errors during downloading metadata for repository '%s':",
                   'Failed to download metadata (baseurl: "%s") for repository "%s"',
                   "failure: repodata/repomd.xml from %s: [Errno 256] No more mirrors to try.",
                   "Cannot retrieve repository metadata (repomd.xml) for repository: %s. Please verify its path and "
                   "try again",
                   "One of the configured repositories failed (%s),"),
         url=GH + "rpm-software-management/dnf/blob/master/dnf/base.py", kind="documented"),
    # apt reading a malformed one-line source (apt-pkg/sourcelist.cc; apt before 1.1 said "Malformed line … in source
    # list"): NVIDIA's .list fetched for a distribution the repository does not publish holds an HTML 404 page, or an
    # edited `$(ARCH)` broke it (NVIDIA/nvidia-docker#800)
    Spec("apt.malformed_list_entry", "apt (apt-pkg/sourcelist.cc)",
         "A sources.list(.d) entry cannot be parsed: apt reads no source list and updates nothing.",
         wordings=("Malformed entry %u in list file %s (%s)", "Malformed line %lu in source list %s (%s)",
                   "Malformed stanza %u in source list %s (%s)",
                   "\u8f6f\u4ef6\u6e90\u5217\u8868 %s \u4e2d\u7b2c %u \u884c\u7684\u5c0f\u8282\u683c\u5f0f"
                   "\u6709\u8bef (%s)"),
         url="https://salsa.debian.org/apt-team/apt/-/blob/main/apt-pkg/sourcelist.cc", kind="documented"),
    # apt reading a one-line source whose first word is not deb/deb-src (apt-pkg/sourcelist.cc): an HTML page saved as
    # the .list ("Type '<!doctype' is not known …") or a line without its type (pjreddie/darknet#1331)
    Spec("apt.unknown_source_type", "apt (apt-pkg/sourcelist.cc)",
         "A sources.list(.d) line does not start with a known type (deb, deb-src): apt reads no source list.",
         wordings=("Type '%s' is not known on line %u in source list %s",
                   # apt's Simplified Chinese (po/zh_CN.po), as a zh_CN system prints it
                   "%s \u7b2c %u \u884c\u4e2d\u7684\u7c7b\u522b \u201c%s\u201d \u65e0\u6cd5\u8bc6\u522b"),
         url="https://salsa.debian.org/apt-team/apt/-/blob/main/apt-pkg/sourcelist.cc", kind="documented"),
    # NVIDIA's Windows driver installer's system check: the package's INF lists no hardware ID of a GPU in the machine
    # (a driver for another product line or form factor, a GPU the branch no longer or not yet supports), another
    # Windows release, or no NVIDIA GPU visible (dartraiden/NVIDIA-patcher#293, arutar/FrankenDriver#110)
    Spec("nvwin.installer_cannot_continue", "NVIDIA Windows driver installer (setup.exe, system check)",
         "The driver package refused this machine: no GPU it supports is visible, or this Windows is not one it "
         "supports.",
         wordings=("NVIDIA Installer cannot continue", "This graphics driver could not find compatible graphics hardware",
                   "This NVIDIA graphics driver is not compatible with this version of Windows",
                   "No NVIDIA GPU is detected on your system"),
         url=GH + "dartraiden/NVIDIA-patcher/issues/293", kind="recorded"),
    # Windows' ERROR_COMMITMENT_LIMIT (1455), as Python prints it ("[WinError 1455] …"): importing torch maps its CUDA
    # and cuDNN DLLs, which can exceed the commit limit (oatsu-gh/enunu_training_kit#8)
    Spec("windows.commitment_limit", "Windows (ERROR_COMMITMENT_LIMIT, 1455)",
         "Windows could not commit the memory a DLL or allocation needs: the paging file (and RAM) is too small.",
         wordings=("The paging file is too small for this operation to complete.",),
         url="https://learn.microsoft.com/en-us/windows/win32/debug/system-error-codes--1300-1699-", kind="documented"),
    # the NVHPC (nvc/nvc++/nvfortran) OpenACC/OpenMP runtime when the binary holds no code for the GPU's compute
    # capability (TinkerTools/tinker-hp#32: a cc90 build on an RTX 5080)
    Spec("nvhpc.rebuild_for_gpu", "NVIDIA HPC SDK accelerator runtime (Accelerator Fatal Error)",
         "The program was compiled for other compute capabilities than this GPU's: no device code for it.",
         wordings=("Rebuild this file with -gpu=cc%d to use NVIDIA Tesla GPU %d",
                   "Rebuild the application with -gpu=cc%d to use NVIDIA Tesla GPU %d"),
         url="https://docs.nvidia.com/hpc-sdk/compilers/hpc-compilers-user-guide/index.html", kind="documented"),
    Spec("toolkit.image_no_driver", "NVIDIA CUDA images (nvidia_entrypoint.sh)",
         "The container started without GPU access (no --gpus / runtime).",
         wordings=("WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.",),
         url="https://gitlab.com/nvidia/container-images/cuda", kind="documented"),
    Spec("toolkit.auto_detected_mode", "nvidia-container-runtime-hook", "The toolkit's mode (legacy/cdi/csv) it chose.",
         repo=NCT, locate="Auto-detected mode as", wordings=("Auto-detected mode as '%s'",)),
    Spec("toolkit.image_built_for_driver", "NVIDIA NGC images (entrypoint)", "The image needs a newer driver release.",
         wordings=("This container was built for NVIDIA Driver Release %s or later, but version %s was detected and "
                   "compatibility mode is UNAVAILABLE.",),
         url="https://docs.nvidia.com/deeplearning/frameworks/support-matrix/", kind="documented"),
    # --- LXC
    Spec("lxc.nvidia_hook_no_cli", "LXC hooks/nvidia", "The LXC nvidia hook needs nvidia-container-cli on the host.",
         repo=LXC, locate="Missing tool nvidia-container-cli", paths=("hooks/nvidia",)),
    Spec("lxc.nvidia_hook_privileged", "LXC hooks/nvidia", "The LXC nvidia hook works in unprivileged containers only.",
         repo=LXC, locate="This hook currently only works in unprivileged mode", paths=("hooks/nvidia",)),
    Spec("lxc.nvidia_hook_no_uvm", "LXC hooks/nvidia", "nvidia_uvm is not loaded on the host: /dev/nvidia-uvm is missing.",
         repo=LXC, locate="Kernel module nvidia_uvm is not loaded", paths=("hooks/nvidia",)),
    Spec("lxc.nvidia_hook_mount_only", "LXC hooks/nvidia", "lxc.hook.mount must name the nvidia hook.",
         repo=LXC, locate="This hook must be used as a", paths=("hooks/nvidia",)),
    Spec("lxc.init_failed", "LXC (start.c)", "The container could not be initialised (config, hooks, mounts).",
         repo=LXC, locate='Failed to initialize container \\"%s\\"', paths=("src/lxc/start.c",)),
    Spec("lxc.spawn_failed", "LXC (start.c)", "The container could not be spawned.",
         repo=LXC, locate='Failed to spawn container \\"%s\\"', paths=("src/lxc/start.c",)),
    Spec("lxc.idmap_setup_failed", "LXC (start.c)", "The uid/gid mapping could not be set up.",
         repo=LXC, locate="Failed to set up id mapping", paths=("src/lxc/start.c",)),
    Spec("lxc.write_mapping_failed", "LXC (idmap_utils.c / conf.c)", "newuidmap/newgidmap refused the lxc.idmap ranges.",
         repo=LXC, locate="Failed to write mapping", paths=("src/lxc",)),
    Spec("lxc.mount_hooks_failed", "LXC (conf.c)", "A mount hook (e.g. hooks/nvidia) failed.",
         repo=LXC, locate="Failed to run mount hooks", paths=("src/lxc/conf.c",)),
    # conf.c mount_entry() (lxc.mount.entry, the GPU nodes LXD/Proxmox pass in) and utils.c safe_mount(); the same
    # text with " (optional)" is logged at INFO for an `optional` entry and does not stop the start. Several lines
    # print it (some with " with flags %lu" or "(optional)" after it), so the wording is recorded, not grepped.
    Spec("lxc.mount_entry_failed", "LXC (conf.c mount_entry / utils.c safe_mount)",
         "LXC could not bind-mount an entry of the container's config (a device node or directory the host lacks, "
         "or a mount the config repeats), so the container does not start.",
         wordings=('Failed to mount "%s" on "%s"', 'Failed to mount "%s" onto "%s"'),
         url=GH + "lxc/lxc/blob/e7b855a51b81a6a562d121aa60e8581993beb203/src/lxc/conf.c#L2101"),
    Spec("lxc.newuidmap_failed", "LXC (uidmap via shadow's newuidmap)", "newuidmap failed: /etc/subuid lacks the range.",
         wordings=("newuidmap failed to write mapping", "newgidmap failed to write mapping"),
         url=GH + "shadow-maint/shadow/blob/master/src/newuidmap.c", kind="documented"),
    # --- pve-container
    Spec("pve.device_mode", "pve-container (lxc-pve-prestart-hook)", "A devN: entry names a path that is not a device node.",
         repo=PVE, locate="Could not get mode or device ID of", paths=("src/lxc-pve-prestart-hook",)),
    Spec("pve.device_missing", "pve-container (PVE::LXC::Tools)", "A devN: entry names a device that does not exist on the host.",
         repo=PVE, locate="Device $path does not exist", paths=("src/PVE/LXC/Tools.pm",)),
    Spec("pve.not_a_device", "pve-container (PVE::LXC::Tools)", "A devN: path exists but is not a device node.",
         repo=PVE, locate='"$path is not a device', paths=("src/PVE/LXC/Tools.pm",)),
    Spec("pve.startup_failed", "pve-container (PVE::LXC)", "pct start failed (the LXC log says why).",
         repo=PVE, locate="startup for container '$vmid' failed", paths=("src/PVE/LXC.pm",)),
    Spec("pve.create_failed", "pve-container (PVE::API2::LXC)", "pct create/restore failed.",
         repo=PVE, locate="unable to create CT $vmid -", paths=("src/PVE/API2/LXC.pm",)),
    Spec("pve.passthrough_root_only", "pve-container (PVE::LXC::Config / API)", "Device passthrough needs root@pam.",
         repo=PVE, locate="configuring device passthrough is only allowed for root@pam",
         wordings=("configuring device passthrough is only allowed for root@pam",)),
    Spec("lvm.insufficient_free_space", "lvm2 (lvcreate, as pct create/resize run it)",
         "The storage (LVM volume group / thin pool) has no room for the container's volume.",
         wordings=('Volume group "%s" has insufficient free space (%u extents): %u required.',),
         url="https://sourceware.org/git/?p=lvm2.git;a=blob;f=lib/metadata/lv_manip.c", kind="documented"),
    Spec("pve.task_error", "Proxmox VE task log", "A Proxmox task failed; the line after says why.",
         wordings=("TASK ERROR: %s",), url="https://pve.proxmox.com/pve-docs/", kind="documented"),
    # --- NCCL
    Spec("nccl.no_socket_interface", "NCCL (bootstrap.cc)", "NCCL found no usable network interface.",
         repo=NCCL, locate="no socket interface found"),
    Spec("nccl.shm_fallocate", "NCCL (shm)", "/dev/shm is too small for NCCL's segments (containers: --shm-size).",
         repo=NCCL, locate="failed to extend %s to %ld bytes",
         wordings=("Call to posix_fallocate failed : %s", "failed to extend /dev/shm/nccl-%s to %d bytes")),
    Spec("nccl.shm_open", "NCCL (shm)", "NCCL could not create a shared memory segment.",
         repo=NCCL, locate="failed to create shared memory file %s",
         wordings=("Call to shm_open failed : %s", "Error while creating shared memory segment %s (size %d)")),
    Spec("nccl.connect_failed", "NCCL (socket.cc)", "A rank could not connect to another (network, firewall, interface).",
         repo=NCCL, locate="socketStartConnect: Connect to"),
    Spec("nccl.maxsharedmem", "NCCL (enqueue.cc)", "This NCCL build predates the GPU (its kernels do not fit the device).",
         repo=NCCL, locate="exceeds device/fn maxSharedMem"),
    Spec("nccl.warn", "NCCL (debug.cc)", "An NCCL warning line (NCCL_DEBUG=WARN/INFO).",
         wordings=("%s:%d:%d [%d] NCCL WARN %s",), url=GH + "NVIDIA/nccl/blob/master/src/debug.cc", kind="documented"),
    Spec("nccl.error_code", "NCCL (ncclGetErrorString)", "An NCCL call failed with this error class.",
         wordings=("NCCL error %d: unhandled system error", "NCCL error %d: unhandled cuda error",
                   "NCCL error %d: internal error", "NCCL error %d: invalid usage", "NCCL error %d: remote process exited or there was a network error"),
         url=GH + "NVIDIA/nccl/blob/master/src/init.cc", kind="documented"),
    Spec("nccl.tests_wrong", "nccl-tests", "nccl-tests found wrong results.",
         wordings=("Out of bounds values : %d FAILED",), url=GH + "NVIDIA/nccl-tests/blob/master/src/common.cu",
         kind="documented"),
    Spec("nccl.p2p_disable_env", "NCCL (graph/paths.cc)", "NCCL_P2P_DISABLE was set: peer-to-peer transport turned off.",
         wordings=("NCCL_P2P_DISABLE set by environment to %d",), url=GH + "NVIDIA/nccl/blob/master/src/graph/paths.cc",
         kind="documented"),
    Spec("pct.cgroup_v1_devices_key", "pct config (/etc/pve/lxc/<vmid>.conf)",
         "A cgroup-v1 device key: ignored on a cgroup-v2 host (Proxmox VE 7+), so the GPU nodes are denied.",
         wordings=("lxc.cgroup.devices.allow: c %d:%s rwm",), url="https://pve.proxmox.com/wiki/Linux_Container",
         kind="documented"),
    # --- uv / pip resolver
    Spec("uv.no_solution", "uv (uv-resolver)", "The requirements cannot be satisfied together.",
         repo=UV, locate='"No solution found when resolving dependencies', paths=("crates",)),
    Spec("uv.no_compatible_version", "uv (uv-resolver, --verbose)",
         "The resolver found no version of a package that fits this Python, platform and index (logged at DEBUG "
         "before it backtracks or gives up).",
         repo=UV, locate="No compatible version found for", paths=("crates/uv-resolver",)),
    Spec("uv.unsatisfiable", "uv (PubGrub report)", "The resolver's derivation of why the requirements conflict.",
         wordings=("we can conclude that your requirements are unsatisfiable",),
         url=GH + "astral-sh/uv/blob/main/crates/uv-resolver/src/error.rs", kind="documented"),
    Spec("uv.no_wheel_for_platform", "uv", "A distribution has no wheel (and no sdist) for this platform.",
         wordings=("Distribution `%s` can't be installed because it doesn't have a source distribution or wheel for "
                   "the current platform",
                   "only has wheels for the following platform%s"),  # "platform: …" or "platforms: …"
         url=GH + "astral-sh/uv/blob/main/crates/uv-resolver/src/pubgrub/report.rs", kind="documented"),
    Spec("kbuild.make_error", "GNU make running the kernel's Kbuild (scripts/Makefile.build)",
         "A recipe of the kernel module build failed (GNU make's `*** [target] Error N`, localised in the user's "
         "language); the compiler's `file.c:L:C: error:` lines above it say why.",
         wordings=("make[%d]: *** [scripts/Makefile.build:%d: %s] Error %d",),
         url="https://www.gnu.org/software/make/manual/html_node/Error-Messages.html", kind="documented"),
    Spec("pip.no_matching_distribution", "pip", "No distribution satisfies the requirement on this index/platform.",
         wordings=("ERROR: No matching distribution found for %s",
                   "ERROR: Could not find a version that satisfies the requirement %s (from versions: %s)"),
         url=PIP + "index/package_finder.py", kind="documented"),
    Spec("pip.resolution_impossible", "pip (resolvelib)", "pip's resolver found the requirements conflicting.",
         wordings=("ResolutionImpossible",), url=PIP + "resolution/resolvelib/factory.py", kind="documented"),
    Spec("pip.dependency_conflict_warning", "pip", "pip installed a set whose requirements conflict.",
         wordings=("pip's dependency resolver does not currently take into account all the packages that are installed.",
                   "%s requires %s, but you have %s which is incompatible."),
         url=PIP + "commands/install.py", kind="documented"),
    Spec("pip.not_supported_wheel", "pip", "The wheel's tags do not match this interpreter/platform.",
         wordings=("%s is not a supported wheel on this platform.",), url=PIP + "req/constructors.py", kind="documented"),
    Spec("pip.subprocess_error", "pip", "A build subprocess failed.", wordings=("subprocess-exited-with-error",),
         url=PIP + "exceptions.py", kind="documented"),
    Spec("pip.oserror", "pip", "pip could not write the packages (disk full, permissions).",
         wordings=("Could not install packages due to an OSError",), url=PIP + "commands/install.py", kind="documented"),
    Spec("uv.build_failed", "uv", "A source distribution failed to build.", wordings=("Failed to build `%s`",),
         url=GH + "astral-sh/uv/blob/main/crates/uv/src/commands/diagnostics.rs", kind="documented"),
    # --- the dynamic loader (glibc) and shells
    Spec("ld.cannot_open_shared_object", "glibc ld.so (elf/dl-load.c)", "A shared library is not on the loader's path.",
         wordings=("error while loading shared libraries: %s: cannot open shared object file: No such file or directory",
                   "%s: cannot open shared object file: No such file or directory"), url=GLIBC, kind="documented"),
    # macOS's loader (dyld): "dyld: Library not loaded: @rpath/libcudart.9.0.dylib" / "Referenced from:" / "Reason: image
    # not found" (dyld 2); dyld 3/4 print "dyld[<pid>]: Library not loaded: …" and the paths tried (pjreddie/darknet#366)
    Spec("dyld.library_not_loaded", "macOS dyld", "A dynamic library is not on the loader's search path (rpath, "
         "DYLD_LIBRARY_PATH).",
         # Python's dlopen on macOS quotes dyld's reason after its own prefix ("OSError: dlopen(…, 0x0006): Library not
         # loaded: @rpath/libomp.dylib")
         wordings=("dyld: Library not loaded: %s", "dyld[%d]: Library not loaded: %s",
                   "dlopen(%s, %s): Library not loaded: %s"),
         url=GH + "apple-oss-distributions/dyld", kind="documented"),
    # cudarc (Rust; candle's CUDA backend) loads CUDA's libraries by name at run time and panics with the names it
    # tried (chelsea0x3b/cudarc#246: CUDA 12.5's nvrtc64_120_0.dll not in 0.11.4's list)
    Spec("cudarc.lib_not_found", "cudarc (Rust crate)", "cudarc found none of the file names it tries for a CUDA "
         "library.",
         wordings=("Unable to find %s lib under the names %s. Please open GitHub issue.",),
         url=GH + "chelsea0x3b/cudarc/issues/246", kind="recorded"),
    # dl-load.c open_verify(): a file that is there but is no usable ELF object (empty, truncated, a text file or a
    # placeholder where the library should be)
    Spec("ld.not_an_elf_object", "glibc ld.so (elf/dl-load.c open_verify)",
         "The library file exists but is not a usable shared object: empty or truncated (an interrupted copy, a "
         "placeholder bind-mounted or left where the real file should be), or not an ELF file at all.",
         wordings=("%s: file too short", "%s: invalid ELF header"), url=GLIBC, kind="documented"),
    # GNU ld linking against the same kind of file: bfd's bfd_error_file_truncated ("file truncated"; "File truncated"
    # before binutils 2.31) after ld's "%s: file not recognized: %s" (ld/ldfile.c). A CUDA driver library left empty
    # in an image built without the NVIDIA runtime (NVIDIA/nvidia-docker#1504: docker buildkit, libcuda.so)
    Spec("binutils.file_truncated", "GNU ld (binutils, bfd)",
         "The linker was given a library file that is empty or cut short: an interrupted copy, or a placeholder where "
         "the real library should have been mounted.",
         wordings=("%s: file not recognized: file truncated",),
         url="https://sourceware.org/git/?p=binutils-gdb.git;a=blob;f=bfd/bfd.c", kind="documented"),
    Spec("ld.version_not_found", "glibc ld.so (elf/dl-version.c)", "A library needs a newer glibc/libstdc++ symbol version.",
         wordings=("version `%s' not found (required by %s)",), url=GLIBC, kind="documented"),
    Spec("ld.undefined_symbol", "glibc ld.so (elf/dl-lookup.c)", "Libraries from different builds are mixed.",
         wordings=("%s: undefined symbol: %s",), url=GLIBC, kind="documented"),
    Spec("ld.cannot_find_lcuda", "binutils ld", "Linking needs libcuda.so (the driver's, or the toolkit's stub).",
         wordings=("cannot find -lcuda",), url="https://sourceware.org/binutils/docs/ld/", kind="documented"),
    Spec("win.dll_load_failed", "CPython on Windows", "A DLL or one of its dependencies failed to load.",
         wordings=("DLL load failed while importing %s", "[WinError 126] The specified module could not be found"),
         url=GH + "python/cpython/blob/main/Python/dynload_win.c", kind="documented"),
    Spec("coreutils.no_dev_nvidia", "coreutils (ls/stat/cat) on the GPU device nodes",
         "A /dev/nvidia* node is absent where the command ran (not created on the host, or not passed in).",
         wordings=("ls: cannot access '/dev/nvidia%s': No such file or directory",
                   "cat: /dev/nvidia%s: No such file or directory"),
         url="https://git.savannah.gnu.org/cgit/coreutils.git/tree/src/ls.c", kind="documented"),
    # Linux's modpost (scripts/mod/modpost.c): a module under a non-GPL licence that uses an EXPORT_SYMBOL_GPL
    # symbol does not link; a kernel that turns a symbol the NVIDIA driver uses GPL-only (rcu_read_unlock_strict in
    # 5.13+ with some configs, __rcu_read_lock, ...) breaks driver releases that predate it. `error()` prefixes
    # "ERROR: modpost: " (older kernels' `fatal()`: "FATAL: modpost: ")
    Spec("kbuild.modpost_gpl_only_symbol", "Linux kbuild (scripts/mod/modpost.c)",
         "A non-GPL module (the NVIDIA driver's) uses a symbol the kernel exports GPL-only: this driver release does "
         "not support this kernel.",
         wordings=("GPL-incompatible module %s.ko uses GPL-only symbol '%s'",),
         url=GH + "torvalds/linux/blob/master/scripts/mod/modpost.c", kind="documented"),
    Spec("shell.compiler_not_found", "bash / sh (for the C compiler a build runs)",
         "No C compiler: the kernel module or an extension cannot be built.",
         wordings=("gcc: command not found", "cc: command not found", "g++: command not found", "c++: command not found"),
         url="https://www.gnu.org/software/bash/manual/", kind="documented"),
    Spec("toolchain.nvcc_unsupported_arch", "nvcc", "The CUDA toolkit predates the GPU architecture asked for.",
         wordings=("nvcc fatal : Unsupported gpu architecture 'compute_%d'",
                   "nvcc fatal : Value 'sm_%d' is not defined for option 'gpu-architecture'"),
         url="https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/", kind="documented"),
    # NVRTC (closed; libnvrtc) rejects an -arch it does not know as an invalid option value: a GPU newer than the
    # toolkit, or one the toolkit dropped (hashcat, OpenMM, CuPy and PyTorch's JIT compile through it)
    Spec("toolchain.nvrtc_invalid_arch", "NVRTC (libnvrtc, nvrtcCompileProgram)",
         "The NVRTC the program carries does not know the GPU architecture it compiles for (newer than the toolkit, "
         "or dropped by it).",
         wordings=("nvrtc: error: invalid value for --gpu-architecture (-arch)",),
         url="https://docs.nvidia.com/cuda/nvrtc/index.html#supported-compile-options", kind="documented"),
    Spec("toolchain.ptxas_unknown_sm", "ptxas", "ptxas predates the GPU architecture asked for.",
         wordings=("ptxas fatal : Value 'sm_%d' is not defined for option 'gpu-name'",),
         url="https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/", kind="documented"),
    Spec("triton.capability_too_old", "Triton", "Triton needs a newer GPU than this one.",
         wordings=("Found %s which is too old to be supported by the triton GPU compiler, which is used as the backend. "
                   "Triton only supports devices of CUDA Capability >= 7.0",),
         url=GH + "pytorch/pytorch/blob/main/torch/_inductor/scheduler.py", kind="documented"),
    # ptxas (closed): a PTX instruction the target architecture lacks; the requirement per instruction is the PTX ISA
    # manual's "Target ISA notes" (mma.m8n8k4 requires sm_70 or higher); the wording as Triton/PyTorch/nvcc users
    # paste ptxas's output (triton-lang/triton#542)
    # TensorRT's builder (closed source: libnvinfer) refusing the GPU's SM, as its releases print it: TensorRT 7
    # ("Assertion failed: Unsupported SM." in rtSafe/cuda/caskUtils.cpp, NVIDIA/TensorRT#2332), 8.x-10.x's
    # "Error Code 1: Internal Error (Unsupported SM: 0x809)" (caskUtils.cpp::trtSmToCask, caskBuilderUtils.cpp::
    # trtSmToCaskCCV; the SM as hex: 0x601 Pascal, 0xc00 Blackwell), 10.x's "Error Code 9: API Usage Error (Target GPU
    # SM 61 is not supported by this TensorRT release." (builderHelpers.cpp checkCurrentSMEnabled; NVIDIA forum t/323431
    # for an RTX 5080 on 10.8)
    Spec("trt.unsupported_sm", "TensorRT (libnvinfer builder)",
         "This TensorRT release has no kernels for the GPU's SM: the GPU is newer than the release, or was dropped.",
         wordings=("Target GPU SM %d is not supported by this TensorRT release.", "Unsupported SM: %s",
                   "Assertion failed: Unsupported SM."),
         url=GH + "NVIDIA/TensorRT/issues/2332", kind="documented"),
    # The CUDA libraries' status for a GPU that lacks what the call needs (cudnnStatus_t CUDNN_STATUS_ARCH_MISMATCH = 6
    # through cuDNN 8; cublasStatus_t CUBLAS_STATUS_ARCH_MISMATCH = 8; cusolverStatus_t/cusparseStatus_t … = 4): the
    # name as cudnnGetErrorString / PyTorch's "cuDNN error: %s" / TensorFlow and helper_cuda print it, and the
    # documented sentence the bindings print (CUDA.jl, JCuda, managedCuda, cudnn-rs; the cuDNN guide's "The function
    # requires a feature absent from the current GPU device", quoted in pluskid/Mocha.jl#57; Torch7's cudnn.torch
    # "Error in CuDNN: CUDNN_STATUS_ARCH_MISMATCH", nagadomi/waifu2x#176; cuBLAS's on a Kepler GPU:
    # NVIDIA/DeepLearningExamples#147, laekov/fastmoe#134's helper_cuda "code=8(CUBLAS_STATUS_ARCH_MISMATCH)")
    Spec("cudnn.arch_mismatch", "cuDNN (cudnnStatus_t CUDNN_STATUS_ARCH_MISMATCH = 6)",
         "The cuDNN call needs a feature the GPU's architecture lacks: the GPU is older than this cuDNN release (or "
         "the operation) supports; the floor is the release's support matrix.",
         wordings=("CUDNN_STATUS_ARCH_MISMATCH", "The function requires a feature absent from the current GPU device."),
         url="https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html#cudnnstatus-t",
         kind="documented", extra_programs=("PyTorch (cuDNN error: %s)", "TensorFlow", "cudnn.torch", "Mocha.jl")),
    Spec("cublas.arch_mismatch", "cuBLAS (cublasStatus_t CUBLAS_STATUS_ARCH_MISMATCH = 8)",
         "The cuBLAS (or cuSOLVER/cuSPARSE) call needs a feature the GPU's architecture lacks: cublasGemmEx and the "
         "tensor-op paths need compute capability 5.0 or later, older releases' double precision 1.3.",
         wordings=("CUBLAS_STATUS_ARCH_MISMATCH", "CUSOLVER_STATUS_ARCH_MISMATCH", "CUSPARSE_STATUS_ARCH_MISMATCH",
                   "The function requires a feature absent from the device architecture"),
         url="https://docs.nvidia.com/cuda/cublas/index.html#cublasstatus-t", kind="documented",
         extra_programs=("cuSOLVER (CUSOLVER_STATUS_ARCH_MISMATCH = 4)", "cuSPARSE (CUSPARSE_STATUS_ARCH_MISMATCH = 4)",
                         "CUDA.jl", "PyTorch")),
    # The CUDA libraries' status for an allocation of device memory that failed inside the library (the docs: "Resource
    # allocation failed inside the cuBLAS library. This is usually caused by a cudaMalloc() failure"): cuBLAS = 3, cuDNN
    # = 2 (cuDNN 9: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED = 4004, …_HOST_ALLOCATION_FAILED = 4003),
    # cuSOLVER/cuSPARSE = 2, cuFFT's CUFFT_ALLOC_FAILED = 2, cuRAND's CURAND_STATUS_ALLOCATION_FAILED = 102, as
    # PyTorch prints them ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuDNN error:
    # %s", "cuFFT error: %s") and TensorFlow ("Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED")
    Spec("cudalib.alloc_failed", "CUDA libraries (cuBLAS, cuDNN, cuSOLVER, cuSPARSE, cuFFT, cuRAND)",
         "A CUDA library could not allocate the device memory it needs (its handle or workspace): the GPU's memory is "
         "exhausted.",
         wordings=("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
                   "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", "CUSOLVER_STATUS_ALLOC_FAILED",
                   "CUSPARSE_STATUS_ALLOC_FAILED", "CUFFT_ALLOC_FAILED", "CURAND_STATUS_ALLOCATION_FAILED",
                   "Resource allocation failed inside the cuBLAS library."),
         url="https://docs.nvidia.com/cuda/cublas/index.html#cublasstatus-t", kind="documented",
         extra_programs=("PyTorch", "TensorFlow", "CuPy")),
    # Blender's window system (intern/ghost/intern/GHOST_WindowX11.cpp) when no GLX visual can be had: the X11 call it
    # checks (glXQueryVersion() through 2.7x, glXChooseVisual() from 2.8) and the initial window's own line (", exit!"
    # dropped in 2.8); Xlib's own notice before it. Inside a Flatpak sandbox whose org.freedesktop.Platform.GL.nvidia-*
    # extension is not the host driver's version (flathub/org.blender.Blender#97), or a nix-built Blender on another
    # distribution, the GL driver the X server's NVIDIA GLX needs is not there.
    Spec("blender.glx_unavailable", "Blender (GHOST_WindowX11.cpp)",
         "Blender found no working OpenGL (GLX) visual: the GL userspace it loaded does not work with the X server's "
         "driver (missing, or another version than the display driver).",
         wordings=("X11 glXChooseVisual() failed, verify working openGL system!",
                   "X11 glXQueryVersion() failed, verify working openGL system!",
                   "initial window could not find the GLX extension, exit!",
                   "initial window could not find the GLX extension"),
         url=GH + "blender/blender/blob/main/intern/ghost/intern/GHOST_WindowX11.cc", kind="documented"),
    # The JVM's loader (java/lang/ClassLoader.java loadLibrary; HotSpot's os_windows.cpp for ERROR_MOD_NOT_FOUND) and
    # JCuda's LibUtils when a native library or a DLL it needs is not found (jcuda/jcuda-main#17: JCublas2's natives
    # built for another CUDA release than the installed one)
    Spec("java.unsatisfied_link", "Java (java.lang.UnsatisfiedLinkError)",
         "The JVM could not load a native library: it, or a library it links (a CUDA runtime of another release), is "
         "not on java.library.path / the loader's path.",
         wordings=("java.lang.UnsatisfiedLinkError: no %s in java.library.path",
                   "java.lang.UnsatisfiedLinkError: Can't load library: %s",
                   "java.lang.UnsatisfiedLinkError: %s: Can't find dependent libraries",
                   'Error while loading native library "%s"'),
         url=GH + "openjdk/jdk/blob/master/src/java.base/share/classes/java/lang/ClassLoader.java", kind="documented",
         extra_programs=("JCuda (jcuda.LibUtils)", "HotSpot (os_windows.cpp)")),
    # cuBLAS's CUBLAS_STATUS_NOT_SUPPORTED (15; cublasGetStatusString: "the requested functionality is not supported")
    # as CTranslate2 ("cuBLAS failed with status %s"), PyTorch ("CUDA error: %s when calling `cublasGemmEx(…)`") and
    # ggml ("cuBLAS error %d at %s:%d: %s") print it: reported for a GPU newer than the cuBLAS a program bundles
    # (RTX 50-series with CTranslate2's CUDA 12.x cuBLAS: coaxk/subarr#163, Purfview/whisper-standalone-win#403) or
    # older than the operation (fp16 GEMM on a GTX 980, ggml-org/llama.cpp#4395; a Tesla M40, OpenBMB/BMInf#13)
    Spec("cublas.not_supported", "cuBLAS (cublasStatus_t CUBLAS_STATUS_NOT_SUPPORTED = 15)",
         "cuBLAS has no implementation of the requested operation for this GPU: the GPU is newer than that cuBLAS "
         "release, or older than the operation's data type needs.",
         wordings=("cuBLAS failed with status CUBLAS_STATUS_NOT_SUPPORTED",
                   "cuBLAS error %d at %s:%d: the requested functionality is not supported"),
         url="https://docs.nvidia.com/cuda/cublas/index.html#cublasstatus-t", kind="documented",
         extra_programs=("CTranslate2", "PyTorch", "ggml / llama.cpp")),
    # candle (huggingface/candle, candle-core's CUDA backend: "{cuda:?} when loading {module_name}") compiles its bf16
    # kernels only for compute capability 8.0+ (`#if __CUDA_ARCH__ >= 800`): on an older GPU the function is not in the
    # module and the driver says CUDA_ERROR_NOT_FOUND (huggingface/candle#1911; spiceai/spiceai#4470 on a T4, 7.5)
    Spec("candle.kernel_not_found", "candle (candle-core CUDA backend)",
         "The kernel candle asked for is not in its compiled module for this GPU: its bf16 (and f8) kernels exist only "
         "for compute capability 8.0 and later.",
         wordings=('DriverError(CUDA_ERROR_NOT_FOUND, "named symbol not found") when loading %s',),
         url=GH + "huggingface/candle/issues/1911", kind="documented"),
    Spec("ptxas.feature_requires_target", "ptxas (CUDA toolkit)",
         "Code uses a PTX feature the GPU's architecture does not have: the GPU is older than the code needs.",
         wordings=("Feature '%s' requires .target sm_%d or higher",),
         url="https://docs.nvidia.com/cuda/parallel-thread-execution/", kind="documented"),
    Spec("bnb.cuda_setup_failed", "bitsandbytes", "bitsandbytes found no usable CUDA library.",
         wordings=("CUDA Setup failed despite GPU being available.",),
         url=GH + "bitsandbytes-foundation/bitsandbytes", kind="documented"),
    Spec("fabricmanager.not_running", "nvidia-fabricmanager (systemd)", "NVSwitch systems need the fabric manager running.",
         wordings=("nvidia-fabricmanager.service: Failed with result 'exit-code'",),
         url="https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/", kind="documented"),
    # --- ggml's CUDA backend: a kernel with no device code for the GPU's arch (common.cuh no_device_code; before
    # 2024 ggml-cuda.cu's bad_arch() printed the older wording, in llama.cpp's tree)
    Spec("ggml.no_device_code", "ggml CUDA backend (src/ggml-cuda/common.cuh)",
         "ggml was built without device code for this GPU's architecture (its CMAKE_CUDA_ARCHITECTURES list lacks "
         "it): the build does not run on this GPU.",
         repo=GGML, locate="has no device code compatible with CUDA arch", paths=("src/ggml-cuda",),
         wordings=("ERROR: ggml-cuda was compiled without support for the current GPU architecture.",),
         extra_programs=("llama.cpp", "ollama", "koboldcpp")),
    # --- CTranslate2's lazy CUDA loader (src/cuda/cublas_stub.cc, nccl_stub.cc): "Library " + name + " is not found
    # or cannot be loaded"
    Spec("ctranslate2.library_not_loaded", "CTranslate2 (src/cuda/*_stub.cc)",
         "CTranslate2 cannot load the CUDA library of the major version it was built against (cuBLAS, cuDNN, NCCL).",
         repo=CT2, locate="is not found or cannot be loaded", paths=("src/cuda",),
         wordings=("Library %s is not found or cannot be loaded",), extra_programs=("faster-whisper", "WhisperX")),
    # --- ptxas (closed; the driver's JIT prints the same through cuLinkAddData): PTX of a newer ISA than it reads
    Spec("ptxas.unsupported_ptx_version", "ptxas / the driver's PTX JIT",
         "The PTX was generated for a newer PTX ISA than this ptxas or driver JIT reads (a CUDA toolkit newer than "
         "the driver, for the JIT).",
         wordings=("ptxas application ptx input, line %d; fatal : Unsupported .version %d.%d; current version is "
                   "'%d.%d'",),
         url="https://docs.nvidia.com/cuda/parallel-thread-execution/#release-notes", kind="documented"),
    # --- the Windows loader (STATUS_ENTRYPOINT_NOT_FOUND 0xC0000139), English and Simplified Chinese dialogs
    Spec("windows.entry_point_not_found", "Windows loader",
         "A DLL of another version than the program was built against was loaded: the function it needs is not in it.",
         wordings=("The procedure entry point %s could not be located in the dynamic link library %s.",
                   "无法定位程序输入点 %s 于动态链接库 %s 上。"),
         url="https://learn.microsoft.com/en-us/openspecs/windows_protocols/ms-erref/596a1078-e883-4972-9bbc-49e60bebca55",
         kind="documented"),
    # --- pip (src/pip/_internal/resolution/resolvelib/factory.py / req_install): a Requires-Python that excludes this one
    Spec("pip.requires_different_python", "pip",
         "The package (or every version of it) declares a Requires-Python that excludes this interpreter.",
         wordings=("ERROR: Package %s requires a different Python: %s not in %s",),
         url=PIP + "exceptions.py", kind="documented"),
    # --- dnf (dnf/cli/main.py; dnf5 main.cpp): the hints it prints under an unresolvable transaction
    # dnf-plugins-core's config-manager (`dnf config-manager --add-repo URL`, yum-config-manager): the .repo file could
    # not be downloaded (librepo's "Status code: 404 for URL (IP: …)" or "Curl error (22): … for URL" before it), so no
    # repository was added (ollama/ollama#1993: NVIDIA published no CUDA repository for Fedora 39 yet)
    Spec("dnf.config_manager_add_repo_failed", "dnf-plugins-core config-manager (plugins/config_manager.py)",
         "`dnf config-manager --add-repo` could not download the .repo file: the URL is wrong or not published for "
         "this release, or unreachable; no repository was added.",
         wordings=("Configuration of repo failed", "Configuration of repos failed"),
         url=GH + "rpm-software-management/dnf-plugins-core/blob/master/plugins/config_manager.py", kind="documented"),
    Spec("dnf.depsolve_failed", "dnf 4 (dnf/cli/main.py) / dnf5 (dnf5/main.cpp)",
         "dnf could not resolve the transaction: a dependency no enabled repository provides, or packages that "
         "conflict; the lines under `Problem:` say which.",
         wordings=("try to add '--skip-broken' to skip uninstallable packages",
                   "try to add '--allowerasing' to command line to replace conflicting packages",
                   "--skip-broken to skip uninstallable packages"),
         url=GH + "rpm-software-management/dnf/blob/5ad76abc97a6b82a70ddc828d2286a47567eff7f/dnf/cli/main.py#L138",
         kind="documented", extra_programs=("dnf5 (https://github.com/rpm-software-management/dnf5/blob/"
                                            "8a8e234809ebb898c488b0efbdde86f1c958a5c4/dnf5/main.cpp#L1211)",)),
    # NVIDIA's Windows installer framework (NVI2: the CUDA toolkit's and the display driver's setup.exe, closed) in its
    # log: the install thread failing, the installer's summary, the constraint check refusing to start while another
    # installation runs (Windows Update's), and an MSI phase's failure (Nsight / Visual Studio Integration) — as the
    # logs posted in pytorch/pytorch#64536 and #34821 word them
    Spec("nvi2.install_failed", "NVIDIA installer for Windows (NVI2, setup.exe)",
         "NVIDIA's Windows installer (CUDA toolkit or driver) failed: a component's installation failed, or the "
         "installer refused to start while another installation was running.",
         wordings=("Installation failed with error Exception {%s}.",
                   "Install failed - Exception {%s} - going to fail state.",
                   "Constraints blocked install.",
                   "Caught exception Exception {0x80070643 - Fatal error during installation.; File: NVMsiPhase.cpp; "
                   "Line: %d}."),
         url=GH + "pytorch/pytorch/issues/64536", kind="documented"),
    # --- FFmpeg's NVENC/NVDEC (libavcodec nvenc.c; nv-codec-headers' loader): what media servers (Jellyfin, Plex's
    # transcoder, Tdarr, Frigate) print when the driver's video userspace is missing or older than the build's SDK
    Spec("ffmpeg.nvenc_driver_too_old", "FFmpeg (libavcodec/nvenc.c)",
         "FFmpeg was built against an NVENC SDK whose API the installed driver does not offer: the driver is older "
         "than the build needs.",
         wordings=("The minimum required Nvidia driver for nvenc is %s or newer",
                   "Driver does not support the required nvenc API version. Required: %d.%d Found: %d.%d"),
         url=GH + "FFmpeg/FFmpeg/blob/master/libavcodec/nvenc.c", kind="documented"),
    # nvenc.c's nvenc_print_error(): "%s: %s (%d)" with the nvenc_errors table's text for the NVENCSTATUS — for
    # NV_ENC_ERR_INVALID_VERSION (15) "invalid version": the driver's NVENC API is older than the SDK the build's
    # headers declare (before, or without, FFmpeg's own API-version check above: HandBrake/HandBrake#1827,
    # "Cannot get the preset configuration: invalid version (15)", settled by a driver update)
    Spec("ffmpeg.nvenc_invalid_version", "FFmpeg (libavcodec/nvenc.c nvenc_print_error)",
         "An NVENC call was refused with NV_ENC_ERR_INVALID_VERSION: the driver's NVENC API is older than the one the "
         "encoder was built for.",
         wordings=("%s: invalid version (15)",),
         url=GH + "FFmpeg/FFmpeg/blob/master/libavcodec/nvenc.c", kind="documented",
         extra_programs=("HandBrake", "OBS Studio's FFmpeg NVENC encoder")),
    # dynlink_loader.h prints `Cannot load %s` with the library macro it dlopen()s: CUDA_LIBNAME, NVCUVID_LIBNAME,
    # NVENC_LIBNAME (Linux: libcuda.so.1, libnvcuvid.so.1, libnvidia-encode.so.1; Windows: nvcuda.dll, nvcuvid.dll,
    # nvEncodeAPI64.dll): the wordings are those expansions (the bare `Cannot load %s` would read any "Cannot load")
    Spec("ffnvcodec.video_lib_missing", "FFmpeg (nv-codec-headers dynlink_loader.h)",
         "The driver's video codec library (NVDEC libnvcuvid / NVENC libnvidia-encode) cannot be loaded: not installed "
         "with the driver, or not given to the container (the toolkit injects it only for the `video` capability).",
         wordings=("Cannot load libnvcuvid.so.1", "Cannot load libnvidia-encode.so.1", "Cannot load nvcuvid.dll",
                   "Cannot load nvEncodeAPI64.dll", "Cannot load nvEncodeAPI.dll"),
         url=NVCODEC, kind="documented"),
    # --- NVIDIA's driver container (the GPU Operator's nvidia-driver-daemonset)
    Spec("gpudriverctr.driver_in_use", "NVIDIA gpu-driver-container (nvidia-driver script)",
         "The driver container cannot unload the NVIDIA modules already loaded on the node (a host-installed driver, "
         "or processes using the GPU), so it cannot install its own driver.",
         repo=GDC, locate="Could not unload NVIDIA driver kernel modules, driver is in use"),
    # --- JAX (jax/_src/xla_bridge.py)
    Spec("jax.no_cuda_jaxlib", "JAX (jax/_src/xla_bridge.py)",
         "JAX sees an NVIDIA GPU but no CUDA backend is installed (a CPU-only jaxlib, or the CUDA plugin missing): it "
         "runs on the CPU.",
         repo=JAX, locate="CUDA-enabled jaxlib is not installed", paths=("jax/_src/xla_bridge.py",)),
    # --- libsolv's problem text, as conda (libmamba solver), mamba and micromamba print an unsolvable environment:
    # problems.c (SOLVER_RULE_PKG_CONSTRAINS, since 2019) joins "package ", the solvable, " has constraint ", the
    # dependency and " conflicting with " over pool_tmpjoin/pool_tmpappend calls; rules.c prints it without "package "
    Spec("libsolv.constraint_conflict", "libsolv (src/problems.c, rules.c), as mamba/conda print it",
         "A package's run constraint conflicts with another package or a virtual package (conda's __cuda is the "
         "driver's CUDA version, __glibc the C library's): the environment cannot be solved.",
         wordings=("package %s has constraint %s conflicting with %s", "%s has constraint %s conflicting with %s"),
         url=GH + "openSUSE/libsolv/blob/1b580675f4e3107823146c78fe03876cb82bf964/src/problems.c#L1446",
         kind="documented"),
    # --- resolvo (src/conflict.rs): pixi's and rattler's report of an unsolvable conda environment, a tree of
    # "<req> cannot be installed because there are no viable options:" / "<version> would require" /
    # "<req>, for which no candidates were found." (a virtual package such as __cuda among them)
    Spec("resolvo.no_viable_options", "resolvo (src/conflict.rs), as pixi/rattler print it",
         "No version of a requirement can be installed: the solver explains why in the tree below.",
         repo=RESOLVO, locate="cannot be installed because there are no viable options", paths=("src/",)),
    Spec("resolvo.no_candidates", "resolvo (src/conflict.rs), as pixi/rattler print it",
         "A requirement has no candidate in the channels at all (a virtual package such as __cuda is offered only "
         "when the system or the manifest declares it).",
         repo=RESOLVO, locate="for which no candidates were found", paths=("src/",)),
    # --- libraries that ship CPU-only and GPU builds, and say which one is installed when asked for the GPU
    Spec("ctranslate2.not_compiled_with_cuda", "CTranslate2 (src/devices.cc)",
         "The installed CTranslate2 (faster-whisper, WhisperX) is a build without CUDA: device='cuda' is refused.",
         repo=CT2, locate="was not compiled with CUDA support", paths=("src/",)),
    Spec("bnb.compiled_without_gpu", "bitsandbytes (bitsandbytes/cextension.py)",
         "bitsandbytes loaded its CPU library: torch reports no CUDA (a CPU-only torch), or the package has no "
         "library for torch's CUDA version (then it first says it could not find the CUDA binary).",
         repo=BNB, locate="was compiled without GPU support", paths=("bitsandbytes/",), tags=("0.45.0", "0.46.0")),
    Spec("bnb.cpu_only_method", "bitsandbytes (bitsandbytes/cextension.py)",
         "A GPU operation was called on the CPU-only build of bitsandbytes.",
         repo=BNB, locate="not available in CPU-only version of bitsandbytes", paths=("bitsandbytes/",)),
    Spec("xgboost.not_compiled_with_gpu", "XGBoost (src/common/common.h)",
         "The installed XGBoost is a build without CUDA (the CPU-only wheel, e.g. xgboost-cpu or an old Windows/macOS "
         "wheel): device='cuda' / gpu_hist is refused.",
         repo=XGB, locate="not compiled with GPU support", paths=("src/",)),
    Spec("lightgbm.gpu_learner_not_enabled", "LightGBM (src/treelearner/gpu_tree_learner.h)",
         "The installed LightGBM was built without its GPU tree learner (device='gpu' needs a build with "
         "-DUSE_GPU=1, or -DUSE_CUDA=1 for device='cuda').",
         repo=LGBM, locate="GPU Tree Learner was not enabled in this build", paths=("src/",)),
    Spec("lightgbm.cuda_learner_not_enabled", "LightGBM (src/treelearner/cuda/cuda_single_gpu_tree_learner.hpp)",
         "The installed LightGBM was built without its CUDA tree learner (device='cuda' needs a build with "
         "-DUSE_CUDA=1).",
         repo=LGBM, locate="CUDA Tree Learner was not enabled in this build", paths=("src/",)),
    Spec("dgl.device_api_not_enabled", "DGL (src/runtime/c_runtime_api.cc)",
         "The installed DGL is the CPU build: its CUDA device API is not compiled in.",
         repo=DGL, locate="is not enabled. Please install the cuda version of dgl", paths=("src/",),
         printed_as="Device API %s {}"),
    Spec("jax.no_gpu_tpu_found", "JAX (jax/lib/xla_bridge.py, jax/_src/xla_bridge.py; before the CUDA-enabled jaxlib "
         "wording)", "JAX found no GPU backend and runs on the CPU: a CPU-only jaxlib where a GPU is present.",
         repo=JAX, locate="No GPU/TPU found, falling back to CPU", paths=("jax/",),
         tags=("jax-v0.2.0", "jax-v0.2.10", "jax-v0.3.25", "jax-v0.4.10")),
    # --- apt (apt-pkg/cacheset.cc, apt-private/private-cacheset.cc, methods/gpgv.cc, apt-pkg/acquire-item.cc): a package
    # it cannot install, a repository it will not read
    Spec("apt.unable_to_locate_package", "apt (apt-pkg/cacheset.cc)",
         "No configured repository has a package of that name (the repository that has it is not in the sources, or "
         "`apt-get update` did not run since it was added).",
         repo=APT, locate="Unable to locate package %s", paths=("apt-pkg/",)),
    Spec("apt.glob_not_found", "apt (apt-pkg/cacheset.cc)",
         "No package name in the configured repositories matches the pattern.",
         repo=APT, locate="Couldn't find any package by glob", paths=("apt-pkg/",)),
    Spec("apt.no_installation_candidate", "apt (apt-private/private-cacheset.cc)",
         "The package is known (named by another package) but no configured repository offers a version of it for "
         "this architecture and release.",
         repo=APT, locate="has no installation candidate", paths=("apt-private/", "cmdline/")),
    Spec("apt.pubkey_not_available", "apt (methods/gpgv.cc)",
         "apt cannot verify the repository's Release file: the key that signed it is not installed (a repository "
         "whose key was rotated, or a keyring never added).",
         repo=APT, locate="public key is not available", paths=("methods/",)),
    Spec("apt.repository_not_signed", "apt (apt-pkg/acquire-item.cc)",
         "apt refuses the repository: its Release file could not be verified (no key for it), so it is treated as "
         "unsigned.",
         repo=APT, locate="is not signed.", paths=("apt-pkg/",)),
    Spec("apt.repository_no_release", "apt (apt-pkg/acquire-item.cc)",
         "apt refuses the repository: there is no Release file at that URL (no repository for this distribution "
         "release or architecture there, or a mistyped URL).",
         repo=APT, locate="does not have a Release file", paths=("apt-pkg/",)),
    # --- dnf (dnf/base.py, dnf/cli/commands/install.py; its exception prints the specs after ": ")
    Spec("dnf.no_match_for_argument", "dnf (dnf/base.py)",
         "No enabled repository has a package matching the spec (the repository is not configured or enabled, or "
         "it has no build for this release).",
         repo=DNF, locate="No match for argument: %s", paths=("dnf/",)),
    Spec("dnf.unable_to_find_match", "dnf (dnf/cli/commands/install.py)",
         "`dnf install` found none of the packages asked for in the enabled repositories.",
         repo=DNF, locate="Unable to find a match", paths=("dnf/",), printed_as="{}: %s"),
    # --- libsolv's problem text for a dependency no candidate satisfies (dnf, zypper, mamba print it)
    Spec("libsolv.requires_uninstallable", "libsolv (src/problems.c), as dnf/zypper/mamba print it",
         "A package needs another one that exists but cannot be installed (its own requirements fail, or the running "
         "kernel has no matching module package).",
         wordings=("package %s requires %s, but none of the providers can be installed",
                   "%s requires %s, but none of the providers can be installed"),
         url=LIBSOLV, kind="documented"),
    Spec("libsolv.nothing_provides", "libsolv (src/problems.c), as dnf/zypper/mamba print it",
         "A package needs something no enabled repository provides (for NVIDIA's kernel module packages: the running "
         "kernel's kernel-devel / kernel-uname-r, dkms from EPEL).",
         wordings=("nothing provides %s needed by %s",), url=LIBSOLV, kind="documented"),
    # --- package managers refusing a package whose files another package (or an unpackaged install) owns
    Spec("rpm.file_conflict", "rpm (lib/rpmprob.c rpmProblemString), as dnf/yum/zypper print it",
         "Two packages install the same file: the transaction is refused.",
         wordings=("file %s from install of %s conflicts with file from package %s",),
         url=GH + "rpm-software-management/rpm/blob/master/lib/rpmprob.c", kind="documented"),
    Spec("dpkg.trying_to_overwrite", "dpkg (src/main/archives.c)",
         "A package's file belongs to another installed package: dpkg refuses to unpack it.",
         wordings=("trying to overwrite '%s', which is also in package %s",),
         url="https://salsa.debian.org/dpkg-team/dpkg/-/blob/main/src/main/archives.c", kind="documented"),
    Spec("pacman.exists_in_filesystem", "pacman (src/pacman/callback.c, util.c)",
         "A package's file already exists on disk (another package's, or an unpackaged install's): pacman refuses "
         "the transaction (\"failed to commit transaction (conflicting files)\").",
         wordings=("%s: %s exists in filesystem (owned by %s)", "%s: %s exists in filesystem"),
         url="https://gitlab.archlinux.org/pacman/pacman/-/blob/master/src/pacman/callback.c", kind="documented"),
    # --- DKMS skipping the module for a kernel without its headers (dkms's kernel postinst / init script, Debian's
    # common.postinst, the RPM template's %post): the package installs, the module is never built
    Spec("dkms.headers_missing", "dkms (kernel_postinst.d_dkms, common.postinst, the RPM template)",
         "DKMS skipped building the module for a kernel whose headers are not installed.",
         wordings=("dkms: autoinstall for kernel %s was skipped since the kernel headers for this kernel do not seem "
                   "to be installed",
                   "Module build for kernel %s was skipped since the\nkernel headers for this kernel do not seem to be "
                   "installed.",
                   "Module build for the currently running kernel was skipped since the\nkernel headers for this kernel "
                   "do not seem to be installed."),
         url=GH + "dell/dkms/blob/master/kernel_postinst.d_dkms", kind="documented"),
    # --- Nix: a derivation's builder failed (src/libstore/build/derivation-goal.cc: nix 2.3's wording, then 2.24+'s)
    Spec("nix.builder_failed", "nix (src/libstore/build/derivation-goal.cc)", "A derivation's build failed.",
         wordings=("builder for '%s' failed with exit code %d", "Cannot build '%s'. Reason: builder failed with exit "
                   "code %d."),  # one sentence to its matcher (nix prints the reason on the next line)
         url=GH + "NixOS/nix/blob/master/src/libstore/build/derivation-goal.cc", kind="documented"),
    # the same for the NVIDIA driver's own derivations (nixpkgs pkgs/os-specific/linux/nvidia-x11: `nvidia-x11-<version>-
    # <kernel>`, the open modules' `nvidia-open-<version>-<kernel>`): its builder failing, not a dependency's
    Spec("nix.nvidia_driver_build_failed", "nix (src/libstore/build/derivation-goal.cc), for nixpkgs' nvidia-x11",
         "The NVIDIA driver's derivation (its kernel module) failed to build for this kernel.",
         wordings=("builder for '%s-nvidia-x11-%s.drv' failed with exit code %d",
                   "builder for '%s-nvidia-open-%s.drv' failed with exit code %d",
                   "Cannot build '%s-nvidia-x11-%s.drv'. Reason: builder failed with exit code %d.",
                   "Cannot build '%s-nvidia-open-%s.drv'. Reason: builder failed with exit code %d."),
         url=GH + "NixOS/nixpkgs/tree/master/pkgs/os-specific/linux/nvidia-x11", kind="documented"),
    # --- nvidia-docker 1.x (src/nvidia-docker/utils.go, src/nvidia/nvidia.go, src/nvml/bindings.go): the wrapper and
    # its plugin, before the container toolkit; the beta tags printed the shorter wordings kept below
    Spec("nvdocker1.unsupported_cuda_version", "nvidia-docker 1.x (src/nvidia-docker/utils.go)",
         "The image's CUDA version (its com.nvidia.cuda.version label) is newer than the CUDA version the host driver "
         "supports: nvidia-docker refuses to start the container.",
         repo=NVDOCKER, locate="unsupported CUDA version:", paths=NVDOCKER1_SRC, tags=NVDOCKER1_TAGS,
         wordings=("unsupported CUDA version: %s < %s",)),  # v1.0.0-beta..beta.3: image, driver (src/nvidia-docker)
    Spec("nvdocker1.uvm_load_failed", "nvidia-docker 1.x and nvidia-docker-plugin (src/nvidia/nvidia.go LoadUVM)",
         "`nvidia-modprobe -u -c=0` failed: the nvidia-uvm kernel module cannot be loaded (no module built for the "
         "running kernel, the driver not loaded) or nvidia-modprobe is not installed.",
         repo=NVDOCKER, locate="Could not load UVM kernel module", paths=NVDOCKER1_SRC, tags=NVDOCKER1_TAGS,
         wordings=("Could not load UVM kernel module",)),  # v1.0.0-beta.3..rc.3
    Spec("nvdocker1.nvml_library", "nvidia-docker-plugin 1.x (src/nvml/bindings.go)",
         "The program cannot dlopen libnvidia-ml.so.1. The Kubernetes device plugin vendored these bindings and prints "
         "the same in its pod, where it means the container runtime did not inject the driver (the nvidia runtime is "
         "not the default); on a host it means no driver userspace.",
         repo=NVDOCKER, locate="could not load NVML library", paths=NVDOCKER1_SRC, tags=NVDOCKER1_TAGS,
         extra_programs=("NVIDIA k8s-device-plugin (its vendored nvml package)",)),
    # --- ONNX Runtime's Python session (onnxruntime/python/onnxruntime_inference_collection.py): a provider asked
    # for that this package was not built with. Three wordings: a ValueError (ORT <= 1.8), then a warning with and
    # without the sentence about external providers. The snapshot is too large for the fetch tool: read at commits
    # 001a1f53 and dbbfd9e7 (find_files/read_file), the newest as ORT 1.16+ prints it in users' logs
    Spec("ort.provider_not_available", "ONNX Runtime (onnxruntime_inference_collection.py)",
         "The installed onnxruntime package was not built with the execution provider the program asked for: "
         "asking for CUDAExecutionProvider from the CPU package (`onnxruntime`, not `onnxruntime-gpu`) falls back "
         "to the CPU.",
         wordings=("Specified provider %s is not in available provider names.Available providers: %s",
                   "Specified provider %s is not in available provider names.It may be an external provider load "
                   "from shared library. Available providers: %s",
                   "Specified provider %s is unavailable. Available providers: %s"),
         url=ORT + "dbbfd9e79e38e3ab0db96e990ff57c81ebce5271/onnxruntime/python/onnxruntime_inference_collection.py",
         kind="documented"),
    # --- PyTorch's extension builder (torch/utils/cpp_extension.py `_check_cuda_version`): the nvcc found against the
    # CUDA torch was built with, a major apart. Older releases broke the sentence over two lines of a '''
    # literal; newer ones join two literals with no space between them ("compilePyTorch")
    Spec("torch.cpp_extension_cuda_mismatch", "PyTorch (torch/utils/cpp_extension.py _check_cuda_version)",
         "A CUDA extension (flash-attn, apex, xformers, a repository's own ops) is being built with a CUDA toolkit "
         "(the nvcc under CUDA_HOME) whose major version differs from the CUDA torch was built with: the build stops.",
         wordings=("The detected CUDA version (%s) mismatches the version that was used to compilePyTorch (%s). Please "
                   "make sure to use the same CUDA versions.",
                   "\nThe detected CUDA version (%s) mismatches the version that was used to compile\nPyTorch (%s). "
                   "Please make sure to use the same CUDA versions.\n"),
         url=TORCH + "torch/utils/cpp_extension.py", kind="documented"),
    # --- PyTorch's loader for the CUDA libraries of the nvidia-* wheels (torch/__init__.py `_preload_cuda_deps`,
    # torch >= 2.0): `raise ValueError(f"{lib_name} not found in the system path {sys.path}")`
    Spec("torch.preload_cuda_deps", "PyTorch (torch/__init__.py _preload_cuda_deps)",
         "torch (a PyPI build that loads CUDA from the nvidia-* wheels) found none of that library in site-packages: "
         "the nvidia-* packages it depends on are not installed in this environment.",
         # lib_name is always a library glob ("libcublas.so.*[0-9]", "libnvrtc.so.*[0-9].*[0-9]")
         wordings=("lib%s.so%s not found in the system path %s",), url=TORCH + "torch/__init__.py", kind="documented"),
)


# --- reading sources ------------------------------------------------------------------------------------------------

_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}


def _git(gitdir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(gitdir), *args], capture_output=True, text=True,
                          check=False).stdout


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), s)


def _interpolations_to_printf(s: str) -> str:
    """Perl `$var`, Rust/Python `{name}`/`{}`, Go `%v`/`%w`/`%q` as printf `%s`."""
    s = re.sub(r"\$\{?\w+\}?(?:->\{\w+\})?", "%s", s)
    s = re.sub(r"\{[\w.:?#]*\}", "%s", s)
    return re.sub(r"%[vwq]", "%s", s)


def format_at(text: str, line_no: int, locate: str) -> str | None:
    """The whole format string around source line `line_no` (1-based): adjacent literals joined."""
    lines = text.splitlines()
    i = line_no - 1
    if i >= len(lines):
        return None

    def is_cont(s: str) -> bool:
        return s.lstrip().startswith('"')

    start = i
    while start > 0 and is_cont(lines[start]) and lines[start - 1].rstrip().endswith('"'):
        start -= 1
    end = i
    while end + 1 < len(lines) and is_cont(lines[end + 1]) and lines[end].rstrip().rstrip(",").endswith('"') \
            and not lines[end].rstrip().endswith(","):
        end += 1
    block = lines[start : end + 1]
    literals = [lit for ln in block for lit in _LITERAL.findall(ln)]
    joined = _unescape("".join(literals))
    probe = _unescape(locate[1:] if locate.startswith('"') else locate)
    if probe not in joined or len(block) == 1:  # a literal of its own on the hit line (or a shell echo)
        own = [_unescape(lit) for lit in _LITERAL.findall(lines[i]) if probe in _unescape(lit)]
        if not own:
            return _python_concatenation(lines, i, probe)
        joined = own[0]
    return _interpolations_to_printf(joined).strip()


_PY_SINGLE = re.compile(r"('(?:[^'\\\n]|\\.)*')")


def _python_concatenation(lines: list[str], i: int, probe: str) -> str | None:
    """Python's `'text ' + str(value) + ' more'` over `\\`-continued lines (NVIDIA's dnf plugin) as one format:
    each literal's text, each expression between them `%s`."""
    start = i
    while start > 0 and lines[start - 1].rstrip().endswith(("\\", "+")):
        start -= 1
    end = i
    while end + 1 < len(lines) and lines[end].rstrip().endswith(("\\", "+")):
        end += 1
    code = " ".join(line.rstrip().rstrip("\\") for line in lines[start : end + 1])
    parts = _PY_SINGLE.split(code)
    literal_at = [n for n, part in enumerate(parts) if n % 2 == 1]
    if not literal_at:
        return None
    out = ""
    for n in range(literal_at[0], literal_at[-1] + 1):
        if n % 2 == 1:
            out += _unescape(parts[n][1:-1])
        elif re.search(r"[^\s+]", parts[n]):
            out += "%s"
    return out.strip() if probe in out else None


def _version_key(tag: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", tag)[:4])


def sample_tags(gitdir: Path, n: int) -> list[str]:
    tags = [t for t in _git(gitdir, "tag").split() if re.search(r"\d+\.\d+", t) and not re.search(r"rc|alpha|beta|dev", t)]
    tags.sort(key=_version_key)
    if len(tags) <= n:
        return tags
    step = (len(tags) - 1) / (n - 1)
    return [tags[round(k * step)] for k in range(n)]


def harvest_repo(gitdir: Path, specs: list[Spec], ntags: int) -> dict[str, dict[str, list[str]]]:
    """spec id -> format -> the revisions (tags, HEAD) that print it."""
    out: dict[str, dict[str, list[str]]] = {s.id: {} for s in specs}
    pinned = [t for spec in specs for t in spec.tags]
    revs = [*sorted(dict.fromkeys([*sample_tags(gitdir, ntags), *pinned]), key=_version_key), "HEAD"]  # oldest first
    cache: dict[tuple[str, str], str] = {}
    for rev in revs:
        sha = _git(gitdir, "rev-parse", rev).strip()
        for spec in specs:
            grep = _git(gitdir, "grep", "-n", "-I", "-F", "-e", spec.locate, sha, "--",
                        *(spec.paths or ["."]), ":!*test*", ":!*.md", ":!*changelog*", ":!*CHANGELOG*", ":!*/tests/*")
            for hit in grep.splitlines()[:4]:
                parts = hit.split(":", 3)
                if len(parts) < 4:
                    continue
                _, path, line_no, _ = parts
                key = (sha, path)
                if key not in cache:
                    cache[key] = _git(gitdir, "show", f"{sha}:{path}")
                fmt = format_at(cache[key], int(line_no), spec.locate)
                if fmt and spec.printed_as:
                    fmt = spec.printed_as.replace("{}", fmt, 1)
                if fmt:
                    out[spec.id].setdefault(fmt, [])
                    label = rev if rev != "HEAD" else f"HEAD@{sha[:12]}"
                    if label not in out[spec.id][fmt]:
                        out[spec.id][fmt].append(label)
                    out[spec.id]["\0path"] = [path, label]  # the newest revision that prints it (HEAD last)
    return out


def build(mirror: Path, ntags: int) -> dict[str, object]:
    entries: list[dict[str, object]] = []
    sources: dict[str, str] = {}
    by_repo: dict[str, list[Spec]] = {}
    for spec in SPECS:
        if spec.repo:
            by_repo.setdefault(spec.repo, []).append(spec)
    harvested: dict[str, dict[str, list[str]]] = {}
    for repo, specs in by_repo.items():
        gitdir = mirror / repo.replace("/", "+") / "repo"
        if not (gitdir / "HEAD").exists():
            print(f"  {repo}: no mirror at {gitdir}; recorded wordings kept", file=sys.stderr)
            continue
        head = _git(gitdir, "rev-parse", "HEAD").strip()
        sources[repo] = head
        print(f"  {repo} @ {head[:12]}: {len(specs)} messages", file=sys.stderr)
        harvested.update(harvest_repo(gitdir, specs, ntags))
    for spec in SPECS:
        found = harvested.get(spec.id, {})
        path, where = (found.pop("\0path", None) or ["", ""])
        wordings: list[dict[str, object]] = []
        for fmt, revs in found.items():
            wordings.append({"format": fmt, "versions": sorted(revs, key=_version_key)})
        harvested_formats = {w["format"] for w in wordings}
        for fmt in spec.wordings:
            if fmt not in harvested_formats:  # closed source, a repository out of reach, or an older wording
                wordings.append({"format": fmt, "versions": ["documented" if spec.kind == "documented" else "recorded"]})
        if not wordings:
            print(f"  {spec.id}: nothing found for {spec.locate!r}", file=sys.stderr)
            continue
        # newest wording first: the one HEAD prints, else the latest version seen
        def newest_first(w: dict[str, object]) -> tuple[bool, bool, list[int]]:
            versions = [str(v) for v in w["versions"]]  # type: ignore[attr-defined]
            seen = any(v not in ("recorded", "documented") for v in versions)  # read in a release, not recorded
            return (not any(v.startswith("HEAD") for v in versions), not seen, [-x for x in _version_key(versions[-1])])
        wordings.sort(key=newest_first)
        url = spec.url
        if not url and spec.repo:
            ref = sources.get(spec.repo, "HEAD") if not where or where.startswith("HEAD") else where
            url = f"{GH}{spec.repo}/blob/{ref}/{path}"
        entries.append({
            "id": spec.id,
            **({"code": spec.code} if spec.code is not None else {}),
            "program": spec.program,
            "programs": [spec.program, *spec.extra_programs],
            "format": wordings[0]["format"],
            "wordings": wordings,
            "meaning": spec.meaning,
            "source": {"kind": spec.kind if spec.repo is None or spec.repo in sources else "recorded",
                       "repo": spec.repo, "path": path or None, "url": url},
        })
    return {"schema": 1, "generated_by": "scripts/harvest_catalogue.py", "sources": sources, "entries": entries}


def merge(committed: dict[str, object], fresh: dict[str, object], prefixes: list[str]) -> dict[str, object]:
    """`committed` with the entries of `fresh` whose id starts with one of `prefixes` replaced or added (a new one
    after the nearest entry that precedes it in SPECS): regenerating some messages keeps every other entry as
    harvested before, from mirrors this machine may not have."""
    entries: list[dict[str, object]] = list(committed["entries"])  # type: ignore[call-overload]
    order = [str(e["id"]) for e in fresh["entries"]]  # type: ignore[attr-defined]
    sources = dict(committed["sources"])  # type: ignore[call-overload]
    for e in fresh["entries"]:  # type: ignore[attr-defined]
        if not str(e["id"]).startswith(tuple(prefixes)):
            continue
        repo = e["source"].get("repo")
        if repo in fresh["sources"]:  # type: ignore[operator]
            sources[repo] = fresh["sources"][repo]  # type: ignore[index]  # the commit its entries were read at
        ids = [str(x["id"]) for x in entries]
        if e["id"] in ids:
            entries[ids.index(e["id"])] = e
            continue
        before = [i for i in order[: order.index(e["id"])] if i in ids]
        entries.insert(ids.index(before[-1]) + 1 if before else len(entries), e)
    return {**committed, "sources": sources, "entries": entries}


def changed(committed: dict[str, object], fresh: dict[str, object]) -> list[str]:
    """Ids whose wordings the sources at hand differ from (entries read from a repository with no mirror here,
    which `build` can only keep as recorded, are not compared; nor the release lists, which depend on the tags a
    mirror holds)."""
    def formats(e: dict[str, object] | None) -> set[str]:
        return {str(w["format"]) for w in e["wordings"]} if e else set()  # type: ignore[attr-defined]
    old = {str(e["id"]): e for e in committed["entries"]}  # type: ignore[attr-defined]
    out = []
    for e in fresh["entries"]:  # type: ignore[attr-defined]
        if e["source"]["kind"] == "recorded":
            continue
        if formats(old.get(str(e["id"]))) != formats(e):  # the releases sampled may differ; the wordings may not
            out.append(str(e["id"]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    ap.add_argument("--tags", type=int, default=8, help="release tags sampled per repository (plus HEAD)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", action="append", default=[], metavar="PREFIX",
                    help="regenerate only the entries whose id starts with PREFIX (repeatable); keep the others")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; list the entries the sources at hand word differently, exit 1 if any")
    args = ap.parse_args()
    cat = build(args.mirror, args.tags)
    committed = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else None
    if args.check:
        diff = changed(committed or {"entries": []}, cat)
        print("\n".join(diff) or "catalogue matches the sources at hand", file=sys.stderr)
        return 1 if diff else 0
    if args.only and committed is not None:
        cat = merge(committed, cat, args.only)
    args.out.write_text(json.dumps(cat, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(cat['entries'])} entries -> {args.out}", file=sys.stderr)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
