"""Is an existing container ours? Owner tag and spec, and our own half-created container.

`lxc.create` adopts an existing container only when it carries our owner tag AND matches the
playbook's spec (hostname, cores, memory, swap, privilege, network, rootfs storage and size,
every feature: nesting, keyctl, fuse, mknod, mount, force_rw_sys). A container with our hostname
and spec but without the tag belongs to someone else.

A create that timed out (scenario `api-timeout`, a stuck pvedaemon worker) leaves a config
holding only `lock: create` — PVE writes it first (`PVE::LXC::Config->create_and_lock_config`)
and the full config only when the worker finishes. To recognise such a container as ours, the step
writes a marker on the node (`/etc/gpu-provisioner/creating/<vmid>.json`, beside our config
backups) before it asks PVE to create, and adds the task's UPID once PVE answers. A later replay
reads the marker, asks PVE about that task, and either waits for it, or (task ended without
finishing the container) removes the empty container and creates it again.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from provisioner.proxmox.lxc_conf import parse_property_string
from provisioner.proxmox.tasks import decode_upid, exitstatus_is_ok
from provisioner.steps.base import StepFailed
from provisioner.steps.context import StepContext
from provisioner.steps.pve_ops import call, node_name
from provisioner.steps.state import HalfCreated

OWNER_TAG = "gpu-provisioner"
MARKER_DIR = "/etc/gpu-provisioner/creating"
_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([KMGT]?)\Z")
_SIZE_GB = {"K": 1 / 1024 / 1024, "M": 1 / 1024, "G": 1.0, "T": 1024.0, "": 1 / 1024 / 1024 / 1024}


def tags_of(config: Mapping[str, object]) -> set[str]:
    """PVE's `pve-tag-list`: tags separated by `;`, `,` or spaces."""
    return {t for t in re.split(r"[;,\s]+", str(config.get("tags", ""))) if t}


def is_ours(config: Mapping[str, object]) -> bool:
    return OWNER_TAG in tags_of(config)


def is_half_created(config: Mapping[str, object]) -> bool:
    return str(config.get("lock", "")) == "create"


def size_gb(value: str) -> float | None:
    """`200G` → 200.0, `512M` → 0.5 (PVE's disk size notation; a bare number is bytes)."""
    m = _SIZE_RE.fullmatch(value.strip())
    return float(m.group(1)) * _SIZE_GB[m.group(2)] if m else None


#: every key of PVE's `features` property (pve-schema, lxc config `features`: booleans default 0, `mount` a
#: `fstype;fstype` list); an adopted container must have each one as the playbook creates it.
FEATURE_BOOLEANS = ("force_rw_sys", "fuse", "keyctl", "mknod", "nesting")
_TRUE = {"1", "yes", "on", "true"}  # PVE::JSONSchema's boolean parse (case-insensitive)
_FALSE = {"0", "no", "off", "false"}


def _feature_bool(value: str) -> str:
    low = value.strip().lower()
    return "1" if low in _TRUE else "0" if low in _FALSE else value


def features_of(value: str) -> dict[str, str]:
    """`nesting=1,keyctl=yes,mount=nfs;cifs` → every feature key, normalised (absent: PVE's default)."""
    given = parse_property_string(value)
    out = {f"features.{k}": _feature_bool(given.get(k, "0")) for k in FEATURE_BOOLEANS}
    out["features.mount"] = ";".join(sorted(x for x in given.get("mount", "").split(";") if x))
    for key in sorted(set(given) - {*FEATURE_BOOLEANS, "mount"}):  # a key this tool does not know is a difference
        out[f"features.{key}"] = given[key]
    return out


def spec_of_config(config: Mapping[str, object]) -> dict[str, str]:
    """The comparable settings of an existing container (PVE's defaults where a key is absent)."""
    net = parse_property_string(str(config.get("net0", "")))
    rootfs = parse_property_string(str(config.get("rootfs", "")), "volume")
    size = size_gb(rootfs.get("size", ""))
    return {
        "hostname": str(config.get("hostname", "")),
        "cores": str(config.get("cores", "")),
        "memory": str(config.get("memory", "512")),
        "swap": str(config.get("swap", "512")),
        "unprivileged": str(config.get("unprivileged", "0")),
        "net0.bridge": net.get("bridge", ""),
        "net0.ip": net.get("ip", ""),
        "rootfs.storage": rootfs.get("volume", "").split(":", 1)[0],
        "rootfs.size_gb": f"{size:g}" if size is not None else "",
        **features_of(str(config.get("features", ""))),
    }


def spec_of_params(p: Any) -> dict[str, str]:
    """The same settings as the playbook's `lxc.create` parameters ask for them."""
    return {
        "hostname": p.hostname,
        "cores": str(p.cores),
        "memory": str(p.memory),
        "swap": str(p.swap),
        "unprivileged": "1" if p.unprivileged else "0",
        "net0.bridge": p.net.bridge,
        "net0.ip": p.net.ip,
        "rootfs.storage": p.rootfs_storage,
        "rootfs.size_gb": f"{float(p.rootfs_size_gb):g}",
        **features_of("nesting=1" if p.nesting else "nesting=0"),  # what `api_params` creates
    }


def differences(params: Any, config: Mapping[str, object]) -> list[str]:
    want, have = spec_of_params(params), spec_of_config(config)
    return [f"{k}: existing {have.get(k, '')!r}, playbook {want.get(k, '')!r}"
            for k in dict.fromkeys([*want, *have]) if have.get(k, "") != want.get(k, "")]


# --- the create marker on the node ------------------------------------------------------------------

def marker_path(vmid: int) -> str:
    return f"{MARKER_DIR}/{int(vmid)}.json"


async def write_marker(ctx: StepContext, vmid: int, hostname: str, upid: str | None = None) -> None:
    doc = {"vmid": vmid, "hostname": hostname, "upid": upid, "started": int(time.time()),
           "controller": socket.gethostname(), "tool": OWNER_TAG}
    await ctx.node.run(["mkdir", "-p", MARKER_DIR], timeout=30, check=True, quiet=True)
    await ctx.node.write_file(marker_path(vmid), json.dumps(doc).encode(), timeout=30)


class CreateMarker(BaseModel):
    """The marker `write_marker` leaves on the node while our create runs (read back to adopt a half-created CT)."""

    model_config = ConfigDict(extra="allow")

    vmid: int | None = None
    hostname: str | None = None
    upid: str | None = None  # absent until the create call answered
    started: int = 0
    controller: str | None = None
    tool: str | None = None


async def read_marker(ctx: StepContext, vmid: int) -> CreateMarker | None:
    result = await ctx.node.run(["cat", marker_path(vmid)], timeout=30, quiet=True)
    if not result.ok:
        return None
    try:
        marker = CreateMarker.model_validate_json(result.output)
    except ValidationError:
        return None
    if marker.tool != OWNER_TAG or marker.vmid != vmid:
        return None
    return marker


async def clear_marker(ctx: StepContext, vmid: int) -> None:
    await ctx.node.run(["rm", "-f", marker_path(vmid)], timeout=30, quiet=True)


def _is_create_task(upid: str, vmid: int) -> bool:
    try:
        task = decode_upid(upid)
    except ValueError:
        return False
    return task.type == "vzcreate" and task.id == str(vmid)


async def half_created(ctx: StepContext, vmid: int, hostname: str) -> HalfCreated | None:
    """Our half-created container `vmid` (marker on the node for this hostname), or None when the
    marker is missing: then the `lock: create` container is someone else's."""
    marker = await read_marker(ctx, vmid)
    if marker is None or marker.hostname != hostname:
        return None
    client = ctx.pve()
    upid = marker.upid
    if upid is None or not _is_create_task(upid, vmid):
        # The create call itself did not answer: look for a vzcreate task of this vmid since the marker.
        tasks = await call(ctx, "list tasks", client.list_tasks, node_name(ctx), vmid=vmid, typefilter="vzcreate")
        since = marker.started - 5
        mine = [t for t in tasks if int(t.get("starttime", 0)) >= since and _is_create_task(str(t.get("upid")), vmid)]
        if not mine:
            return HalfCreated(vmid, None, "unknown")
        upid = str(max(mine, key=lambda t: int(t.get("starttime", 0)))["upid"])
    try:
        status = await call(ctx, "create task status", client.task_status, node_name(ctx), upid)
    except StepFailed:  # a task PVE no longer knows (rotated task log): treat it as ended
        return HalfCreated(vmid, upid, "unknown")
    if status.get("status") != "stopped":
        return HalfCreated(vmid, upid, "running")
    exitstatus = str(status.get("exitstatus") or "unexpected status")
    return HalfCreated(vmid, upid, "ok" if exitstatus_is_ok(exitstatus) else "failed", exitstatus)
