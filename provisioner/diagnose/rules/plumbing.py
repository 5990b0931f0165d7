"""The container plumbing layer (issue 35 item 3): LXC's nvidia hook, nvidia-container-cli's config (ldconfig,
no-cgroups), device-node ownership in an unprivileged (idmapped) container. Fixes name the setting of the tool
in use: the LXC config key, the toolkit's config.toml key, the Proxmox devN entry (`{lxc_words}` is filled from
where the log ran: `evidence.lxc_words`)."""

from __future__ import annotations

from provisioner.diagnose.model import Rule
from provisioner.diagnose.rules.common import LXC_CONTEXT

_TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"

RULES: tuple[Rule, ...] = (
    Rule(
        name="plumbing.lxc_nvidia_hook_no_cli",
        category="proxmox_lxc",
        patterns=(r"hooks/nvidia[^\n]{0,80}\bMissing tool nvidia-container-cli",),
        messages=("lxc.nvidia_hook_no_cli",),
        confidence=0.9,
        root_cause=("LXC's nvidia hook (lxc.hook.mount = /usr/share/lxc/hooks/nvidia) runs nvidia-container-cli on the "
                    "host, and the host has none, so the container does not start."),
        fix=("Install nvidia-container-cli on the host (package libnvidia-container-tools from NVIDIA's repository) "
             "and start the container again; or remove the hook (`lxc.hook.mount`, `lxc.environment: "
             "NVIDIA_VISIBLE_DEVICES`) and pass the nodes instead: {lxc_words}."),
        examples=("ERROR: Missing tool nvidia-container-cli, see https://github.com/NVIDIA/libnvidia-container",),
    ),
    Rule(
        name="plumbing.lxc_nvidia_hook_privileged",
        category="proxmox_lxc",
        patterns=(r"hooks/nvidia[^\n]{0,80}\bonly works in unprivileged mode",),
        messages=("lxc.nvidia_hook_privileged",),
        confidence=0.9,
        root_cause="LXC's nvidia hook works only in an unprivileged container, and this container is privileged.",
        fix=("Make the container unprivileged (Proxmox: `unprivileged: 1` in /etc/pve/lxc/<vmid>.conf on a new CT; "
             "LXD/Incus: `security.privileged=false`), or remove `lxc.hook.mount = /usr/share/lxc/hooks/nvidia` "
             "and pass the nodes instead: {lxc_words}."),
        examples=("FIXME: This hook currently only works in unprivileged mode.",),
    ),
    Rule(
        name="plumbing.lxc_nvidia_hook_mount_only",
        category="proxmox_lxc",
        patterns=(r"hooks/nvidia[^\n]{0,80}\bmust be used as a [\"']?mount[\"']? hook",),
        messages=("lxc.nvidia_hook_mount_only",),
        confidence=0.9,
        root_cause="LXC's nvidia hook is configured as another kind of hook; it runs only as a mount hook.",
        fix=("Name it as a mount hook in the container's config: `lxc.hook.mount = /usr/share/lxc/hooks/nvidia` "
             "(not lxc.hook.pre-start or lxc.hook.start), with `lxc.environment = NVIDIA_VISIBLE_DEVICES=all`."),
        examples=('ERROR: This hook must be used as a "mount" hook.',),
    ),
    Rule(
        # the hook failing in words other than its own three texts above: LXC runs it as `lxc.hook.mount` and stops
        # the start when it exits non-zero ("Failed to run mount hooks", conf.c); LXD/Incus run it for
        # `nvidia.runtime=true`. Its nvidia-container-cli forks an RPC service to load the host's NVML and kills it
        # with SIGTERM when that fails (libnvidia-container src/rpc.c `reap_process`: "rpc service terminated with
        # signal %d"; "driver service" in releases before rpc.c)
        name="plumbing.lxc_nvidia_hook_failed",
        category="proxmox_lxc",
        patterns=(
            r"hooks/nvidia\b[^\n]{0,200}\b(?:fails?|failed|failing|errors?|exit(?:ed)? (?:with )?status [1-9]"
            r"|permission denied|cannot|unable to)\b",
            r"\b(?:fails?|failed|failing)\b[^\n]{0,120}\bhooks/nvidia\b",
            r"\b(?:driver|rpc) service terminated with signal \d+",
        ),
        messages=("lxc.mount_hooks_failed",),
        requires=(r"hooks/nvidia\b|\bnvidia\.runtime\b|lxc\.hook\.mount",),
        confidence=0.75,
        root_cause=("LXC's nvidia hook failed: the nvidia-container-cli it runs on the host at mount time could not "
                    "load the host's driver (NVML) for the container's user, so the container gets no driver "
                    "libraries or device nodes, or does not start."),
        fix=("Run the hook's call by hand on the host as the container's user: `nvidia-container-cli --debug=/dev/stderr "
             "--user=<container root uid>:<gid> info`; the usual causes are the host's /dev/nvidia* nodes not readable "
             "by that user (mode 0660 root:video: load the module with `NVreg_DeviceFileMode=0666` or a udev rule), no "
             "driver loaded on the host, or the host driver installed from the .run without its libraries where the "
             "hook looks (`ldconfig -p | grep libnvidia-ml`); then start the container again."),
        examples=("`nvidia-container-cli` call in `/usr/share/lxc/hooks/nvidia` fails as follows:\n"
                  " I0401 03:37:29.686296 28008 driver.c:233] driver service terminated with signal 15",),
    ),
    Rule(
        # nvidia-smi's "couldn't communicate" inside an LXC/LXD/Incus container (`pct exec`, `lxc exec`): NVML opens
        # /dev/nvidiactl and /dev/nvidiaN, which only the container's config passes in (Proxmox devN:/mount entries,
        # LXD/Incus's gpu device) — the same words in a docker container are container.driver_unreachable_in_container
        name="plumbing.lxc_driver_unreachable",
        category="proxmox_lxc",
        patterns=(r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",),
        messages=("smi.cannot_communicate",),
        context=LXC_CONTEXT,
        confidence=0.8,
        root_cause=("Inside the LXC container nvidia-smi cannot reach the driver: the container's config does not pass "
                    "the host's /dev/nvidiactl and /dev/nvidiaN in (for LXD/Incus: the gpu device matched none, or "
                    "other nodes than the GPU's), or the host's driver is not loaded."),
        fix=("Run `nvidia-smi` on the host first (no driver there: load it); then compare `ls -l /dev/nvidia*` on the "
             "host and in the container and pass the missing nodes: {lxc_words}."),
        examples=("$ lxc exec c1 -- nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                  "driver. Make sure that the latest NVIDIA driver is installed and running.",),
    ),
    Rule(
        name="plumbing.nvc_ldconfig_path",
        category="container_device_missing",
        patterns=(
            r"ldcache error: open failed: [\"']?/sbin/ldconfig(?:\.real)?",
            r"exec: [\"']?/sbin/ldconfig(?:\.real)?[\"']?: no such file or directory",
            r"/sbin/ldconfig\.real[\"']?:? (?:no such file or directory|not found)",
        ),
        messages=("nvc.ldcache_error",),
        confidence=0.86,
        root_cause=("nvidia-container-cli runs the ldconfig its config names (`ldconfig = \"@/sbin/ldconfig.real\"` "
                    "on Debian/Ubuntu packages) and this host has no such file, so the driver's libraries are not "
                    "registered in the container."),
        fix=(f"In {_TOOLKIT_CONFIG}, under [nvidia-container-cli], set `ldconfig = \"@/sbin/ldconfig\"` (the `@` "
             "means the host's binary; name the path `ls -l /sbin/ldconfig*` shows), then restart the container "
             "(`nvidia-ctk config --set nvidia-container-cli.ldconfig=@/sbin/ldconfig --in-place`)."),
        examples=(
            "nvidia-container-cli: ldcache error: open failed: /sbin/ldconfig.real: no such file or directory: unknown",
        ),
    ),
    Rule(
        name="plumbing.idmapped_node_not_accessible",
        category="container_device_missing",
        # `ls -l /dev/nvidia*` inside an unprivileged container: the host's root:root nodes appear as
        # nobody:nogroup (unmapped ids), and without o+rw nothing in the container may open them
        patterns=(
            r"^\s*c[r-][w-]-[r-][w-]-{4}\S*\s+\d+\s+(?:nobody|65534)\s+(?:nogroup|nobody|65534)\s+\d+,\s*\d+[^\n]*"
            r"(?:/dev/)?nvidia(?:\d+|ctl|-uvm)\b",
        ),
        messages=("nvml.no_permission",),
        confidence=0.78,
        root_cause=("In the unprivileged container the GPU's device nodes belong to nobody:nogroup (ids the idmap "
                    "does not map) and are not world-readable/writable, so nothing in the container may open them."),
        fix=("Give the nodes a mode or owner the container can use: {lxc_words}; on Proxmox a devN entry takes "
             "`mode=0666` or `gid=<gid in the CT>` (`dev0: /dev/nvidia0,mode=0666`); with bind mounts set the mode on "
             "the host (udev rule `MODE=\"0666\"`) or map the group through `lxc.idmap`."),
        examples=("crw-rw---- 1 nobody nogroup 195,   0 Mar  1 10:00 /dev/nvidia0",),
    ),
)
