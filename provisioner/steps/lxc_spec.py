"""Change what we own: the in-place update of a container carrying our tag whose spec differs.

`lxc.create` finds CT <vmid> ours (`ownership.is_ours`) but not as the playbook asks. Like Terraform's
in-place update, the difference becomes a plan (`cores 64 → 32`) and, once confirmed, API calls:

- `PUT /nodes/{node}/lxc/{vmid}/config` (`pct set`) for hostname, cores, memory, swap, onboot (when this
  step owns it: `manages_onboot`), net0 and features. On a running container PVE applies cores/hostname/onboot at once (`$LXC_FASTPLUG_OPTIONS`),
  memory/swap through the cgroup and net0 through `update_net` (`vmconfig_hotplug_pending`,
  pve-container src/PVE/LXC/Config.pm); features stay pending until the container's next start.
- `PUT /nodes/{node}/lxc/{vmid}/resize` (`pct resize <vmid> rootfs <size>`) to grow the root disk.

Refused, with PVE's own reason (and never sent): a smaller disk (`resize_vm`: "unable to shrink disk
size"), another `unprivileged` (`update_pct_config`: "unable to modify read-only option:
'unprivileged'") and another rootfs storage (that is `pct move-volume`, a copy, not a config edit).

The net0 and features values sent keep every property the playbook does not name (the MAC address
`hwaddr` above all: PVE generates a new one when it is missing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioner.proxmox.lxc_conf import format_property_string, parse_property_string
from provisioner.steps import ownership


@dataclass
class SpecUpdate:
    """What it takes to bring an existing container of ours to the playbook's spec."""

    vmid: int
    config: dict[str, str] = field(default_factory=dict)  # PUT …/config parameters
    resize_gb: int | None = None  # PUT …/resize rootfs to this size
    changes: list[str] = field(default_factory=list)  # `cores 64 → 32`, as the plan shows them
    refused: list[str] = field(default_factory=list)  # differences PVE cannot apply in place, with why

    @property
    def empty(self) -> bool:
        return not self.config and self.resize_gb is None and not self.refused

    def commands(self) -> list[str]:
        """The changes as the commands that make them (`plan --json`): `pct` spelling of the API calls."""
        out: list[str] = []
        if self.config:
            out.append(f"pct set {self.vmid} " + " ".join(f"--{k} {v}" for k, v in self.config.items()))
        if self.resize_gb is not None:
            out.append(f"pct resize {self.vmid} rootfs {self.resize_gb}G")
        return out


def _flag(value: object, default: str = "0") -> str:
    text = str(value if value is not None else default)
    return "1" if text in ("1", "true", "True") else "0"


def _net_value(existing: dict[str, str], bridge: str, ip: str, gw: str | None) -> str:
    """net0 with the playbook's bridge/ip/gw and every other existing property (hwaddr, name, type…) kept."""
    merged = dict(existing) or {"name": "eth0", "type": "veth"}
    merged["bridge"], merged["ip"] = bridge, ip
    if gw:
        merged["gw"] = gw
    else:
        merged.pop("gw", None)
    return format_property_string(merged)


def _short_net(net: dict[str, str]) -> str:
    return ",".join(f"{k}={net[k]}" for k in ("bridge", "ip", "gw") if net.get(k))


def manages_onboot(params: Any, steps: Sequence[Any]) -> bool:
    """`onboot` is one fact with one owner: `lxc.create` updates it only when its params name it and no
    `lxc.boot_persistence` step of the playbook sets it (that later step keeps it, drift included)."""
    return "onboot" in params.model_fields_set and not any(
        s.kind == "lxc.boot_persistence" and s.params.get("onboot") is not None for s in steps)


def plan_update(params: Any, config: Mapping[str, object], vmid: int, *, onboot: bool = True) -> SpecUpdate:
    """The update from `config` (GET …/config of CT `vmid`) to the `lxc.create` parameters `params`;
    `onboot`: whether this step owns `onboot` (`manages_onboot`)."""
    upd = SpecUpdate(vmid=vmid)

    def scalar(key: str, have: str, want: str) -> None:
        if have != want:
            upd.config[key] = want
            upd.changes.append(f"{key} {have or '(unset)'} → {want}")

    scalar("hostname", str(config.get("hostname", "")), params.hostname)
    scalar("cores", str(config.get("cores", "")), str(params.cores))
    scalar("memory", str(config.get("memory", "512")), str(params.memory))  # PVE's defaults where absent
    scalar("swap", str(config.get("swap", "512")), str(params.swap))
    if onboot:
        scalar("onboot", _flag(config.get("onboot")), "1" if params.onboot else "0")

    net = parse_property_string(str(config.get("net0", "")))
    want_net = {"bridge": params.net.bridge, "ip": params.net.ip, **({"gw": params.net.gw} if params.net.gw else {})}
    if _short_net(net) != _short_net(want_net):
        upd.config["net0"] = _net_value(net, params.net.bridge, params.net.ip, params.net.gw)
        upd.changes.append(f"net0 {_short_net(net) or '(none)'} → {_short_net(want_net)}")

    wanted_features = "nesting=1" if params.nesting else "nesting=0"  # what `api_params` creates
    have_f = ownership.features_of(str(config.get("features", "")))
    want_f = ownership.features_of(wanted_features)
    differ = [k for k in sorted(set(have_f) | set(want_f)) if have_f.get(k, "") != want_f.get(k, "")]
    if differ:
        upd.config["features"] = wanted_features
        said = ", ".join(f"{k.removeprefix('features.')}={have_f.get(k) or '(unset)'} → "
                         f"{want_f.get(k) or '(unset)'}" for k in differ)
        upd.changes.append(f"features {said} (takes effect at the container's next start)")

    have_unpriv = _flag(config.get("unprivileged"))
    want_unpriv = "1" if params.unprivileged else "0"
    if have_unpriv != want_unpriv:
        upd.refused.append(f"unprivileged {have_unpriv} → {want_unpriv}: PVE fixes this when the container is "
                           "created (\"unable to modify read-only option: 'unprivileged'\")")

    have = ownership.spec_of_config(config)
    if have["rootfs.storage"] != params.rootfs_storage:
        upd.refused.append(f"rootfs storage {have['rootfs.storage']} → {params.rootfs_storage}: moving a disk "
                           "copies it (pct move-volume), it is not a config change")
    size = ownership.size_gb(parse_property_string(str(config.get("rootfs", "")), "volume").get("size", ""))
    if size is not None and abs(size - params.rootfs_size_gb) > 1e-9:
        if params.rootfs_size_gb > size:
            upd.resize_gb = params.rootfs_size_gb
            upd.changes.append(f"rootfs {size:g}G → {params.rootfs_size_gb}G (grow the disk)")
        else:
            upd.refused.append(f"rootfs {size:g}G → {params.rootfs_size_gb}G: PVE cannot shrink a container "
                               "disk (\"unable to shrink disk size\")")
    return upd
