"""arch_unsupported: the GPU architecture is missing from the binary (or too old for it)."""

from __future__ import annotations

from provisioner.diagnose.model import Rule

# "This file was compiled: … -gpu=ccNN …" followed by "Rebuild … with -gpu=ccNN": the same capability (RE2 has no
# back-references: one alternative per capability NVHPC targets)
_NVHPC_SAME_CC = "|".join(
    rf"This file was compiled:[^\n]*-gpu=(?:[\w,]*,)?cc{cc}\b[^\n]*\n[^\n]*Rebuild (?:this file|the application) with "
    rf"-gpu=cc{cc}\b"
    for cc in (35, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121))

#: a kernel launch or a kernel's attributes, as the CUDA runtime/driver calls and their checks print them (not
#: cuModuleGetFunction: a kernel name missing from a module it loaded is the program's own name — C++ mangling, no
#: `extern "C"` — while a module without this GPU's code fails when it is loaded)
KERNEL_CALL = (r"\b(?:cudaFuncSetAttribute|cudaFuncGetAttributes|cudaLaunchKernel(?:Ex)?|cuLaunchKernel(?:Ex)?"
               r"|cudaLaunchCooperativeKernel)\b|\bKernelError\b|\bkernel launch\b|<<<[^\n]{0,120}>>>")
#: a GPU below compute capability 3.0 by its name — Fermi (GeForce GTX 4xx/5xx and their M parts, GTX 670M/675M,
#: GT 4xx/5xx/610/620, Quadro 600-6000 and their M parts, Tesla C/M20x0/20x5) and the Tesla generation before it
#: (GeForce 8800/9800, GTX 2xx, Tesla C/M/S10x0) — or by the capability deviceQuery prints
PRE_KEPLER_GPU = (r"\bGTX[ -]?(?:4[5-9]0|4[6-8]5|5[5-9]0|5[5-9]5)(?:[ -]?Ti)?M?\b|\bGTX[ -]?(?:4[6-8][05]|5[6-8]0|67[05])M\b"
                  r"|\bGT[ -]?(?:4[2-4]0|5[2-4]0|6[12]0)M?\b|\bQuadro[ -](?:[2-6]000|600|[1-5][01]00)M?\b"
                  r"|\bTesla[ -][CMS](?:20[5-9][05]|10[67]0)\b|\b(?:8800|9800)[ -]?(?:GTX?|GTS|GX2)\b|\bGTX[ -]?2[6-9][05]\b"
                  r"|\bCapability Major/Minor version number:\s*[12]\.\d\b")
#: a GPU of compute capability 3.0 or later named in the same log (another card beside an old display card): the
#: cuDNN failure is then no proof of the old one
NEWER_GPU = (r"\b(?:RTX|TITAN)\b|\bGTX[ -]?(?:6[4-9]0|[79][5-8]0|1[0-9][5-8]0|16[56]0)(?:[ -]?Ti)?\b"
             r"|\bTesla[ -]?[KPVTAH]\d|\bQuadro[ -][KMPT]\d|\b(?:[AHB]100|H200|B200|A(?:10|30|40|6000)|L40S?|L4)\b"
             r"|\bCapability Major/Minor version number:\s*(?:[3-9]|1\d)\.\d\b")

RULES: tuple[Rule, ...] = (
    Rule(
        name="arch.torch_capability_not_compatible",
        category="arch_unsupported",
        patterns=(
            r"with CUDA capability sm_\d+[a-z]? is not compatible with the current PyTorch installation",
            r"The current PyTorch install supports CUDA capabilities",
        ),
        confidence=0.95,
        root_cause="The installed PyTorch build has no kernels for {gpu_arch}[; it was built for {archs}].",
        fix="{arch_fix}",
        demotes=("cpu_only_wheel", "no_driver_loaded"),
        examples=(
            "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
            "PyTorch installation.\nThe current PyTorch install supports CUDA capabilities sm_50 sm_60 "
            "sm_70 sm_75 sm_80 sm_86 sm_90.",
        ),
    ),
    Rule(
        name="arch.gpu_too_old_for_torch",
        category="arch_unsupported",
        patterns=(
            r"PyTorch no longer supports this GPU because it is too old",
            r"The minimum cuda capability (?:supported|that we support) (?:by this library )?is \d",
            r"Support for Maxwell and Pascal architectures is removed for CUDA",
            r"Found GPU\d+ [^\n]{1,80} which is of (?:cuda|compute) capability",
            r"does not include kernels for this GPU",
            r"The following list shows the CCs this version of PyTorch was built for",
        ),
        confidence=0.9,
        root_cause="The installed PyTorch build does not support {gpu_cc}.",
        fix="{arch_fix}",
        demotes=("cpu_only_wheel", "no_driver_loaded"),
        examples=(
            "Found GPU0 NVIDIA GeForce GTX 1080 Ti which is of cuda capability 6.1.\n"
            "PyTorch no longer supports this GPU because it is too old.\n"
            "The minimum cuda capability supported by this library is 7.5.",
            "Your installed torch==2.14.0+cu130 does not include kernels for this GPU.",
        ),
    ),
    Rule(
        name="arch.no_kernel_image",
        category="arch_unsupported",
        patterns=(
            r"no kernel image is available for execution on the device",
            r"cudaErrorNoKernelImageForDevice",
            r"CUDA_ERROR_NO_BINARY_FOR_GPU",
            r"no binary for GPU",
        ),
        confidence=0.75,
        root_cause=(
            "CUDA code was launched on {gpu_arch}, but the binary (PyTorch or an extension) contains no "
            "kernel for its architecture."
        ),
        fix="{arch_fix} Rebuild any custom CUDA extension with TORCH_CUDA_ARCH_LIST including this GPU.",
        demotes=("cpu_only_wheel", "no_driver_loaded"),
        examples=(
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
        ),
    ),
    Rule(
        name="arch.invalid_device_function",
        category="arch_unsupported",
        patterns=(r"invalid device function", r"cudaErrorInvalidDeviceFunction"),
        confidence=0.55,
        root_cause="A CUDA kernel was not compiled for this GPU's architecture (invalid device function).",
        fix="{arch_fix}",
        examples=("RuntimeError: CUDA error: invalid device function",),
    ),
    Rule(
        # TensorRT builds an engine from kernels for the SMs its release knows (its support matrix): a GPU newer than
        # the release (Blackwell SM 120 before 10.8) or one it dropped (Pascal in 10.x, Volta in the newest) is refused
        name="arch.tensorrt_unsupported_sm",
        category="arch_unsupported",
        patterns=(r"\(Unsupported SM\.\)",),  # TensorRT 7's assertion, "trtSmToCask: 0 (Unsupported SM.)"
        messages=("trt.unsupported_sm",),
        confidence=0.9,
        root_cause=("This TensorRT release has no kernels for the GPU's architecture (its SM): the GPU is newer than the "
                    "release, or the release dropped it."),
        fix=("Use a TensorRT release whose support matrix lists this GPU: a newer one for a new GPU (Blackwell, SM 120, "
             "needs TensorRT 10.8 or later built for CUDA 12.8+; in containers, an image of that TensorRT), or the last "
             "release that still supports an old one (TensorRT 8.x for Pascal); rebuild the engine with it."),
        examples=("[TRT] [E] IBuilder::buildSerializedNetwork: Error Code 9: API Usage Error (Target GPU SM 61 is not "
                  "supported by this TensorRT release.)",
                  "[caskBuilderUtils.cpp::trtSmToCaskCCV::548] Error Code 1: Internal Error (Unsupported SM: 0x809)"),
    ),
    Rule(
        # a CUDA library refusing a call the GPU's architecture cannot run: cuDNN's, cuBLAS's, cuSOLVER's, cuSPARSE's,
        # cuRAND's, cuTENSOR's and nvJPEG's ARCH_MISMATCH status, by its name or the documented sentence bindings print
        name="arch.cuda_library_arch_mismatch",
        category="arch_unsupported",
        patterns=(
            # the status itself (cuDNN 9's CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH is also what cudnn_frontend warns
            # for each engine it rejects while choosing one: not read)
            r"\b(?:CUDNN|CUBLAS|CUSOLVER|CUSPARSE|CURAND|CUTENSOR|NVJPEG(?:2K)?)_STATUS_ARCH_MISMATCH\b",
            # a binding's own short text for the status: its error type and the text ("CUBLASError: arch mismatch"),
            # or Mocha.jl's "ERROR: Arch mismatch" right after "Initializing CuDNN backend..."
            r"\b(?:cudnn|cublas|cusolver|cusparse)\w*(?:error|exception)\s*[:=(]\s*arch mismatch\b",
            r"\bcudnn backend\b[^\n]{0,20}\n\s*error\s*:?\s*arch mismatch\W*(?:\n|$)",
        ),
        messages=("cudnn.arch_mismatch", "cublas.arch_mismatch"),
        # below arch.no_kernel_image's: where the build has no kernel for the GPU, that is the finding
        confidence=0.7,
        root_cause=("A CUDA library (cuDNN, cuBLAS or another) refused the call with ARCH_MISMATCH: {gpu_cc} "
                    "lacks a feature the call needs — the GPU is older than this library release, or this "
                    "operation or data type, supports."),
        fix=("Check the GPU's compute capability against the support matrix of the cuDNN/cuBLAS release the program "
             "uses (the floor rose over the releases: early cuDNN ran from 3.0, cuDNN 8.9 from 5.0; cuBLAS's GemmEx "
             "and tensor-op paths need 5.0+): run on a newer GPU, or use a framework build with a library release (or "
             "a code path, such as disabling cuDNN, or another data type) that still supports this one."),
        examples=("/home/u/torch/install/share/lua/5.1/cudnn/init.lua:145: Error in CuDNN: CUDNN_STATUS_ARCH_MISMATCH",
                  "CUDA error at moe_compute_kernel.cu:132 code=8(CUBLAS_STATUS_ARCH_MISMATCH) \"cublasXgemm(...)\""),
    ),
    Rule(
        # cuBLAS without a kernel for the requested GEMM on this GPU: reported most for a GPU newer than the cuBLAS a
        # program or image bundles, or older than the data type; a shape or type cuBLAS never supports says it too,
        # so a weak, generic reading
        name="arch.cublas_not_supported",
        category="arch_unsupported",
        patterns=(r"\bCUBLAS_STATUS_NOT_SUPPORTED\b",),
        messages=("cublas.not_supported",),
        generic=True,
        confidence=0.6,
        root_cause=("cuBLAS refused the operation as not supported on {gpu_cc}. Reported most for a GPU newer than the "
                    "cuBLAS the program or image carries (RTX 50-series / RTX PRO Blackwell need CUDA 12.8+ builds) and "
                    "for a data type the GPU lacks (bf16 before Ampere, fp16 GEMMs on Maxwell); a parameter combination "
                    "that cuBLAS release does not implement says the same on any GPU."),
        fix=("Use a build or image of the program made with a CUDA release that supports this GPU (for Blackwell: CUDA "
             "12.8 or later — a cu128+ PyTorch, a CTranslate2/faster-whisper built on CUDA 12.8); on an older GPU "
             "choose a compute type it supports (float32, or float16/int8 instead of bfloat16); if neither applies, "
             "the operation's types or layout are the program's to change."),
        examples=("RuntimeError: cuBLAS failed with status CUBLAS_STATUS_NOT_SUPPORTED",
                  "cuBLAS error 15 at ggml-cuda.cu:7956: the requested functionality is not supported"),
    ),
    Rule(
        # candle's kernels for a dtype the GPU lacks (bf16 below compute capability 8.0) are compiled out: loading one
        # finds no such function in the module
        name="arch.candle_kernel_not_compiled",
        category="arch_unsupported",
        patterns=(),
        messages=("candle.kernel_not_found",),
        confidence=0.8,
        root_cause=("candle found no compiled CUDA kernel for the operation on {gpu_cc}: its bf16 (and f8) kernels are "
                    "built only for compute capability 8.0 (Ampere) and later."),
        fix=("Run the model in a dtype this GPU has kernels for (f16 or f32: the program's `--dtype f16`/`--use-f32`, "
             "or the model's config), or use a GPU of compute capability 8.0 or later."),
        examples=('Error: DriverError(CUDA_ERROR_NOT_FOUND, "named symbol not found") when loading cast_u32_bf16',),
    ),
    Rule(
        # cudaErrorSymbolNotFound / CUDA_ERROR_NOT_FOUND on a kernel launch or a kernel's attributes: the binary holds
        # no code for this GPU's architecture under that kernel's name (NVIDIA/stdexec#888 and fatlipp/cuda-tree#1:
        # built for another GPU's architecture; RosettaCommons/foundry#5: cuEquivariance's kernels on a Turing GPU).
        # The same words name a missing device variable, a driver entry point or a mistyped kernel name elsewhere:
        # only beside a kernel launch or attribute call, and generic
        name="arch.kernel_symbol_not_found",
        category="arch_unsupported",
        patterns=(),
        requires=(KERNEL_CALL,),
        generic=True,
        confidence=0.5,
        root_cause=("A CUDA kernel the program launches was not found in its binary for this GPU (named symbol not "
                    "found): the program or extension was built without code for {gpu_cc}."),
        fix=("Build or install the program for this GPU's architecture (its CUDA architectures list, e.g. "
             "TORCH_CUDA_ARCH_LIST / CMAKE_CUDA_ARCHITECTURES, must include it), or disable the optional kernels it "
             "provides for newer GPUs only (the program's option or environment variable for them)."),
        examples=('[rank0]: RuntimeError: CUDA error: "named symbol not found" at run_fmha.cu:160\n'
                  "[rank0]: Failed call: cudaFuncSetAttribute(*kernel_ptr, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                  "smem_size)",
                  "/tmp/cuda-tree/lib/core/octree/OctreeBuilderCuda.cu(57) : getLastCudaError() CUDA error : "
                  "KernelError : (500) named symbol not found."),
    ),
    Rule(
        # cuDNN has never supported a GPU below compute capability 3.0 (Fermi, and the Tesla generation before it):
        # cuDNN fails at its first call with whatever status that release returns (NVIDIA/DIGITS#1659: a GTX 460 with
        # cuDNN 5, CUDNN_STATUS_BAD_PARAM at handle creation)
        name="arch.gpu_older_than_cudnn",
        category="arch_unsupported",
        patterns=(r"CUDNN_STATUS_(?:BAD_PARAM|NOT_SUPPORTED|EXECUTION_FAILED|INTERNAL_ERROR|NOT_INITIALIZED)\b",
                  r"(?:Cannot|Could not|Failed to) create (?:a )?cudnn handle"),
        requires=(PRE_KEPLER_GPU,),
        unless=NEWER_GPU,
        confidence=0.82,
        root_cause=("cuDNN does not support this GPU: it is a Fermi-generation (or older) GPU, compute capability below "
                    "3.0, and no cuDNN release runs on one."),
        fix=("Use a GPU of compute capability 3.0 or later (check the cuDNN release's support matrix for its floor: 3.5 "
             "from cuDNN 8, 5.0 from cuDNN 9), or run the program without cuDNN (a CPU build, or its no-cuDNN "
             "option)."),
        examples=("backed by GTX-460\nCheck failed: status == CUDNN_STATUS_SUCCESS (3 vs. 0)  CUDNN_STATUS_BAD_PARAM",),
    ),
    Rule(
        name="arch.toolchain_unknown_arch",
        category="arch_unsupported",
        patterns=(
            r"nvcc fatal\s*: Unsupported gpu architecture 'compute_\d+[a-z]?'",
            r"ptxas fatal\s*: Value 'sm_\d+[a-z]?' is not defined for option 'gpu-name'",
            r"'sm_\d+[a-z]?' is not a recognized processor for this target",
        ),
        confidence=0.8,
        root_cause=("The CUDA compiler (nvcc, ptxas or the NVRTC the program carries) does not know the GPU "
                    "architecture it was asked to build for[ (sm_{sm})]: the GPU is newer than that toolkit, or the "
                    "toolkit has dropped it."),
        fix=(
            "Use a CUDA toolkit that knows this GPU (12.8+ for Blackwell sm_100/sm_120) or a prebuilt "
            "wheel; set TORCH_CUDA_ARCH_LIST to architectures the toolkit supports. For a GPU the toolkit dropped, "
            "use an older one that still lists it (Kepler sm_30: CUDA 10.2; sm_35/sm_37: 11.8; Maxwell, Pascal and "
            "Volta: 12.x) or a build made with it."
        ),
        examples=("nvcc fatal   : Unsupported gpu architecture 'compute_120'",
                  # openmm/openmm#3756 (a Kepler Quadro K2000 with CUDA 11.4's NVRTC)
                  "CUDA platform error: Error compiling program: nvrtc: error: invalid value for --gpu-architecture "
                  "(-arch)"),
    ),
    Rule(
        name="arch.feature_needs_newer_gpu",
        category="arch_unsupported",
        patterns=(
            r"requires device with capability [><=]+ \(\d+, ?\d+\) but your GPU has capability \(\d+, ?\d+\)",
            r"too old to be supported by the triton GPU compiler",
            r"Triton only supports devices of CUDA Capability >= \d",
            r"FlashAttention only supports (?:Ampere|Turing) GPUs or newer",
            r"with Cuda compute capability \d+\.\d+\. The minimum required Cuda capability is",
            r"Bfloat16 is only supported on GPUs with compute capability of at least",
        ),
        confidence=0.85,
        root_cause="The GPU is older than this software supports[: {gpu_cc}].",
        fix=(
            "Run on a newer GPU, or disable the feature (e.g. torch.compile/Triton, FlashAttention, bf16) for this "
            "GPU."
        ),
        examples=(
            "NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs: ... "
            "`cutlassF` is not supported because: requires device with capability > (8, 0) but your GPU has "
            "capability (7, 5) (too old)",
            "Found NVIDIA GeForce GTX 1070 which is too old to be supported by the triton GPU compiler, "
            "which is used as the backend. Triton only supports devices of CUDA Capability >= 7.0, but "
            "your device is of CUDA capability 6.1",
            "RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
        ),
    ),
    Rule(
        name="arch.legacy_gpu_dropped_by_driver",
        category="arch_unsupported",
        patterns=(
            r"NVRM: [^\n]{0,120}is supported through the NVIDIA \d+\.xx Legacy drivers",
            r"will ignore this GPU",
        ),
        # over what follows from the GPU being ignored (modprobe's "No such device", NVML's and torch's "no driver"),
        # under Secure Boot refusing the module (0.94)
        confidence=0.92,
        root_cause=(
            "The installed driver branch has dropped this (pre-Turing) GPU; it is served only by a legacy branch."
        ),
        fix="Install the legacy driver branch named in the message (e.g. R580) and a cu126 PyTorch build.",
        examples=(
            "NVRM: The NVIDIA GeForce GTX 1050 GPU installed in this system is supported through the NVIDIA 580.xx "
            "Legacy drivers. Please visit http://www.nvidia.com/object/unix.html for more information. "
            "The 595.58.03 NVIDIA driver will ignore this GPU.",
        ),
    ),
    Rule(
        # ggml's CUDA backend (llama.cpp, ollama, koboldcpp): no device code for the GPU's arch in this build
        name="arch.ggml_no_device_code",
        category="arch_unsupported",
        patterns=(r"\bhas no device code compatible with CUDA arch \d+",),
        messages=("ggml.no_device_code",),
        demotes=("oom_or_hw",),
        confidence=0.88,
        root_cause=("This ggml build (llama.cpp, ollama, koboldcpp, …) has no CUDA device code for the GPU's "
                    "architecture[ ({gpu_arch})]: its CUDA architectures list does not include it."),
        fix=("Use a build compiled for this GPU (a release whose CUDA architectures include it), or build it yourself "
             "with `-DCMAKE_CUDA_ARCHITECTURES=<the GPU's sm, e.g. 61 or 120>`; check the GPU's compute capability "
             "with `nvidia-smi --query-gpu=compute_cap --format=csv`."),
        examples=("Since updating from 1.54 to 1.55 I've been getting `ERROR: ggml-cuda was compiled without support "
                  "for the current GPU architecture.` errors",),
    ),
    Rule(
        # the GPU check NVIDIA's NGC framework images run at start (entrypoint.d: each GPU's SM from deviceQuery against
        # the oldest SM the image supports and the newest it was built for): NVIDIA-NeMo/Speech#346 (a Tesla K80 in a
        # NeMo image), a Triton 24.05 image on a Quadro M1200
        name="arch.ngc_image_gpu_unsupported",
        category="arch_unsupported",
        patterns=(),
        messages=("ngc.gpu_not_supported",),
        confidence=0.9,
        demotes=("container_device_missing",),
        root_cause=("The container image (an NGC framework image) has no kernels for this GPU: its entrypoint found the "
                    "GPU's compute capability outside the range the image was built for (an older GPU it dropped, or a "
                    "newer one than the release knows)."),
        fix=("Use an image release whose support matrix lists this GPU (an older release for a GPU the current images "
             "dropped, such as Kepler or Maxwell; a newer one for a new GPU), or install the framework outside the image "
             "with a build for this compute capability."),
        examples=("ERROR: Detected NVIDIA Tesla K80 GPU, which is not supported by this container\n"
                  "ERROR: No supported GPU(s) detected to run this container",),
    ),
    Rule(
        # the same check's warning for a GPU newer than the image supports (frameworks may still run it through PTX:
        # ChenRocks/UNITER#90, an A100 on a CUDA 10 image, failed; RTX 40xx on 22.0x images mostly ran) and its summary
        # alone (fauxpilot/fauxpilot#104: fixed by a system upgrade): the image did not count the GPU, a weak signal
        name="arch.ngc_image_gpu_not_counted",
        category="arch_unsupported",
        patterns=(),
        messages=("ngc.gpu_not_counted",),
        confidence=0.45,
        generic=True,
        root_cause=("The container image's GPU check counted no GPU as supported: a GPU newer than the image's CUDA "
                    "(its frameworks may still run it through PTX, or fail with \"no kernel image\"), or one its "
                    "deviceQuery could not read."),
        fix=("Check the image's support matrix for this GPU and use a release built for it (a newer image for a new "
             "GPU); if the check found no GPU at all, check `nvidia-smi` in the container and the driver on the host."),
        examples=("WARNING: Detected NVIDIA NVIDIA A100-PCIE-40GB GPU, which is not yet supported in this version of the "
                  "container",),
    ),
    Rule(
        # the NVHPC compilers' accelerator runtime (OpenACC, OpenMP offload) when the binary holds no device code for
        # the GPU (TinkerTools/tinker-hp#32: built for cc90 on an RTX 5080, cc120; a cc60/cc70 build on an RTX 3060 Ti)
        name="arch.nvhpc_no_code_for_gpu",
        category="arch_unsupported",
        patterns=(),
        messages=("nvhpc.rebuild_for_gpu",),
        # the file compiled for the very capability the runtime asks for (an H200 run failing on one rank only,
        # passing with NVCOMPILER_ACC_NOTIFY set): the code is there, the runtime could not load or launch it
        unless=_NVHPC_SAME_CC,
        confidence=0.88,
        root_cause=("The program (built with the NVIDIA HPC SDK's OpenACC/OpenMP offload) holds device code only for "
                    "other compute capabilities than this GPU's."),
        fix=("Rebuild with the GPU's compute capability (`-gpu=ccXY`, or `-gpu=ccall`/`ccnative`), using an NVHPC "
             "release that knows this GPU (Blackwell, cc100/cc120, needs NVHPC 25.x with CUDA 12.8 or later)."),
        examples=("Accelerator Fatal Error:\nThis file was compiled: -acc=gpu -gpu=cc90\nRebuild this file with "
                  "-gpu=cc120 to use NVIDIA Tesla GPU 0",),
    ),
)
