"""cpu_only_wheel: a torch build without CUDA."""

from __future__ import annotations

from provisioner.diagnose.model import Rule

#: PaddlePaddle's CPU package refusing the GPU in its own words (the catalogue's paddle.cpu_version_installed)
_PADDLE_REFUSAL = r"Cannot use GPU because you have installed CPU version|not compiled with CUDA"

AARCH64 = (
    r"(?:^|[^a-z0-9])(?:aarch64|arm64|sbsa|GH200|GB200|GB300|GB10|Grace Hopper|Grace Blackwell|DGX Spark|Jetson|Orin"
    r"|Xavier|L4T|JetPack)(?:[^a-z0-9]|$)"
)
#: the log shows an NVIDIA GPU on this machine: nvidia-smi's header or a GPU's model name
GPU_PRESENT = (r"NVIDIA-SMI \d|Driver Version:\s*\d|\bNVIDIA (?:GeForce|RTX|Tesla|Quadro|TITAN|A\d{2,3}|H\d{2,3}|L\d{1,2}|"
               r"B\d{3}|T4|V100|P100|GH200|GB200)|\b(?:Tesla|GeForce|Quadro) [A-Z]*\d|\bRTX \d{4}")
AARCH64_CAUSE = (
    "On this aarch64 host (Grace Hopper/Blackwell or Jetson) the default index served a CPU-only torch: PyPI's "
    "aarch64 torch wheels were CPU-only, and Jetson needs NVIDIA's JetPack builds."
)
AARCH64_FIX = (
    "GH200/GB200/GB10 (SBSA): install from the PyTorch CUDA index, which has aarch64 CUDA wheels "
    "(`--index-url https://download.pytorch.org/whl/cu128` or newer; `provisioner resolve --arch aarch64`); "
    "Jetson: install NVIDIA's JetPack torch wheel for the L4T release. Check torch.version.cuda is not None."
)

RULES: tuple[Rule, ...] = (
    Rule(
        name="cpu.torch_not_compiled_with_cuda",
        category="cpu_only_wheel",
        # torch/cuda/__init__.py `_lazy_init`: AssertionError("Torch not compiled with CUDA enabled"); reports quote
        # it short of its last word, or with an "is" ("torch is not compiled with cuda")
        patterns=(r"Torch not compiled with CUDA enabled", r"\btorch (?:is )?not compiled with CUDA\b"),
        confidence=0.95,
        root_cause="The installed torch[ ({torch_version})] is a CPU-only build.",
        fix=(
            "Reinstall torch from a CUDA index (e.g. --index-url https://download.pytorch.org/whl/cu128, "
            "or the variant `provisioner resolve` picks) and check that torch.version.cuda is not None."
        ),
        examples=(
            'raise AssertionError("Torch not compiled with CUDA enabled")\n'
            "AssertionError: Torch not compiled with CUDA enabled",
        ),
    ),
    Rule(
        name="cpu.build_reports_no_cuda",
        category="cpu_only_wheel",
        patterns=(
            r"CUDA used to build PyTorch\s*: (?:None|Could not collect)",
            r"torch\.version\.cuda\)?[^\n]{0,20}\n\s*None\b",
            r"torch\.version\.cuda\s*(?:=|:|is)\s*None",
            r"\b\d+\.\d+(?:\.\d+)?(?:\.dev\d+)?\+cpu\b",
            r"\bpy3(?:\.?\d+)?_cpu_\d+\b",  # the pytorch channel's build string: py3.10_cpu_0, py310_cpu_0
            r"pytorch-mutex[^\n]{0,40}\bcpu\b",
            r"^\s*cpuonly\s",
        ),
        confidence=0.85,
        root_cause="The installed PyTorch[ ({torch_version})] was built without CUDA (CPU-only variant).",
        fix=(
            "Install the CUDA variant explicitly (pip/uv: --index-url https://download.pytorch.org/whl/cu128; "
            "conda: pin pytorch=*=*cuda*) and verify torch.version.cuda."
        ),
        examples=(
            "PyTorch version: 2.1.0.dev20230905\nCUDA used to build PyTorch: Could not collect\nIs CUDA available: "
            "False",
            "Successfully installed torch-2.5.1+cpu torchvision-0.20.1+cpu",
        ),
    ),
    Rule(
        name="cpu.cpu_index",
        category="cpu_only_wheel",
        patterns=(r"download\.pytorch\.org/whl/cpu\b", r"--torch-backend[= ]cpu\b"),
        confidence=0.6,
        root_cause="torch was installed from the CPU-only index.",
        fix="Install from the CUDA index matching the GPU and driver (e.g. https://download.pytorch.org/whl/cu128).",
        examples=("Looking in indexes: https://download.pytorch.org/whl/cpu",),
    ),
    Rule(
        name="cpu.cuda_unavailable_generic",
        category="cpu_only_wheel",
        patterns=(
            r"torch\.cuda\.is_available\(\)\)?[^\n]{0,20}\n?\s*False",
            r"Is CUDA available\s*: False",
            r"User provided device_type of 'cuda', but CUDA is not available",
        ),
        confidence=0.35,
        generic=True,
        root_cause="torch reports CUDA unavailable; the most common cause is a CPU-only torch build.",
        fix=(
            "Print torch.__version__ and torch.version.cuda; if it is +cpu/None reinstall from a CUDA index, else "
            "check the driver."
        ),
        examples=(">>> torch.cuda.is_available()\nFalse",),
    ),
    Rule(
        name="cpu.aarch64_default_index",
        category="cpu_only_wheel",
        patterns=(
            r"CUDA used to build PyTorch\s*: (?:None|Could not collect)",
            r"torch\.version\.cuda\)?\s*(?:is|=|:|->)?\s*None\b",
            r"\+cpu\b",
            r"\b(?:the )?CPU[- ]?(?:only )?(?:version|build|wheel|variant) of (?:torch|pytorch)",
            r"\b(?:torch|pytorch)\b[^\n]{0,40}\bCPU[- ](?:only )?(?:version|build|wheel)",
            r"Torch not compiled with CUDA enabled",
        ),
        confidence=0.88,
        context=AARCH64,
        unless=r"no kernel image is available|is not compatible with the current PyTorch installation",
        demotes=("no_driver_loaded", "container_device_missing"),
        root_cause=AARCH64_CAUSE,
        fix=AARCH64_FIX,
        examples=(
            "OS: Ubuntu 22.04.4 LTS (aarch64)\nCUDA used to build PyTorch: Could not collect\nIs CUDA available: "
            "False\nGPU models and configuration: GPU 0: NVIDIA GH200 480GB",
            "noticing that trying to `pip install torch` resulted in the CPU version of torch stable.\n"
            "1. Get an aarch64 machine, e.g. GB200",
        ),
    ),
    Rule(
        name="cpu.aarch64_cuda_unavailable",
        category="cpu_only_wheel",
        patterns=(
            r"is_available\(\)\)?\s*(?:returns?|returned|is|gives|==|=|->)?\s*:?\s*False\b",
            r"Is CUDA available\s*: False",
        ),
        confidence=0.7,
        context=AARCH64,
        # a CUDA build that cannot see the GPU is a driver/device problem, not a CPU wheel
        unless=(
            r"no kernel image is available|is not compatible with the current PyTorch installation"
            r"|CUDA used to build PyTorch\s*: \d|\+cu\d{2,3}\b|torch\.version\.cuda\)?\s*(?:is|=|:|->)?\s*'?\d"
        ),
        root_cause=AARCH64_CAUSE,
        fix=AARCH64_FIX,
        examples=(
            "I successfully install the torch on my jetson nano(Jetpack 4.4 [L4T 32.4.3]),but cuda.is_available() "
            "returns false",
        ),
    ),
    Rule(
        # JAX's backend selection (jax/_src/xla_bridge.py): a GPU is visible, no CUDA backend was registered
        name="cpu.jax_without_cuda",
        category="cpu_only_wheel",
        patterns=(r"\bCUDA-enabled jaxlib is not installed\b",),
        messages=("jax.no_cuda_jaxlib",),
        confidence=0.88,
        root_cause=("JAX sees an NVIDIA GPU but has no CUDA backend: the installed jaxlib is a CPU build, or the CUDA "
                    "plugin packages (jax-cuda12-plugin / jax-cuda12-pjrt; conda: the cuda plugin builds) are missing, "
                    "so it runs on the CPU."),
        fix=("Install JAX's CUDA backend for the driver's CUDA major (`pip install -U \"jax[cuda12]\"`; conda: jaxlib "
             "`*cuda*` builds with their plugin packages) and check `python -c 'import jax; print(jax.devices())'`."),
        examples=("An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed. Falling "
                  "back to cpu.",),
    ),
    Rule(
        # TensorFlow's own answer about its build: `tf.test.is_built_with_cuda()` returning False at the prompt, or
        # get_build_info()'s `is_cuda_build` (conda-forge/tensorflow-feedstock#365: packages labelled cuda120 built
        # without CUDA; TensorFlow 2.11+ on native Windows, which has no CUDA build)
        name="cpu.tensorflow_built_without_cuda",
        category="cpu_only_wheel",
        # the call then its answer on the next line (a REPL, `python -c "…print(…)"`, IPython's "Out[2]:"); a print's
        # label ("Is TensorFlow built with CUDA?: False"); not source code comparing it ("… is False:")
        patterns=(r"is_built_with_cuda\(\)[)\"' \t]*\n(?:>>>|Out\[\d+\]:)?[ \t]*False\b",
                  r"is_built_with_cuda\(\)\)?[ \t]*(?::|->|returns?|=)[ \t]*False\b",
                  r"\bbuilt with CUDA\W{0,3}[ \t]*False\b",
                  r"[\"']is_cuda_build[\"'][ \t]*[,:][ \t]*False\b"),
        messages=("tf.build_info_not_cuda",),
        confidence=0.85,
        root_cause=("The installed TensorFlow is a build without CUDA (`is_built_with_cuda()` is False), so it never "
                    "uses the GPU, whatever the driver."),
        fix=("Install a CUDA build: on Linux `pip install \"tensorflow[and-cuda]\"` (2.14+), with conda a `*cuda*` build "
             "whose `python -c 'import tensorflow as tf; print(tf.sysconfig.get_build_info())'` says is_cuda_build "
             "True (conda-forge has shipped mislabelled builds: pin an earlier one); on native Windows TensorFlow "
             "2.11+ has no CUDA build: use WSL 2, or TensorFlow 2.10 with CUDA 11.2/cuDNN 8.1; on aarch64 (Jetson, "
             "Grace) PyPI's tensorflow is a CPU build whatever extras are installed: use NVIDIA's container or its "
             "JetPack wheel."),
        examples=(">>> tf.test.is_built_with_cuda()\nFalse",),
    ),
    Rule(
        # libraries shipped as CPU-only and GPU builds say so when the GPU is asked of the CPU one (the catalogue:
        # CTranslate2, bitsandbytes, XGBoost, LightGBM, DGL; each read in its source)
        name="cpu.library_built_without_gpu",
        category="cpu_only_wheel",
        patterns=(),  # the catalogue's wordings (rules/citations.py)
        confidence=0.8,  # below a missing library's (0.85): a CUDA build that cannot load one says both
        root_cause=("The installed library is its CPU-only build (no CUDA compiled in), so the GPU is refused or "
                    "unused whatever the driver."),
        fix=("Install the library's GPU build for the CUDA in use (faster-whisper/CTranslate2: the PyPI wheel on Linux "
             "x86_64, with CUDA 12 and cuDNN 9; on aarch64 (Jetson, GH200) PyPI's wheels are CPU-only: build it from "
             "source with -DWITH_CUDA=ON; bitsandbytes: a torch with CUDA first, then bitsandbytes; XGBoost: the "
             "`xgboost` wheel, not `xgboost-cpu`; LightGBM: built with -DUSE_GPU=1 for device='gpu', -DUSE_CUDA=1 for "
             "device='cuda'; DGL: the `dgl` wheel from DGL's CUDA index) and check it sees the GPU."),
        examples=("ValueError: This CTranslate2 package was not compiled with CUDA support",
                  "xgboost.core.XGBoostError: [09:12:33] src/common/common.h:187: XGBoost version not compiled with GPU "
                  "support."),
    ),
    Rule(
        # bitsandbytes warns at import that it loaded its CPU library (bitsandbytes/cextension.py): torch reports no
        # CUDA, or the package has no library for torch's CUDA version, which it says first (0.43+: "Could not find
        # the bitsandbytes CUDA binary"; 0.41/0.42: "Required library version not found", "CUDA detection failed")
        name="cpu.bitsandbytes_cpu_library",
        category="cpu_only_wheel",
        patterns=(),  # the catalogue's wording (rules/citations.py)
        context=GPU_PRESENT,  # an import-time notice: a finding where the log shows a GPU it could have used
        unless=(r"Could not find the bitsandbytes CUDA binary|Required library version not found: libbitsandbytes_cuda"
                r"|Defaulting to libbitsandbytes_cpu|CUDA Setup failed despite|CUDA detection failed"
                r"|cannot open shared object file"),
        confidence=0.7,
        root_cause=("bitsandbytes loaded its CPU library on a machine with an NVIDIA GPU: the torch beside it reports no "
                    "CUDA (a CPU-only torch build), so 8-bit and 4-bit GPU operations are unavailable."),
        fix=("Install a CUDA build of torch (`provisioner resolve` picks the index), then bitsandbytes again, and check "
             "`python -m bitsandbytes`."),
        examples=("| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |\nUserWarning: The installed "
                  "version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, "
                  "and GPU quantization are unavailable.",),
    ),
    Rule(
        # JAX before the "CUDA-enabled jaxlib is not installed" wording said only this, also on machines without a
        # GPU: a finding where the log shows an NVIDIA GPU beside it (nvidia-smi's header or a GPU's model name)
        name="cpu.jax_fell_back_to_cpu",
        category="cpu_only_wheel",
        patterns=(),  # the catalogue's wording (rules/citations.py)
        context=GPU_PRESENT,
        # a CUDA jaxlib whose backend failed to start says so first: a library or the driver, not a CPU build
        unless=(r"CUDA backend failed to initialize|Unable to initialize backend '(?:cuda|gpu)'|failed call to cuInit"
                r"|cuda_dnn\.cc|cuda_driver\.cc"),
        confidence=0.7,
        root_cause=("JAX found no GPU backend and runs on the CPU: the jaxlib installed is a CPU-only build (plain "
                    "`pip install jax`), or its CUDA plugin is missing."),
        fix=("Install JAX with its CUDA backend for the driver's CUDA major (`pip install -U \"jax[cuda12]\"`) and check "
             "`python -c 'import jax; print(jax.devices())'` lists the GPU."),
        examples=("WARNING:absl:No GPU/TPU found, falling back to CPU. (Set TF_CPP_MIN_LOG_LEVEL=0 and rerun for more "
                  "info.)\n| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |",),
    ),
    Rule(
        # ONNX Runtime's Python package is built per provider set: `onnxruntime` (CPU; 1.16+ adds the Azure provider)
        # and `onnxruntime-gpu` (TensorRT, CUDA, CPU). `onnxruntime.get_available_providers()` lists what the
        # installed build has, whether or not its libraries load; asking for CUDA from the CPU build warns (the
        # catalogue entry). Not where CUDA is available and only TensorRT was missing, nor where the GPU build's
        # provider library failed to load (a missing CUDA/cuDNN library: the libs rules)
        name="cpu.onnxruntime_cpu_package",
        category="cpu_only_wheel",
        patterns=(
            # the list get_available_providers() returns, as printed: only CPU-side providers (Azure is in the CPU
            # package's list, never in a session's applied providers)
            r"\[\s*(?:[\"'](?:Azure|Dnnl|XNNPACK|ACL|ArmNN)ExecutionProvider[\"'],\s*)+"
            r"[\"']CPUExecutionProvider[\"']\s*\]",
            r"get_available_providers\(\)\)?[^\n]{0,40}\[\s*[\"']CPUExecutionProvider[\"']\s*\]",
        ),
        confidence=0.8,
        # about NVIDIA's GPU: not another vendor's or OS's provider asked for, nor a session asked for the CPU
        context=r"CUDAExecutionProvider|TensorrtExecutionProvider|\bnvidia|\bcuda\b",
        unless=(r"Available providers:\s*[\"']?[^\n]{0,200}CUDAExecutionProvider|libonnxruntime_providers_cuda"
                r"|onnxruntime_providers_cuda\.dll|Specified provider [\"']?(?:Dml|CoreML|ROCM|MIGraphX|OpenVINO|QNN"
                r"|VitisAI|WebGpu)ExecutionProvider|providers\s*=\s*\[\s*[\"']CPUExecutionProvider[\"']\s*\]"),
        root_cause=("The installed ONNX Runtime is the CPU package (`onnxruntime`): it has no CUDA execution provider, "
                    "so the program runs on the CPU whatever the GPU and driver."),
        fix=("Replace it with the GPU package for the CUDA major in use: `pip uninstall -y onnxruntime "
             "onnxruntime-directml onnxruntime-openvino && pip install onnxruntime-gpu` (another onnxruntime package "
             "installed beside it shadows the GPU one); check "
             "`python -c 'import onnxruntime as o; print(o.get_available_providers())'` lists CUDAExecutionProvider."),
        examples=("UserWarning: Specified provider 'CUDAExecutionProvider' is not in available provider "
                  "names.Available providers: 'AzureExecutionProvider, CPUExecutionProvider'",
                  "ONNX Runtime Providers: ['AzureExecutionProvider', 'CPUExecutionProvider']\nCUDAExecutionProvider "
                  "not available — ONNX will fall back to CPU."),
    ),
    Rule(
        # conda-forge's and the pytorch channel's build strings name the variant: cpu_py310h… against cuda118_py310h…
        # (conda-forge/pytorch-cpu-feedstock recipe), printed by conda/mamba's transaction and `conda list`
        name="cpu.conda_cpu_build",
        category="cpu_only_wheel",
        patterns=(
            r"^\s*\+?\s*(?:pytorch|tensorflow(?:-base)?|jaxlib)\s+\d+\.\d+(?:\.\d+)?\s+cpu_py\d+",
            r"\b(?:pytorch|tensorflow|jaxlib)\b[^\n]{0,80}\bcpu_py\d{2,3}h[0-9a-f]{7}",  # the build string quoted
            # Anaconda's variant selector (the pytorch/tensorflow packages of the defaults channel, 2018-2020):
            # `_pytorch_select 0.1 cpu_0` / `_tflow_select 2.3.0 mkl` is the CPU build, `gpu_0` / `gpu` the CUDA one
            r"^\s*\+?\s*_pytorch_select\s+[\d.]+\s+cpu_\d+",
        ),
        # a CUDA build of the framework listed beside it (a selector left behind when the channel changed)
        unless=r"^\s*\+?\s*(?:pytorch|pytorch-gpu|tensorflow-gpu)\s+[\d.]+\s+\S*cuda",
        messages=("torch.not_compiled_with_cuda",),
        confidence=0.75,
        root_cause=("conda/mamba chose (or installed) the CPU-only build of the framework: its build string is "
                    "`cpu_py…`; a channel ahead of the one with CUDA builds, or a spec that does not ask for the "
                    "CUDA variant, let the solver take it."),
        fix=("Ask for the CUDA variant in the spec (`\"pytorch=*=*cuda*\"`, `pytorch-gpu`, or `cuda-version=12.x` beside "
             "it) with the channel that has it, and check the transaction's build string before confirming."),
        examples=("  + pytorch                 1.10.2  cpu_py310h2272b30_0   conda-forge/linux-64      49MB",),
    ),
    Rule(
        # libtorch_cuda.so and libc10_cuda.so are built only where PyTorch is built with CUDA (caffe2/CMakeLists.txt:
        # the torch_cuda target under USE_CUDA; c10/cuda under USE_CUDA; ROCm builds make libtorch_hip.so): an
        # extension built against a CUDA torch (torchvision's, an openmm-torch/mmcv/detectron2 op) that cannot find
        # them is loaded beside a torch that is not a CUDA build (openmm/openmm-torch#94: conda's cpu_py311 pytorch).
        # Not 1.10-1.12's libtorch_cuda_cu.so/_cpp.so, which newer torches do not have (an extension/torch mismatch).
        name="cpu.torch_cuda_library_absent",
        category="cpu_only_wheel",
        # Python's import of the extension failing (not a LibTorch C++ program's loader: its LD_LIBRARY_PATH)
        patterns=(r"(?:ImportError|OSError)\b[^\n]{0,200}\blib(?:torch_cuda|c10_cuda)\.so: cannot open shared object file",),
        # the same cause as PyTorch's collect_env says it (cited, read only beside the missing library)
        messages=("torch.collect_env_cuda_none",),
        requires=(r"\blib(?:torch_cuda|c10_cuda)\.so: cannot open shared object file",),
        # torch shown as a CUDA build (an extension built for another torch version) or a ROCm one: not this
        unless=(r"\+cu\d{2,3}\b|\+rocm|CUDA used to build PyTorch\s*:\s*\d|ROCM used to build PyTorch\s*:\s*\d"
                r"|torch\.version\.cuda\)?[^\n]{0,20}\n\s*\d"),
        confidence=0.88,
        demotes=("missing_shared_lib",),
        root_cause=("libtorch_cuda.so and libc10_cuda.so are parts of a CUDA build of PyTorch only: the extension that "
                    "loads them was built against a CUDA torch, and the torch installed beside it is not a CUDA build "
                    "(a CPU or ROCm one)."),
        fix=("Install the CUDA build of the torch version the extension was built for (pip: the cuXXX index, "
             "`torch==<v>+cu1XX`; conda: `pytorch=*=*cuda*`) and check `python -c 'import torch; "
             "print(torch.version.cuda)'` prints a CUDA version, not None."),
        examples=("ImportError: libtorch_cuda.so: cannot open shared object file: No such file or directory",
                  "OSError: libc10_cuda.so: cannot open shared object file: No such file or directory"),
    ),
    Rule(
        # PyTorch's dispatcher finds no CUDA kernel for a torchvision/torchaudio operator: that package is a CPU-only
        # build (PyPI's torchvision on Windows, or one installed without the PyTorch index) beside a CUDA torch
        name="cpu.torchvision_cpu_build",
        category="cpu_only_wheel",
        patterns=(),
        messages=("torch.op_missing_for_backend",),
        requires=(r"Could not run [\"'`]?(?:torchvision|torchaudio)::\w+[\"'`]? with arguments from the [\"'`]?CUDA",),
        # a CUDA build of torchvision shown beside it: the two builds do not pair (another CUDA variant or release)
        unless=r"\btorch(?:vision|audio)(?:==|-|:?\s+)\d+\.\d+(?:\.\d+)?\+cu\d{2,3}",
        confidence=0.85,
        root_cause=("torchvision (or torchaudio) is a CPU-only build beside a CUDA build of torch: its operators have no "
                    "CUDA kernels, so running them on the GPU fails."),
        fix=("Install torchvision/torchaudio from the same index and CUDA variant as torch, at the versions that pair "
             "with it (`pip install --force-reinstall torchvision==<pair> --index-url "
             "https://download.pytorch.org/whl/cuXXX`, the +cuXXX of torch's own version); check "
             "`python -c 'import torchvision; print(torchvision.__version__)'` ends in the same +cuXXX as torch."),
        examples=("NotImplementedError: Could not run 'torchvision::nms' with arguments from the 'CUDA' backend.",),
        # ksugar/qupath-extension-sam#6
    ),
    Rule(
        # PaddlePaddle ships its CPU build as `paddlepaddle` and the CUDA one as `paddlepaddle-gpu`; the CPU package
        # refuses a GPU in its own words (the catalogue entry), or the program quietly runs on the CPU with the CPU
        # package listed beside a working NVIDIA driver
        name="cpu.paddle_cpu_package",
        category="cpu_only_wheel",
        patterns=(
            r"^\s*paddlepaddle\s*(?:==\s*|\s+)\d+\.\d+[^\n]*$",
        ),
        messages=("paddle.cpu_version_installed",),
        # the package listed is a finding only where the program is said to run on the CPU (or refuses the GPU)
        # the package listed is a finding only where the program is said to run on the CPU (or refuses the GPU) and
        # the log shows an NVIDIA GPU with its driver (a CPU-only machine runs the CPU package on purpose)
        requires=(_PADDLE_REFUSAL + r"|\b(?:use|using|uses|runs? on|running on|fall(?:s|ing)? back to)\s+(?:the\s+)?cpu\b",
                  _PADDLE_REFUSAL + r"|Driver Version\s*:\s*\d|NVIDIA-SMI\s+\d|CUDA Version\s*:\s*\d"),
        unless=r"\bpaddlepaddle-gpu\s*(?:==|\s+\d)",
        confidence=0.8,
        root_cause=("The installed PaddlePaddle is the CPU package (`paddlepaddle`): it has no CUDA, so Paddle and the "
                    "programs on it (PaddleOCR, PaddleNLP, PaddleDetection) run on the CPU or refuse the GPU."),
        fix=("Replace it with the GPU package of the same version for the CUDA in use: `pip uninstall -y paddlepaddle && "
             "pip install paddlepaddle-gpu==<version> -i https://www.paddlepaddle.org.cn/packages/stable/cu118/` (the "
             "cuXXX the driver supports); check `python -c 'import paddle; print(paddle.is_compiled_with_cuda())'` "
             "prints True."),
        examples=("paddleocr==3.1.0\npaddlepaddle==3.1.0\nuse cpu for inference , has someone same problem?\n"
                  "Driver Version: 525.60.13",),  # PaddlePaddle/PaddleOCR#16093
    ),
)
