"""Issue #35, diagnosis from the emitters' own words (session 20): the NVIDIA kernel module's GSP firmware version check
and its status codes for a GPU that must be reset (read in NVIDIA/open-gpu-kernel-modules), resolvo's conflict report
as pixi/rattler print it (prefix-dev/resolvo) with conda's __cuda virtual package, and PyTorch's loader for the CUDA
libraries of the nvidia-* wheels. Each case is the program's wording (its source cited in
provisioner/diagnose/catalogue.json) as a real report pasted it; the URL is beside each."""

from __future__ import annotations

from provisioner.diagnose import diagnose, engine
from provisioner.diagnose.catalogue import catalogue, code_regex, entry
from provisioner.diagnose.layers import failing_lines
from provisioner.diagnose.rx import required_literals
from tests.support.diagnosis import all_rules, top_and_rules

# Nobara-Project/rpm-sources#526: a DKMS package built from sources one release behind its firmware and userspace
GSP_MISMATCH = (
    "$ modinfo nvidia | grep version\nversion: 595.58.03\n\n"
    "NVRM: GPU0 _kgspFwContainerVerifyVersion: GSP firmware image version mismatch:\n"
    "got version 595.71.05, expected version 595.58.03\n"
    "NVRM: GPU0 kgspInitRm_IMPL: Error preparing GSP-RM image\n"
    "NVRM: GPU0 RmInitAdapter: Cannot initialize GS")


def test_gsp_firmware_of_another_release_is_a_version_mismatch_not_a_missing_driver() -> None:
    found = diagnose(GSP_MISMATCH)
    assert found[0].category == "driver_lib_mismatch" and found[0].rule == "mismatch.gsp_firmware"
    assert any("version mismatch" in e for e in found[0].evidence)


def test_gsp_mismatch_outranks_rm_init_adapter_printed_beside_it() -> None:
    log = GSP_MISMATCH + "IT\n[ 5.2] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0x40:1860)\n"
    found = diagnose(log)
    assert found[0].rule == "mismatch.gsp_firmware"
    assert "no_driver_loaded" in {a.category for a in found[0].also_possible}


# scitix/sichek#51: an NCCL test fails only with GPU1 in it; dmesg says that GPU needs a reset
RESET_REQUIRED = (
    "Test CUDA failure common.cu:1007\n'CUDA-capable device(s) is/are busy or unavailable'\n\n"
    "[Sun Jan 11 09:52:01 2026] NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; hParent=0x5c000054; "
    "hObject=0x5c00005b; hClass=0x0000c86f; paramsSize=0x00000170; paramsStatus=0x00000062; status=0x00000062\n"
    "[Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] "
    "(0x00000062) returned from status @ kernel_channel.c:2874")


def test_a_gpu_that_needs_a_reset_is_hardware_not_a_missing_driver() -> None:
    category, rules = top_and_rules(RESET_REQUIRED)
    assert category == "oom_or_hw" and "hw.gpu_needs_reset" in rules
    # without the status line, the busy/unavailable symptom alone is not read as a GPU needing a reset
    assert "hw.gpu_needs_reset" not in all_rules(RESET_REQUIRED.split("\n\n")[0])


def test_status_codes_are_read_as_nvstatus_prints_them() -> None:
    """nvstatus.c prints each code as `<text> [<name>]`: the catalogue holds that form, harvested per release."""
    e = entry("nvrm.status_reset_required")
    assert e.format == "Reset required [NV_ERR_RESET_REQUIRED]"
    assert len(e.wordings[0].versions) >= 2
    # a status that is not a GPU fault is not read as one
    assert "hw.gpu_needs_reset" not in all_rules(
        "NVRM: nvAssertOkFailedNoLog: Assertion failed: Call timed out [NV_ERR_TIMEOUT] (0x00000065) returned from x")


# prefix-dev/pixi#1288: a jaxlib CUDA build without a declared CUDA system requirement
PIXI = (
    " × failed to solve the conda requirements of 'default' 'linux-64'\n"
    "  ╰─▶ Cannot solve the request because of: jaxlib >=0.4.23,<0.5.0 *cuda12* cannot be installed because there are "
    "no viable options:\n"
    "      └─ jaxlib 0.4.23 | 0.4.23 | 0.4.23 would require\n"
    "         └─ __cuda *, for which no candidates were found.")


def test_resolvo_without_the_cuda_virtual_package_names_the_system_requirement() -> None:
    found = diagnose(PIXI)
    assert found[0].category == "resolver_failure" and found[0].rule == "resolver.cuda_virtual_package_absent"
    assert "system-requirements" in found[0].fix


def test_resolvo_tree_without_cuda_is_a_plain_resolver_failure() -> None:
    other = PIXI.replace("__cuda *", "libfoo >=9").replace("*cuda12* ", "")
    found = diagnose(other)
    assert found[0].category == "resolver_failure" and found[0].rule == "resolver.unsatisfiable"


# pytorch/pytorch#100974: poetry resolved torch 2.0.1 without its nvidia-* dependencies
TORCH_PRELOAD = (
    "Traceback (most recent call last):\n  File \"/app/main.py\", line 3, in <module>\n    import torch\n"
    "  File \"/app/.venv/lib/python3.10/site-packages/torch/__init__.py\", line 168, in _load_global_deps\n"
    "    _preload_cuda_deps(lib_folder, lib_name)\n"
    "ValueError: libnvrtc.so.*[0-9].*[0-9] not found in the system path ['/app', '/usr/lib/python310.zip']")


def test_torch_without_its_nvidia_wheels_is_a_missing_library_with_the_reinstall_fix() -> None:
    found = diagnose(TORCH_PRELOAD)
    assert found[0].category == "missing_shared_lib" and found[0].rule == "lib.torch_cuda_wheels_missing"
    assert "nvidia-" in found[0].fix


# --- CUDA errors printed by their number (the catalogue's `code`) ----------------------------------------------------

# ollama/ollama#1865: ggml's CUDA_CHECK of the time printed the runtime's number, on a compute capability 5.0 GPU
OLLAMA_209 = ("ggml_init_cublas: found 1 CUDA devices:\n  Device 0: Quadro M1000M, compute capability 5.0\n"
              "llm_load_tensors: offloaded 23/23 layers to GPU\nCUDA error 209 at /go/src/github.com/jmorganca/ollama/"
              "llm/llama.cpp/ggml-cuda.cu:7801: no kernel image is available")


def test_a_cuda_error_printed_by_its_number_is_read_as_its_name() -> None:
    category, rules = top_and_rules(OLLAMA_209.rsplit(":", 1)[0])  # the number alone, its text cut off
    assert category == "arch_unsupported" and "arch.no_kernel_image" in rules
    assert top_and_rules("cudaGetDeviceCount failed: 35")[1] & {"driver.insufficient_for_runtime"}
    assert top_and_rules("CUDA error: 804")[0] == "driver_too_old"


def test_numbers_that_are_not_cuda_error_codes_are_not_read() -> None:
    for text in ("CUDA error 2.5 is the version we need", "CUDA error 2024-01-09 in the changelog",
                 "CUDA version 12.4, 209 tests passed", "error 209 in module foo"):
        assert "arch.no_kernel_image" not in all_rules(text), text
        assert "driver.insufficient_for_runtime" not in all_rules(text), text


def test_every_cuda_and_nvml_entry_carries_its_code() -> None:
    codes = {e.id: e.code for e in catalogue().values() if e.id.startswith(("cuda.", "nvml."))}
    assert codes["cuda.no_kernel_image"] == 209 and codes["cuda.insufficient_driver"] == 35
    assert codes["nvml.lib_rm_version_mismatch"] == 18 and codes["nvml.driver_not_loaded"] == 9
    assert all(code is not None for code in codes.values()), codes


def test_code_matchers_carry_a_prefilter_literal() -> None:
    """A long log is read through the literals every pattern needs: a code's forms must not run over it bare."""
    for e in catalogue().values():
        if e.code is not None:
            assert required_literals(engine.to_regex(code_regex(e.id.split(".")[0], e.code))), e.id


def test_nvml_return_codes_printed_by_number() -> None:
    """nvmlReturn_t by number, as ollama's discovery and other C callers print it: its own numbering, not CUDA's."""
    assert top_and_rules("nvmlInit_v2 err: 18")[0] == "driver_lib_mismatch"
    assert top_and_rules("NVML error 9")[0] == "no_driver_loaded"
    assert top_and_rules("nvmlDeviceGetHandleByIndex returned 15")[0] == "oom_or_hw"
    assert top_and_rules("CUDA error 9")[0] != "no_driver_loaded"  # CUDA's 9 is an invalid configuration
    # ollama's discovery's own error (gpu/gpu_info_nvml.c: "nvml vram init failure: %d"; later "…: nvml error %d")
    assert top_and_rules('msg="unable to load nvml" error="nvml vram init failure: 9"')[0] == "no_driver_loaded"
    assert top_and_rules("nvml vram init failure: nvml error 18")[0] == "driver_lib_mismatch"
    assert not top_and_rules("nvml vram init failure: 18.5")[1]  # not a version's first part


# --- NVRTC, modpost, JetPack 4 containers, a reporter's words for the loader -----------------------------------------

# openmm/openmm#3756: CUDA 11.4's NVRTC and a Kepler Quadro K2000; dizcza/docker-hashcat#20: an RTX 5080 and an image's
# older NVRTC
def test_nvrtc_rejecting_the_architecture_is_the_toolchain_not_knowing_the_gpu() -> None:
    for log in ("CUDA platform error: Error compiling program: nvrtc: error: invalid value for --gpu-architecture "
                "(-arch)",
                "nvrtcCompileProgram(): NVRTC_ERROR_INVALID_OPTION\n\nnvrtc: error: invalid value for "
                "--gpu-architecture (-arch)\n\n* Device #1: Kernel /usr/local/share/hashcat/OpenCL/shared.cl build "
                "failed."):
        category, rules = top_and_rules(log)
        assert category == "arch_unsupported" and "arch.toolchain_unknown_arch" in rules, log


# NVIDIA/gpu-operator#729: the driver container builds 535.54.03 on a newer AKS kernel
MODPOST = ("nvidia-driver-daemonset pod debug log\nDRIVER_ARCH is x86_64\nCreating directory NVIDIA-Linux-x86_64-535.54.03\n"
           "...\nERROR: modpost: GPL-incompatible module nvidia.ko uses GPL-only symbol 'rcu_read_unlock_strict'\n"
           "Container Runtime: Containerd\nK8s: AKS")


def test_a_gpl_only_symbol_is_a_driver_older_than_the_kernel_even_in_a_kubernetes_log() -> None:
    category, rules = top_and_rules(MODPOST)
    assert category == "installer_failure" and "installer.driver_older_than_kernel" in rules
    # another non-GPL module (ZFS) that meets the same check is not the NVIDIA driver's
    zfs = "FATAL: modpost: GPL-incompatible module zfs.ko uses GPL-only symbol '__rcu_read_lock'"
    assert "installer.driver_older_than_kernel" not in all_rules(zfs)


# dusty-nv/jetson-containers#93: an l4t-r32 image started without the NVIDIA runtime
JETSON = ("Status: Downloaded newer image for dustynv/ros:noetic-pytorch-l4t-r32.5.0\nroot@e22d0ae5ddbc:/# python\n"
          ">>> import torch\nTraceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\n"
          "OSError: libcurand.so.10: cannot open shared object file: No such file or directory")


def test_a_jetpack4_container_without_cuda_is_the_runtime_not_mounting_the_hosts() -> None:
    category, rules = top_and_rules(JETSON)
    assert category == "container_device_missing" and "container.l4t_runtime_mounts_missing" in rules
    # the same library missing on a JetPack 4 host (no container) is a missing library
    host = JETSON.replace("Status: Downloaded newer image for dustynv/ros:noetic-pytorch-", "Jetson Nano, ").replace(
        "root@e22d0ae5ddbc:/# ", "$ ")
    assert top_and_rules(host)[0] == "missing_shared_lib"


def test_a_reporters_words_for_a_library_that_does_not_load() -> None:
    # openmm/openmm#2760
    log = ("It complains of 'libcuda.so.1' and 'libnvrtc.so.10.1' can not be loaded. CUDA version reported by "
           "`nvidia-smi` is **10.2**  while the `nvcc` is **10.1**. Could it be the version mismatch causes the problem?")
    assert top_and_rules(log)[0] == "missing_shared_lib"


# --- the layer the whole log points at, where its failing lines name none ---------------------------------------------

# cupy/cupy#9430: the failing line is the reporter's "cannot get it on another (2xGH200)"; the traceback names NCCL
CUPY_GH200 = (
    "I am struggling to get distributed Cupy to work on a system. I have it working on one (its a 2xa6000 system) but "
    "cannot get it on another (2xGH200). Im not sure if its an architecture difference but I get the error:\n\n"
    "```bash\nTraceback (most recent call last):\n"
    "  File \"/u/p/MyTorch/tests/all_reduce_test_wo_launch.py\", line 8, in main\n"
    "    comm = NCCLBackend(n_devices=world_size, rank=rank, host=\"127.0.0.1\", port=13333)\n"
    "  File \"/u/p/.conda/envs/sidetorch/lib/python3.12/site-packages/cupyx/distributed/_nccl_comm.py\", line 105, in "
    "_init_with_tcp_store\n    shifted_nccl_id = bytes([b + 128 for b in nccl_id])\n```")


def test_a_failure_whose_lines_name_no_layer_is_read_by_the_whole_logs_words() -> None:
    found = diagnose(CUPY_GH200)
    assert found and found[0].category == "nccl_failure" and found[0].rule == "layer.nccl_failure"
    assert found[0].confidence < 0.3  # below a guess from the failing lines themselves
    assert "reports a failure" in found[0].root_cause
    assert "cannot get it on another" in found[0].evidence[0]  # the line that says it failed comes first


def test_the_whole_log_is_read_only_where_a_line_reports_a_failure_that_is_not_a_warning() -> None:
    no_failure = CUPY_GH200.replace("but cannot get it on another", "and now on another")
    assert not [f for f in diagnose(no_failure) if f.rule.startswith("layer.")]
    warning = ("WARNING: Unable to determine the path to install the libglvnd EGL vendor library config files.\n"
               "NCCL version 2.21.5+cuda12.4\nnccl all_reduce 8 ranks")
    assert not diagnose(warning)


def test_inxi_listing_an_x_driver_that_did_not_load_is_not_a_failure() -> None:
    """inxi -G names the X drivers that failed to load; the compute side of a healthy host prints it too."""
    inxi = ("Graphics:  Device-1: NVIDIA GP104 [GeForce GTX 1080] driver: nvidia v: 430.26\n"
            "           Display: server: X.Org 1.20.4 driver: nouveau,vesa FAILED: nvidia unloaded: fbdev,modesetting\n"
            "           OpenGL: renderer: llvmpipe (LLVM 8.0 256 bits) v: 3.3 Mesa 19.0.2")
    assert not diagnose(inxi)


def test_this_tools_own_run_output_is_no_failure() -> None:
    """`provisioner demo`/`replay` print each step's status and what it found; the recap's column is titled
    "failed". A support engineer diagnosing a good run's output gets no finding."""
    out = (" 5. Make the GPUs and the container survive a host reboot: changed (0.7s)  boot unit "
           "gpu-provisioner-nvidia-nodes.service is not installed: after a reboot the passed device nodes are missing "
           "before…\n 6. Start the container: changed (0.7s)  start CT 200 (now stopped)\n"
           " 4. Pass the GPUs through to the container: will change  add devN entries for /dev/nvidia0\nRecap\n"
           "┃ host            ┃ ok ┃ changed ┃ failed ┃ skipped ┃\n│ 127.0.0.1:42179 │  4 │       7 │      0 │       0 │")
    assert not diagnose(out)
    failed = out.replace("survive a host reboot: changed (0.7s)", "survive a host reboot: failed (0.7s)")
    assert [line for _, line in failing_lines(failed.splitlines())] == [failed.splitlines()[0]]  # a failed step is one


# --- a container image's CUDA against the host driver's ----------------------------------------------------------------

IMAGE_NEWER = ("$ docker run --rm --gpus all nvidia/cuda:12.8.0-base-ubuntu22.04 python train.py\n"
               "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |\n"
               "RuntimeError: CUDA error: unknown error")


def test_an_image_newer_than_the_hosts_driver_is_a_driver_too_old() -> None:
    found = diagnose(IMAGE_NEWER)
    assert found[0].category == "driver_too_old" and found[0].rule == "evidence.image_cuda_newer_than_driver"
    assert "R570" in found[0].fix  # CUDA 12.8's first branch
    assert [e.line for e in found[0].evidence_lines] == [1, 2]  # the image's line and nvidia-smi's


def test_an_image_within_the_drivers_cuda_or_a_run_that_did_not_fail_is_no_finding() -> None:
    assert "evidence.image_cuda_newer_than_driver" not in all_rules(IMAGE_NEWER.replace("12.8.0-base", "12.2.0-base"))
    # within one major (CUDA's minor-version compatibility) the versions alone are no failure
    assert not diagnose(IMAGE_NEWER.replace("python train.py", "nvidia-smi").rsplit("\n", 1)[0])
    # across majors (an image's CUDA 12 on a CUDA 11 driver), beside the GPU's failure
    other = ("$ docker run --gpus all pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime python -c 'import torch'\n"
             "| NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |\n"
             "RuntimeError: CUDA error: unknown error")
    assert diagnose(other)[0].rule == "evidence.image_cuda_newer_than_driver"
    # ...and not beside a failure that is not the GPU's, nor where nothing failed
    assert "evidence.image_cuda_newer_than_driver" not in all_rules(other.replace("RuntimeError: CUDA error: unknown "
                                                                                 "error", CURL_404))
    assert not diagnose(other.rsplit("\n", 1)[0])


def test_the_pytorch_channels_cpu_build_string_with_a_dotted_python() -> None:
    """The pytorch channel names its builds `py3.10_cpu_0` / `py3.10_cuda11.8_cudnn8.7.0_0` (conda list's Build
    column); conda-forge's `cpu_py310h…` is read by cpu.conda_cpu_build."""
    listing = "pytorch                   2.0.1           py3.10_cpu_0    pytorch\n>>> torch.cuda.is_available()\nFalse"
    assert top_and_rules(listing)[0] == "cpu_only_wheel"
    cuda = listing.replace("py3.10_cpu_0", "py3.10_cuda11.8_cudnn8.7.0_0")
    assert "cpu.build_reports_no_cuda" not in all_rules(cuda)


# --- what the review of this work found (each a false finding it showed) -------------------------------------------

SMI_TABLE = ("+-----------------------------------------------------------------------------------------+\n"
             "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |\n"
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
             "|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:07:00.0 Off |                    0 |\n"
             "+-----------------------------------------------------------------------------------------+")
CURL_404 = "curl: (22) The requested URL returned error: 404"


def test_a_healthy_table_beside_an_unrelated_failure_is_no_finding() -> None:
    assert not diagnose(SMI_TABLE + "\n" + CURL_404)
    # a cause that needs a failure beside it is not shown by an unrelated one
    assert not diagnose(SMI_TABLE + "\nSuccessfully installed torch-2.7.0+cu128\n" + CURL_404)


def test_failing_lines_that_name_two_layers_alike_are_decided_among_those_two_by_the_rest_of_the_log() -> None:
    tie = "step A failed: nccl communicator\nstep B failed: libfoo.so\nNCCL version 2.21.5\nnccl all_reduce ranks 8"
    found = diagnose(tie)
    assert found[0].rule == "layer.nccl_failure" and found[0].confidence < 0.3
    assert found[0].evidence[0] == "step A failed: nccl communicator"  # the failing line of that layer leads
    # the rest of the log cannot bring in a layer no failing line named: here only ECC words besides the two
    ecc = tie.replace("NCCL version 2.21.5\nnccl all_reduce ranks 8", "ECC mode enabled\nECC memory scrub done")
    assert not [f for f in diagnose(ecc) if f.category == "oom_or_hw"]


def test_inxi_3_listing_of_x_drivers_is_not_a_failure() -> None:
    inxi3 = ("Graphics:\n  Device-1: NVIDIA GA102 [GeForce RTX 3090] driver: nvidia v: 550.54.14\n"
             "  Display: x11 server: X.Org v: 21.1.4 driver: X: loaded: modesetting,nouveau\n"
             "    unloaded: fbdev,vesa failed: nvidia dri: swrast gpu: nvidia\n" + SMI_TABLE)
    assert not diagnose(inxi3)
    assert not failing_lines(["  Display: x11 server: X.Org driver: X: loaded: modesetting unloaded: fbdev,vesa "
                              "failed: nvidia"])


def test_a_light_barred_status_cell_still_reports_a_failure() -> None:
    assert failing_lines(["| modprobe nvidia | failed |"])
    assert not failing_lines(["┃ host ┃ ok ┃ changed ┃ failed ┃ errors ┃ skipped ┃"])


def test_the_review_s_narrower_rules() -> None:
    # a program that is not a library, "not found in the system path", is not torch's loader
    assert "lib.torch_cuda_wheels_missing" not in all_rules("RuntimeError: ffmpeg not found in the system path ['/app']")
    # __cuda offered (pixi info) while another requirement has no candidates
    other = ("Virtual packages: __unix=0=0, __linux=6.5=0, __cuda=12.2=0\n"
             "  ╰─▶ Cannot solve the request because of: foo cannot be installed because there are no viable options:\n"
             "      └─ foo 1 would require\n         └─ barlib >=2, for which no candidates were found.")
    assert "resolver.cuda_virtual_package_absent" not in all_rules(other)
    # a CUDA_VERSION outside any container is no image's
    assert "evidence.image_cuda_newer_than_driver" not in all_rules("CUDA_VERSION=12.1\n" + SMI_TABLE + "\nError: boom")
    # a negative return is not the code of its digits
    assert "nodriver.no_driver_found" not in all_rules("nvmlDeviceGetCount returned -9")


def test_a_code_at_the_end_of_a_sentence_is_the_code() -> None:
    """(Session 23's review.) A full stop after the code ends the sentence; a digit after it makes a version."""
    assert top_and_rules("Failed to initialize NVML: nvmlInit_v2 failed with error 18.")[0] == "driver_lib_mismatch"
    assert top_and_rules("CUDA error 209.")[0] == "arch_unsupported"
    assert not top_and_rules("CUDA error 209.1")[1]


def test_a_value_printed_onto_a_messages_last_word() -> None:
    """(Session 23's second review.) A catalogue message's last word ends at a word boundary, unless the program prints
    a value onto it: nvcc's "compute_%d", uv's "platform%s" ("platforms: …")."""
    assert top_and_rules('nvcc fatal   : Unsupported gpu architecture "compute_120"')[0] == "arch_unsupported"
    assert top_and_rules("hint: You're on Linux (`manylinux_2_39_aarch64`), but `foo` (v1) only has wheels for the "
                         "following platforms: `win_amd64`, `macosx_11_0_arm64`")[0] == "resolver_failure"
