"""Issue #35, diagnosis from the emitters' own words (session 27): TensorRT's own check of CUDA before it builds or
runs an engine prints the CUDA error by its number, in a wording that changed over TensorRT's versions. Each case is a
real report's paste; the URL is beside it."""

from __future__ import annotations

from tests.support.diagnosis import top_and_rules

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
                 " Invalid module format"):
        rules = top_and_rules(line)[1]
        assert not rules & {"nodriver.module_missing", "nodriver.module_found_no_device"}, (line, rules)


def test_the_nvidia_modules_names_in_each_packagings_words_still_read_as_nvidia_ko() -> None:
    cases = (
        ("FATAL: Error inserting nvidia_current (/lib/modules/3.0.0-12-generic/updates/dkms/nvidia_current.ko): "
         "Invalid module format", "nodriver.module_missing"),
        ("modprobe: ERROR: could not insert 'nvidia_uvm': Exec format error", "nodriver.module_missing"),
        ("modprobe: ERROR: could not insert 'nvidia-340xx': Key was rejected by service", "nodriver.secure_boot"),
        ("insmod: error inserting 'nvidia.ko': -1 Invalid module format", "nodriver.module_missing"),
        ("modprobe: ERROR: could not insert 'nvidia': No such device", "nodriver.module_found_no_device"),
    )
    for line, rule in cases:
        category, rules = top_and_rules(line)
        assert category == "no_driver_loaded" and rule in rules, (line, category, rules)
