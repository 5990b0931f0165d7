"""Issue #35, diagnosis from the emitters' own words (session 28): NVIDIA's X driver's own lines when it cannot use the
kernel module or bring the GPU up; the CUDA runtime's "named symbol not found" on a kernel call; cuDNN on a GPU older
than any cuDNN supports. Each case is a real report's paste (the URL beside it) or its line in another setting."""

from __future__ import annotations

import re

from provisioner.diagnose import diagnose
from provisioner.diagnose.rules.arch import PRE_KEPLER_GPU
from tests.support.diagnosis import all_rules, top_and_rules


def top_rule(log: str) -> str | None:
    found = diagnose(log)
    return found[0].rule if found else None


# --- NVIDIA's X driver (nvidia_drv.so) -------------------------------------------------------------------------------

# archzfs/archzfs#548: the prebuilt `nvidia` package beside a pinned older kernel; Xorg.0.log's lines as posted
X_MODULE = ("[     9.393] (EE) NVIDIA: Failed to initialize the NVIDIA kernel module. Please see the\n"
            "[     9.393] (EE) NVIDIA:     system's kernel log for additional error messages and\n"
            "[     9.393] (EE) NVIDIA:     consult the NVIDIA README for details.")
# a 96.43.17 X driver's older wording (pastebin bctRgg64, `grep NVIDIA Xorg.0.log`)
X_MODULE_96 = ("(II) NVIDIA dlloader X Driver 96.43.17 Thu Apr 15 05:35:23 PDT 2010\n"
               "(EE) NVIDIA(0): Failed to initialize the NVIDIA kernel module! Please ensure\n"
               "(EE) NVIDIA(0): that there is a supported NVIDIA GPU in this system, and\n"
               "(EE) NVIDIA(0): that the NVIDIA device files have been created properly.\n"
               "(EE) NVIDIA(0): Please consult the NVIDIA README for details.\n(EE) NVIDIA(0): *** Aborting ***")


def test_the_x_driver_that_cannot_use_the_kernel_module_is_no_driver_loaded() -> None:
    for log in (X_MODULE, X_MODULE_96):
        got, rules = top_and_rules(log)
        assert got == "no_driver_loaded" and "nodriver.x_driver_cannot_use_module" in rules, (log[:60], got, rules)


def test_the_kernel_log_beside_the_x_driver_line_names_the_cause() -> None:
    # the X driver's line is the consequence; the kernel's or modprobe's line beside it says why
    secure_boot = "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n" + X_MODULE
    assert (top_rule(secure_boot) or "").startswith("nodriver.secure_boot"), top_and_rules(secure_boot)
    mismatch = ("NVRM: API mismatch: the client has the version 535.54.03, but\nNVRM: this kernel module has the "
                "version 530.41.03.  Please\nNVRM: make sure that this kernel module and all NVIDIA driver\n"
                "NVRM: components have the same version.\n" + X_MODULE)
    got, rules = top_and_rules(mismatch)
    assert got == "driver_lib_mismatch", (got, rules)
    # the module loaded and could not bring the GPU up (a review of session 28): that is the finding, not a module
    # "not loaded for the running kernel"
    rm_init = X_MODULE + "\n[   10.120] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:667)"
    assert top_rule(rm_init) == "nodriver.rm_init_adapter", top_and_rules(rm_init)


def test_the_x_driver_that_could_not_load_the_module_itself_is_no_driver_loaded() -> None:
    # the X driver's own modprobe failing, beside Xorg's own "Failed to load module" line (Xorg.0.log posts)
    log = ("[    18.301] (EE) NVIDIA: Failed to load the NVIDIA kernel module. Please check your\n"
           "[    18.301] (EE) NVIDIA:     system's kernel log for additional error messages.\n"
           '[    18.301] (EE) Failed to load module "nvidia" (module-specific error, 0)')
    got, rules = top_and_rules(log)
    assert got == "no_driver_loaded" and "nodriver.x_driver_cannot_use_module" in rules, (got, rules)


def test_the_x_driver_that_cannot_bring_the_gpu_up_reads_as_rm_init_adapter() -> None:
    # Bumblebee-Project/Bumblebee#432 (bumblebeed relaying Xorg's line) and ewagner12/all-ways-egpu#58 (gdm-x-session)
    for log in ("[  623.056813] [ERROR]Cannot access secondary GPU - error: [XORG] (EE) NVIDIA(0): Failed to initialize "
                "the NVIDIA GPU at PCI:1:0:0.  Please\n[  623.056833] [ERROR]Aborting because fallback start is "
                "disabled.",
                "Nov  3 12:31:22 host /usr/libexec/gdm-x-session[1605]: (EE) NVIDIA(GPU-0): Failed to initialize the "
                "NVIDIA GPU at PCI:82:0:0.  Please\nNov  3 12:31:22 host /usr/libexec/gdm-x-session[1605]: (EE) "
                "NVIDIA(GPU-0):     check your system's kernel log for additional error\nNov  3 12:31:22 host "
                "/usr/libexec/gdm-x-session[1605]: (EE) NVIDIA(GPU-0): Failed to initialize the NVIDIA graphics "
                "device!"):
        got, rules = top_and_rules(log)
        assert got == "no_driver_loaded" and "nodriver.rm_init_adapter" in rules, (log[:60], got, rules)


# --- "named symbol not found" on a kernel call ------------------------------------------------------------------------

def test_a_kernel_call_that_finds_no_symbol_is_a_binary_without_code_for_the_gpu() -> None:
    for log in (
        # RosettaCommons/foundry#5: cuEquivariance's fused kernels on a TITAN RTX (Turing)
        '[rank0]: RuntimeError: CUDA error: "named symbol not found" at run_fmha.cu:160\n\n'
        "[rank0]: Failed call: cudaFuncSetAttribute(*kernel_ptr, cudaFuncAttributeMaxDynamicSharedMemorySize, "
        "smem_size)",
        # fatlipp/cuda-tree#1: CUDA_ARCHITECTURES not this GPU's
        "/tmp/cuda-tree/lib/core/octree/OctreeBuilderCuda.cu(57) : getLastCudaError() CUDA error : KernelError : "
        "(500) named symbol not found.",
    ):
        got, rules = top_and_rules(log)
        assert got == "arch_unsupported" and "arch.kernel_symbol_not_found" in rules, (log[:60], got, rules)


def test_named_symbol_not_found_without_a_kernel_call_is_not_read_as_the_gpu() -> None:
    # a device variable the program names wrongly, or a driver entry point: the same words, no kernel
    for log in ("cudaMemcpyToSymbol failed: named symbol not found",
                "cuGetProcAddress('cuMemAdvise_v2') failed: named symbol not found",
                # PyCUDA's classic: the kernel's name mangled (no extern "C") or mistyped — the module loaded fine
                "pycuda._driver.LogicError: cuModuleGetFunction failed: named symbol not found",
                # a check macro's file and line name no kernel call (NVIDIA/stdexec#888's own line: its cause, a
                # kernel built for the other GPU of the machine, is not in the text)
                "CUDA error cudaErrorSymbolNotFound [/src/app/main.cu:12]: named symbol not found",
                # a kernel's launch syntax pasted beside another call's error, not on its line's kernel
                "<<<<<<< HEAD\nError 500: named symbol not found (cudaGetDeviceCount)"):
        assert "arch.kernel_symbol_not_found" not in top_and_rules(log)[1], log
    # candle's own loader line keeps its own, more specific rule
    candle = 'Error: DriverError(CUDA_ERROR_NOT_FOUND, "named symbol not found") when loading cast_u32_bf16'
    assert top_rule(candle) == "arch.candle_kernel_not_compiled", top_and_rules(candle)


# --- cuDNN on a GPU older than any cuDNN supports ---------------------------------------------------------------------

# NVIDIA/DIGITS#1659: a GTX 460 (Fermi) with caffe-nv and cuDNN 5
DIGITS = ("I have installed Digits (v5..0.0) and running a local devserver on Ubuntu 16.04 backed by GTX-460.\n"
          '"ERROR: Check failed: status == CUDNN_STATUS_SUCCESS (3 vs. 0) CUDNN_STATUS_BAD_PARAM\n"\n'
          '"Cannot create cuDNN handle. cuDNN won\'t be available.\n'
          'Check failed: status == CUDNN_STATUS_SUCCESS (3 vs. 0)  CUDNN_STATUS_BAD_PARAM"\n'
          "ii  libcudnn5                                   5.1.10-1+cuda8.0")


def test_cudnn_failing_on_a_fermi_gpu_is_the_gpu_too_old() -> None:
    assert top_rule(DIGITS) == "arch.gpu_older_than_cudnn", top_and_rules(DIGITS)
    # deviceQuery's capability line says the same as the name
    query = ("  CUDA Capability Major/Minor version number:    2.1\n"
             "F0412 caffe cudnn_conv_layer.cpp:53] Check failed: status == CUDNN_STATUS_SUCCESS (3 vs. 0)  "
             "CUDNN_STATUS_BAD_PARAM")
    assert top_rule(query) == "arch.gpu_older_than_cudnn", top_and_rules(query)


def test_cudnn_failing_on_a_newer_gpu_is_not_read_as_fermi() -> None:
    log = DIGITS.replace("GTX-460", "GTX 1060")
    assert "arch.gpu_older_than_cudnn" not in all_rules(log)
    # an old display card beside a newer GPU (a review of session 28): TensorFlow's handle error is then no proof
    two = ("GPU 0: GeForce RTX 2070\nGPU 1: GeForce GTX 550 Ti\n"
           "E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR")
    assert "arch.gpu_older_than_cudnn" not in all_rules(two)
    fermi = re.compile(PRE_KEPLER_GPU, re.IGNORECASE)  # the engine matches without case
    for name in ("GeForce GTX 460", "geforce gtx 460", "GTX 580", "GTX 560 Ti", "GeForce GTX 580M", "GTX 670M",
                 "GeForce GT 430", "GT 620", "Quadro 4000", "Quadro 5000M", "Tesla C2050", "Tesla M2075", "Tesla M2090",
                 "GeForce GTX 285", "GeForce 8800 GTX", "Tesla C1060"):
        assert fermi.search(name), name
    for name in ("GeForce GTX 1050 Ti", "GeForce RTX 4090", "GTX 4090", "Quadro K2000", "Quadro M4000", "GTX 680M",
                 "Quadro RTX 6000", "Tesla K80", "GeForce GT 640", "GTX 650 Ti"):
        assert not fermi.search(name), name


# --- Julia's CUDAnative.jl comparing the toolkit with the driver ------------------------------------------------------

def test_cudanative_toolkit_newer_than_the_driver_is_the_driver_too_old() -> None:
    for log in (
        # JuliaGPU/julia-ngc#7 (CUDAnative 2.x's error, its line wrapped where the source wraps it)
        "Precompiling CUDAnative\nERROR: LoadError: CUDA 10.0 is not supported by\nyour driver (which supports up to 9.0)",
        # CUDAnative 3.2's warning (src/CUDAnative.jl __runtime_init__)
        "┌ Warning: You are using CUDA toolkit 10.2.0 with a driver that only supports up to 10.1.0.\n"
        "│ It is recommended to upgrade your driver, or switch to automatic installation of CUDA.",
    ):
        got, rules = top_and_rules(log)
        assert got == "driver_too_old" and "driver.insufficient_for_runtime" in rules, (log[:60], got, rules)
    # CUDAnative's own debug line when the toolkit is within the driver's support is no finding of this rule
    assert "driver.insufficient_for_runtime" not in all_rules(
        "┌ Debug: Using CUDA driver v11.2.0 and toolkit v10.1.0\n│ CUDA 10.1 is supported by your driver")


# --- FFmpeg's NVENC refusing the encoder's API version --------------------------------------------------------------

def test_nvenc_invalid_version_is_the_driver_older_than_the_encoders_sdk() -> None:
    # HandBrake/HandBrake#1827 (HandBrake 1.2.0's FFmpeg NVENC on an older driver; settled by driver 399)
    log = ("[h264_nvenc @ 000001e8482050c0] Cannot get the preset configuration: invalid version (15)\n"
           "[21:40:25] encavcodecInit: avcodec_open failed\nFailure to initialise thread 'FFMPEG encoder (libavcodec)'")
    got, rules = top_and_rules(log)
    assert got == "driver_too_old" and "driver.nvenc_needs_newer_driver" in rules, (got, rules)
    # the same words from another program, with no NVENC encoder in the log, are not NVENC's
    assert "driver.nvenc_needs_newer_driver" not in top_and_rules("pip: invalid version (15) in requirement")[1]


# --- NVIDIA's Windows installer (NVI2) in its own log ---------------------------------------------------------------

def test_the_windows_installers_own_failure_lines_are_an_installer_failure() -> None:
    for log in (
        # pytorch/pytorch#64536: the constraint check refusing while Windows Update installed
        "ERROR: [NVI2.Installation] 1208@CInstallationCheckingBase::CheckConstraints : Constraints blocked install.\n\n"
        "ERROR: [NVI2.InstallThread] 54@CInstallThread::ThreadProc : Install failed - Exception {0xe4080000; File: "
        "InstallationStepper.cpp; Line: 382} - going to fail state.\n\nERROR: [NVI2.NVInstaller] 240@CNVInstaller::"
        "PerformSteps : Installation failed with error Exception {0xe4080000; File: InstallThread.cpp; Line: 112}.",
        # pytorch/pytorch#34821: the Nsight Visual Studio Edition MSI failing inside the toolkit's install
        "    289.428 |    ERROR: [NVI2.NVMsiPhase] 827@CNVMsiPhase::InvokePhase : Caught exception Exception "
        "{0x80070643 - Fatal error during installation.; File: NVMsiPhase.cpp; Line: 75}.",
        # philferriere/dlwin#47: the installer's own window
        'The Cuda installer failed every time with a "CUDA Installer Failed" message',
    ):
        got, rules = top_and_rules(log)
        assert got == "installer_failure" and "installer.nvidia_windows_installer_failed" in rules, (log[:60], rules)
    # the driver installer's own refusal of the machine says why: that rule's fix, not the generic one
    refused = "NVIDIA Installer failed\nThis graphics driver could not find compatible graphics hardware."
    assert top_rule(refused) == "installer.windows_driver_refused", top_and_rules(refused)


# --- ggml's CUDA check before it named the call ---------------------------------------------------------------------

def test_ggmls_numbered_cuda_error_with_the_runtimes_out_of_memory_text_is_the_gpu_out_of_memory() -> None:
    # an ollama log of 2023 (llama.cpp's ggml-cuda.cu CUDA_CHECK: "CUDA error %d at %s:%d: %s")
    log = ("CUDA error 2 at /go/src/github.com/jmorganca/ollama/llm/llama.cpp/gguf/ggml-cuda.cu:7358: out of memory\n"
           "current device: 0")
    assert top_rule(log) == "hw.cuda_oom", top_and_rules(log)
    # another error's text after the same shape is not memory
    assert "hw.cuda_oom" not in all_rules("CUDA error 209 at ggml-cuda.cu:6968: no kernel image is available for "
                                          "execution on the device")
