"""Issue #35, diagnosis from the emitters' own words (session 27): TensorRT's own check of CUDA before it builds or
runs an engine prints the CUDA error by its number, in a wording that changed over TensorRT's versions. Each case is a
real report's paste; the URL is beside it."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from tests.support.diagnosis import all_rules, layer_guess, top_and_rules

# --- TensorRT's "CUDA initialization failure with error N" over its versions ----------------------------------------

TRT_INIT = (
    # onnx/onnx-tensorrt#91 (TensorRT 5, onnx2trt): its padding kept
    ("[2018-12-17 05:50:18   ERROR] Cuda initialization failure with error 35.              Please check cuda "
     "installation:             http://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html.\n"
     "terminate called after throwing an instance of 'std::runtime_error'\n  what():  Failed to create object",
     "driver_too_old", "driver.insufficient_for_runtime"),
    # NVIDIA/TensorRT#1052 (TensorRT 7.2, driver 450 against a newer toolkit's PTX)
    ("[TensorRT] ERROR: CUDA initialization failure with error 222. Please check your CUDA installation:  "
     "http://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html",
     "driver_too_old", "driver.ptx_toolchain_newer"),
    # NVIDIA/TensorRT#149 (a comment: TensorRT's sample on a machine whose GPU CUDA cannot see)
    ("[E] [TRT] Cuda initialization failure with error 100. Please check cuda installation: "
     "http://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html.",
     "no_driver_loaded", "nodriver.no_device_generic"),
    # vbanakha/edgePtychoNN#5 (TensorRT 10's builder: the colon, and where it was raised)
    ("terminate called after throwing an instance of 'nvinfer1::APIUsageError'\n"
     "  what():  CUDA initialization failure with error: 35. Please check your CUDA installation: "
     "http://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html In checkCudaInstalledAndPrintMemoryUsage "
     "at optimizer/api/builder.cpp:1238\nAborted (core dumped)",
     "driver_too_old", "driver.insufficient_for_runtime"),
)


def test_tensorrt_names_the_cuda_error_by_its_number_in_each_versions_words() -> None:
    for log, category, rule in TRT_INIT:
        got, rules = top_and_rules(log)
        assert got == category and rule in rules, (log[:70], got, rules)


def test_tensorrt_init_failure_with_a_version_like_number_is_not_an_error_code() -> None:
    # the code ends where a number goes on as a version would ("35.1"): no CUDA error 35 read from it
    got, rules = top_and_rules("CUDA initialization failure with error 35.1.2 in module loader")
    assert "driver.insufficient_for_runtime" not in rules, (got, rules)


# --- the nvidia module's names, one pattern for every rule that reads them -------------------------------------------


def test_nvidiafb_failing_to_load_is_not_the_nvidia_module() -> None:
    # nvidiafb is the kernel's framebuffer driver for pre-GeForce FX cards: its refusal says nothing about nvidia.ko
    for line in ("modprobe: ERROR: could not insert 'nvidiafb': No such device",
                 "FATAL: Error inserting nvidiafb (/lib/modules/3.2.0-4-amd64/kernel/drivers/video/nvidia/nvidiafb.ko):"
                 " Invalid module format",
                 "modprobe: FATAL: Module nvidiafb not found in directory /lib/modules/6.8.0-45-generic",
                 "nvidiafb: disagrees about version of symbol module_layout",
                 # another module altogether: modprobe's and the kernel's wordings name any
                 "modprobe: FATAL: Module vfio_pci not found in directory /lib/modules/6.8.0-45-generic",
                 "zfs: Unknown symbol spl_panic (err 0)"):
        rules = top_and_rules(line)[1]
        assert not rules & {"nodriver.module_missing", "nodriver.module_found_no_device"}, (line, rules)


def test_the_nvidia_modules_names_in_each_packagings_words_still_read_as_nvidia_ko() -> None:
    cases = (
        ("FATAL: Error inserting nvidia_current (/lib/modules/3.0.0-12-generic/updates/dkms/nvidia_current.ko): "
         "Invalid module format", "nodriver.module_missing"),
        ("modprobe: ERROR: could not insert 'nvidia_uvm': Exec format error", "nodriver.module_missing"),
        ("modprobe: ERROR: could not insert 'nvidia-340xx': Key was rejected by service", "nodriver.secure_boot"),
        ("insmod: error inserting 'nvidia.ko': -1 Invalid module format", "nodriver.module_missing"),
        ("modprobe: FATAL: Module nvidia_drm not found in directory /lib/modules/6.8.12-4-pve", "nodriver.module_missing"),
        ("[    5.120] nvidia: Unknown symbol drm_open (err 0)", "nodriver.module_missing"),
        ("modprobe: ERROR: could not insert 'nvidia': No such device", "nodriver.module_found_no_device"),
    )
    for line, rule in cases:
        category, rules = top_and_rules(line)
        assert category == "no_driver_loaded" and rule in rules, (line, category, rules)


# --- the CUDA libraries' ARCH_MISMATCH status ------------------------------------------------------------------------

ARCH_MISMATCH = (
    # pluskid/Mocha.jl#57: Mocha's own text for cuDNN's status (the maintainer quoted the cuDNN guide: capability 3.0+)
    "julia>init(backend)\n16-Mar 23:11:13:INFO:root:Initializing CuDNN backend...\nERROR: Arch mismatch\n"
    " in create at /home/b/.julia/v0.3/Mocha/src/cuda/cudnn.jl:43\n in init at /home/b/.julia/v0.3/Mocha/src/cuda/"
    "backend.jl:139",
    # nagadomi/waifu2x#176: Torch7's cudnn.torch on a GPU below capability 3.0
    "/home/zhixin/torch/install/share/lua/5.1/cudnn/init.lua:145: Error in CuDNN: CUDNN_STATUS_ARCH_MISMATCH\n"
    "stack traceback:\n\t[C]: in function 'error'",
    # NVIDIA/DeepLearningExamples#147: FasterTransformer's cublasGemmEx on a Tesla K40m (capability 3.5)
    "Device Tesla K40m\nterminate called after throwing an instance of 'std::runtime_error'\n"
    "  what():  [FT][ERROR] CUDA runtime error: CUBLAS_STATUS_ARCH_MISMATCH "
    "/workspace/tf_case/FasterTransformer/fastertransformer/cuda/open_attention.h:171 \n\nAborted (core dumped)",
    # laekov/fastmoe#134: helper_cuda's "code=%d(%s)" form
    "CUDA error at /home/jovyan/data/tmp/fastmoe-megatron-patch/cuda/moe_compute_kernel.cu:132 "
    "code=8(CUBLAS_STATUS_ARCH_MISMATCH) \"cublasXgemm( smgr->handle(i), CUBLAS_OP_T, CUBLAS_OP_N )\"",
)


def test_a_cuda_librarys_arch_mismatch_is_the_gpu_too_old_for_it() -> None:
    for log in ARCH_MISMATCH:
        category, rules = top_and_rules(log)
        assert (category, rules) == ("arch_unsupported", {"arch.cuda_library_arch_mismatch"}), (log[:60], rules)
    fix = diagnose(ARCH_MISMATCH[1])[0].fix
    assert "support matrix" in fix and "compute capability" in fix, fix


def test_a_build_without_the_gpus_kernels_leads_over_a_librarys_arch_mismatch_beside_it() -> None:
    # the build has no kernel for this GPU (often a GPU newer than the build): that finding, not "the GPU is too old"
    log = ("RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
           "cuDNN error: CUDNN_STATUS_ARCH_MISMATCH")
    assert diagnose(log)[0].rule == "arch.no_kernel_image"


def test_cudnn_frontends_engine_rejections_and_cpu_architecture_mismatches_are_not_read() -> None:
    # cudnn_frontend warns CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH for each engine it skips while choosing one; a
    # package's CPU architecture is no GPU's
    for log in ("Warning: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH; Reason: FORT_NATIVE_8X engine requires Ampere or "
                "newer (device compute capability below 800)\nTraining step 100 loss 0.23",
                "Downloading cudnn-linux-x86_64-8.9.7.29_cuda12-archive.tar.xz\nerror: arch mismatch",
                "Collecting nvidia-cudnn-cu12\nERROR: arch mismatch",
                "cudnn: arch mismatch (package built for aarch64, host is x86_64)",
                "cudnn_version=8\n  ARCH MISMATCH"):
        assert "arch.cuda_library_arch_mismatch" not in all_rules(log), log[:50]


def test_another_programs_arch_mismatch_is_not_a_cuda_librarys() -> None:
    for log in ("ERROR: wheel arch mismatch: expected x86_64, got aarch64",
                "Initializing cuDNN\nplatform arch mismatch for package foo",
                "docker: image arch mismatch (linux/arm64 on linux/amd64)"):
        assert "arch.cuda_library_arch_mismatch" not in all_rules(log), log


def test_a_cuda_librarys_alloc_failed_status_is_the_gpu_out_of_memory() -> None:
    # the status names as PyTorch ("CUDA error: %s when calling `%s`", "cuDNN error: %s", "cuFFT error: %s") and
    # TensorFlow ("Could not create cudnn handle: %s") print them; each library's own name for the status
    for line in ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                 "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
                 "E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create cudnn handle: "
                 "CUDNN_STATUS_ALLOC_FAILED",
                 "RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED",
                 "RuntimeError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`",
                 "curandGenerateNormal failed: CURAND_STATUS_ALLOCATION_FAILED"):
        category, rules = top_and_rules(line)
        assert category == "oom_or_hw" and "hw.cuda_oom" in rules, (line, category, rules)
    # cuDNN 9's names for the same status
    for line in ("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
                 "cudnnCreate failed: CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED"):
        assert top_and_rules(line) == ("oom_or_hw", {"hw.cuda_oom"}), line
    # a status that several causes share (memory taken, a library that does not match the GPU or driver) is not read
    # as memory
    assert "hw.cuda_oom" not in all_rules("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED")


# --- a Flatpak sandbox's NVIDIA GL extension, a JVM's CUDA binding -------------------------------------------------

# flathub/org.blender.Blender#97: host driver 510.54, no org.freedesktop.Platform.GL.nvidia-510-54 installed
FLATPAK_BLENDER = (
    "$ flatpak run org.blender.Blender \n"
    "Read prefs: /home/micha/.var/app/org.blender.Blender/config/blender/3.0/config/userpref.blend\n"
    "intern/ghost/intern/GHOST_WindowX11.cpp:206: X11 glXChooseVisual() failed, verify working openGL system!\n"
    "initial window could not find the GLX extension\nWriting: /tmp/blender.crash.txt")


def test_no_glx_in_a_flatpak_sandbox_is_its_nvidia_gl_extension_not_matching_the_host_driver() -> None:
    category, rules = top_and_rules(FLATPAK_BLENDER)
    assert (category, rules) == ("driver_lib_mismatch", {"mismatch.flatpak_nvidia_gl_extension"}), (category, rules)
    assert "org.freedesktop.Platform.GL.nvidia-" in diagnose(FLATPAK_BLENDER)[0].fix


def test_no_glx_outside_a_flatpak_sandbox_is_not_read_as_its_extension() -> None:
    # Ubuntu Forums (2011): Blender 2.58 from the distribution, Xlib's notice and 2.5x's glXQueryVersion wording
    distro = ('Xlib:  extension "GLX" missing on display ":0".\n'
              "/build/buildd/blender-2.58-svn37702/intern/ghost/intern/GHOST_WindowX11.cpp:194: X11 glXQueryVersion() "
              "failed, verify working openGL system!\ninitial window could not find the GLX extension, exit!")
    # a nix-built Blender on Ubuntu (no host GL driver in its closure): the same lines, no sandbox
    nix = ("$ nix run nixpkgs#blender\nintern/ghost/intern/GHOST_WindowX11.cpp:206: X11 glXChooseVisual() failed, "
           "verify working openGL system!\ninitial window could not find the GLX extension\n"
           "[1]    190094 segmentation fault  blender")
    # in a sandbox, but another GPU's Mesa driver, a display forwarded over ssh, or Mesa's own GL extension
    amd = ("$ flatpak run com.valvesoftware.Steam\nlibGL error: MESA-LOADER: failed to open radeonsi: "
           "/usr/lib/dri/radeonsi_dri.so\nlibGL error: failed to load driver: swrast")
    forwarded = "$ ssh -X server\n$ flatpak run org.kde.krita\nlibGL error: No matching fbConfigs or visuals found"
    mesa = ("$ flatpak list --runtime\nMesa  org.freedesktop.Platform.GL.default  23.08\n$ glxgears\n"
            "libGL error: No matching fbConfigs or visuals found")
    for log in (distro, nix, amd, forwarded, mesa):
        assert "mismatch.flatpak_nvidia_gl_extension" not in all_rules(log), log[:40]


# jcuda/jcuda-main#17: JCuda 0.8.0's JCublas2 natives on Windows with another CUDA toolkit than 8.0 installed
JCUDA = ('java.lang.UnsatisfiedLinkError: Error while loading native library "JCublas2-0.8.0-windows-x86_64"\n'
         "Operating system name: Windows 10\nArchitecture         : amd64\n"
         "---(start of nested stack traces)---\nStack trace from the attempt to load the library as a file:\n"
         "java.lang.UnsatisfiedLinkError: no JCublas2-0.8.0-windows-x86_64 in java.library.path\n"
         "\tat java.lang.ClassLoader.loadLibrary(Unknown Source)\n\tat jcuda.LibUtils.loadLibrary(LibUtils.java:143)")


def test_a_jvm_not_loading_a_cuda_bindings_native_library_is_a_library_not_found() -> None:
    category, rules = top_and_rules(JCUDA)
    assert (category, rules) == ("missing_shared_lib", {"lib.java_native_cuda_library"}), (category, rules)
    # HotSpot's Windows wording for a DLL whose own dependencies (the CUDA release's DLLs) are missing
    assert top_and_rules("java.lang.UnsatisfiedLinkError: C:\\Users\\u\\AppData\\Local\\Temp\\JCublas2-0.8.0-"
                         "windows-x86_64.dll: Can't find dependent libraries")[1] == {"lib.java_native_cuda_library"}
    # another native library, also where the log names NVIDIA or CUDA elsewhere (a GL renderer line, JDK 11+'s search
    # path after the message)
    for other in ("Exception in thread \"main\" java.lang.UnsatisfiedLinkError: no opencv_java320 in "
                  "java.library.path\n\tat java.lang.ClassLoader.loadLibrary(ClassLoader.java:1867)",
                  "[LWJGL] GL_RENDERER: NVIDIA GeForce GTX 1060/PCIe/SSE2\n"
                  "java.lang.UnsatisfiedLinkError: no lwjgl64 in java.library.path",
                  "java.lang.UnsatisfiedLinkError: no opencv_java455 in java.library.path: /usr/local/cuda/lib64:/usr/lib",
                  "java.lang.UnsatisfiedLinkError: Error while loading native library \"custom_native-1.0\"\n"
                  "GPU: NVIDIA GeForce RTX 3080"):
        assert "lib.java_native_cuda_library" not in all_rules(other), other[:50]


# --- cuBLAS's NOT_SUPPORTED; PaddlePaddle 1.x's CUDA error code; "hardware" encoders are no hardware fault ----------


def test_cublas_not_supported_is_a_weak_reading_of_the_gpu_against_the_build() -> None:
    # coaxk/subarr#163 (CTranslate2's cuBLAS on an RTX 50-series), ggml-org/llama.cpp#4395 (fp16 GEMM on a GTX 980)
    for log in ("ERROR:root:Error processing ASR (ID: asr-e7c80ca31037c2f1): cuBLAS failed with status "
                "CUBLAS_STATUS_NOT_SUPPORTED\nRuntimeError: cuBLAS failed with status CUBLAS_STATUS_NOT_SUPPORTED",
                "cuBLAS error 15 at ggml-cuda.cu:7956: the requested functionality is not supported"):
        category, rules = top_and_rules(log)
        assert (category, rules) == ("arch_unsupported", {"arch.cublas_not_supported"}), (log[:50], rules)
    # generic: the GPU's memory running out beside it is the finding
    assert top_and_rules("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
                         "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx(...)`")[0] \
        == "oom_or_hw"


def test_paddle_names_the_cuda_call_then_its_error_code() -> None:
    # PaddlePaddle/Paddle#22576: paddlepaddle-gpu 1.6.3.post107 (CUDA 10.0) on a driver for CUDA 9.2
    log = ("paddle.fluid.core_avx.EnforceNotMet: \nError Message Summary:\n----------------------\n"
           "Error: cudaGetDeviceCount failed in paddle::platform::GetCUDADeviceCountImpl, error code : 35, Please see "
           "detail in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html#group__CUDART__TYPES_1g3f5"
           "1e3575c2178246db0a94a430e0038 at (/paddle/paddle/fluid/platform/gpu_info.cc:67)")
    category, rules = top_and_rules(log)
    assert category == "driver_too_old" and "driver.insufficient_for_runtime" in rules, (category, rules)
    # a word that only begins like a CUDA call ("current", "Cuda compilation"), a library's name (cuDF, cuRAND,
    # cuTENSOR) or a CUDA call with another program's code later on its line is not a CUDA error code
    for other in ("current version mismatch, error code: 35", "Cuda compilation failed, error code: 35",
                  "cuDF: reader failed, error code: 35", "cudaMalloc ok (123 MB) -- pip: error code: 35",
                  "cuRAND error code: 100 (CURAND_STATUS_VERSION_MISMATCH)",
                  "cuTENSOR handle create failed, error code: 999"):
        assert not all_rules(other) & {"driver.insufficient_for_runtime", "nodriver.no_device_generic",
                                       "container.cuda_unknown_error"}, other


def test_hardware_encoding_unavailable_is_not_a_hardware_fault() -> None:
    # sam-dumont/immich-video-memory-generator#936: NVENC libraries not mounted into a Kubernetes pod (the video
    # capability): an application's "hardware encoder/acceleration" lines name the GPU's engines, not a fault
    log = ("Hardware encoder probe failed for ['-c:v', 'h264_nvenc']: ... Terminating thread with return code -22 "
           "(Invalid argument)\nHardware encoding is unavailable: libva could not open a device. Check that /dev/dri is "
           "passed into the container and that the container user is in the render group\n"
           "No hardware acceleration detected, using software encoding")
    assert top_and_rules(log)[0] != "oom_or_hw"
    # "hardware" as a fault still is (no other hardware word beside it: the cue alone decides)
    for fault in ("GPU 0: hardware malfunction detected\ntraining crashed: failing hardware?\n"
                  "error: hardware-error reported by the GPU",
                  "job failed: hardware failure on the GPU\nfaulty GPU hardware, the vendor says\n"
                  "cannot continue: hardware error"):
        guess = layer_guess(fault)
        assert guess is not None and guess.category == "oom_or_hw", (fault[:40], guess)


# --- set ac's read half: dnf config-manager adding NVIDIA's repository, NCCL 2.2/2.3's prefix, candle's kernels -----


def test_dnf_config_manager_failing_to_add_nvidias_repository_is_the_installer() -> None:
    # ollama/ollama#1993: no CUDA repository for Fedora 39 yet (librepo's "Status code: 404 for …")
    log = (">>> Installing NVIDIA repository...\n"
           "Adding repo from: https://developer.download.nvidia.com/compute/cuda/repos/fedora39/x86_64/cuda-fedora39.repo"
           "\nStatus code: 404 for https://developer.download.nvidia.com/compute/cuda/repos/fedora39/x86_64/"
           "cuda-fedora39.repo (IP: 152.195.19.142)\nError: Configuration of repo failed")
    category, rules = top_and_rules(log)
    assert category == "installer_failure" and "installer.nvidia_rpm_repository_metadata_failed" in rules, rules
    # Docker's repository failing the same way is not NVIDIA's
    docker = ("Adding repo from: https://download.docker.com/linux/centos/docker-ce.repo\nCurl error (35): SSL connect "
              "error for https://download.docker.com/linux/centos/docker-ce.repo\nError: Configuration of repo failed")
    assert "installer.nvidia_rpm_repository_metadata_failed" not in all_rules(docker)


def test_nccl_2_3s_warning_without_its_name_is_nccls() -> None:
    # horovod/horovod#666: NCCL 2.2/2.3's prefix has no "NCCL"; AWS Neuron's fork of the same code says "CCOM WARN"
    log = ("seyun:17283:17549 [3] include/socket.h:371 WARN Connection closed by remote peer\n"
           "seyun:17283:17549 [3] INFO transport/net_socket.cu:166 -> 2\n"
           "seyun:17281:17552 [1] INFO bootstrap.cu:45 -> 2 [Net]")
    category, rules = top_and_rules(log)
    assert (category, rules) == ("nccl_failure", {"nccl.warn"}), (category, rules)
    neuron = "2024-Sep-23 00:09:01.0809 1:26 [1] include/socket.h:270 CCOM WARN Skipping IPv6 loopback adddress"
    assert "nccl.warn" not in all_rules(neuron)


def test_candle_finding_no_bf16_kernel_is_the_gpu_below_compute_capability_8() -> None:
    # spiceai/spiceai#4470 (a T4, 7.5); huggingface/candle#1911
    log = ("2025-01-21T21:00:37.333131Z  WARN runtime::init::model: Failed to load LLM: hf_local_model.\n"
           "Failed to load the model.\nAn error occurred: DriverError(CUDA_ERROR_NOT_FOUND, \"named symbol not "
           "found\") when loading cast_bf16_f16")
    category, rules = top_and_rules(log)
    assert (category, rules) == ("arch_unsupported", {"arch.candle_kernel_not_compiled"}), (category, rules)
    assert "f16" in diagnose(log)[0].fix


# --- docker-compose 1.x refusing the file's GPU request -----------------------------------------------------------


def test_docker_compose_without_the_gpu_keys_refuses_the_request() -> None:
    # docker/compose (a read log): a distribution's docker-compose 1.17.1 and deploy.resources.reservations.devices,
    # which came in 1.28.0; `runtime:` in a format 3.x file
    for log in ("ERROR: The Compose file './docker-compose.yml' is invalid because:\nservices.testserver.deploy."
                "resources.reservations value Additional properties are not allowed ('devices' was unexpected)",
                "ERROR: The Compose file './docker-compose.yml' is invalid because:\n"
                "Unsupported config option for services.app: 'runtime'"):
        category, rules = top_and_rules(log)
        assert (category, rules) == ("container_device_missing", {"container.compose_cannot_request_gpu"}), rules
    assert "1.28.0" in diagnose("Unsupported config option for services.app: 'runtime'")[0].fix
    # another key the same Compose refuses is no GPU request
    for other in ("ERROR: The Compose file './docker-compose.yml' is invalid because:\n"
                  "Unsupported config option for services.db: 'platform'",
                  "services.web.ports value Additional properties are not allowed ('published' was unexpected)"):
        assert "container.compose_cannot_request_gpu" not in all_rules(other), other
