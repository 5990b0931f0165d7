"""Issue #35, diagnosis from the emitters' own words (session 25): MSBuild's missing CUDA build customization, dnf's
metadata download failure for an NVIDIA/CUDA repository, apt's parse errors for NVIDIA's .list. Each case is a real
report's paste; the URL is beside it."""

from __future__ import annotations

import textwrap

from provisioner.diagnose import diagnose
from tests.support.diagnosis import all_rules, top_and_rules

# --- MSBuild (MSB4019) ---------------------------------------------------------------------------------------------

# brichard19/BitCrack#234: the Visual Studio error list (tab-separated) for a project that imports CUDA 10.1's
# customization, CUDA 10.2 installed
BITCRACK = ("Severity\tCode\tDescription\tProject\tFile\tLine\tSuppression State\n"
            "Error\tMSB4019\tThe imported project \"C:\\Program Files (x86)\\Microsoft Visual Studio\\2019\\Community\\"
            "MSBuild\\Microsoft\\VC\\v160\\BuildCustomizations\\CUDA 10.1.props\" was not found. \n"
            "Confirm that the expression in the Import declaration \"C:\\Program Files (x86)\\Microsoft Visual Studio"
            "\\2019\\Community\\MSBuild\\Microsoft\\VC\\v160\\\\BuildCustomizations\\CUDA 10.1.props\" is correct, and "
            "that the file exists on disk.\tcuKeyFinder\tC:\\BitCrack-master\\CudaKeySearchDevice\\"
            "CudaKeySearchDevice.vcxproj\t59\t")
# dlunion/tensorRTIntegrate#15: a Chinese Visual Studio 2017
TENSORRT_ZH = ("\u9519\u8bef\tMSB4019\t\u672a\u627e\u5230\u5bfc\u5165\u7684\u9879\u76ee\u201cC:\\Program Files (x86)\\"
               "Microsoft Visual Studio\\2017\\Community\\Common7\\IDE\\VC\\VCTargets\\BuildCustomizations\\CUDA "
               "10.0.props\u201d\u3002\u8bf7\u786e\u8ba4 <Import> \u58f0\u660e\u4e2d\u7684\u8def\u5f84\u6b63\u786e"
               "\uff0c\u4e14\u78c1\u76d8\u4e0a\u5b58\u5728\u8be5\u6587\u4ef6\u3002\tTensorRT\tD:\\github_prj\\"
               "tensorRTIntegrate-master\\TensorRT.vcxproj\t128\t")


def test_a_cuda_build_customization_visual_studio_lacks_is_the_toolkits_integration() -> None:
    for log in (BITCRACK, TENSORRT_ZH):
        category, rules = top_and_rules(log)
        assert category == "installer_failure" and "installer.cuda_vs_props_missing" in rules, (log[:60], rules)
    assert "BuildCustomizations" in diagnose(BITCRACK)[0].fix
    # NVIDIA/cuda-samples#119: MSBuild's own one-line form ("… .vcxproj : error  : The imported project …")
    samples = ("C:\\cuda-samples\\Samples\\0_Introduction\\simpleTemplates\\simpleTemplates_vs2022.vcxproj : error  : "
               "The imported project \"C:\\Program Files\\Microsoft Visual Studio\\2022\\Community\\MSBuild\\Microsoft\\"
               "VC\\v170\\BuildCustomizations\\CUDA 11.6.props\" was not found. Confirm that the expression in the "
               "Import declaration \"C:\\Program Files\\Microsoft Visual Studio\\2022\\Community\\MSBuild\\Microsoft\\VC"
               "\\v170\\\\BuildCustomizations\\CUDA 11.6.props\" is correct, and that the file exists on disk.")
    assert top_and_rules(samples)[0] == "installer_failure"


def test_another_missing_import_is_not_cudas() -> None:
    # the same MSBuild error for a Visual C++ file (a missing workload), in a project that also builds CUDA code
    log = ("error MSB4019: The imported project \"C:\\Microsoft.Cpp.Default.props\" was not found. Confirm that the "
           "path in the <Import> declaration is correct, and that the file exists on disk.\n"
           "nvcc --version: Cuda compilation tools, release 12.4, V12.4.131")
    assert "installer.cuda_vs_props_missing" not in all_rules(log)


# --- dnf / yum -------------------------------------------------------------------------------------------------------

# NVIDIA/libnvidia-container#203: a typo in the .repo file (RHEL 9)
DNF_TOOLKIT = ("libnvidia-container                                  1.6 kB/s |  81  B     00:00\n"
               "Errors during downloading metadata for repository 'libnvidia-container':\n"
               "  - Status code: 404 for https://nvidia.github.io/libnvidia-container/stable/rhel9.0/x86_64/repodata/"
               "repomd.xml (IP: 185.199.109.153)\n"
               "Error: Failed to download metadata for repo 'libnvidia-container': Cannot download repomd.xml: Cannot "
               "download repodata/repomd.xml: All mirrors were tried")
# negativo17/cuda#27: Fedora 33 after its end of life (the repository no longer publishes it)
DNF_NEGATIVO = ("Errors during downloading metadata for repository 'fedora-nvidia':\n"
                "  - Status code: 404 for https://negativo17.org/repos/nvidia/fedora-33/x86_64/repodata/repomd.xml "
                "(IP: 217.79.184.49)\n"
                "Error: Failed to download metadata for repo 'fedora-nvidia': Cannot download repomd.xml: Cannot "
                "download repodata/repomd.xml: All mirrors were tried\n"
                "Ignoring repositories: fedora-nvidia\n"
                "Dependencies resolved.\nNothing to do.\nComplete!")


def test_dnf_that_cannot_read_an_nvidia_repository_is_the_install() -> None:
    for log in (DNF_TOOLKIT, DNF_NEGATIVO):
        category, rules = top_and_rules(log)
        assert category == "installer_failure" and "installer.nvidia_rpm_repository_metadata_failed" in rules, rules
    # NVIDIA/libnvidia-container#189: a hand-made repository id named for NVIDIA's host
    host = ("Errors during downloading metadata for repository 'developer.download.nvidia.com_':\n"
            "  - Status code: 404 for https://developer.download.nvidia.com/repodata/repomd.xml (IP: 152.195.19.142)")
    assert top_and_rules(host)[0] == "installer_failure"


def test_another_repository_failing_beside_a_cuda_install_is_not_nvidias() -> None:
    # facebookincubator/velox#10016: CentOS Stream 8's own repositories were switched off while installing CUDA
    log = ("+ yum install -y cuda-nvcc-11-8 cuda-cudart-devel-11-8\n"
           "CentOS Stream 8 - AppStream                     429  B/s |  38  B     00:00\n"
           "Error: Failed to download metadata for repo 'appstream': Cannot prepare internal mirrorlist: No URLs in "
           "mirrorlist")
    assert "installer.nvidia_rpm_repository_metadata_failed" not in all_rules(log)


# --- apt's source list -----------------------------------------------------------------------------------------------


def test_a_malformed_nvidia_list_is_the_install() -> None:
    # NVIDIA/nvidia-docker#800
    log = ("E: Malformed entry 2 in list file /etc/apt/sources.list.d/nvidia-docker.list (Suite)\n"
           "E: The list of sources could not be read.")
    category, rules = top_and_rules(log)
    assert category == "installer_failure" and "installer.apt_malformed_nvidia_source" in rules, rules
    # an HTML page saved as the .list (the form apt gives it: "Type … is not known")
    html = ("E: Type '<!DOCTYPE' is not known on line 1 in source list /etc/apt/sources.list.d/nvidia-docker.list\n"
            "E: The list of sources could not be read.")
    assert "installer.apt_malformed_nvidia_source" in all_rules(html)
    # pjreddie/darknet#1331: the same error for docker's own list is not NVIDIA's repository
    docker = ("E: Type 'deb https://apt.dockerproject.org/repo ubuntu-xenial' is not known on line 1 in source list "
              "/etc/apt/sources.list.d/docker.list\nE: The list of sources could not be read.")
    assert "installer.apt_malformed_nvidia_source" not in all_rules(docker)


# --- a log re-pasted through a wrapper or a terminal keeps its diagnosis (bench/diagnose_repaste.py) ---------------

# facebookresearch/xformers#891: a V100 (7.0) for FlashAttention; no rule knows xformers' words, the layer guess reads
# "compute capability" in the failing lines
XFORMERS = ("ValueError: Operator `memory_efficient_attention` does not support inputs:\n"
            "     query       : shape=(1, 4101, 32, 128) (torch.float16)\n"
            "     p           : 0.0\n"
            "`flshattF` is not supported because:\n"
            "    requires a GPU with compute capability > 7.5")


def test_a_wrappers_prefix_is_no_layers_word() -> None:
    as_pasted = top_and_rules(XFORMERS)
    assert as_pasted[0] == "arch_unsupported" and as_pasted[1] == {"layer.arch_unsupported"}, as_pasted
    # torchrun's "[rank3]:" names no NCCL rank fault; Python logging's "- ERROR -" makes no line a failing one
    for prefix in ("[rank3]: ", "[default0]:", "2024-05-01 12:00:00,123 - worker - ERROR - "):
        log = "\n".join(prefix + line for line in XFORMERS.splitlines())
        assert top_and_rules(log) == as_pasted, (prefix, top_and_rules(log))


def test_a_requirement_a_terminal_wrapped_is_still_met() -> None:
    # NVIDIA/ansible-role-nvidia-driver#42 (set s), wrapped at 80 columns the way a terminal or `fold` cuts a long
    # word: NVIDIA's host name itself is cut in two (the unwrapped view joins it; the rule's requirement is read there)
    line = ("msg: 'Failed to update apt cache: E:Failed to fetch https://developer.download.nvidia.com/compute/cuda/repos/"
            "ubuntu2004/x86_64/by-hash/SHA256/751939d95516afc289908a19e447f0acc1506367f72ed356431a2b1a469cc8ca  404  "
            "Not Found [IP: 152.199.39.144 80]'")
    wrapped = "\n".join(textwrap.wrap(line, 80, break_on_hyphens=False, drop_whitespace=False))
    assert "developer.download.nvidia.com" not in wrapped
    for log in (line, wrapped):
        category, rules = top_and_rules(log)
        assert category == "installer_failure" and "installer.nvidia_repository_fetch_failed" in rules, (log, rules)


# --- set t's read half --------------------------------------------------------------------------------------------

# void-linux/void-packages#51704: after the 550.107.02 upgrade libnvidia-nvvm.so.4 still pointed at 525.105.17
VOID_STALE = ("/usr/lib/libnvidia-nvvm.so.4` -> libnvidia-nvvm.so.525.105.17\n"
              "/home/ati # docker run --rm --runtime=nvidia --gpus all ubuntu nvidia-smi\n"
              "docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
              "runtime create failed: runc create failed: unable to start container process: error during container "
              "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as "
              "'legacy'\n"
              "nvidia-container-cli: detection error: open failed: /usr/lib/libnvidia-nvvm.so.525.105.17")


def test_a_library_of_another_driver_version_left_behind_is_the_mismatch() -> None:
    category, rules = top_and_rules(VOID_STALE)
    assert category == "driver_lib_mismatch" and "mismatch.stale_driver_library" in rules, rules
    # NVIDIA/nvidia-docker#1610 (one line, through docker's error)
    tls = ("docker: Error response from daemon: OCI runtime create failed: container_linux.go:380: starting container "
           "process caused: process_linux.go:545: container init caused: Running hook #0:: error running hook: exit "
           "status 1, stdout: , stderr: nvidia-container-cli: detection error: open failed: /usr/lib/x86_64-linux-gnu/"
           "libnvidia-tls.so.470.86: no such file or directory: unknown.")
    assert top_and_rules(tls)[0] == "driver_lib_mismatch"
    # a device node or a library without a driver version in its name is not another version's
    for other in ("nvidia-container-cli: detection error: open failed: /dev/nvidia-uvm: no such file or directory",
                  "nvidia-container-cli: detection error: open failed: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: "
                  "permission denied"):
        assert "mismatch.stale_driver_library" not in all_rules(other), other


# conda-forge/tensorflow-feedstock#365: packages labelled cuda120 built without CUDA
TF_CPU = (">>> import tensorflow as tf\n"
          "2023-12-29 16:17:51.727737: I tensorflow/core/platform/cpu_feature_guard.cc:182] This TensorFlow binary is "
          "optimized to use available CPU instructions in performance-critical operations.\n"
          ">>> tf.test.is_built_with_cuda()\n"
          "False\n\n"
          "tensorflow                2.15.0          cuda120py311h5cbd639_1    conda-forge")


def test_tensorflow_saying_it_was_built_without_cuda_is_a_cpu_build() -> None:
    category, rules = top_and_rules(TF_CPU)
    assert category == "cpu_only_wheel" and "cpu.tensorflow_built_without_cuda" in rules, rules
    info = "OrderedDict([('cpu_compiler', '/usr/bin/gcc'), ('is_cuda_build', False), ('is_rocm_build', False)])"
    assert top_and_rules(info)[0] == "cpu_only_wheel"
    # the same question answered True (a CUDA build that cannot see the GPU) is not a CPU build
    cuda = ">>> tf.test.is_built_with_cuda()\nTrue\n>>> tf.config.list_physical_devices('GPU')\n[]"
    assert "cpu.tensorflow_built_without_cuda" not in all_rules(cuda)


# --- CUDA's error codes the catalogue did not hold ----------------------------------------------------------------


def test_an_api_the_installed_driver_lacks_is_a_driver_too_old() -> None:
    # lllyasviel/Fooocus#95 (cudaMallocAsync on an older driver; settled by a newer CUDA driver or no cuda_malloc)
    fooocus = ("    return t.to(device, dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)\n"
               "RuntimeError: CUDA error: API call is not supported in the installed CUDA driver\n"
               "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n\ntorch2.0.1+cu117")
    category, rules = top_and_rules(fooocus)
    assert category == "driver_too_old" and "driver.insufficient_for_runtime" in rules, rules
    # NVIDIA/FasterTransformer#406: a GRID T4 guest on R450 (CUDA 11.0) running a newer build
    ft = ("[FT][ERROR] CUDA runtime error: API call is not supported in the installed CUDA driver\n"
          "| NVIDIA-SMI 450.102.04   Driver Version: 450.102.04   CUDA Version: 11.0     |")
    assert top_and_rules(ft)[0] == "driver_too_old"
    # the number as torch's CUDA initialisation warning prints it
    assert top_and_rules("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Error 36: "
                         "API call is not supported in the installed CUDA driver")[0] == "driver_too_old"


def test_an_uncorrectable_nvlink_error_is_the_hardware() -> None:
    # MIC-DKFZ/nnUNet#1519
    log = "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution"
    category, rules = top_and_rules(log)
    assert category == "oom_or_hw" and "hw.nvlink_uncorrectable" in rules, rules
    # the NCCL error it surfaces as in a distributed job is the link's, not NCCL's configuration (composed from the
    # programs' formats: c10d's "NCCL error in: …, unhandled cuda error", NCCL's CUDACHECK "Cuda failure '%s'")
    nccl = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
            "ncclUnhandledCudaError: Call to CUDA function failed.\n"
            "Last error:\nCuda failure 'uncorrectable NVLink error detected during the execution'")
    assert top_and_rules(nccl)[0] == "oom_or_hw", diagnose(nccl)[0]


# --- the review's cases --------------------------------------------------------------------------------------------


def test_a_loggers_level_stays_the_programs_word() -> None:
    # Python logging's "%(asctime)s - %(name)s - %(levelname)s -": an INFO line is information (a healthy run gives
    # no finding), an ERROR line reports a failure (its layer words are read)
    healthy = ("2024-06-01 10:00:00,123 - deepspeed - INFO - ds_accelerator: cpu_adam op not compiled with cuda, "
               "skipping its fused kernel\n"
               "2024-06-01 10:00:00,200 - deepspeed - INFO - Training started on 8 GPUs\n"
               "2024-06-01 11:40:00,200 - deepspeed - INFO - Training finished")
    assert diagnose(healthy) == []
    failed = ("2024-06-01 10:00:00,123 - vllm.worker - INFO - Initializing the model worker on GPU 0\n"
              "2024-06-01 10:00:02,456 - vllm.worker - ERROR - The installed NVIDIA driver 470.82.01 is older than "
              "what CUDA 12.1 requires")
    assert top_and_rules(failed)[0] == "driver_too_old"


def test_a_long_logs_wrapped_requirement_is_met_too() -> None:
    # NVIDIA/nvidia-docker#1610's error as an 80-column terminal wrapped it, behind a long log (the prefilter's path)
    wrapped = ("docker: Error response from daemon: OCI runtime create failed: container_linux.g\n"
               "o:380: starting container process caused: process_linux.go:545: container init c\n"
               "aused: Running hook #0:: error running hook: exit status 1, stdout: , stderr: nv\n"
               "idia-container-cli: detection error: open failed: /usr/lib/x86_64-linux-gnu/libn\n"
               "vidia-tls.so.470.86: no such file or directory: unknown.")
    filler = "".join(f"#{i} [{i % 7}/9] RUN pip install -r requirements-{i % 13}.txt{' ' * (i % 5)} done\n"
                     for i in range(6000))
    assert len(filler) > 256 * 1024
    for log in (wrapped, filler + wrapped):
        assert top_and_rules(log)[0] == "driver_lib_mismatch", len(log)
    # a versioned library the runtime may not open (not a leftover) is not this
    perm = "nvidia-container-cli: detection error: open failed: /usr/lib64/libnvidia-ml.so.535.104.05: permission denied"
    assert "mismatch.stale_driver_library" not in all_rules(perm)


def test_only_a_missing_cuda_import_is_the_toolkits_integration() -> None:
    # two projects: Qt's import is the one missing; CUDA 12.1's .targets runs (its integration is there)
    log = ("2>C:\\src\\app\\gui\\gui.vcxproj(40,3): error MSB4019: The imported project \"C:\\Users\\me\\AppData\\Local\\"
           "QtMsBuild\\qt_defaults.props\" was not found. Confirm that the expression in the Import declaration "
           "\"$(QtMsBuild)\\qt_defaults.props\" is correct, and that the file exists on disk.\n"
           "1>C:\\Program Files\\Microsoft Visual Studio\\2022\\Community\\MSBuild\\Microsoft\\VC\\v170\\"
           "BuildCustomizations\\CUDA 12.1.targets(799,9): error MSB3721: The command \"nvcc.exe -x cu kernel.cu\" "
           "exited with code 1.")
    assert "installer.cuda_vs_props_missing" not in all_rules(log)


def test_dnf_names_the_repository_that_failed() -> None:
    # NVIDIA/nvidia-docker#1403: repomd.xml's signature (the fix speaks of the key too)
    gpg = ("$ sudo dnf install -y nvidia-docker2\n"
           "Error: Failed to download metadata for repo 'nvidia-docker': repomd.xml GPG signature verification error: "
           "Bad GPG signature")
    found = diagnose(gpg)[0]
    assert found.rule == "installer.nvidia_rpm_repository_metadata_failed" and "gpg-pubkey" in found.fix
    # NVIDIA's repository added, another repository failing (velox#10016's with the CUDA repository beside it)
    other = ("+ dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/"
             "cuda-rhel8.repo\n"
             "Errors during downloading metadata for repository 'appstream':\n"
             "Error: Failed to download metadata for repo 'appstream': Cannot prepare internal mirrorlist: No URLs in "
             "mirrorlist")
    assert "installer.nvidia_rpm_repository_metadata_failed" not in all_rules(other)


def test_tensorflows_answer_in_the_forms_people_print_it() -> None:
    # tensorflow/tensorflow#121157 (aarch64: PyPI's wheel is a CPU build) and #68236
    one_liner = ("(tf.env) [vikren@n502 ~]$ python -c \"import tensorflow as tf; print(tf.test.is_built_with_cuda())\"\n"
                 "False")
    labelled = "Is GPU available? []\nIs TensorFlow built with CUDA?: False"
    for log in (one_liner, labelled, "In [2]: tf.test.is_built_with_cuda()\nOut[2]: False"):
        assert top_and_rules(log)[0] == "cpu_only_wheel", log
    assert "aarch64" in diagnose(one_liner)[0].fix
    # source code comparing the answer is not the answer
    assert "cpu.tensorflow_built_without_cuda" not in all_rules("    if tf.test.is_built_with_cuda() is False:")


def test_apts_chinese_messages_for_an_nvidia_list() -> None:
    # apt's zh_CN message (as https://wenku.csdn.net/answer/52f163b6go shows it for docker.list), for NVIDIA's list
    log = "E: /etc/apt/sources.list.d/nvidia-docker.list \u7b2c 1 \u884c\u4e2d\u7684\u7c7b\u522b \u201c<!doctype\u201d " \
          "\u65e0\u6cd5\u8bc6\u522b\nE: \u65e0\u6cd5\u8bfb\u53d6\u6e90\u5217\u8868\u3002"
    assert top_and_rules(log) == ("installer_failure", {"installer.apt_malformed_nvidia_source"})


def test_nvidias_windows_installer_refusing_the_machine_is_the_install() -> None:
    # dartraiden/NVIDIA-patcher#293 (a CMP 90HX, Windows 10), the reporter's words for the installer's dialog
    log = "The same error today on cmp90hx, windows 10.\nNvidia installer cannot continue.\n" \
          "This nvndia graphics driver is not compatible with your device."
    category, rules = top_and_rules(log)
    assert category == "installer_failure" and "installer.windows_driver_refused" in rules, rules
    assert "Hardware Ids" in diagnose(log)[0].fix


def test_a_module_not_found_is_no_alias_to_off() -> None:
    # kmod's "Module %s not found" names any module: only the module "off" is nvidia-prime's `alias nvidia off` (the
    # review's case: a DKMS build that failed, then modprobe finds no nvidia module)
    log = ("Error! Bad return status for module build on kernel: 6.8.0-45-generic (x86_64)\n"
           "$ sudo modprobe nvidia\nmodprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.0-45-generic")
    assert "nodriver.module_aliased_off" not in all_rules(log)
    assert "nodriver.module_aliased_off" in all_rules("modprobe: FATAL: Module off not found in directory "
                                                      "/lib/modules/5.15.0-91-generic")
