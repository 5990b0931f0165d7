"""`driver.userspace`: the NVIDIA userspace inside the container, at exactly the host module's version."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import uuid
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from provisioner import download as dl
from provisioner import validate
from provisioner.events import Event
from provisioner.facts import catalog, nvidia
from provisioner.facts.base import FactUnavailable
from provisioner.facts.models import Gpu
from provisioner.paths import cache_dir
from provisioner.steps.base import DependsOnEarlier, Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import ensure_inventory
from provisioner.steps.state import HostInventory
from provisioner.transport.base import CommandResult

NVIDIA_BASE = "https://download.nvidia.com/XFree86"


INSTALLER_LOG = "/var/log/nvidia-installer.log"


ALLOWED_FLAGS = frozenset({"--no-nvidia-modprobe", "--no-opengl-files", "--no-install-compat32-libs", "--skip-depmod",
                           "--no-systemd", "--no-distro-scripts", "--no-kernel-module-source", "--install-libglvnd",
                           "--no-install-libglvnd", "--skip-module-unload"})


# GPU compute capabilities that newer driver branches no longer drive (torch-matrix.md §2d).
LEGACY_CC_MAX_BRANCH = {"6": 580, "5": 580, "7.0": 580, "7.2": 580, "3": 470}


class DriverParams(Params):
    version: str = Field("host", description="'host' (the host kernel module's version) or an explicit version")
    driver_run: str | None = Field(None, description="Local .run file (air-gapped sites); needs sha256 or .sha256sum")
    driver_mirror: str | None = Field(None, description="Base URL replacing https://download.nvidia.com/XFree86")
    sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    extra_flags: list[str] = Field(default_factory=list)
    install_prereqs: bool = True
    apt_lock_backoff_max_s: float = Field(20.0, ge=0.1, le=300,
                                          description="Longest wait between retries while apt/dpkg is locked")

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        return v if v == "host" else validate.driver_version(v)

    @field_validator("extra_flags")
    @classmethod
    def _flags(cls, v: list[str]) -> list[str]:
        bad = [f for f in v if f not in ALLOWED_FLAGS]
        if bad:
            raise ValueError(f"unsupported installer flags {bad}; allowed: {sorted(ALLOWED_FLAGS)}")
        return v

    @field_validator("driver_mirror")
    @classmethod
    def _mirror(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[A-Za-z0-9.\-:\[\]]+(/[A-Za-z0-9._~\-/%]*)?$", v):
            raise ValueError(f"not an http(s) URL: {v!r}")
        return v


#: per event loop, one asyncio.Lock per cache file (the hosts of a fleet are tasks of one loop)
_CACHE_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Path, asyncio.Lock]] = (
    weakref.WeakKeyDictionary())


@contextlib.asynccontextmanager
async def cache_lock(dest: Path) -> AsyncIterator[None]:
    """One check/download/verify of the cached `dest` at a time: across the hosts of a fleet (an
    asyncio lock, so a waiting host holds no worker thread) and across replays sharing the cache (flock)."""
    locks = _CACHE_LOCKS.setdefault(asyncio.get_running_loop(), {})
    async with locks.setdefault(dest, asyncio.Lock()):
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest.with_name(dest.name + ".lock"), "w") as fh:
            await asyncio.to_thread(fcntl.flock, fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def private_copy(path: Path) -> Path:
    """A hard link to the verified cache file (named ``.<name>.<pid>-<rand>``) that no other host's
    download can replace or remove while this host copies it; the caller unlinks it."""
    link = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.link(path, link)
    return link


def installer_name(version: str, arch: str = "x86_64") -> str:
    return f"NVIDIA-Linux-{arch}-{version}.run"


def installer_url(version: str, arch: str, mirror: str | None) -> str:
    base = (mirror or NVIDIA_BASE).rstrip("/")
    return f"{base}/Linux-{arch}/{version}/{installer_name(version, arch)}"


def legacy_gpu_problem(inventory: HostInventory, version: str) -> str | None:
    branch = int(version.split(".")[0])
    for gpu in inventory.gpus:
        cc = str(gpu.compute_cap or "")
        for prefix, max_branch in LEGACY_CC_MAX_BRANCH.items():
            if (cc == prefix or cc.startswith(prefix + ".")) and branch > max_branch:
                return (f"GPU {gpu.index} ({gpu.name}, compute capability {cc}) is not supported by driver "
                        f"branch R{branch}; its last branch is R{max_branch}")
    return None


@register
class DriverUserspaceStep(StepKind[DriverParams]):
    """Install the userspace driver with the official .run installer and --no-kernel-modules."""

    kind = "driver.userspace"
    title = "Install the NVIDIA userspace driver in the container"
    Params = DriverParams
    invalidates = ("smi_status", "userspace_libs")

    async def _versions(self, ctx: StepContext) -> tuple[str, list[str], HostInventory]:
        inv = await ensure_inventory(ctx)
        host = inv.driver_version
        if self.params.version not in ("host", host):
            raise StepFailed(f"the playbook asks for driver {self.params.version} but the host kernel module is {host}; "
                             "userspace must equal the module exactly",
                             fix=f"set version: host (or {host}), or change the host driver first", exit_code=2)
        problem = legacy_gpu_problem(inv, host)
        if problem:
            raise StepFailed(problem, fix="use the NVIDIA 580 legacy branch on the host for this GPU, or remove it",
                             exit_code=3)
        try:
            libs = await ctx.fact(ctx.container(), catalog.USERSPACE_LIBS)
        except FactUnavailable:
            if ctx.mode == "plan":
                raise DependsOnEarlier("the container is not running yet") from None
            return host, [], inv
        return host, list(libs.versions), inv

    async def check(self, ctx: StepContext) -> Plan:
        try:
            host, installed, _ = await self._versions(ctx)
        except StepFailed as exc:
            if ctx.mode == "plan" and "not running" in exc.message:
                raise DependsOnEarlier("the container is not running yet") from None
            raise
        ctx.state.host_driver = host
        if installed == [host]:
            return Plan.no_change(f"userspace {host} installed, equal to the host module")
        if not installed:
            return Plan(changes=[f"install NVIDIA userspace {host} (.run --no-kernel-modules)"])
        return Plan(changes=[f"replace userspace {', '.join(installed)} with {host} (host module)"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        host, installed, _ = await self._versions(ctx)
        arch = "x86_64"
        ct = ctx.container()
        local: Path
        async for event in self._obtain(ctx, host, arch):
            if isinstance(event, Path):
                local = event
            else:
                yield event
        try:
            if self.params.install_prereqs:
                async for ev in self._prereqs(ctx):
                    yield ev
            remote = f"/root/{installer_name(host, arch)}"
            yield ctx.info(f"copying {installer_name(host, arch)} into CT {ctx.vmid}")
            await ct.put(local, remote, 0o755)
        finally:
            if local.parent == cache_dir() / "drivers" and local.name.startswith("."):
                local.unlink(missing_ok=True)  # the private hard link of the cache file
        if installed:
            yield ctx.info(f"removing userspace {', '.join(installed)}")
            await ct.run(["sh", "-c", "command -v nvidia-uninstall >/dev/null && nvidia-uninstall --silent || true"],
                         timeout=600)
        flags = ["--silent", "--no-kernel-modules", "--no-nouveau-check", "--no-x-check",
                 f"--log-file-name={INSTALLER_LOG}", *self.params.extra_flags]
        yield ctx.info("running the NVIDIA installer (userspace only)")
        result = await ct.run(["sh", remote, *flags], timeout=1800)
        if not result.ok:
            await self._installer_failed(ctx, result)
        await ct.run(["rm", "-f", remote], timeout=60, quiet=True)

    async def _obtain(self, ctx: StepContext, version: str, arch: str) -> AsyncIterator[Any]:
        """Yields events, then the local verified installer Path last."""
        name = installer_name(version, arch)
        if self.params.driver_run:
            path = Path(self.params.driver_run).expanduser()
            if not path.is_file():
                raise StepFailed(f"driver_run {path} does not exist", exit_code=2)
            expected = self.params.sha256
            if expected is None:
                side = path.with_name(path.name + ".sha256sum")
                if not side.exists():
                    raise StepFailed(f"{path} has no checksum: an operator-supplied installer is never trusted blindly",
                                     fix=f"add sha256: <hex> to the step or place {side.name} next to it", exit_code=2)
                expected = dl.parse_sha256sum(side.read_text(), path.name)
            await self._verify(path, expected)
            yield path
            return
        url = installer_url(version, arch, self.params.driver_mirror)
        cache = cache_dir() / "drivers"
        dest = cache / name
        try:
            expected = self.params.sha256 or dl.parse_sha256sum(
                await asyncio.to_thread(dl.fetch_text, url + ".sha256sum"), name)
        except dl.DownloadError as exc:
            raise StepFailed(f"cannot get the published checksum: {exc}",
                             fix="check network access to the driver server, or set driver_run/sha256 for an "
                                 "air-gapped site") from None
        async with cache_lock(dest):  # the hosts of a fleet (and concurrent replays) share this cache file
            if dest.exists() and await asyncio.to_thread(dl.sha256_file, dest) == expected:
                yield ctx.info(f"using cached {dest}")
            else:
                if dest.exists():
                    dest.unlink()
                state: dict[str, Any] = {"done": 0, "total": None}

                def progress(done: int, total: int | None) -> None:
                    state["done"], state["total"] = done, total

                yield ctx.info(f"downloading {url}")
                task = asyncio.create_task(asyncio.to_thread(dl.download, url, dest, progress=progress))
                while not task.done():
                    await asyncio.sleep(0.2)
                    yield ctx.progress(f"download {name}", state["done"], state["total"], "bytes")
                try:
                    task.result()
                except dl.DownloadError as exc:
                    raise StepFailed(str(exc), fix="retry the replay: a partial download resumes") from None
                yield ctx.progress(f"download {name}", state["done"], state["done"], "bytes")
                await self._verify(dest, expected)
            local = private_copy(dest)  # a host whose mirror publishes another sha may replace `dest` next
        yield local

    async def _verify(self, path: Path, expected: str) -> None:
        try:
            await asyncio.to_thread(dl.verify, path, expected)
        except dl.ChecksumMismatch as exc:
            raise StepFailed(str(exc), fix="the download is corrupt or tampered with: check the mirror, then replay",
                             exit_code=1) from None

    async def _prereqs(self, ctx: StepContext) -> AsyncIterator[Event]:
        ct = ctx.container()
        probe = await ct.run(["sh", "-c", "for t in modprobe lsmod depmod rmmod ldconfig; do command -v $t >/dev/null"
                                          " || echo missing:$t; done"], timeout=60, quiet=True)
        missing = [ln.split(":", 1)[1] for ln in probe.lines if ln.startswith("missing:")]
        if not missing:
            return
        yield ctx.info(f"installing installer prerequisites (missing: {', '.join(missing)})")
        for attempt in range(6):
            result = await ct.run(["sh", "-c", "export DEBIAN_FRONTEND=noninteractive; "
                                               "apt-get install -y --no-install-recommends kmod pkg-config"],
                                  timeout=900)
            if result.ok:
                return
            if any("Could not get lock" in ln or "Unable to acquire the dpkg" in ln for ln in result.lines):
                yield ctx.warning(f"apt/dpkg lock held by another process; retrying ({attempt + 1}/6)")
                await asyncio.sleep(min(2 ** attempt, self.params.apt_lock_backoff_max_s))
                continue
            raise StepFailed("installing kmod/pkg-config in the container failed", result=result,
                             fix="check the container's network and package sources (apt-get update)")
        raise StepFailed("the apt/dpkg lock in the container stayed held", fix="wait for the other apt run to finish "
                         "(unattended-upgrades?), then replay")

    async def _installer_failed(self, ctx: StepContext, result: CommandResult) -> None:
        log = await ctx.container().run(["cat", INSTALLER_LOG], timeout=60, quiet=True)
        lines = result.tail(10)
        try:
            parsed = nvidia.parse_installer_log(log.output) if log.ok and log.output.strip() else None
        except ValueError:
            parsed = None
        decisive = list(parsed.decisive_lines) if parsed else []
        for line in log.lines[-200:]:
            ctx.bus.emit(ctx.info(f"nvidia-installer.log: {line}"))
        status = result.exit_status or 0
        if status > 128:
            raise StepFailed(f"the NVIDIA installer was killed by signal {status - 128} (exit {status}) before it "
                             "finished", evidence=decisive or lines,
                             fix="check for the OOM killer (`dmesg | grep -i oom`) or an operator stopping it, then "
                                 "replay: the step reinstalls the userspace cleanly")
        raise StepFailed("the NVIDIA installer failed" + (": " + "; ".join(decisive[:3]) if decisive else ""),
                         evidence=decisive or lines,
                         fix="read the decisive lines; the installer must run with --no-kernel-modules inside a "
                             "container, and needs kmod tools; replay after fixing")

    async def verify(self, ctx: StepContext) -> None:
        host = ctx.state.host_driver or (await ensure_inventory(ctx)).driver_version
        await verify_smi(ctx, host)


async def verify_smi(ctx: StepContext, host: str) -> list[Gpu]:
    """nvidia-smi inside the container lists every passed GPU at the host's driver version."""
    result = await ctx.container().for_facts().run(list(nvidia.QUERY_GPU_COMMAND), timeout=120, quiet=True)
    failure = nvidia.classify_smi_failure(result.output)
    if failure is not None or not result.ok:
        raise StepFailed(f"nvidia-smi in CT {ctx.vmid} failed: {failure.kind if failure else result.exit_status}",
                         result=result,
                         fix="container userspace and host module must be the same version; replay this step")
    gpus = nvidia.parse_gpu_query_csv(result.output)
    expected = len([d for d in ctx.state.passthrough_devices or [] if re.fullmatch(r"/dev/nvidia\d+", d)]) or \
        len((await ensure_inventory(ctx)).gpus)
    versions = {g.driver_version for g in gpus}
    if len(gpus) != expected:
        raise StepFailed(f"nvidia-smi in CT {ctx.vmid} lists {len(gpus)} GPUs, expected {expected}", result=result)
    if versions != {host}:
        raise StepFailed(f"container driver {', '.join(sorted(versions))} differs from the host module {host}",
                         result=result)
    return gpus
