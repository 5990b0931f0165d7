"""`lxc.create`: create the container through the Proxmox API (never touching a foreign one).

A container is adopted only when it carries our tag and the playbook's spec (`steps/ownership.py`);
a container we half-created (the create task timed out: `lock: create`) is recognised by the marker
written on the node before the API call, and is waited for or removed and created again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import Field, field_validator, model_validator

from provisioner import secrets, validate
from provisioner.events import Event
from provisioner.exitcodes import ExitCode
from provisioner.payloads import JsonObject, TemplateRecord
from provisioner.steps import lxc_spec, ownership
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import OWNER_TAG, target_vmid
from provisioner.steps.pve_ops import call, node_name
from provisioner.steps.task_wait import wait_task


class Net(Params):
    """net0 as a mapping, or in PVE's own syntax: `bridge=vmbr0,ip=192.0.2.200/24,gw=192.0.2.1`."""

    bridge: validate.BridgeName = "vmbr0"
    ip: str = Field("dhcp", description="dhcp or CIDR, e.g. 10.0.0.50/24")
    gw: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _pve_syntax(cls, v: Any) -> Any:
        parsed = validate.pve_property_string(v, allowed=("name", "bridge", "ip", "gw", "type"))
        if isinstance(parsed, dict) and isinstance(v, str):
            if parsed.pop("name", "eth0") != "eth0" or parsed.pop("type", "veth") != "veth":
                raise ValueError("only name=eth0 and type=veth are created (net0 of the container)")
        return parsed

    def pve_text(self) -> str:
        """What the wizard's field shows: PVE's syntax, as the plan prints it."""
        return ",".join([f"bridge={self.bridge}", f"ip={self.ip}", *([f"gw={self.gw}"] if self.gw else [])])

    @field_validator("ip")
    @classmethod
    def _ip(cls, v: str) -> str:
        if v in ("dhcp", "manual"):
            return v
        return validate.ipv4_cidr(v)

    @field_validator("gw")
    @classmethod
    def _gw(cls, v: str | None) -> str | None:
        return None if v is None else validate.ipv4(v)

    def property_string(self) -> str:
        parts = ["name=eth0", f"bridge={self.bridge}", f"ip={self.ip}"]
        if self.gw:
            parts.append(f"gw={self.gw}")
        return ",".join([*parts, "type=veth"])


class CreateParams(Params):
    vmid: validate.Vmid | None = Field(None, description="Container id; default: the playbook target's container.")
    template: str = Field("local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst",
                          description="Template volume id (storage:vztmpl/file).")
    download_template: bool = Field(False, description="Download the template via aplinfo when missing.")
    hostname: validate.HostName = "gpu-ct"
    cores: int = Field(8, ge=1, le=8192)
    memory: int = Field(65536, ge=16, le=validate.MAX_MEMORY_MIB, description="MiB")
    swap: int = Field(0, ge=0, le=validate.MAX_MEMORY_MIB, description="MiB")
    rootfs_storage: validate.StorageId = "local-lvm"
    rootfs_size_gb: int = Field(64, ge=1, le=65536)
    net: Net = Net()
    unprivileged: bool = True
    nesting: bool = True
    ssh_public_key_file: str | None = Field(None, description="Public key installed for root in the container.")
    onboot: bool = False
    task_timeout_s: int = Field(900, ge=5, le=86400,
                                description="How long to wait for PVE's create task (progress is shown meanwhile)")
    download_timeout_s: int = Field(1800, ge=5, le=86400, description="How long to wait for a template download")

    @field_validator("template")
    @classmethod
    def _template(cls, v: str) -> str:
        storage, sep, rest = v.partition(":")
        if not sep or not rest.startswith("vztmpl/") or not validate.TEMPLATE_FILE_RE.fullmatch(rest[7:]):
            raise ValueError(f"template must look like local:vztmpl/<file>, got {v!r}")
        validate.storage(storage)
        return v

    def api_params(self, vmid: int) -> dict[str, str | int]:
        """The `POST /nodes/{node}/lxc` parameters (without the secrets `apply` adds)."""
        params: dict[str, str | int] = {
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
        return ownership.spec_of_params(self)


def _existing_comparable(config: Mapping[str, object]) -> dict[str, str]:
    return ownership.spec_of_config(config)


def public_key(path: str) -> str:
    """The key lines of `ssh_public_key_file`: a public key only (a private key or /dev/zero is refused)."""
    try:
        return secrets.read_public_key(path)
    except secrets.SecretError as exc:
        raise StepFailed(f"ssh_public_key_file: {exc}", fix="point ssh_public_key_file at a .pub file",
                         exit_code=ExitCode.USAGE) from None


async def choose_vmid(ctx: StepContext, vmid: int | None) -> int:
    """The step's vmid; with none given anywhere, the next free id from /cluster/nextid (then recorded)."""
    if vmid is not None or ctx.playbook.target.container is not None or ctx.resolved.vmid or \
            ctx.state.vmid:
        return target_vmid(ctx, vmid)
    chosen = int(await call(ctx, "next free vmid", ctx.pve().nextid))
    ctx.state.vmid = chosen
    return chosen


async def container_exists(ctx: StepContext, vmid: int) -> Mapping[str, object] | None:
    """The container's config (`GET .../lxc/{vmid}/config`: open PVE JSON, read by key), None when absent."""
    client = ctx.pve()
    cts = await call(ctx, "list containers", client.list_cts, node_name(ctx))
    for ct in cts:
        if int(ct.get("vmid", -1)) == vmid:
            config: Mapping[str, object] = await call(ctx, f"read CT {vmid} config", client.ct_config, vmid, node_name(ctx))
            return config
    return None


def template_record(volid: str, aplinfo: list[Mapping[str, object]] | None) -> TemplateRecord:
    """The template as `resolved.template` records it: its file name and the sha512 PVE's appliance index
    lists for it (`GET /nodes/{node}/aplinfo`, `sha512sum` per template: pve-manager PVE/APLInfo.pm; `pveam
    available` reads the same index); sha512 None for a template the index does not list (a custom one)."""
    name = volid.partition(":")[2].removeprefix("vztmpl/")
    entry = next((e for e in aplinfo or [] if e.get("template") == name), None)
    sha = entry.get("sha512sum") if entry else None
    return TemplateRecord(name=name, sha512=sha if isinstance(sha, str) and sha else None)


def template_drift(recorded: TemplateRecord | None, current: TemplateRecord) -> str | None:
    """A note when the index now lists another sha512 for the recorded template (or another template)."""
    if recorded is None or not recorded.name:
        return None
    if recorded.name != current.name:
        return (f"warning: drift: template {current.name}, the playbook recorded {recorded.name} "
                f"(sha512 {recorded.sha512})")
    if recorded.sha512 and current.sha512 and recorded.sha512 != current.sha512:
        return (f"warning: drift: aplinfo lists template {current.name} with sha512 {current.sha512}, "
                f"the playbook recorded {recorded.sha512}: the index re-published the file")
    return None


@register
class LxcCreate(StepKind[CreateParams]):
    """Create the container through the Proxmox API; update one of ours in place (`steps/lxc_spec.py`);
    never modify or destroy a foreign one."""

    kind = "lxc.create"
    title = "Create the LXC container"
    Params = CreateParams

    async def check(self, ctx: StepContext) -> Plan:
        if self.params.ssh_public_key_file:
            public_key(self.params.ssh_public_key_file)  # refuse a private key before planning anything
        vmid = await choose_vmid(ctx, self.params.vmid)
        existing = await container_exists(ctx, vmid)
        ctx.state.create_resume = None
        changes: list[str] = []
        if existing is not None and ownership.is_half_created(existing):
            half = await ownership.half_created(ctx, vmid, self.params.hostname)
            if half is None:
                raise StepFailed(
                    f"CT {vmid} on {node_name(ctx)} is being created by someone else (lock: create, no marker of "
                    f"gpu-provisioner in {ownership.MARKER_DIR}); it is left untouched",
                    fix=ctx.words.field(self.kind, "vmid", "choose another container id, or finish/remove "
                                                            f"CT {vmid} on the node"), exit_code=ExitCode.FAILED)
            if half.task == "ok":
                existing = await container_exists(ctx, vmid)  # the worker finished since: compare it below
            elif half.task == "running":
                ctx.state.create_resume = half
                return Plan(changes=[f"wait for {half.describe()} (CT {vmid} half-created by an earlier run), "
                                     f"up to {self.params.task_timeout_s} s"])
            else:
                ctx.state.create_resume = half
                changes.append(f"remove our half-created CT {vmid} ({half.describe()}) and create it again")
                existing = None
        if existing is not None and ownership.is_half_created(existing):
            raise StepFailed(f"CT {vmid} is still locked (lock: create) although its create task finished",
                             fix=f"check CT {vmid} on the node (`pct config {vmid}`); `pct unlock {vmid}` if it "
                                 f"is complete, {ctx.words.retry}", exit_code=ExitCode.FAILED)
        if existing is not None:
            if not ownership.is_ours(existing):
                raise StepFailed(
                    f"CT {vmid} already exists on {node_name(ctx)} and is not tagged {ownership.OWNER_TAG!r} (not "
                    "created by gpu-provisioner); it is left untouched:\n  "
                    + "\n  ".join([f"tags: existing {existing.get('tags', '')!r}, ours {ownership.OWNER_TAG!r}",
                                    *ownership.differences(self.params, existing)]),
                    fix=ctx.words.field(self.kind, "vmid", "choose another container id, or remove "
                                                f"CT {vmid} on the node yourself"), exit_code=ExitCode.FAILED)
            ctx.state.ct_created = False
            if not ctx.resolved.template:
                # a playbook without a record, on a CT of ours: the record the install would have written
                # (PVE keeps no ostemplate in the config), so every path's recording holds the same `resolved`
                await self._template(ctx, node_name(ctx))
            update = lxc_spec.plan_update(self.params, existing, vmid,
                                            onboot=lxc_spec.manages_onboot(self.params, ctx.playbook.steps))
            if update.refused:
                raise StepFailed(
                    f"CT {vmid} on {node_name(ctx)} is ours, but these changes cannot be made in place; it is left "
                    "untouched:\n  "
                    + "\n  ".join(update.refused),
                    fix=ctx.words.field(self.kind, "vmid", f"keep CT {vmid}'s values, or choose another "
                                                "container id for a new container"), exit_code=ExitCode.FAILED)
            if update.changes:
                return Plan(changes=[f"update CT {vmid} in place: {c}" for c in update.changes],
                            commands=update.commands())
            return Plan.no_change(f"CT {vmid} ({existing.get('hostname')}) is ours and has the same spec")
        await self._check_rootfs_storage(ctx, node_name(ctx))
        storage, _, volume = self.params.template.partition(":")
        content = await call(ctx, "list templates", ctx.pve().storage_content, storage, "vztmpl", node_name(ctx))
        if not any(item.get("volid") == self.params.template for item in content):
            if not self.params.download_template:
                raise StepFailed(f"template {self.params.template} is not on storage {storage}",
                                 fix="set download_template: true, or `pveam download "
                                     f"{storage} {volume.removeprefix('vztmpl/')}` on the node", exit_code=ExitCode.FAILED)
            changes.append(f"download template {volume.removeprefix('vztmpl/')} to {storage}")
        notes = await self._template(ctx, node_name(ctx))
        p = self.params
        changes.append(f"create CT {vmid} '{p.hostname}': {p.cores} cores, {p.memory} MiB RAM, {p.swap} MiB swap, "
                       f"rootfs {p.rootfs_storage}:{p.rootfs_size_gb}G, net0 {p.net.property_string()}, "
                       f"{'unprivileged' if p.unprivileged else 'privileged'}")
        return Plan(changes=changes, notes=notes)

    async def _check_rootfs_storage(self, ctx: StepContext, node: str) -> None:
        """Refuse, before any change, a rootfs storage the node does not list for container disks (content
        ``rootdir``), naming the field and the storages that fit. A listing that cannot be read checks nothing
        (the create then reports what PVE answers)."""
        try:
            stores = await call(ctx, "list storages", ctx.pve().storages, node, "rootdir")
        except StepFailed:
            return
        names = sorted({s["storage"] for s in stores if isinstance(s, dict) and isinstance(s.get("storage"), str)
                        and validate.STORAGE_RE.fullmatch(s["storage"]) is not None})
        if not names or self.params.rootfs_storage in names:
            return
        raise StepFailed(f"storage {self.params.rootfs_storage!r} does not hold container disks on {node} "
                         f"(storages that do: {', '.join(names)})",
                         fix=ctx.words.field(self.kind, "rootfs_storage",
                                             f"choose one the node has ({', '.join(names)})") + f", {ctx.words.retry}",
                         exit_code=ExitCode.FAILED)

    async def _template(self, ctx: StepContext, node: str) -> list[str]:
        """The template's record (name, aplinfo sha512) for `resolved.template`, and a note when it differs
        from the playbook's. An index that cannot be read leaves the name alone recorded."""
        try:
            apl: list[Mapping[str, object]] | None = await call(ctx, "read aplinfo", ctx.pve().aplinfo, node)
        except StepFailed:
            apl = None
        ctx.state.template = template_record(self.params.template, apl)
        drift = template_drift(ctx.resolved.template, ctx.state.template)
        return [drift] if drift else []

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        vmid = target_vmid(ctx, self.params.vmid)
        client = ctx.pve()
        node = node_name(ctx)
        half, ctx.state.create_resume = ctx.state.create_resume, None  # check's finding, used once
        existing = None if half is not None else await container_exists(ctx, vmid)
        if existing is not None:  # ours (check refused anything else): the in-place update check planned
            update = lxc_spec.plan_update(self.params, existing, vmid,
                                            onboot=lxc_spec.manages_onboot(self.params, ctx.playbook.steps))
            if update.config:
                yield ctx.info(f"CT {vmid}: " + "; ".join(c for c in update.changes if not c.startswith("rootfs")))
                await call(ctx, f"update CT {vmid}", client.set_config, vmid, update.config, node=node)
            if update.resize_gb is not None:
                yield ctx.info(f"CT {vmid}: grow rootfs to {update.resize_gb}G")
                upid = await call(ctx, f"resize CT {vmid}", client.resize_ct, vmid, "rootfs",
                                  f"{update.resize_gb}G", node)
                await wait_task(ctx, f"resize CT {vmid}", upid, self.params.task_timeout_s)
            return
        if half is not None:
            if half.task == "running" and half.upid:
                yield ctx.info(f"CT {vmid}: {half.describe()}; waiting for it")
                await wait_task(ctx, f"create CT {vmid}", half.upid, self.params.task_timeout_s)
                await ownership.clear_marker(ctx, vmid)
                ctx.state.ct_created = True
                return
            yield ctx.info(f"CT {vmid}: {half.describe()}; removing the empty container to create it again")
            await ctx.node.run(["pct", "unlock", str(vmid)], timeout=60, check=True)
            upid = await call(ctx, f"remove half-created CT {vmid}", client.delete_ct, vmid, node, True)
            await wait_task(ctx, f"remove half-created CT {vmid}", upid, self.params.task_timeout_s)
        storage, _, volume = self.params.template.partition(":")
        content = await call(ctx, "list templates", client.storage_content, storage, "vztmpl", node)
        if not any(item.get("volid") == self.params.template for item in content):
            yield ctx.info(f"downloading template {volume} via aplinfo")
            upid = await call(ctx, "download template", client.download_template, storage,
                              volume.removeprefix("vztmpl/"), node)
            await wait_task(ctx, "download template", upid, self.params.download_timeout_s)
        params = self.params.api_params(vmid)
        if self.params.ssh_public_key_file:
            params["ssh-public-keys"] = public_key(self.params.ssh_public_key_file)
        # The marker goes first: should PVE's answer never come, a replay still knows the CT is ours.
        await ownership.write_marker(ctx, vmid, self.params.hostname)
        yield ctx.info(f"creating CT {vmid}")
        upid = await call(ctx, f"create CT {vmid}", client.create_ct, node, params)
        await ownership.write_marker(ctx, vmid, self.params.hostname, upid)
        yield ctx.info(f"task {upid}")
        await wait_task(ctx, f"create CT {vmid}", upid, self.params.task_timeout_s)
        await ownership.clear_marker(ctx, vmid)
        ctx.state.ct_created = True

    async def verify(self, ctx: StepContext) -> None:
        vmid = target_vmid(ctx, self.params.vmid)
        existing = await container_exists(ctx, vmid)
        if existing is None:
            raise StepFailed(f"CT {vmid} does not exist after creation")
        bad = ownership.differences(self.params, existing)
        if not ownership.is_ours(existing):
            bad.insert(0, f"tags {existing.get('tags', '')!r} lack {ownership.OWNER_TAG!r}")
        if ownership.is_half_created(existing):
            bad.insert(0, "still locked (lock: create)")
        if bad:
            raise StepFailed(f"CT {vmid} was created but differs: " + "; ".join(bad))

    def resolved(self, ctx: StepContext) -> JsonObject:
        out: JsonObject = {"vmid": ctx.vmid} if ctx.playbook.target.container is None else {}
        template = ctx.state.template or ctx.resolved.template  # an existing CT keeps its record
        if template:
            out["template"] = template.dump()
        return out
