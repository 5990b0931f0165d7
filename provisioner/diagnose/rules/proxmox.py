"""proxmox_lxc: Proxmox API, storage and LXC start failures."""

from __future__ import annotations

from provisioner.diagnose.model import Rule
from provisioner.diagnose.rules.common import RUNTIME_START

RULES: tuple[Rule, ...] = (
    Rule(
        name="pve.container_start_failed",
        category="proxmox_lxc",
        patterns=(
            r'Failed to initialize container \"?\d+',
            r"Failed to set up id mapping",
            r"container '\d+' not running",
            r"startup for container '\d+' failed",
            r"Failed to spawn container \"?\d+",
            r"Failed to setup container \"?\d+",
            r"Failed to run mount hooks",
            r"lxc_start: [^\n]{0,80}The container failed to start",
            r"command 'lxc-start (?:-F )?-n \d+[^']*' failed",
        ),
        confidence=0.78,
        root_cause="Proxmox could not start container[ {vmid}]; an LXC hook or mount in its config fails.",
        fix=(
            "Run `pct start {vmid} --debug` (or lxc-start -n {vmid} -F -l DEBUG) to see the failing line; "
            "remove or fix the hook/mount entry (NVIDIA hooks need an unprivileged CT, bind mounts need existing "
            "host paths)."
        ),
        examples=(
            "run_buffer: 314 Script exited with status 1\nlxc_setup: 3388 Failed to run mount hooks\n"
            "__lxc_start: 1999 Failed to spawn container \"102\"\nTASK ERROR: startup for container '102' failed",
        ),
    ),
    Rule(
        name="pve.idmap",
        category="proxmox_lxc",
        patterns=(
            r"newuidmap failed",
            r"newgidmap failed",
            r"uid range \[[\d-]+\) -> \[[\d-]+\) not allowed",
            r"gid range \[[\d-]+\) -> \[[\d-]+\) not allowed",
            r"Failed to write mapping",
            r"lxc_map_ids: ",
            r"^lxc\.idmap\s*[:=]\s*[ug] \d+ \d+ \d+",
        ),
        confidence=0.7,
        root_cause=(
            "The container's lxc.idmap is incomplete or not allowed by /etc/subuid and /etc/subgid (once any "
            "lxc.idmap line is set Proxmox adds no default mapping)."
        ),
        fix=(
            "Map both uids and gids over the full 0-65535 range (e.g. `lxc.idmap: u 0 100000 65536` next to the g "
            "lines) "
            "and allow every mapped host id in /etc/subuid and /etc/subgid (root:100000:65536, root:44:1, ...)."
        ),
        examples=(
            "lxc.idmap: g 0 100000 44\nlxc.idmap: g 44 44 1\nlxc.idmap: g 45 100045 61",
            "newuidmap: uid range [0-65536) -> [100000-165536) not allowed",
        ),
    ),
    Rule(
        name="pve.api_permission",
        category="proxmox_lxc",
        patterns=(
            r"Parameter verification failed",
            r"unsupported (?:debian|ubuntu|centos|fedora|alpine|archlinux) version",
            r'apparmor=\"DENIED\"[^\n]{0,200}profile=\"lxc-',
            r"configuring device passthrough is only allowed for root@pam",
            r"property is not defined in schema and the schema does not allow additional properties",
            r"Permission check failed \(",
            r"CT is locked",
            r"can't lock file '/run/lock/lxc/pve-config-\d+\.lock'",
            r"unable to parse (?:config|value of) [^\n]{0,60}lxc",
        ),
        confidence=0.85,
        root_cause=(
            "The Proxmox API or config refused the change (device passthrough needs root@pam; raw lxc.* keys are not "
            "API-settable; locked CT)."
        ),
        fix=(
            "Set devN entries as root@pam with a password ticket or `pct set` over SSH (API tokens cannot), and "
            "write raw "
            "lxc.* lines to /etc/pve/lxc/<vmid>.conf as root."
        ),
        examples=(
            "unable to create CT 105 - unsupported debian version '13.1'",
            "403 Forbidden: Permission check failed (configuring device passthrough is only allowed for root@pam)",
        ),
    ),
    Rule(
        name="pve.cgroup_v1_keys",
        category="proxmox_lxc",
        patterns=(r"^lxc\.cgroup\.devices\.allow\s*[:=]", r"cgroup v1 (?:keys|configuration) [^\n]{0,40}ignored"),
        confidence=0.5,
        root_cause=(
            "The container config uses cgroup v1 keys (lxc.cgroup.devices.allow) on a cgroup v2 host (PVE >= 7), "
            "where they are ignored."
        ),
        fix="Use lxc.cgroup2.devices.allow lines (or devN entries on PVE >= 8.1).",
        examples=("lxc.cgroup.devices.allow: c 195:* rwm",),
    ),
    Rule(
        name="pve.container_does_not_start",
        category="proxmox_lxc",
        patterns=(
            r"(?:LXC|CT|container)(?: \S+){0,2} (?:does not|doesn't|won't|will not|fails to|failed to|can't|cannot) "
            r"start",
            r"TASK ERROR: ",
            r"unable to create CT \d+",
        ),
        confidence=0.45,
        generic=True,
        unless=RUNTIME_START,  # a docker/podman/Kubernetes container that does not start is that runtime's
        root_cause="The Proxmox container fails to start (or a Proxmox task failed).",
        fix=(
            "Run `pct start <vmid> --debug` and read the first ERROR line; check the lxc.* lines added to "
            "/etc/pve/lxc/<vmid>.conf."
        ),
        examples=("But my LXC Container does not start.",),
    ),
    Rule(
        name="pve.lxc_cgroup_setup",
        category="proxmox_lxc",
        patterns=(
            r"cgfsng_\w+: \d+ [^\n]{0,120}(?:Failed|Permission denied)",
            r"Failed to (?:create|setup|set up) (?:cgroup|limits)",
            r"lxc\.hook\.\w+ [^\n]{0,60}failed",
        ),
        confidence=0.7,
        root_cause="LXC could not set up the container's cgroup limits or hooks from its config.",
        fix=(
            "Check the lxc.cgroup2.* and lxc.hook.* lines in /etc/pve/lxc/<vmid>.conf (cgroup v2 keys only on PVE >= "
            "7)."
        ),
        examples=('cgfsng_setup_limits: 3251 No such file or directory - Failed to setup limits for the "devices" controller',),
    ),
    Rule(
        name="pve.storage_full",
        category="proxmox_lxc",
        patterns=(
            r"Volume group \"?[\w.+-]+\"? has insufficient free space",
            r"Insufficient (?:suitable )?(?:allocatable )?(?:free space|extents) for logical volume",
            r"out[- ]of[- ]data[- ]space",
            r"Insufficient free space: \d+ extents needed",
            r"Cannot create new thin volume, free space in thin pool",
            r"lvcreate '[^'\n]+' error:[^\n]{0,160}(?:insufficient|space)",
            r"cannot create '[^'\n]+': out of space",
            r"(?:unable to create CT \d+|TASK ERROR|vzcreate|pct (?:create|restore))[^\n]{0,200}No space left on device",
        ),
        confidence=0.92,
        demotes=("installer_failure",),
        root_cause=(
            "storage full: the Proxmox storage chosen for the container's rootfs has no room for the requested size "
            "(the LVM volume group / thin pool / ZFS pool is out of free space), so `pct create` failed."
        ),
        fix=(
            "storage full: shrink the rootfs (a smaller `rootfs` size) or pick another storage with room "
            "(`pvesm status` lists free space); or free space in that volume group/thin pool, then replay."
        ),
        examples=(
            "TASK ERROR: unable to create CT 200 - lvcreate 'pve/vm-200-disk-0' error:   Volume group \"pve\" has "
            "insufficient free space (1023 extents): 2048 required.",
        ),
    ),
    Rule(
        name="pve.passthrough_node_missing",
        category="proxmox_lxc",
        patterns=(
            r"Could not get mode or device ID of /dev/\S+",
            r"Device /dev/\S+ does not exist",
            r"/dev/\S+ is not a (?:character |block )?device",
            r"Failed to mount [\"']?/dev/[\w/.-]+[\"']? (?:onto|on) [\"']?\S*/(?:lxc|rootfs)\S*",
        ),
        confidence=0.88,
        demotes=("container_device_missing",),
        root_cause=(
            "The container cannot start: a device its config passes in (devN or an lxc.mount.entry) does not exist "
            "on the host or is not a device node; after a reboot or driver upgrade /dev/nvidia-uvm*, "
            "/dev/nvidia-modeset and /dev/nvidia-caps/* only appear once something creates them."
        ),
        fix=(
            "On the host create the nodes at boot (`nvidia-modprobe -u -c=0 -m`, e.g. from a systemd unit, and "
            "nvidia-persistenced for /dev/nvidiaN), check `ls -l /dev/nvidia* /dev/dri`, and drop devN/mount entries "
            "for paths the host does not have; then `pct start {vmid}`."
        ),
        examples=(
            "TASK ERROR: Could not get mode or device ID of /dev/nvidia-uvm",
            "safe_mount: 1425 No such file or directory - Failed to mount \"/dev/nvidia-modeset\" onto "
            "\"/usr/lib/x86_64-linux-gnu/lxc/rootfs/dev/nvidia-modeset\"\nrun_buffer: 571 Script exited with status 17\n"
            "lxc_setup: 3948 Failed to run autodev hooks",
        ),
    ),
    Rule(
        name="pve.lxc_mount_entry_failed",
        category="proxmox_lxc",
        # LXC's own error (catalogue lxc.mount_entry_failed), as its log line ends when the mount was not optional
        patterns=(r"Failed to mount [\"'][^\"'\n]{1,300}[\"'] (?:on|onto) [\"'][^\"'\n]{1,300}[\"']\s*$",),
        confidence=0.86,
        context=r"\b(?:lxc|lxd|incus|pve|proxmox)\b|\bpct |/var/lib/lxc/|/etc/pve/",
        # an `optional` entry that fails is logged at INFO with " (optional)" and the container still starts
        unless=r"Failed to mount [^\n]{0,400}\(optional\)",
        demotes=("container_device_missing",),
        root_cause=(
            "LXC could not bind-mount an entry of the container's config (an lxc.mount.entry, a devN node or an "
            "LXD/Incus gpu device's node): its source is missing on the host, or the same target is mounted twice "
            "(a second gpu device repeating the shared nvidiactl/nvidia-uvm/nvidia-caps nodes), so the container does "
            "not start."
        ),
        fix=(
            "Check the source on the host (`ls -l /dev/nvidia* /dev/nvidia-caps`); create missing nodes at boot "
            "(`nvidia-modprobe -u -c=0 -m`) or drop their entries; mount the shared nodes once (on LXD/Incus one gpu "
            "device for all GPUs, or per-GPU devices by id); then start with `pct start <vmid> --debug` / `lxc-start "
            "-F -l DEBUG` to confirm."
        ),
        examples=(
            'lxc ct1 20240101 ERROR conf - conf.c:mount_entry:2101 - No such file or directory - Failed to mount '
            '"/dev/nvidia-uvm" on "/usr/lib/x86_64-linux-gnu/lxc/dev/nvidia-uvm"',
        ),
    ),
    Rule(
        name="pve.unprivileged_lxc_nested_cgroup",
        category="proxmox_lxc",
        # nvidia-container-cli (docker nested in the LXC) denied the device cgroup: cgroup v2 BPF device filters
        # (catalogue nvc.bpf_prog_query, nvc.add_device_rules) or cgroup v1's devices.allow (nvc.mount_error's
        # "write error: <file>: <strerror>")
        patterns=(
            r"bpf_prog_query\(BPF_CGROUP_DEVICE\) failed: operation not permitted",
            r"failed to add device rules[^\n]{0,300}operation not permitted",
            r"mount error: write error: [^\n]{0,300}devices\.allow: operation not permitted",
        ),
        confidence=0.9,
        # ... in an unprivileged LXC container: its config says so (pct's `unprivileged: 1`), the report does, or
        # libnvidia-container does ("skipping kernel modules load due to user namespace", src/nvc.c)
        context=(r"^\s*unprivileged:\s*1\b|\bunprivileged (?:lxc|lxd|incus|proxmox|pve)\b"
                 r"|\bunprivileged (?:ct|container)\b|skipping kernel modules load due to user namespace"),
        requires=(r"\b(?:lxc|lxd|incus|pve|proxmox)\b|\bpct |/etc/pve/|/var/lib/lxc/",),
        demotes=("container_device_missing",),
        root_cause=(
            "Docker runs nested in an unprivileged LXC container, whose user namespace does not let the NVIDIA "
            "container runtime manage device cgroups (cgroup v2 BPF device filters, v1 devices.allow): every GPU "
            "container start fails there, though nvidia-smi works in the LXC."
        ),
        fix=(
            "Inside the LXC set `no-cgroups = true` under [nvidia-container-cli] in "
            "/etc/nvidia-container-runtime/config.toml, give the LXC the GPU nodes in its config (devN entries, or "
            "lxc.cgroup2.devices.allow plus lxc.mount.entry lines in /etc/pve/lxc/<vmid>.conf), and pass them to "
            "docker with `--device /dev/nvidiaX` (or CDI specs)."
        ),
        examples=(
            "root@pve:~# cat /etc/pve/lxc/105.conf\nunprivileged: 1\n"
            "nvidia-container-cli: mount error: failed to add device rules: unable to find any "
            "existing device filters attached to the cgroup: bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not "
            "permitted: unknown",
        ),
    ),
)
