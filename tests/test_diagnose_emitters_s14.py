"""Issue #35, diagnosis from the emitters' own words (session 14): each new or changed rule fed the message as the
program that prints it words it (the source file or documentation cited beside each case), never a corpus log."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from provisioner.diagnose.evidence import extract_evidence, negated_mention
from tests.support.diagnosis import all_rules, top_and_rules

# --- kmod: `alias nvidia off` (nvidia-prime) turns `modprobe nvidia` into the module "off" -------------------------
# kmod tools/modprobe.c prints `could not insert '%s': %s` with the module it resolved; nvidia-prime's prime-select
# `_blacklist_nvidia` writes `alias nvidia off` to /lib/modprobe.d/blacklist-nvidia.conf
# (https://github.com/canonical/nvidia-prime/blob/00be3492de1eb4c93071aa97e7313f583717c441/prime-select)


def test_module_aliased_off_is_no_driver() -> None:
    for line in ("modprobe: ERROR: could not insert 'off': Unknown symbol in module, or unknown parameter (see dmesg)",
                 "modprobe: FATAL: Module off not found in directory /lib/modules/6.8.0-45-generic"):
        cat, rules = top_and_rules("$ sudo modprobe nvidia\n" + line)
        assert cat == "no_driver_loaded" and "nodriver.module_aliased_off" in rules, (line, rules)
    assert "nodriver.module_aliased_off" not in all_rules("modprobe: ERROR: could not insert 'nvidia': No such device")


def test_kmod_older_wording_of_module_not_found() -> None:
    """kmod before the "in directory" suffix (CentOS/RHEL 7's kmod 20): `modprobe: FATAL: Module %s not found.`
    (https://git.kernel.org/pub/scm/utils/kernel/kmod/kmod.git/tree/tools/modprobe.c)."""
    cat, rules = top_and_rules("# nvidia-smi\nmodprobe: FATAL: Module nvidia not found.\nNVIDIA-SMI has failed because it "
                      "couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is "
                      "installed and running.")
    assert cat == "no_driver_loaded" and "nodriver.module_missing" in rules


# --- GNU make / gcc while nvidia-installer or DKMS builds the module -------------------------------------------------
# GNU make: `make[N]: *** [FILE:LINE: TARGET] Error N` (https://www.gnu.org/software/make/manual/html_node/Error-Messages.html;
# "Error" comes from make's message catalogue, so it is translated: de "Fehler"); nvidia-installer
# install-from-cwd.c logs "Installing NVIDIA driver version %s." and kernel.c "Kernel source path: '%s'"


def test_kbuild_error_while_the_installer_builds_the_module() -> None:
    log = ("-> Installing NVIDIA driver version 390.157.\n"
           "-> Kernel source path: '/lib/modules/6.11.0-9-generic/build'\n"
           "   /tmp/selfgz4242/NVIDIA-Linux-x86_64-390.157/kernel/nv-mmap.c:77:9: error: implicit declaration of "
           "function 'vm_flags_set'\n"
           "   make[3]: *** [scripts/Makefile.build:244: /tmp/selfgz4242/kernel/nv-mmap.o] Error 1")
    cat, rules = top_and_rules(log)
    assert cat == "installer_failure" and "installer.kbuild_failed_in_driver_build" in rules


def test_kbuild_error_in_the_users_language_under_dkms() -> None:
    log = ("Building module(s)... (bad exit status: 2)\nError! Bad return status for module build on kernel: 6.12.1\n"
           "Consult /var/lib/dkms/nvidia/470.256.02/build/make.log for more information.\n"
           "make[2]: *** [/usr/src/linux-headers-6.12.1/Makefile:1945: /var/lib/dkms/nvidia/470.256.02/build] Fehler 2")
    assert top_and_rules(log)[0] == "installer_failure"
    assert "installer.kbuild_failed_in_driver_build" in all_rules(
        "dkms: building nvidia 470.256.02\nmake[2]: *** [/usr/src/linux-headers-6.12.1/Makefile:1945: "
        "/var/lib/dkms/nvidia/470.256.02/build] Fehler 2")


def test_make_error_outside_a_driver_build_is_not_this_rule() -> None:
    log = "make[2]: *** [scripts/Makefile.build:244: drivers/foo/bar.o] Error 1\nbar.c:3:1: error: expected ';'"
    assert "installer.kbuild_failed_in_driver_build" not in all_rules(log)


# --- uv ---------------------------------------------------------------------------------------------------------------
# crates/uv-resolver/src/resolver/mod.rs: `debug!("No compatible version found for: {next_package}")`
# crates/uv-resolver/src/lock/mod.rs / lock/export/pylock_toml.rs: "... can't be installed because it doesn't have a
# source distribution or wheel for the current platform" (astral-sh/uv@26a9dd4b2125)


def test_uv_no_compatible_version_is_a_resolver_failure() -> None:
    log = ("DEBUG Solving with installed Python version: 3.14.0\n"
           "DEBUG Searching for a compatible version of torchaudio (>=2.4.1, <2.4.1+)\n"
           "DEBUG No compatible version found for: torchaudio")
    cat, rules = top_and_rules(log)
    assert cat == "resolver_failure" and "resolver.uv_no_compatible_version" in rules
    # logged while uv backtracks too: a resolution that then succeeds is not a failure
    assert "resolver.uv_no_compatible_version" not in all_rules(log + "\nResolved 14 packages in 812ms")


def test_uv_locked_local_version_without_wheel_installed_nothing() -> None:
    """A `+cpu` local version in the lock that has no wheel for this platform: nothing was installed, so it is the
    resolution that failed, not a CPU-only torch that ran (evidence.resolution_failed_first)."""
    log = ("Resolved 31 packages in 2.10s\n"
           "error: Distribution `torch==2.6.0+cpu @ registry+https://download.pytorch.org/whl/cpu` can't be "
           "installed because it doesn't have a source distribution or wheel for the current platform")
    assert extract_evidence(log).resolution_failed
    assert top_and_rules(log)[0] == "resolver_failure"
    assert top_and_rules("error: Package `torch` can't be installed because it doesn't have a source distribution or wheel "
                "for the current platform")[0] == "resolver_failure"


# --- LXC: conf.c mount_entry() / utils.c safe_mount() --------------------------------------------------------------
# https://github.com/lxc/lxc/blob/e7b855a51b81a6a562d121aa60e8581993beb203/src/lxc/conf.c#L2101 (error) and #L2098
# (the same text with " (optional)" at INFO for an `optional` entry)


def test_lxc_mount_entry_failure_is_the_lxc_layer() -> None:
    log = ('lxc gpu1 20250312101500.120 ERROR    conf - ../src/lxc/conf.c:mount_entry:2101 - Device or resource busy - '
           'Failed to mount "/var/snap/lxd/common/lxd/devices/gpu1/unix.gpu3.dev-nvidia-uvm" on '
           '"/usr/lib/x86_64-linux-gnu/lxc/dev/nvidia-uvm"\n'
           "lxc gpu1 20250312101500.121 ERROR    start - ../src/lxc/start.c:lxc_init:878 - Failed to setup container")
    cat, rules = top_and_rules(log)
    assert cat == "proxmox_lxc" and "pve.lxc_mount_entry_failed" in rules


def test_optional_lxc_mount_entry_is_not_a_failure() -> None:
    log = ('lxc 105 20250312101500.120 INFO     conf - ../src/lxc/conf.c:mount_entry:2098 - No such file or directory - '
           'Failed to mount "/dev/nvidia-modeset" on "/usr/lib/x86_64-linux-gnu/lxc/rootfs/dev/nvidia-modeset" '
           "(optional)")
    assert "pve.lxc_mount_entry_failed" not in all_rules(log)


# --- strace(1): a failed call is printed `name(args) = -1 ERRNO (strerror)` -------------------------------------------


def test_strace_enoent_on_the_uvm_node() -> None:
    log = ('openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR|O_CLOEXEC) = 3\n'
           'openat(AT_FDCWD, "/dev/nvidia-uvm", O_RDWR|O_CLOEXEC) = -1 ENOENT (No such file or directory)')
    cat, rules = top_and_rules(log)
    assert cat == "container_device_missing" and "container.uvm_missing" in rules
    assert extract_evidence(log).nodes_missing == ["/dev/nvidia-uvm"]


# --- the UVM/modeset nodes missing while the driver answers (evidence.uvm_nodes_missing) ----------------------------


def test_uvm_node_missing_with_driver_loaded_is_the_nodes() -> None:
    # coreutils ls (src/ls.c) wording beside nvidia-smi's table header
    log = ("| NVIDIA-SMI 550.127.05             Driver Version: 550.127.05     CUDA Version: 12.4     |\n"
           "$ ls -l /dev/nvidia-uvm\nls: cannot access '/dev/nvidia-uvm': No such file or directory")
    cat, rules = top_and_rules(log)
    assert cat == "container_device_missing" and "evidence.uvm_nodes_missing" in rules


def test_uvm_node_missing_in_a_reports_words() -> None:
    for text in ("After the reboot there is no /dev/nvidia-uvm on the host, nvidia-smi still works.",
                 "the job could not find /dev/nvidia-modeset after the node restarted",
                 "I didn't have `/dev/nvidia-uvm` although the module was loaded"):
        assert extract_evidence(text).nodes_missing, text
        assert top_and_rules(text)[0] == "container_device_missing", text
    # the module itself absent: "no driver", not the nodes
    assert "evidence.uvm_nodes_missing" not in all_rules(
        "modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.0\nthere is no /dev/nvidia-uvm")


# --- torch/cuda/__init__.py: AssertionError("Torch not compiled with CUDA enabled") --------------------------------


def test_torch_not_compiled_with_cuda_quoted_short() -> None:
    for text in ("AssertionError: Torch not compiled with CUDA enabled",
                 "on the Jetson the torch is not compiled with cuda, so the model falls back"):
        assert top_and_rules(text)[0] == "cpu_only_wheel", text


# --- a torch build whose CUDA predates Blackwell (CUDA 12.8 release notes: SM_100/SM_120 first supported) ----------


def test_torch_cuda_older_than_blackwell_is_arch() -> None:
    # torch/utils/collect_env.py's lines
    log = ("PyTorch version: 2.4.1+cu121\nCUDA used to build PyTorch: 12.1\nIs CUDA available: False\n"
           "GPU models and configuration: GPU 0: NVIDIA GeForce RTX 5080")
    cat, rules = top_and_rules(log)
    assert cat == "arch_unsupported" and "evidence.torch_cuda_predates_gpu" in rules
    ok = log.replace("2.4.1+cu121", "2.7.1+cu128").replace("PyTorch: 12.1", "PyTorch: 12.8")
    assert "evidence.torch_cuda_predates_gpu" not in all_rules(ok)


# --- a report's checklist of messages it did NOT see ----------------------------------------------------------------


def test_negated_messages_are_not_evidence() -> None:
    log = ("The all_reduce hangs; no errors in the kernel log:\n* No `NVRM: Xid`\n* No `GPU has fallen off the bus`\n"
           "- without 'Out of memory: Killed process'")
    assert not [f for f in diagnose(log) if f.category == "oom_or_hw"]
    assert not extract_evidence(log).hw_errors
    assert top_and_rules("NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.")[0] == "oom_or_hw"
    line = "* No `GPU has fallen off the bus`"
    assert negated_mention(line, line.index("GPU"))
    assert not negated_mention("GPU has fallen off the bus", 0)
