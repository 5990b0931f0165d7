"""Issue #35, diagnosis from the emitters' own words (session 26): an empty driver library left in a container where
the NVIDIA runtime should have mounted the host's, the kernel's "No such device" for nvidia.ko in module-init-tools'
words, nvidia-xconfig finding no GPU, and two findings that each claim to explain the other. Each case is a real
report's paste; the URL is beside it."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from tests.support.diagnosis import all_rules, layer_guess, top_and_rules

# --- an empty driver library in a container (libnvidia-container's mount targets) ---------------------------------

# dusty-nv/jetson-inference#1290: a docker build on JetPack 4 under runc (the maintainer: make nvidia the default
# runtime so that builds get the CSV mounts)
JETSON_BUILD = (
    "/usr/lib/aarch64-linux-gnu/libcublas.so  file not recognized: File truncated\n"
    "root@2705d68d0852:/# ll /usr/lib/aarch64-linux-gnu/libcublas.so.10.2.2.89 \n"
    "-rw-r--r-- 1 root root 0 Jul  1  2020 /usr/lib/aarch64-linux-gnu/libcublas.so.10.2.2.89\n"
    "root@2705d68d0852:/# file /usr/lib/aarch64-linux-gnu/libcublas.so.10.2.2.89 \n"
    "**/usr/lib/aarch64-linux-gnu/libcublas.so.10.2.2.89: empty**")
# NVIDIA/nvidia-docker#1504: docker buildkit does not run build steps under the NVIDIA runtime
BUILDKIT = ("When building a container (docker 19.03) that should use CUDA it should bind the nvidia driver libraries\n"
            " /usr/lib/x86_64-linux-gnu/libcuda.so: file not recognized: File truncated\n"
            " collect2: error: ld returned 1 exit status")
# Thinklab-SJTU/R3Det_Tensorflow#78: a container started with plain `docker run` (answer: use nvidia-docker)
PLAIN_RUN = ("ImportError: /usr/lib/x86_64-linux-gnu/libcuda.so.1: file too short\n"
             "\u6211\u7684docker \u5bb9\u5668\u542f\u52a8\u65b9\u5f0f\uff1a\ndocker run -it f2808fb1dfe9 bash")


def test_an_empty_driver_library_in_a_container_is_the_runtime_not_mounting_it() -> None:
    for log in (JETSON_BUILD, BUILDKIT, PLAIN_RUN):
        category, rules = top_and_rules(log)
        assert (category, rules) == ("container_device_missing", {"container.placeholder_driver_library"}), \
            (log[:60], category, rules)
    assert "default-runtime" in diagnose(BUILDKIT)[0].fix


def test_a_broken_library_that_is_not_a_runtime_mount_stays_a_broken_library() -> None:
    # nvidia-container-cli loading the host's own libnvidia-ml (the example of libs.library_file_broken): the host's file
    host = ("nvidia-container-cli: initialization error: load library failed: "
            "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1: file too short\n"
            "docker: Error response from daemon: OCI runtime create failed")
    # ggml-org/llama.cpp#14813: an image's own library, not one the runtime mounts
    curl = ("docker compose up\n/app/llama-server: error while loading shared libraries: "
            "/lib/x86_64-linux-gnu/libcurl.so.4: file too short")
    # no container at all: the host's libcuda is broken
    bare = "$ python -c 'import torch'\nImportError: /usr/lib/x86_64-linux-gnu/libcuda.so.1: file too short"
    for log in (host, curl, bare):
        assert top_and_rules(log)[0] == "missing_shared_lib", log[:60]
        assert "container.placeholder_driver_library" not in all_rules(log), log[:60]


# --- the kernel's ENODEV for nvidia.ko -------------------------------------------------------------------------------

# MrMEEE/ironhide#149: module-init-tools' modprobe on Ubuntu 11.10, the Optimus GPU switched off
IRONHIDE = ("  ironhide could not be started - optirun cannot be executed.\n"
            "I tried running sudo modprobe nvidia-current, and it gave me this:\n"
            "FATAL: Error inserting nvidia_current (/lib/modules/3.0.0-12-generic/updates/dkms/nvidia-current.ko): "
            "No such device")


def test_module_init_tools_no_such_device_is_no_gpu_for_the_driver() -> None:
    category, rules = top_and_rules(IRONHIDE)
    assert category == "no_driver_loaded" and "nodriver.module_found_no_device" in rules, rules
    assert "powered off" in diagnose(IRONHIDE)[0].root_cause
    # kmod's wording of the same refusal
    assert "nodriver.module_found_no_device" in all_rules("modprobe: ERROR: could not insert 'nvidia': No such device")


def test_another_modules_no_such_device_is_not_nvidias() -> None:
    log = ("FATAL: Error inserting snd_hda_intel (/lib/modules/3.2.0-23-generic/kernel/sound/pci/hda/snd-hda-intel.ko): "
           "No such device")
    assert "nodriver.module_found_no_device" not in all_rules(log)


def test_module_init_tools_invalid_module_format_is_a_module_for_another_kernel() -> None:
    log = ("FATAL: Error inserting nvidia (/lib/modules/2.6.32-5-amd64/kernel/drivers/video/nvidia.ko): "
           "Invalid module format")
    assert top_and_rules(log) == ("no_driver_loaded", {"nodriver.module_missing"})


# --- nvidia-xconfig --query-gpu-info ---------------------------------------------------------------------------------

# openSUSE/SUSEPrime#31: prime-select runs nvidia-xconfig --query-gpu-info to find the BusID
SUSEPRIME = ("TW-WEDC:~ # prime-select nvidia\nERROR: Unable to query GPU information\n"
             "TW-WEDC:~ # prime-select nvidia\nnvidia driver already in use!")


def test_nvidia_xconfig_finding_no_gpu_is_the_driver() -> None:
    assert top_and_rules(SUSEPRIME) == ("no_driver_loaded", {"nodriver.xconfig_found_no_gpu"})
    # in a docker container the same answer is the container not given the GPU
    docker = "docker run --rm cuda-img nvidia-xconfig --query-gpu-info\nERROR: Unable to query GPU information"
    assert "nodriver.xconfig_found_no_gpu" not in all_rules(docker)


# --- two findings that each explain the other ------------------------------------------------------------------------

def test_the_more_confident_of_two_mutual_explanations_stands() -> None:
    # libs.library_file_broken demotes container_device_missing (a runtime passing on a broken library) and the
    # placeholder rule demotes missing_shared_lib: the second, more confident, claim stands whatever order they meet
    findings = diagnose(PLAIN_RUN)
    assert findings[0].rule == "container.placeholder_driver_library"
    assert any(r.rule == "libs.library_file_broken" for r in findings[0].also_possible)


# --- the CUDA runtime a program carries against the driver's, as one log prints them ----------------------------------

# sp-hash/TeamBlackMiner#285: a miner built with the CUDA 11.4 runtime on a 460.32 driver (CUDA 11.2); the maintainer:
# "cuda 11.4 or newer"
MINER = ("00:00:00 [2022-05-03 15:10:57.638] OpenCL driver version: 460.32\n"
         "00:00:00 [2022-05-03 15:10:57.644] Cuda driver version: 11.2\n"
         "00:00:00 [2022-05-03 15:10:57.644] Cuda runtime API version: 11.4\n"
         "00:00:00 [2022-05-03 15:10:57.644] Welcome to Team Black Miner 1.62\n"
         "00:00:00 [2022-05-03 15:10:57.644] No devices are set\n"
         "00:00:00 [2022-05-03 15:10:57.644] Shutting down threads")


def test_a_runtime_newer_than_the_drivers_cuda_is_the_driver_too_old() -> None:
    assert top_and_rules(MINER) == ("driver_too_old", {"evidence.runtime_cuda_newer_than_driver"})
    # deviceQuery's pair and the API's integers (cudaDriverGetVersion 11020, cudaRuntimeGetVersion 12020): another
    # major needs no failure beside it
    assert top_and_rules("  CUDA Driver Version / Runtime Version          11.2 / 12.2\n") == \
        ("driver_too_old", {"evidence.runtime_cuda_newer_than_driver"})
    assert top_and_rules("CUDA Driver Version  : 11020\nCUDA Runtime Version : 12020")[0] == "driver_too_old"


def test_versions_that_run_are_no_finding() -> None:
    # within one major and nothing failed (minor-version compatibility), or a runtime older than the driver's CUDA
    assert diagnose("  CUDA Driver Version / Runtime Version          12.2 / 12.4\nResult = PASS") == []
    assert "evidence.runtime_cuda_newer_than_driver" not in all_rules(
        "Cuda driver version: 12.4\nCuda runtime API version: 11.8\nNo devices are set")
    # the runtime's refusal message itself is not a version
    assert "evidence.runtime_cuda_newer_than_driver" not in all_rules(
        "CUDA driver version is insufficient for CUDA runtime version")


# --- dkms status: the nvidia module left behind by a kernel upgrade ---------------------------------------------------

# Bumblebee-Project/Bumblebee#965: Debian stretch moved to the backports 4.16 kernel; nvidia-current 375.82 stayed at 4.9
BACKPORTS = ("Cannot access secondary GPU - error: Could not load GPU driver\n\n"
             "[ERROR]Aborting because fallback start is disabled.\n"
             "bbswitch, 0.8, 4.16.0-0.bpo.1-amd64, x86_64: installed\n"
             "bbswitch, 0.8, 4.9.0-6-amd64, x86_64: installed\n"
             "nvidia-current, 375.82, 4.9.0-6-amd64, x86_64: installed")


def test_dkms_building_other_modules_for_a_newer_kernel_than_nvidia() -> None:
    assert top_and_rules(BACKPORTS) == ("no_driver_loaded", {"evidence.dkms_nvidia_not_built_for_kernel"})
    assert "4.16.0-0.bpo.1-amd64" in diagnose(BACKPORTS)[0].fix
    # dkms 3's "module/version" form, nvidia built for the newest kernel too: nothing left behind
    ok = ("nvidia/535.183.01, 6.8.0-45-generic, x86_64: installed\nnvidia/535.183.01, 6.8.0-40-generic, x86_64: installed\n"
          "v4l2loopback/0.12.7, 6.8.0-45-generic, x86_64: installed\nError: could not load GPU driver")
    assert "evidence.dkms_nvidia_not_built_for_kernel" not in all_rules(ok)
    # a listing alone, nothing failed: no finding
    assert diagnose(BACKPORTS.split("\n", 3)[3]) == []


# --- FreeBSD's kernel linker, makepkg ---------------------------------------------------------------------------------

# trueos/trueos-core#271: nvidia.ko from the package, built for the kernel before an update
FREEBSD = ("$ kldload nvidia\nkldload: an error occurred while loading the module. Please check dmesg(8) for more details.\n"
           "KLD nvidia.ko: depends on kernel - not available or version mismatch\n"
           "linker_load_file: Unsupported file type\n$ pkg info nvidia-driver\nnvidia-driver-367.44_3")


def test_freebsd_refusing_nvidia_ko_built_for_another_kernel() -> None:
    assert top_and_rules(FREEBSD) == ("no_driver_loaded", {"nodriver.freebsd_module_for_other_kernel"})
    assert "nodriver.freebsd_module_for_other_kernel" not in all_rules(
        "KLD zfs.ko: depends on kernel - not available or version mismatch")


# Frogging-Family/nvidia-all#71: the driver package built from a path with "(1)" in it
NVIDIA_ALL = ("> ==> Starting package_nvidia-utils-tkg()...\n"
              "> readelf: Error: '/home/liam/.local/share/Trash/files/nvidia-all' is not an ordinary file\n"
              "> readelf: Error: '(1)/nvidia-all/pkg/nvidia-utils-tkg/usr/lib/libcuda.so.495.44': No such file\n"
              "> ln: failed to create symbolic link '(1)/nvidia-all/pkg/nvidia-utils-tkg/usr/lib/': No such file or "
              "directory\n> ==> ERROR: A failure occurred in package_nvidia-utils-tkg().\n>     Aborting...")


def test_makepkg_failing_in_an_nvidia_package_is_the_install() -> None:
    assert top_and_rules(NVIDIA_ALL) == ("installer_failure", {"installer.makepkg_nvidia_package_failed"})
    other = "==> Making package: yay 12.3.5-1\n==> ERROR: A failure occurred in build().\n    Aborting..."
    assert "installer.makepkg_nvidia_package_failed" not in all_rules(other)


# --- the review's cases (each would have been a false finding or a miss) -----------------------------------------------

def test_collect_envs_cuda_runtime_line_is_nvcc_not_a_runtime() -> None:
    # collect_env prints nvcc's release as "CUDA runtime version: 12.1.105" (pytorch/pytorch#78489)
    log = ("PyTorch version: 1.13.1+cu117\nCUDA runtime version: 12.1.105\n"
           "| NVIDIA-SMI 515.65.01    Driver Version: 515.65.01    CUDA Version: 11.7 |\n"
           "ModuleNotFoundError: No module named 'mmcv._ext'")
    assert "evidence.runtime_cuda_newer_than_driver" not in all_rules(log)


def test_other_printed_forms_of_the_two_versions_are_read() -> None:
    from provisioner.diagnose.evidence import log_evidence
    # PaddlePaddle's device line (PaddlePaddle/Paddle#39090), numba -s's tuples
    paddle = log_evidence("W0112 GPU Device 0: Tesla T4, Compute Capability: 7.5, Driver API Version: 10.2, Runtime API "
                          "Version: 11.2")
    assert (paddle.cuda_version, paddle.runtime_cuda) == ("10.2", "11.2")
    numba = log_evidence("CUDA Driver Version                           : (11, 4)\n"
                         "CUDA Runtime Version                          : (12, 1)")
    assert (numba.cuda_version, numba.runtime_cuda) == ("11.4", "12.1")


def test_a_runtime_that_ran_is_not_blamed_on_the_driver() -> None:
    # within one major, CUDA ran (an illegal address, CuPy's pool out of memory): that error is the cause
    head = "CUDA Driver Version : 12020\nCUDA Runtime Version : 12040\n"
    assert diagnose(head + "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorIllegalAddress: an illegal "
                           "memory access was encountered")[0].category == "oom_or_hw"
    assert top_and_rules(head + "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 23,622,320,128 bytes "
                                "(allocated so far: 23,622,320,128 bytes).") == ("oom_or_hw", {"hw.cuda_oom"})


def test_dkms_kernels_are_compared_within_one_flavour_and_release_order() -> None:
    fail = "\nRuntimeError: No CUDA GPUs are available"
    for listing in (
        # RHEL: 513.5.1.el8_9 is newer than 513.el8
        "nvidia/550.54.15, 4.18.0-513.5.1.el8_9.x86_64, x86_64: installed\n"
        "zfs/2.1.14, 4.18.0-513.5.1.el8_9.x86_64, x86_64: installed\nzfs/2.1.14, 4.18.0-513.el8.x86_64, x86_64: installed",
        # a release candidate is older than its release
        "nvidia/535.54.03, 6.1.0, x86_64: installed\nzfs/2.1.9, 6.1.0-rc1, x86_64: installed",
        # another flavour is another series
        "nvidia/535.54.03, 5.15.0-91-generic, x86_64: installed\nv4l2loopback/0.12, 5.15.0-1050-azure, x86_64: installed",
    ):
        assert "evidence.dkms_nvidia_not_built_for_kernel" not in all_rules(listing + fail), listing


def test_a_truncated_object_file_is_no_library() -> None:
    log = "CMakeFiles/foo.dir/src/bar.cpp.o: file not recognized: file truncated\ncollect2: error: ld returned 1 exit status"
    assert "libs.library_file_broken" not in all_rules(log)


def test_makepkg_reads_the_nvidia_package_that_failed() -> None:
    # another package failed after the NVIDIA one finished; the container toolkit is no driver package
    batch = ("==> Making package: nvidia-470xx-utils 470.223.02-1\n==> Finished making: nvidia-470xx-utils 470.223.02-1\n"
             "==> Making package: python-torchvision-cuda 0.16-1\n==> ERROR: A failure occurred in build().\n    Aborting...")
    toolkit = ("==> Making package: nvidia-container-toolkit 1.14.3-1\ndial tcp: i/o timeout\n"
               "==> ERROR: A failure occurred in build().\n    Aborting...")
    for log in (batch, toolkit):
        assert "installer.makepkg_nvidia_package_failed" not in all_rules(log), log[:40]
    dkms = ("==> Making package: nvidia-470xx-dkms 470.223.02-1\nmake: *** [Makefile:80: modules] Error 2\n"
            "==> ERROR: A failure occurred in build().\n    Aborting...")
    assert "installer.makepkg_nvidia_package_failed" in all_rules(dkms)


def test_nvidia_xconfig_in_a_container_or_warning_alone_is_not_the_driver() -> None:
    # NVIDIA/nvidia-xconfig#2: Xorg inside a container; a warning in a run that wrote its file
    for log in ("running xorg inside a container\nERROR: Unable to query GPU information",
                "WARNING: Unable to use the nvidia-cfg library to query NVIDIA hardware.\n"
                "New X configuration file written to '/etc/X11/xorg.conf'"):
        assert "nodriver.xconfig_found_no_gpu" not in all_rules(log), log[:40]


def test_freebsds_other_dependencies_are_not_the_kernel() -> None:
    # linux.ko not loaded (forums.freebsd.org/threads/nvidia-drivers.55216)
    assert "nodriver.freebsd_module_for_other_kernel" not in all_rules(
        "KLD nvidia.ko: depends on linux - not available or version mismatch")


def test_insmods_own_wordings_and_not_nvidiafb() -> None:
    for log in ("insmod: ERROR: could not insert module nvidia.ko: No such device",  # utcs-scea/LAKE#10
                "insmod: error inserting 'nvidia.ko': -1 No such device"):
        assert top_and_rules(log) == ("no_driver_loaded", {"nodriver.module_found_no_device"}), log
    assert top_and_rules("insmod: error inserting 'nvidia.ko': -1 Invalid module format")[1] == {"nodriver.module_missing"}
    assert "nodriver.module_found_no_device" not in all_rules("modprobe: ERROR: could not insert 'nvidiafb': No such device")


# --- set x's read half ---------------------------------------------------------------------------------------------------

def test_macos_dyld_and_cudarc_not_finding_a_cuda_library() -> None:
    # pjreddie/darknet#366 (dyld 2 on macOS), chelsea0x3b/cudarc#246 (Windows, CUDA 12.5's nvrtc64_120_0.dll)
    dyld = ("\u279c  darknet git:(master) \u2717 ./darknet\ndyld: Library not loaded: @rpath/libcudart.9.0.dylib\n"
            "  Referenced from: /Users/turbo/darknet/./darknet\n  Reason: image not found\n[1]    16092 abort      ./darknet")
    cudarc = ("thread 'main' panicked at C:\\Users\\Brandon\\.cargo\\registry\\src\\index.crates.io-6f17d22bba15001f\\"
              "cudarc-0.11.4\\src\\nvrtc\\sys\\mod.rs:51:9:\nUnable to find nvrtc lib under the names [\"nvrtc\", "
              "\"nvrtc64\", \"nvrtc64_12\", \"nvrtc64_125\", \"nvrtc64_125_0\", \"nvrtc64_120_5\", \"nvrtc64_10\"]. Please "
              "open GitHub issue.")
    assert top_and_rules(dyld) == ("missing_shared_lib", {"lib.macos_dylib_not_loaded"})
    assert top_and_rules(cudarc) == ("missing_shared_lib", {"lib.cudarc_library_not_found"})


def test_a_programs_own_capability_check_is_the_architecture() -> None:
    # heterodb/pg-strom#262: PG-Strom needs compute capability 3.5; nothing the tool knows by its words
    log = ("LOG:  CUDA Runtime version: 8.0.0\nLOG:  NVIDIA driver version: 367.57\n"
           "LOG:  GPU0 Quadro K600 (1 SMs, 875MHz), L2 256KB, RAM 980MB (128bits, 891MHz), capability 3.0, NOT SUPPORTED\n"
           "FATAL:  No supported CUDA devices, PG-Strom was disabled")
    assert top_and_rules(log) == ("arch_unsupported", {"layer.arch_unsupported"})


# --- set y's read half ---------------------------------------------------------------------------------------------------

def test_a_cpu_only_torchvision_beside_a_cuda_torch() -> None:
    # ksugar/qupath-extension-sam#6 (Windows: PyPI's torchvision 0.15.2 beside torch 2.0.1+cu118)
    log = ("ERROR:    Exception in ASGI application\nNotImplementedError: Could not run 'torchvision::nms' with arguments "
           "from the 'CUDA' backend. \nRequirement already satisfied: torchvision in c:\\users\\jeanb\\anaconda3\\envs\\"
           "samapi\\lib\\site-packages (0.15.2)\nRequirement already satisfied: torch==2.0.1 in c:\\users\\jeanb\\"
           "anaconda3\\envs\\samapi\\lib\\site-packages (from torchvision) (2.0.1+cu118)")
    assert top_and_rules(log) == ("cpu_only_wheel", {"cpu.torchvision_cpu_build"})
    # another operator missing for CUDA (a custom op not built for it) is not torchvision's CPU build
    assert "cpu.torchvision_cpu_build" not in all_rules(
        "NotImplementedError: Could not run 'aten::_foo' with arguments from the 'CUDA' backend.")


def test_paddles_cpu_package() -> None:
    # PaddlePaddle/PaddleOCR#16093: the CPU package beside a V100 and its driver, inference on the CPU
    log = ("paddleocr==3.1.0\npaddlepaddle==3.1.0\nuse cpu for inference , has someone same problem? how to solve it?\n\n"
           "NVIDIA-SMI 525.60.13   \nDriver Version: 525.60.13    \nCUDA Version: 12.0      \nV100/16GB")
    assert top_and_rules(log) == ("cpu_only_wheel", {"cpu.paddle_cpu_package"})
    # the CPU package's own refusal (paddle/fluid/pybind/place.cc)
    assert "cpu.paddle_cpu_package" in all_rules("Cannot use GPU because you have installed CPU version PaddlePaddle.\n"
                                                  "If you want to use GPU, please try to install GPU version")
    # the package listed beside a working GPU, nothing said about the CPU: no finding; the GPU package listed: no finding
    assert "cpu.paddle_cpu_package" not in all_rules("paddlepaddle==2.6.1\nDriver Version: 535.104.05")
    assert "cpu.paddle_cpu_package" not in all_rules("paddlepaddle==2.6.1\npaddlepaddle-gpu==2.6.1\nuse cpu")


# --- the second review's cases -------------------------------------------------------------------------------------------

def test_paddles_cpu_package_needs_an_nvidia_gpu_in_the_log() -> None:
    for log in ("paddlepaddle 2.6.1\nI use cpu on purpose (laptop has no GPU). OCR works fine",
                "macOS 14.4 (Apple M2)\npaddlepaddle==2.6.1\nRunning on CPU",
                "paddlepaddle 2.6.1\ntorch 2.2.0+cu121\nDevice set to use cpu"):
        assert "cpu.paddle_cpu_package" not in all_rules(log), log[:30]


def test_a_cuda_torchvision_that_does_not_pair_is_no_cpu_build() -> None:
    log = ("torch 2.1.0+cu121\ntorchvision 0.16.0+cu118\nNotImplementedError: Could not run 'torchvision::nms' with "
           "arguments from the 'CUDA' backend.")
    assert "cpu.torchvision_cpu_build" not in all_rules(log)


def test_macos_and_cudarc_libraries_get_their_own_fixes() -> None:
    brew = ("dyld: Library not loaded: /usr/local/opt/libpng/lib/libpng16.16.dylib\n"
            "  Referenced from: /usr/local/bin/convert\n  Reason: image not found")
    finding = diagnose(brew)[0]
    assert finding.rule == "lib.macos_dylib_not_loaded" and "libpng16.16.dylib" in finding.root_cause
    assert "otool" in finding.fix and "nvidia-" not in finding.fix
    # Python's dlopen on macOS quotes dyld after its own prefix
    assert "lib.macos_dylib_not_loaded" in all_rules(
        "OSError: dlopen(/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.dylib, 0x0006): Library not "
        "loaded: @rpath/libomp.dylib")
    cudarc = diagnose('Unable to find nvrtc lib under the names ["nvrtc64_120"]. Please open GitHub issue.')[0]
    assert cudarc.rule == "lib.cudarc_library_not_found" and "upgrade cudarc" in cudarc.fix


def test_a_healthy_capability_line_is_no_architecture_word() -> None:
    for log in ("Device 0: NVIDIA GeForce RTX 3090, capability 8.6 (minimum supported: 3.5)\n"
                "Error: failed to open model file /models/x.gguf: No such file or directory",
                "Error: GPU0 RTX 3090 capability 8.6, free memory 20 GB less than the required 40 GB"):
        guess = layer_guess(log)
        assert guess is None or guess.category != "arch_unsupported", (log[:40], guess)
