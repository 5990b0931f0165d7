"""`lxc.create`: create the container through the Proxmox API (never touching a foreign one)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field, field_validator

from provisioner import validate
from provisioner.events import Event
from provisioner.proxmox.lxc_conf import parse_property_string
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import OWNER_TAG, target_vmid
from provisioner.steps.pve_ops import call, node_name


class Net(Params):
    bridge: str = "vmbr0"
    ip: str = Field("dhcp", description="dhcp or CIDR, e.g. 10.0.0.50/24")
    gw: str | None = None

    @field_validator("bridge")
    @classmethod
    def _bridge(cls, v: str) -> str:
        if not v.isalnum():
            raise ValueError(f"not a bridge name: {v!r}")
        return v

    @field_validator("ip")
    @classmethod
    def _ip(cls, v: str) -> str:
        if v in ("dhcp", "manual"):
            return v
        addr, _, prefix = v.partition("/")
        if not validate.IPV4_RE.match(addr) or not prefix.isdigit() or not 0 < int(prefix) <= 32:
            raise ValueError(f"not dhcp or an IPv4 CIDR: {v!r}")
        return v

    @field_validator("gw")
    @classmethod
    def _gw(cls, v: str | None) -> str | None:
        if v is not None and not validate.IPV4_RE.match(v):
            raise ValueError(f"not an IPv4 gateway: {v!r}")
        return v

    def property_string(self) -> str:
        parts = ["name=eth0", f"bridge={self.bridge}", f"ip={self.ip}"]
        if self.gw:
            parts.append(f"gw={self.gw}")
        return ",".join([*parts, "type=veth"])


class CreateParams(Params):
    vmid: int | None = Field(None, description="Container id; default: the playbook target's container.")
    template: str = Field("local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst",
                          description="Template volume id (storage:vztmpl/file).")
    download_template: bool = Field(False, description="Download the template via aplinfo when missing.")
    hostname: validate.HostName = "gpu-ct"
    cores: int = Field(8, ge=1, le=8192)
    memory: int = Field(65536, ge=16, description="MiB")
    swap: int = Field(0, ge=0, description="MiB")
    rootfs_storage: validate.StorageId = "local-lvm"
    rootfs_size_gb: int = Field(64, ge=1, le=65536)
    net: Net = Net()
    unprivileged: bool = True
    nesting: bool = True
    ssh_public_key_file: str | None = Field(None, description="Public key installed for root in the container.")
    onboot: bool = False

    @field_validator("template")
    @classmethod
    def _template(cls, v: str) -> str:
        storage, sep, rest = v.partition(":")
        if not sep or not rest.startswith("vztmpl/") or "/" in rest[7:] or not rest[7:]:
            raise ValueError(f"template must look like local:vztmpl/<file>, got {v!r}")
        validate.storage(storage)
        return v

    def api_params(self, vmid: int) -> dict[str, Any]:
        params: dict[str, Any] = {
            "vmid": vmid,
            "ostemplate": self.template,
            "hostname": self.hostname,
            "cores": self.cores,
            "memory": self.memory,
            "swap": self.swap,
            "rootfs": f"{self.rootfs_storage}:{self.rootfs_size_gb}",
            "net0": self.net.property_string(),
            "unprivileged": 1 if self.unprivileged else 0,  # always explicit: PVE 9 changed the default
            "features": "nesting=1" if self.nesting else "nesting=0",
            "onboot": 1 if self.onboot else 0,
            "tags": OWNER_TAG,
            "start": 0,
        }
        return params

    def comparable(self) -> dict[str, str]:
        """The settings an existing container must have for this step to call it 'the same'."""
        return {
            "hostname": self.hostname,
            "cores": str(self.cores),
            "memory": str(self.memory),
            "swap": str(self.swap),
            "unprivileged": "1" if self.unprivileged else "0",
            "net0.bridge": self.net.bridge,
            "net0.ip": self.net.ip,
        }


def _existing_comparable(config: dict[str, Any]) -> dict[str, str]:
    net = parse_property_string(str(config.get("net0", "")))
    return {
        "hostname": str(config.get("hostname", "")),
        "cores": str(config.get("cores", "")),
        "memory": str(config.get("memory", "512")),
        "swap": str(config.get("swap", "512")),
        "unprivileged": str(config.get("unprivileged", "0")),
        "net0.bridge": net.get("bridge", ""),
        "net0.ip": net.get("ip", ""),
    }


async def choose_vmid(ctx: StepContext, vmid: int | None) -> int:
    """The step's vmid; with none given anywhere, the next free id from /cluster/nextid (then recorded)."""
    if vmid is not None or ctx.playbook.target.container is not None or ctx.resolved.get("vmid") or \
            ctx.state.vmid:
        return target_vmid(ctx, vmid)
    chosen = int(await call(ctx, "next free vmid", ctx.pve().nextid))
    ctx.state.vmid = chosen
    return chosen


async def container_exists(ctx: StepContext, vmid: int) -> dict[str, Any] | None:
    client = ctx.pve()
    cts = await call(ctx, "list containers", client.list_cts, node_name(ctx))
    for ct in cts:
        if int(ct.get("vmid", -1)) == vmid:
            config: dict[str, Any] = await call(ctx, f"read CT {vmid} config", client.ct_config, vmid, node_name(ctx))
            return config
    return None


@register
class LxcCreate(StepKind[CreateParams]):
    """Create the container through the Proxmox API; never modify or destroy an existing one."""

    kind = "lxc.create"
    title = "Create the LXC container"
    Params = CreateParams

    async def check(self, ctx: StepContext) -> Plan:
        vmid = await choose_vmid(ctx, self.params.vmid)
        existing = await container_exists(ctx, vmid)
        if existing is not None:
            want = self.params.comparable()
            have = _existing_comparable(existing)
            diff = [f"{k}: existing {have[k]!r}, playbook {want[k]!r}" for k in want if have[k] != want[k]]
            if diff:
                foreign = have["hostname"] != want["hostname"]
                raise StepFailed(
                    f"CT {vmid} already exists on {node_name(ctx)} with a different "
                    f"{'hostname (not ours)' if foreign else 'spec'}; it is left untouched:\n  " + "\n  ".join(diff),
                    fix=f"choose another container id in the playbook, or align the playbook with CT {vmid}",
                    exit_code=1)
            ctx.state.ct_created = False
            return Plan.no_change(f"CT {vmid} ({have['hostname']}) exists with the same spec")
        changes = []
        storage, _, volume = self.params.template.partition(":")
        content = await call(ctx, "list templates", ctx.pve().storage_content, storage, "vztmpl", node_name(ctx))
        if not any(item.get("volid") == self.params.template for item in content):
            if not self.params.download_template:
                raise StepFailed(f"template {self.params.template} is not on storage {storage}",
                                 fix="set download_template: true, or `pveam download "
                                     f"{storage} {volume.removeprefix('vztmpl/')}` on the node", exit_code=1)
            changes.append(f"download template {volume.removeprefix('vztmpl/')} to {storage}")
        p = self.params
        changes.append(f"create CT {vmid} '{p.hostname}': {p.cores} cores, {p.memory} MiB RAM, {p.swap} MiB swap, "
                       f"rootfs {p.rootfs_storage}:{p.rootfs_size_gb}G, net0 {p.net.property_string()}, "
                       f"{'unprivileged' if p.unprivileged else 'privileged'}")
        return Plan(changes=changes)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        vmid = target_vmid(ctx, self.params.vmid)
        client = ctx.pve()
        node = node_name(ctx)
        storage, _, volume = self.params.template.partition(":")
        content = await call(ctx, "list templates", client.storage_content, storage, "vztmpl", node)
        if not any(item.get("volid") == self.params.template for item in content):
            yield ctx.info(f"downloading template {volume} via aplinfo")
            upid = await call(ctx, "download template", client.download_template, storage,
                              volume.removeprefix("vztmpl/"), node)
            await call(ctx, "download template", client.wait_task, node, upid, 1800)
        params = self.params.api_params(vmid)
        if self.params.ssh_public_key_file:
            from pathlib import Path

            params["ssh-public-keys"] = Path(self.params.ssh_public_key_file).expanduser().read_text().strip()
        yield ctx.info(f"creating CT {vmid}")
        upid = await call(ctx, f"create CT {vmid}", client.create_ct, node, params)
        yield ctx.info(f"task {upid}")
        await call(ctx, f"create CT {vmid}", client.wait_task, node, upid, 900)
        ctx.state.ct_created = True

    async def verify(self, ctx: StepContext) -> None:
        vmid = target_vmid(ctx, self.params.vmid)
        existing = await container_exists(ctx, vmid)
        if existing is None:
            raise StepFailed(f"CT {vmid} does not exist after creation")
        have = _existing_comparable(existing)
        want = self.params.comparable()
        bad = [k for k in want if have[k] != want[k]]
        if bad:
            raise StepFailed(f"CT {vmid} was created but differs in {', '.join(bad)}")

    def resolved(self, ctx: StepContext) -> dict[str, Any]:
        return {"vmid": ctx.vmid} if ctx.playbook.target.container is None else {}
