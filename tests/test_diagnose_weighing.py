"""Evidence weighed together (issue 35 items 2 and 3): facts first, then findings scored from them.

The log lines are real wordings: NVRM's `RmInitAdapter failed! (0x62:0x65:1792)` and GSP lines
(open-gpu-kernel-modules issues), `collect_env`'s "CUDA used to build PyTorch", nvidia-smi's header,
NVML's "NVML library version" (nvidia-smi -q) and /proc/driver/nvidia/version's NVRM line, LXC's nvidia
hook (lxc/hooks/nvidia in lxc/lxc), libnvidia-container's ldcache error."""

from __future__ import annotations

from provisioner.diagnose import diagnose

RM_INIT = "[  903.610907] NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)"
OFF_BUS = "[ 1843.30] NVRM: Xid (PCI:0000:98:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
GSP_BOOT = "[  903.60] NVRM: GPU0 kgspBootstrap: GSP-RM boot timed out waiting for GSP firmware init"
UVM_GONE = "ls: cannot access '/dev/nvidia-uvm': No such file or directory"


def _lines(finding: object) -> list[tuple[int | None, str]]:
    return [(e["line"], e["text"]) for e in finding.to_dict()["evidence_lines"]]  # type: ignore[attr-defined]


def test_specific_hardware_evidence_beats_the_generic_line_beside_it() -> None:
    for specific in (OFF_BUS, GSP_BOOT):
        log = f"boot\n{specific}\n{RM_INIT}\n"
        top = diagnose(log)[0]
        assert top.category == "oom_or_hw", (specific, top)
        lines = _lines(top)
        assert any(n == 2 and specific.split("] ", 1)[1] in t for n, t in lines), lines
        assert any(n == 3 and "RmInitAdapter failed" in t for n, t in lines), lines
        assert "no_driver_loaded" in [a.category for a in top.also_possible]
        assert [f.category for f in diagnose(log)].count("no_driver_loaded") == 0  # one finding per root cause
    # the generic line alone stays what it was
    assert diagnose(RM_INIT + "\n")[0].category == "no_driver_loaded"


def test_a_proxmox_context_changes_the_fix() -> None:
    plain = diagnose(f"$ docker run --rm app\n{UVM_GONE}\n")[0]
    pve = diagnose(f"root@pve:~# pct exec 101 -- bash\n{UVM_GONE}\n")[0]
    assert plain.category == pve.category == "container_device_missing"
    assert "dev0: /dev/nvidia0" in pve.fix and "/etc/pve/lxc/" in pve.fix
    assert "dev0:" not in plain.fix
    lxd = diagnose(f"$ lxc exec c1 -- bash   # lxd\n{UVM_GONE}\n")[0]
    assert "lxc config device add" in lxd.fix


def test_torch_cuda_newer_than_the_drivers_cuda_is_driver_too_old_with_both_lines() -> None:
    log = (
        "Collecting environment information...\n"
        "PyTorch version: 2.7.0+cu128\n"
        "CUDA used to build PyTorch: 12.8\n"
        "| NVIDIA-SMI 550.54.14              Driver Version: 550.54.14      CUDA Version: 12.4     |\n"
        ">>> torch.cuda.is_available()\n"
        "False\n"
        "RuntimeError: No CUDA GPUs are available\n"
    )
    top = diagnose(log)[0]
    assert top.category == "driver_too_old"
    assert "evidence.torch_cuda_newer_than_driver" in top.rules
    lines = _lines(top)
    assert (3, "CUDA used to build PyTorch: 12.8") in lines
    assert any(n == 4 and "CUDA Version: 12.4" in t for n, t in lines)
    assert "R570" in top.fix or top.rule != "evidence.torch_cuda_newer_than_driver"


def test_a_newer_minor_alone_on_a_healthy_log_is_no_finding() -> None:
    log = "CUDA used to build PyTorch: 12.8\n| NVIDIA-SMI 550.54.14   Driver Version: 550.54.14   CUDA Version: 12.4 |\n"
    assert diagnose(log) == []
    newer_major = "CUDA used to build PyTorch: 13.0\n| Driver Version: 550.54.14   CUDA Version: 12.4 |\n"
    assert diagnose(newer_major)[0].category == "driver_too_old"


def test_a_build_newer_by_a_minor_loses_to_an_error_only_a_running_cuda_returns() -> None:
    # "no kernel image" (a launch), "illegal memory access" (a launched kernel's fault), "CUDA out of memory" (an
    # allocation): CUDA initialised, so the driver was not refused (minor-version compatibility); the versions
    # stay "also possible"
    head = ("PyTorch version: 2.7.1+cu128\nCUDA used to build PyTorch: 12.8\n"
            "| NVIDIA-SMI 550.78                 Driver Version: 550.78         CUDA Version: 12.4     |\n")
    for error, category in (
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "arch_unsupported"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom_or_hw"),
    ):
        top = diagnose(head + error + "\n")[0]
        assert top.category == category, (error, top)
        assert "driver_too_old" in [a.category for a in top.also_possible], top.also_possible
    # a newer major is refused at initialisation whatever follows
    newer_major = head.replace("12.8", "13.0").replace("cu128", "cu130")
    assert diagnose(newer_major + "RuntimeError: CUDA error: no kernel image is available for execution on the "
                    "device\n")[0].category == "driver_too_old"


def test_a_missing_library_in_an_lxc_container_is_that_library_not_the_driver_userspace() -> None:
    conf = "root@pve:~# cat /etc/pve/lxc/101.conf\ndev0: /dev/nvidia0,gid=44\ndev1: /dev/nvidiactl,gid=44\n"
    cudnn = "ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory\n"
    top = diagnose(conf + cudnn)[0]
    assert top.category == "missing_shared_lib" and "libcudnn" in top.root_cause, top
    nvml = "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared " \
           "object file: no such file or directory\n"
    assert diagnose(conf + nvml)[0].category == "proxmox_lxc"


def test_userspace_and_module_versions_printed_in_one_log_are_compared() -> None:
    log = (
        "==============NVSMI LOG==============\n"
        "NVML library version: 550.120\n"
        "$ cat /proc/driver/nvidia/version\n"
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
    )
    top = diagnose(log)[0]
    assert top.category == "driver_lib_mismatch" and "evidence.userspace_vs_module" in top.rules
    assert [n for n, _ in _lines(top)] == [2, 4]
    listed = "$ ls /usr/lib/x86_64-linux-gnu/libcuda.so.*\n/usr/lib/x86_64-linux-gnu/libcuda.so.550.120\n" + log.split("\n", 2)[2]
    assert "evidence.userspace_vs_module" in diagnose(listed)[0].rules  # the library's file name is its version
    same = log.replace("550.120", "550.54.14")
    assert not [f for f in diagnose(same) if "evidence.userspace_vs_module" in f.rules]  # equal: nothing compared


def test_one_finding_per_root_cause_with_also_possible_and_differing_evidence() -> None:
    log = (
        "root@ct101:~# nvidia-smi\n"
        "NVML library version: 550.120\n"
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "RuntimeError: No CUDA GPUs are available\n"
    )
    findings = diagnose(log)
    assert findings[0].category == "driver_lib_mismatch"
    cats = [f.category for f in findings]
    assert len(cats) == len(set(cats))
    shown = {n for f in findings for n, _ in _lines(f)}
    assert shown >= {2, 3, 4}
    for f in findings:  # no log line is the evidence of two findings
        others = {n for g in findings if g is not f for n, _ in _lines(g)}
        assert not ({n for n, _ in _lines(f)} & others)
    for alt in findings[0].to_dict()["also_possible"]:  # type: ignore[union-attr]
        assert {"evidence_lines", "differing_evidence"} <= set(alt)


def test_lxc_plumbing_in_the_tools_words() -> None:
    hook = diagnose("lxc-start c1 20240101 ERROR: Missing tool nvidia-container-cli, see "
                    "https://github.com/NVIDIA/libnvidia-container\n")[0]
    assert hook.rule == "plumbing.lxc_nvidia_hook_no_cli" and "libnvidia-container-tools" in hook.fix
    privileged = diagnose("FIXME: This hook currently only works in unprivileged mode.\n")[0]
    assert privileged.category == "proxmox_lxc" and "unprivileged" in privileged.fix
    ld = diagnose("nvidia-container-cli: ldcache error: open failed: /sbin/ldconfig.real: no such file or directory: "
                  "unknown\n")[0]
    assert ld.rule == "plumbing.nvc_ldconfig_path" and 'ldconfig = "@/sbin/ldconfig"' in ld.fix
    owned = diagnose("root@ct101:~# ls -l /dev/nvidia0\ncrw-rw---- 1 nobody nogroup 195, 0 Mar  1 10:00 /dev/nvidia0\n"
                     "root@pve:~# cat /etc/pve/lxc/101.conf\n")[0]
    assert owned.rule == "plumbing.idmapped_node_not_accessible" and "mode=0666" in owned.fix
    cgroup = diagnose("root@pve:~# pct enter 2051\nnvidia-container-cli: mount error: failed to add device rules: "
                      "bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not permitted: unknown\n")[0]
    assert "no-cgroups = true" in cgroup.fix and "dev0:" in cgroup.fix


def test_line_numbers_survive_a_long_log_and_progress_bars() -> None:
    filler = "".join(f"Downloading part {i} ... done\n" for i in range(20000))
    log = filler + "\r 10%\r 50%\r100%\n" + OFF_BUS + "\n"
    top = diagnose(log)[0]
    assert top.category == "oom_or_hw"
    assert any(n == 20002 for n, _ in _lines(top)), _lines(top)


def test_the_toolkit_not_finding_the_hosts_nvml_is_the_container_runtime_not_a_library_the_image_lacks() -> None:
    # runc's hook error around nvidia-container-cli's dlopen of the host's libnvidia-ml (libnvidia-container)
    log = ("$ docker compose up -d\n"
           "Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime "
           "create failed: runc create failed: unable to start container process: error during container init: error "
           "running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
           "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared "
           "object file: no such file or directory: unknown\n")
    top = diagnose(log)[0]
    assert top.category == "container_device_missing", top
    # an application's own missing library stays what it is
    app = "ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory\n"
    assert diagnose("$ docker run --gpus all app\n" + app)[0].category == "missing_shared_lib"


def test_the_lxc_nvidia_hook_failing_in_other_words_is_the_hook() -> None:
    # nvidia-container-cli's RPC service killed as the hook gives up (libnvidia-container src/rpc.c, "driver service"
    # in older releases), under a reporter's own words about the hook
    log = ("`nvidia-container-cli` call in `/usr/share/lxc/hooks/nvidia` fails as follows:\n"
           " I0401 03:37:29.684130 28010 driver.c:133] starting driver service\n"
           " I0401 03:37:29.686296 28008 driver.c:233] driver service terminated with signal 15\n")
    top = diagnose(log)[0]
    assert top.category == "proxmox_lxc" and top.rule == "plumbing.lxc_nvidia_hook_failed", top
    assert "NVreg_DeviceFileMode" in top.fix
    # the same service line from docker's hook is not LXC's
    docker = ("docker: Error response from daemon: OCI runtime create failed: error running hook #0: exit status 1\n"
              "I0401 03:37:29.686296 28008 rpc.c:71] rpc service terminated with signal 15\n")
    assert all(f.rule != "plumbing.lxc_nvidia_hook_failed" for f in diagnose(docker))


def test_a_kernel_message_pasted_from_its_middle_line_still_reads() -> None:
    # the open module refusing a pre-Turing GPU (open-gpu-kernel-modules nv.c, one printk per NVRM line), pasted
    # from its third line as `dmesg | grep` or a cut paste leaves it
    log = ("NVRM: nvidia.ko because it does not include the required GPU\n"
           "nvidia 0000:01:00.0: probe with driver nvidia failed with error -1\n")
    top = diagnose(log)[0]
    assert top.category == "no_driver_loaded" and top.rule == "nodriver.module_flavour_refuses_gpu", top
    # a line shared with other messages' pointers to documentation is not matched on its own
    assert diagnose("NVRM: the Linux graphics driver download page at\n") == []


def test_dockers_default_hostname_says_the_log_ran_in_a_container() -> None:
    # TensorFlow/XLA's cuda_diagnostics prints the host's name; docker names it after the container id
    log = ("E external/local_xla/xla/stream_executor/cuda/cuda_driver.cc:274] failed call to cuInit: "
           "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected\n"
           "I external/local_xla/xla/stream_executor/cuda/cuda_diagnostics.cc:136] hostname: 3a7cddb6f838\n")
    assert diagnose(log)[0].category == "container_device_missing"
    bare = log.replace("3a7cddb6f838", "gpu-node-07")
    assert diagnose(bare)[0].category == "no_driver_loaded"


def test_a_driver_library_missing_in_a_docker_container_is_the_runtime_not_the_image() -> None:
    # libcuda.so.1 comes from the driver package: the toolkit mounts the host's into a container that asks for a GPU
    log = ("On two servers the Docker Compose services fail: `/usr/local/bin/node: error while loading shared "
           "libraries: libcuda.so.1: cannot open shared object file`\n")
    top = diagnose(log)[0]
    assert top.category == "container_device_missing", top
    # on a host, the same missing library is a missing library
    host = "/usr/local/bin/node: error while loading shared libraries: libcuda.so.1: cannot open shared object file\n"
    assert diagnose(host)[0].category == "missing_shared_lib"


def test_cdi_devices_the_runtime_cannot_resolve_are_the_container_runtime() -> None:
    # CDI's own error (cncf-tags/container-device-interface pkg/cdi cache.go) as podman prints it
    log = ("$ nvidia-ctk --debug cdi list\nINFO[0000] Found 3 CDI devices\nnvidia.com/gpu=0\nnvidia.com/gpu=all\n"
           "$ podman run -it --rm --device nvidia.com/gpu=0 nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04 bash\n"
           "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=0\n")
    top = diagnose(log)[0]
    assert top.category == "container_device_missing" and top.rule == "container.cdi_device_unresolvable", top
    assert "nvidia-ctk cdi generate" in top.fix and "cdiVersion" in top.fix


def test_a_container_that_loses_its_gpu_after_hours_is_the_cgroup_reload() -> None:
    log = ("Ollama is running via docker compose. After sometimes 12 hours Ollama will stop using the GPU and revert "
           "to CPU only.\n")
    top = diagnose(log)[0]
    assert top.category == "container_device_missing" and top.rule == "container.gpu_lost_after_a_while", top
    assert "native.cgroupdriver=cgroupfs" in top.fix
    # the same words about a host are not a container's cgroup
    assert all(f.rule != "container.gpu_lost_after_a_while"
               for f in diagnose("After 12 hours the training stops using the GPU.\n"))


NO_DRIVER = ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
             "installed a driver from http://www.nvidia.com/Download/index.aspx\n")


def test_no_driver_inside_a_container_that_started_is_the_gpu_never_asked_for() -> None:
    for start in ("$ docker run --rm -it myimage python train.py",
                  "$ srun --nodes=1 --gpus=2 --container-image=myimage --pty bash -i",
                  "$ apptainer exec pytorch.sif python train.py"):
        top = diagnose(start + "\n" + NO_DRIVER)[0]
        assert top.category == "container_device_missing" and top.rule == "container.no_driver_in_container", top
        assert "--gpus all" in top.fix and "--nv" in top.fix and "NVIDIA_VISIBLE_DEVICES" in top.fix
    assert diagnose("$ python train.py\n" + NO_DRIVER)[0].category == "no_driver_loaded"
    # an LXC container's driver userspace is its own setup, not a runtime's injection
    assert all(f.rule != "container.no_driver_in_container" for f in diagnose("root@pve:~# pct exec 101 -- bash\n" + NO_DRIVER))


def test_a_ptx_feature_the_gpu_lacks_is_the_gpu_too_old() -> None:
    # ptxas's words as Triton wraps them (triton-lang/triton#542: tl.dot's mma on a Pascal TITAN X)
    log = ("E       RuntimeError: Internal Triton PTX codegen error: \n"
           "E       ptxas /tmp/fileeECWP1, line 297; error   : Feature 'mma' requires .target sm_70 or higher\n")
    top = diagnose(log)[0]
    assert top.category == "arch_unsupported" and top.rule == "arch.feature_needs_newer_gpu", top


def test_kernel_devel_for_another_kernel_than_the_installed_ones_is_the_module_build() -> None:
    # `yum list installed` as a reporter pasted it (NVIDIA/ansible-role-nvidia-driver#18) and `rpm -qa`
    listing = ("Installed Packages\n"
               "kernel.x86_64                            3.10.0-957.el7                  @anaconda\n"
               "kernel-devel.x86_64                   3.10.0-1127.18.2.el7               @updates\n"
               "kernel-headers.x86_64               3.10.0-957.el7                    @anaconda\n")
    top = diagnose(listing)[0]
    assert top.category == "installer_failure" and top.rule == "evidence.kernel_devel_mismatch", top
    assert "3.10.0-1127.18.2.el7" in top.root_cause and "3.10.0-957.el7" in top.root_cause
    assert [n for n, _ in _lines(top)] == [2, 3]
    assert diagnose(listing.replace("3.10.0-1127.18.2.el7", "3.10.0-957.el7")) == []
    rpm = "kernel-3.10.0-957.el7.x86_64\nkernel-3.10.0-1160.el7.x86_64\nkernel-devel-3.10.0-1160.el7.x86_64\n"
    assert diagnose(rpm) == []  # one of the kernels has its tree
    assert diagnose(rpm.replace("devel-3.10.0-1160", "devel-3.10.0-1127"))[0].rule == "evidence.kernel_devel_mismatch"
