"""`lxc.create`, `lxc.gpu_passthrough`, `lxc.start`: the container and every GPU passed into it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from provisioner import quoting, secrets, validate
from provisioner.events import Event
from provisioner.facts import catalog, nvidia
from provisioner.proxmox.lxc_conf import LxcConfig, parse_property_string
from provisioner.steps import ownership
from provisioner.steps.base import DependsOnEarlier, Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.node import gather_inventory
from provisioner.steps.pve_ops import call, node_name
from provisioner.steps.task_wait import wait_task

OWNER_TAG = ownership.OWNER_TAG
BACKUP_DIR = "/etc/gpu-provisioner/backups"  # node config files are copied here before an edit


# --- lxc.create ------------------------------------------------------------------------------------

class Net(Params):
    bridge: validate.BridgeName = "vmbr0"
    ip: str = Field("dhcp", description="dhcp or CIDR, e.g. 10.0.0.50/24")
    gw: str | None = None

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
        return ownership.spec_of_params(self)


def _existing_comparable(config: dict[str, Any]) -> dict[str, str]:
    return ownership.spec_of_config(config)


def public_key(path: str) -> str:
    """The key lines of `ssh_public_key_file`: a public key only (a private key or /dev/zero is refused)."""
    try:
        return secrets.read_public_key(path)
    except secrets.SecretError as exc:
        raise StepFailed(f"ssh_public_key_file: {exc}", fix="point ssh_public_key_file at a .pub file",
                         exit_code=2) from None


def target_vmid(ctx: StepContext, vmid: int | None) -> int:
    if vmid is not None:
        if ctx.playbook.target.container not in (None, vmid):
            raise StepFailed(f"step vmid {vmid} differs from the playbook's target container "
                             f"{ctx.playbook.target.container}", exit_code=2)
        return vmid
    return ctx.vmid


async def choose_vmid(ctx: StepContext, vmid: int | None) -> int:
    """The step's vmid; with none given anywhere, the next free id from /cluster/nextid (then recorded)."""
    if vmid is not None or ctx.playbook.target.container is not None or ctx.resolved.get("vmid") or \
            ctx.shared.get("vmid"):
        return target_vmid(ctx, vmid)
    chosen = int(await call(ctx, "next free vmid", ctx.pve().nextid))
    ctx.shared["vmid"] = chosen
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
        if self.params.ssh_public_key_file:
            public_key(self.params.ssh_public_key_file)  # refuse a private key before planning anything
        vmid = await choose_vmid(ctx, self.params.vmid)
        existing = await container_exists(ctx, vmid)
        ctx.shared.pop("create_resume", None)
        changes: list[str] = []
        if existing is not None and ownership.is_half_created(existing):
            half = await ownership.half_created(ctx, vmid, self.params.hostname)
            if half is None:
                raise StepFailed(
                    f"CT {vmid} on {node_name(ctx)} is being created by someone else (lock: create, no marker of "
                    f"gpu-provisioner in {ownership.MARKER_DIR}); it is left untouched",
                    fix=f"choose another container id, or finish/remove CT {vmid} on the node", exit_code=1)
            if half.task == "ok":
                existing = await container_exists(ctx, vmid)  # the worker finished since: compare it below
            elif half.task == "running":
                ctx.shared["create_resume"] = half
                return Plan(changes=[f"wait for {half.describe()} (CT {vmid} half-created by an earlier run), "
                                     f"up to {self.params.task_timeout_s} s"])
            else:
                ctx.shared["create_resume"] = half
                changes.append(f"remove our half-created CT {vmid} ({half.describe()}) and create it again")
                existing = None
        if existing is not None and ownership.is_half_created(existing):
            raise StepFailed(f"CT {vmid} is still locked (lock: create) although its create task finished",
                             fix=f"check CT {vmid} on the node (`pct config {vmid}`); `pct unlock {vmid}` if it "
                                 "is complete, then replay", exit_code=1)
        if existing is not None:
            diff = ownership.differences(self.params, existing)
            ours = ownership.is_ours(existing)
            if not ours or diff:
                why = ("is not tagged " + repr(ownership.OWNER_TAG) + " (not created by gpu-provisioner)"
                       if not ours else "has a different spec")
                lines = ([f"tags: existing {existing.get('tags', '')!r}, ours {ownership.OWNER_TAG!r}"]
                         if not ours else []) + diff
                raise StepFailed(
                    f"CT {vmid} already exists on {node_name(ctx)} and {why}; it is left untouched:\n  "
                    + "\n  ".join(lines),
                    fix=f"choose another container id in the playbook, or align the playbook with CT {vmid}",
                    exit_code=1)
            ctx.shared["ct_created"] = False
            return Plan.no_change(f"CT {vmid} ({existing.get('hostname')}) is ours and has the same spec")
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
        half = ctx.shared.pop("create_resume", None)
        if isinstance(half, ownership.HalfCreated):
            if half.task == "running" and half.upid:
                yield ctx.info(f"CT {vmid}: {half.describe()}; waiting for it")
                await wait_task(ctx, f"create CT {vmid}", half.upid, self.params.task_timeout_s)
                await ownership.clear_marker(ctx, vmid)
                ctx.shared["ct_created"] = True
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
        ctx.shared["ct_created"] = True

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

    def resolved(self, ctx: StepContext) -> dict[str, Any]:
        return {"vmid": ctx.vmid} if ctx.playbook.target.container is None else {}


# --- lxc.gpu_passthrough ---------------------------------------------------------------------------

class PassthroughParams(Params):
    mode: Literal["auto", "dev", "raw"] = Field("auto", description="dev: PVE ≥ 8.1 devN entries; raw: lxc.* lines")
    gpus: Literal["all"] | list[Annotated[int, Field(ge=0, le=1023)]] = Field(
        "all", description="'all' or a list of GPU indices")
    modeset: bool = Field(True, description="Also pass /dev/nvidia-modeset")
    caps: bool = Field(False, description="Also pass /dev/nvidia-caps (MIG management)")
    dev_mode: str = Field("0666", pattern=r"^0[0-7]{3}$", description="Access mode of devN nodes in the container")


def wanted_devices(inventory: dict[str, Any], params: PassthroughParams) -> list[str]:
    gpus = inventory["gpus"]
    indices = [g["index"] for g in gpus] if params.gpus == "all" else list(params.gpus)
    unknown = [i for i in indices if i not in {g["index"] for g in gpus}]
    if unknown:
        raise StepFailed(f"GPU indices {unknown} are not on the node (it has {[g['index'] for g in gpus]})", exit_code=2)
    devices = [f"/dev/nvidia{i}" for i in sorted(indices)] + ["/dev/nvidiactl", "/dev/nvidia-uvm",
                                                              "/dev/nvidia-uvm-tools"]
    if params.modeset:
        devices.append("/dev/nvidia-modeset")
    if params.caps and inventory.get("caps_major") is not None:
        devices += ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]
    return devices


def raw_lines_for(devices: list[str], inventory: dict[str, Any]) -> list[tuple[str, str]]:
    key = "lxc.cgroup2.devices.allow" if inventory["cgroup_version"] == 2 else "lxc.cgroup.devices.allow"
    majors = [inventory.get("nvidia_major") or 195]
    if inventory.get("uvm_major") is not None:
        majors.append(inventory["uvm_major"])
    if any("nvidia-caps" in d for d in devices) and inventory.get("caps_major") is not None:
        majors.append(inventory["caps_major"])
    lines = [(key, f"c {m}:* rwm") for m in majors]
    for dev in devices:
        if dev.startswith("/dev/nvidia-caps/"):
            continue
        lines.append(("lxc.mount.entry", f"{dev} {dev[1:]} none bind,optional,create=file"))
    if any("nvidia-caps" in d for d in devices):
        lines.append(("lxc.mount.entry", "/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir"))
    return lines


def conf_path(vmid: int) -> str:
    return f"/etc/pve/lxc/{vmid}.conf"


async def read_conf(ctx: StepContext, vmid: int) -> LxcConfig:
    result = await ctx.node.run(["cat", conf_path(vmid)], timeout=30, quiet=True)
    if not result.ok:
        raise DependsOnEarlier(f"CT {vmid} config does not exist yet") if ctx.mode == "plan" else \
            StepFailed(f"cannot read {conf_path(vmid)}: {' '.join(result.tail(2))}")
    return LxcConfig.parse(result.output)


async def ensure_inventory(ctx: StepContext) -> dict[str, Any]:
    inv = ctx.shared.get("inventory")
    if inv is None:
        inv = await gather_inventory(ctx)
        ctx.shared["inventory"] = inv
    return dict(inv)


@register
class LxcGpuPassthrough(StepKind[PassthroughParams]):
    """Pass every GPU plus nvidiactl/uvm/uvm-tools/modeset into the container (devN or raw lines)."""

    kind = "lxc.gpu_passthrough"
    title = "Pass the GPUs through to the container"
    Params = PassthroughParams

    def _mode(self, ctx: StepContext, inv: dict[str, Any]) -> str:
        release = tuple(inv.get("pve_release") or (0, 0))
        if self.params.mode == "dev" and release < (8, 1):
            raise StepFailed(f"devN passthrough needs Proxmox VE ≥ 8.1; this node runs {inv['pve_version']}",
                             fix="use mode: raw (lxc.* lines) or upgrade Proxmox VE", exit_code=2)
        mode = self.params.mode if self.params.mode != "auto" else ("dev" if release >= (8, 1) else "raw")
        target = ctx.playbook.target
        if not target.local and target.ssh.user != "root":
            raise StepFailed(
                f"{mode} passthrough needs root on the node: devN may only be set by root@pam (`pct set` as root "
                "or a root@pam password ticket; PVE refuses API tokens with 403) and raw lxc.* lines need a root edit "
                f"of /etc/pve/lxc/<vmid>.conf; the playbook logs in as {target.ssh.user!r}",
                fix="set target.ssh.user: root (key authentication) for this step", exit_code=2)
        return mode

    async def _plan(self, ctx: StepContext) -> tuple[str, list[str], LxcConfig, list[str], bool]:
        inv = await ensure_inventory(ctx)
        mode = self._mode(ctx, inv)
        devices = wanted_devices(inv, self.params)
        uvm_missing = "/dev/nvidia-uvm" not in inv["device_nodes"] or "/dev/nvidia-uvm-tools" not in inv["device_nodes"]
        conf = await read_conf(ctx, ctx.vmid)
        changes: list[str] = []
        if uvm_missing:
            changes.append("create /dev/nvidia-uvm and /dev/nvidia-uvm-tools on the host (nvidia-modprobe -u -c=0)")
        if mode == "dev":
            have = {parse_property_string(v, "path").get("path") for v in conf.indexed("dev").values()}
            missing = [d for d in devices if d not in have]
            if missing:
                changes.append(f"add devN entries for {', '.join(missing)} (mode {self.params.dev_mode})")
        elif inv.get("uvm_major") is None:
            # nvidia-uvm is not loaded: its dynamic major is only known after nvidia-modprobe loads it.
            changes.append(f"add raw cgroup allow and bind-mount lines for {len(devices)} device nodes to "
                           f"{conf_path(ctx.vmid)} (backup first) once nvidia-uvm is loaded")
        else:
            lines = raw_lines_for(devices, inv)
            have_raw = set(conf.raw_lines())
            missing = [f"{k}: {v}" for k, v in lines if (k, v) not in have_raw]
            if missing:
                changes.append(f"add {len(missing)} raw lines to {conf_path(ctx.vmid)} (backup first): "
                               + "; ".join(missing[:3]) + (" …" if len(missing) > 3 else ""))
        return mode, devices, conf, changes, uvm_missing

    async def check(self, ctx: StepContext) -> Plan:
        mode, devices, _, changes, _ = await self._plan(ctx)
        ctx.shared["passthrough_devices"] = devices
        note = f"mode {mode}: {len(devices)} device nodes"
        return Plan(changes=changes, notes=[note]) if changes else Plan.no_change(note)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        _, _, _, _, uvm_missing = await self._plan(ctx)
        if uvm_missing or ctx.shared["inventory"].get("uvm_major") is None:
            yield ctx.info("loading nvidia-uvm and creating its device nodes on the host (nvidia-modprobe -u -c=0)")
            await ctx.node.run(["nvidia-modprobe", "-u", "-c=0"], timeout=60, check=True)
            ctx.facts.invalidate(ctx.node.name, "dev_nodes", "proc_devices")
            ctx.shared["inventory"] = await gather_inventory(ctx)
        mode, devices, conf, _, _ = await self._plan(ctx)
        vmid = ctx.vmid
        if mode == "dev":
            have = {parse_property_string(v, "path").get("path") for v in conf.indexed("dev").values()}
            used = set(conf.indexed("dev"))
            index = 0
            for dev in devices:
                if dev in have:
                    continue
                while index in used:
                    index += 1
                used.add(index)
                # `pct set` runs as root@pam on the node: the only identity PVE lets set devN
                # (API tokens get 403).
                await ctx.node.run(["pct", "set", str(vmid), f"--dev{index}", f"{dev},mode={self.params.dev_mode}"],
                                   timeout=60, check=True)
        else:
            inv = ctx.shared["inventory"]
            backup_dir = BACKUP_DIR
            stamp = time.strftime("%Y%m%dT%H%M%S")
            await ctx.node.run(["mkdir", "-p", backup_dir], timeout=30, check=True)
            await ctx.node.run(["cp", "-p", conf_path(vmid), f"{backup_dir}/{vmid}.conf.{stamp}"], timeout=30,
                               check=True)
            yield ctx.info(f"backed up {conf_path(vmid)} to {backup_dir}/{vmid}.conf.{stamp}")
            for key, value in raw_lines_for(devices, inv):
                conf.add_raw(key, value)
            tmp = f"{conf_path(vmid)}.tmp-provisioner"
            await ctx.node.run(["sh", "-c", f"cat > {quoting.join([tmp])} && mv -f {quoting.join([tmp])} "
                                            f"{quoting.join([conf_path(vmid)])}"],
                               stdin=conf.render().encode(), timeout=30, check=True)

    async def verify(self, ctx: StepContext) -> None:
        _, _, _, changes, _ = await self._plan(ctx)
        if changes:
            raise StepFailed("passthrough configuration incomplete after apply: " + "; ".join(changes))


# --- lxc.start -------------------------------------------------------------------------------------

class StartParams(Params):
    timeout_s: int = Field(120, ge=5, le=3600)


@register
class LxcStart(StepKind[StartParams]):
    """Start the container and prove every passed device node is present inside."""

    kind = "lxc.start"
    title = "Start the container"
    Params = StartParams

    async def _status(self, ctx: StepContext) -> str:
        cts = await call(ctx, "list containers", ctx.pve().list_cts, node_name(ctx))
        if not any(int(ct.get("vmid", -1)) == ctx.vmid for ct in cts):
            if ctx.mode == "plan":
                raise DependsOnEarlier(f"CT {ctx.vmid} does not exist yet")
            raise StepFailed(f"CT {ctx.vmid} does not exist on {node_name(ctx)}", fix="run lxc.create first")
        status = await call(ctx, "container status", ctx.pve().ct_status, ctx.vmid, node_name(ctx))
        return str(status.get("status", "unknown"))

    async def check(self, ctx: StepContext) -> Plan:
        status = await self._status(ctx)
        if status == "running":
            return Plan.no_change(f"CT {ctx.vmid} is running")
        return Plan(changes=[f"start CT {ctx.vmid} (now {status})"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        client = ctx.pve()
        upid = await call(ctx, f"start CT {ctx.vmid}", client.start_ct, ctx.vmid, node_name(ctx))
        await wait_task(ctx, f"start CT {ctx.vmid}", upid, self.params.timeout_s)
        yield ctx.info(f"CT {ctx.vmid} started")

    async def verify(self, ctx: StepContext) -> None:
        if await self._status(ctx) != "running":
            raise StepFailed(f"CT {ctx.vmid} is not running after start")
        await verify_devices_in_container(ctx)


async def verify_devices_in_container(ctx: StepContext) -> None:
    """Every passed node exists in the container with the host's major:minor."""
    devices = ctx.shared.get("passthrough_devices")
    if not devices:
        return
    inv = await ensure_inventory(ctx)
    ct = ctx.container()
    result = await ct.run(["sh", "-c", "ls -l /dev/nvidia* 2>&1; true"], timeout=60, quiet=True)
    inside = nvidia.parse_ls_dev(result.output).by_path()
    host_nodes = (await ctx.fact(ctx.node, catalog.DEV_NODES)).by_path()
    problems = []
    for dev in devices:
        if dev.startswith("/dev/nvidia-caps/"):
            continue
        node = inside.get(dev)
        if node is None:
            problems.append(f"{dev} missing")
        elif dev in host_nodes and (node.major, node.minor) != (host_nodes[dev].major, host_nodes[dev].minor):
            problems.append(f"{dev} is {node.major}:{node.minor}, host has "
                            f"{host_nodes[dev].major}:{host_nodes[dev].minor}")
    if problems:
        raise StepFailed(f"device nodes in CT {ctx.vmid}: " + "; ".join(problems),
                         fix="check the passthrough lines and restart the container (`pct reboot`)",
                         evidence=result.lines[-20:])
    _ = inv
