"""`driver.userspace`: the NVIDIA userspace inside the container, at exactly the host module's version."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shlex
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from provisioner import download as dl
from provisioner import retry, validate
from provisioner.diagnose.model import Finding
from provisioner.driver_eol import branch_eol_problems
from provisioner.events import Event
from provisioner.exitcodes import ExitCode
from provisioner.facts import catalog, installer_log
from provisioner.facts.base import FactUnavailable
from provisioner.facts.models import Gpu
from provisioner.facts.vgpu import vgpu_host_problem
from provisioner.paths import cache_dir
from provisioner.payloads import DriverSourceRecord, JsonObject
from provisioner.steps.base import DependsOnEarlier, Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import ChecksumConfirmation, StepContext
from provisioner.steps.gpu_common import verify_smi
from provisioner.steps.lxc_common import ensure_inventory
from provisioner.steps.state import HostInventory
from provisioner.transport.base import CommandResult

NVIDIA_BASE = "https://download.nvidia.com/XFree86"
#: data-center ("Tesla") releases: https://us.download.nvidia.com/tesla/<v>/NVIDIA-Linux-<arch>-<v>.run, no .sha256sum
TESLA_BASE = "https://us.download.nvidia.com/tesla"


INSTALLER_LOG = "/var/log/nvidia-installer.log"


ALLOWED_FLAGS = frozenset({"--no-nvidia-modprobe", "--no-opengl-files", "--no-install-compat32-libs", "--skip-depmod",
                           "--no-systemd", "--no-distro-scripts", "--no-kernel-module-source", "--install-libglvnd",
                           "--no-install-libglvnd", "--skip-module-unload"})


#: GPUs NVIDIA ships data-center ("Tesla") drivers for: their releases are published under tesla/<v>/ first
DATACENTER_GPU_RE = re.compile(
    r"\b(Tesla|[ABH]100|A800|H800|H20|H200|GH200|B200|B300|GB200|GB300|A30|A40|A10G?|A16|A2|L40S?|L20|L4|T4|"
    r"V100|P100|P40|P4)\b")


class _AptLocked(Exception):
    """apt/dpkg's lock is held by another process in the container (waited for with a backoff)."""


class DriverParams(Params):
    version: str = Field("host", description="'host' (the host kernel module's version) or an explicit version")
    driver_run: str | None = Field(None, description="Local .run file (air-gapped sites); needs sha256 or .sha256sum")
    driver_mirror: str | None = Field(None, description="Base URL replacing https://download.nvidia.com/XFree86")
    sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$",
                               description="Pin of the installer's SHA-256 (needed where NVIDIA publishes none: tesla/)")
    layout: Literal["auto", "XFree86", "tesla"] = Field(
        "auto", description="Where the .run is published: auto probes (data-center GPUs: tesla/ first)")
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


#: the installer's prerequisites in the container: the kmod tools it calls even with --no-kernel-modules
PREREQ_TOOLS = ("modprobe", "lsmod", "depmod", "rmmod", "ldconfig")
PREREQ_INSTALL = "apt-get install -y --no-install-recommends kmod pkg-config"


def installer_name(version: str, arch: str = "x86_64") -> str:
    return f"NVIDIA-Linux-{arch}-{version}.run"


def installer_url(version: str, arch: str, mirror: str | None) -> str:
    base = (mirror or NVIDIA_BASE).rstrip("/")
    return f"{base}/Linux-{arch}/{version}/{installer_name(version, arch)}"


def published_url(url: str, mirror: str | None) -> str:
    """Where NVIDIA publishes the file a site's mirror served from `url` (what a playbook records)."""
    if mirror is None:
        return url
    for base, real in ((mirror.rstrip("/"), NVIDIA_BASE), (tesla_base(mirror), TESLA_BASE)):
        if url.startswith(base + "/"):
            return real.rstrip("/") + url[len(base):]
    return url


def tesla_base(mirror: str | None) -> str:
    """The tesla/ tree next to the mirror's XFree86/ tree (NVIDIA's own: us.download.nvidia.com/tesla)."""
    if mirror is None:
        return TESLA_BASE
    base = mirror.rstrip("/")
    return (base[: -len("/XFree86")] if base.endswith("/XFree86") else base) + "/tesla"


@dataclass(frozen=True)
class DriverSource:
    """One place NVIDIA publishes the .run of `version` for `arch`; `checksum_url` None: no checksum published."""

    layout: Literal["XFree86", "tesla"]
    version: str
    arch: str
    url: str
    checksum_url: str | None

    @property
    def filename(self) -> str:
        return installer_name(self.version, self.arch)

    @property
    def where(self) -> str:
        return f"XFree86/Linux-{self.arch}/" if self.layout == "XFree86" else f"tesla/{self.version}/"


def is_datacenter(gpus: list[Gpu]) -> bool:
    return any(DATACENTER_GPU_RE.search(g.name) for g in gpus)


def driver_sources(version: str, arch: str, mirror: str | None, *, datacenter: bool,
                   layout: str = "auto") -> list[DriverSource]:
    """The candidate sources in probing order: data-center GPUs try tesla/ first, the others XFree86/."""
    xfree = DriverSource("XFree86", version, arch, installer_url(version, arch, mirror),
                         installer_url(version, arch, mirror) + ".sha256sum")
    tesla_url = f"{tesla_base(mirror)}/{version}/{installer_name(version, arch)}"
    tesla = DriverSource("tesla", version, arch, tesla_url, None)
    if layout == "XFree86":
        return [xfree]
    if layout == "tesla":
        return [tesla]
    return [tesla, xfree] if datacenter else [xfree, tesla]


def legacy_gpu_problem(inventory: HostInventory, version: str) -> str | None:
    """The branch end-of-life rule (`provisioner.driver_eol`, shared with the resolver) for this host."""
    problems = branch_eol_problems([g.compute_cap for g in inventory.gpus], version)
    return "; ".join(p.message for p in problems) or None


@register
class DriverUserspaceStep(StepKind[DriverParams]):
    """Install the userspace driver with the official .run installer and --no-kernel-modules."""

    kind = "driver.userspace"
    title = "Install the NVIDIA userspace driver in the container"
    Params = DriverParams
    invalidates = ("smi_status", "userspace_libs", "installer_record")
    _checksum: str = "published"

    async def _versions(self, ctx: StepContext) -> tuple[str, list[str], HostInventory]:
        inv = await ensure_inventory(ctx)
        host = inv.driver_version
        if self.params.version not in ("host", host):
            raise StepFailed(f"the playbook asks for driver {self.params.version} but the host kernel module is {host}; "
                             "userspace must equal the module exactly",
                             fix=f"set version: host (or {host}), or change the host driver first", exit_code=ExitCode.USAGE)
        problems = branch_eol_problems([g.compute_cap for g in inv.gpus], host)
        if problems:
            raise StepFailed("; ".join(p.message for p in problems), fix=problems[0].rule.fix, exit_code=ExitCode.NO_SOLUTION)
        try:
            libs = await ctx.fact(ctx.container(), catalog.USERSPACE_LIBS)
        except FactUnavailable:
            if ctx.mode == "plan":
                raise DependsOnEarlier("the container is not running yet") from None
            return host, [], inv
        return host, list(libs.versions), inv

    async def _arch(self, ctx: StepContext) -> str:
        """The host module's architecture (its /proc/driver/nvidia/version banner), else `uname -m`."""
        proc = await ctx.fact(ctx.node, catalog.PROC_DRIVER_VERSION)
        arch = proc.arch if proc is not None and proc.arch else await ctx.fact(ctx.node, catalog.ARCH)
        if arch not in ("x86_64", "aarch64"):
            raise StepFailed(f"NVIDIA publishes no Linux driver for architecture {arch!r}",
                             fix="run on an x86_64 or aarch64 Proxmox node", exit_code=ExitCode.NO_SOLUTION)
        return arch

    def _pin(self, ctx: StepContext, filename: str) -> tuple[str | None, str]:
        """The SHA-256 this run must see for `filename`: the playbook's pin, else what `resolved` recorded."""
        if self.params.sha256:
            return self.params.sha256.lower(), "pinned in the playbook"
        rec = ctx.resolved.driver
        if isinstance(rec, dict) and rec.get("filename") == filename and isinstance(rec.get("sha256"), str):
            return str(rec["sha256"]).lower(), "recorded in resolved"
        return None, ""

    async def _source(self, ctx: StepContext, version: str) -> DriverSource:
        """Where this host's driver is published: probes each candidate (HEAD) in order."""
        cached = ctx.state.driver_source
        if cached is not None and cached.version == version:
            return DriverSource(cached.layout, version, cached.arch, cached.url, cached.checksum_url)
        arch = await self._arch(ctx)
        inv = await ensure_inventory(ctx)
        tried = []
        for source in driver_sources(version, arch, self.params.driver_mirror, datacenter=is_datacenter(inv.gpus),
                                     layout=self.params.layout):
            tried.append(source.url)
            try:
                found = await asyncio.to_thread(dl.url_exists, source.url)
            except dl.DownloadError as exc:
                raise StepFailed(f"cannot reach the driver server: {exc}",
                                 fix="check network access to the driver server, or set driver_run/sha256 for an "
                                     "air-gapped site") from None
            if found:
                ctx.state.driver_source = DriverSourceRecord(layout=source.layout, version=version, arch=arch,
                                                             url=source.url, checksum_url=source.checksum_url)
                return source
        try:
            vgpu = vgpu_host_problem(await ctx.fact(ctx.node, catalog.VGPU), version)
        except FactUnavailable:
            vgpu = None
        if vgpu is not None:  # a vGPU manager's version is never public: say what the container needs instead
            message, fix = vgpu
            finding = Finding(category="driver_lib_mismatch", confidence=0.95, root_cause=message, fix=fix,
                              evidence=tuple(tried), rule="driver.vgpu_host")
            raise StepFailed(message, fix=fix, evidence=[f"not published: {url}" for url in tried],
                             findings=[finding.to_dict()], exit_code=ExitCode.NO_SOLUTION)
        raise StepFailed(f"NVIDIA driver {version} for {arch} is published at none of: {', '.join(tried)}",
                         fix="check the version against the host module, or set driver_run (local .run) with sha256",
                         exit_code=ExitCode.FAILED)

    async def _source_notes(self, ctx: StepContext, host: str) -> tuple[str, list[str]]:
        """Where the installer comes from and how its SHA-256 is known (the downloaded file's where NVIDIA
        publishes none, for the operator to confirm or pin)."""
        if self.params.driver_run:
            return "", []
        source = await self._source(ctx, host)
        notes = [f"installer {source.url}"]
        pin, why = self._pin(ctx, source.filename)
        if source.checksum_url is None and pin is None:
            sha, size = await self._unpublished_sha(ctx, source)
            notes.append(f"NVIDIA publishes no checksum for {source.where}{source.filename}: the downloaded file "
                         f"({size} bytes) has sha256 {sha}; confirm it, or pin it in the playbook "
                         f"(driver.userspace params: sha256: {sha})")
        elif pin is not None:
            notes.append(f"sha256 {pin} ({why})")
        return f" from {source.where}", notes

    async def check(self, ctx: StepContext) -> Plan:
        try:
            host, installed, _ = await self._versions(ctx)
        except (StepFailed, DependsOnEarlier) as exc:
            if ctx.mode == "plan" and ("not running" in str(exc)):
                # the container comes later; the installer, its checksum and its commands can be shown already
                inv = await ensure_inventory(ctx)
                _, notes = await self._source_notes(ctx, inv.driver_version)
                commands = self.planned_commands(inv.driver_version, await self._arch(ctx), [])
                raise DependsOnEarlier("; ".join(["the container is not running yet", *notes]),
                                       commands=commands) from None
            raise
        ctx.state.host_driver = host
        unfinished = None
        if installed == [host]:
            # libraries of the right version are not proof: an installer killed after writing them
            # (a dropped connection, the OOM killer) leaves them without the rest of the install
            record = await ctx.fact(ctx.container(), catalog.INSTALLER_RECORD)
            unfinished = record.unfinished
            if unfinished is None:
                notes = [f"userspace {host} installed, equal to the host module"]
                if ctx.mode == "apply":  # a recording holds the driver pin whatever the run's path
                    self._record, note = await self._installed_record(ctx, host)
                    notes += [note] if note else []
                return Plan.no_change(*notes)
        where, notes = await self._source_notes(ctx, host)
        commands = self.planned_commands(host, await self._arch(ctx), installed)
        if self.params.install_prereqs:
            notes = [*notes, f"first, when the container lacks its kmod tools ({', '.join(PREREQ_TOOLS)}): "
                             f"{PREREQ_INSTALL} (in CT {ctx.vmid})"]
        if unfinished is not None:
            return Plan(changes=[f"reinstall NVIDIA userspace {host} (.run --no-kernel-modules){where}: the last "
                                 f"install did not finish ({unfinished})"], notes=notes, commands=commands)
        if not installed:
            return Plan(changes=[f"install NVIDIA userspace {host} (.run --no-kernel-modules){where}"], notes=notes,
                        commands=commands)
        return Plan(changes=[f"replace userspace {', '.join(installed)} with {host} (host module){where}"],
                    notes=notes, commands=commands)

    def installer_flags(self) -> list[str]:
        return ["--silent", "--no-kernel-modules", "--no-nouveau-check", "--no-x-check",
                f"--log-file-name={INSTALLER_LOG}", *self.params.extra_flags]

    def planned_commands(self, host: str, arch: str, installed: list[str]) -> list[str]:
        """What apply runs in the container, in order (the prerequisites only where tools are missing)."""
        remote = f"/root/{installer_name(host, arch)}"
        out: list[str] = []
        if self.params.install_prereqs:
            out.append(f"{PREREQ_INSTALL}  # only if missing: {' '.join(PREREQ_TOOLS)}")
        if installed:
            out.append("nvidia-uninstall --silent")
        out.append(shlex.join(["sh", remote, *self.installer_flags()]))
        out.append(shlex.join(["rm", "-f", remote]))
        return out

    async def _installed_record(self, ctx: StepContext, version: str) -> tuple[dict[str, Any] | None, str]:
        """A no-op: the `resolved.driver` record an install of `version` writes (the installer this playbook
        installs and the SHA-256 a later replay verifies it against), so that a no-op replay's recording holds
        the same pin as the install's. Known without downloading: the playbook's pin, the recorded one, the
        published checksum, or the verified installer in the controller's cache. When none can be had (the
        driver server unreachable), the step still succeeds; the note says the pin is not recorded."""
        earlier = ctx.resolved.driver
        if isinstance(earlier, dict) and earlier.get("version") == version and isinstance(earlier.get("sha256"), str):
            return dict(earlier), ""
        try:
            if self.params.driver_run:
                path = Path(self.params.driver_run).expanduser()
                expected, checksum = self.params.sha256, "pinned"
                side = path.with_name(path.name + ".sha256sum")
                if expected is None and side.is_file():
                    expected, checksum = dl.parse_sha256sum(side.read_text(), path.name), "published"
                if expected is None:
                    return None, f"driver pin not recorded: {path} has no sha256 (pin it in the playbook)"
                return {"version": version, "filename": path.name, "url": str(path), "sha256": expected.lower(),
                        "checksum": checksum}, ""
            source = await self._source(ctx, version)
            record: dict[str, Any] = {"version": version, "filename": source.filename, "url": published_url(source.url, self.params.driver_mirror),
                                      "layout": source.layout}
            pin, _ = self._pin(ctx, source.filename)
            if pin is not None:
                return {**record, "sha256": pin, "checksum": "pinned" if self.params.sha256 else "recorded"}, ""
            if source.checksum_url is not None:
                published = dl.parse_sha256sum(await asyncio.to_thread(dl.fetch_text, source.checksum_url),
                                               source.filename)
                return {**record, "sha256": published.lower(), "checksum": "published"}, ""
            cached = cache_dir() / "drivers" / source.filename  # only a verified copy is ever kept there
            if cached.is_file():
                sha = await asyncio.to_thread(dl.sha256_file, cached)
                return {**record, "sha256": sha.lower(), "checksum": "cached"}, ""
            return None, (f"driver pin not recorded: NVIDIA publishes no checksum for {source.filename} and no "
                          "verified copy is cached (pin it in the playbook: driver.userspace params: sha256)")
        except (StepFailed, dl.DownloadError, OSError, ValueError) as exc:
            return None, f"driver pin not recorded: {exc}"

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        host, installed, _ = await self._versions(ctx)
        arch = await self._arch(ctx)
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
        flags = self.installer_flags()
        yield ctx.info("running the NVIDIA installer (userspace only)")
        result = await ct.run(["sh", remote, *flags], timeout=1800)
        if not result.ok:
            await self._installer_failed(ctx, result)
        await ct.run(["rm", "-f", remote], timeout=60, quiet=True)

    async def _unpublished_sha(self, ctx: StepContext, source: DriverSource) -> tuple[str, int]:
        """Download `source` (no published checksum) into the cache's unverified area; its sha256 and size."""
        dest = cache_dir() / "drivers" / "unverified" / source.layout / source.filename
        async with cache_lock(dest):
            dest.unlink(missing_ok=True)  # never trust an earlier unverified copy: fetch what the server has now
            try:
                await asyncio.to_thread(dl.download, source.url, dest)
            except dl.DownloadError as exc:
                raise StepFailed(str(exc), fix="retry the replay: a partial download resumes") from None
            sha = await asyncio.to_thread(dl.sha256_file, dest)
            size = dest.stat().st_size
        ctx.state.driver_unverified_sha = {source.url: sha}
        return sha, size

    async def _expected(self, ctx: StepContext, source: DriverSource) -> str:
        """The SHA-256 the download must have: pinned/recorded, published, or confirmed by the operator now."""
        pin, _ = self._pin(ctx, source.filename)
        if pin is not None:
            self._checksum = "pinned" if self.params.sha256 else "recorded"
            return pin
        if source.checksum_url is not None:
            try:
                published = dl.parse_sha256sum(await asyncio.to_thread(dl.fetch_text, source.checksum_url),
                                               source.filename)
            except dl.DownloadError as exc:
                raise StepFailed(f"cannot get the published checksum: {exc}",
                                 fix="check network access to the driver server, or set driver_run/sha256 for an "
                                     "air-gapped site") from None
            self._checksum = "published"
            return published
        sha = (ctx.state.driver_unverified_sha or {}).get(source.url)
        size = 0
        if sha is None:
            sha, size = await self._unpublished_sha(ctx, source)
        else:
            with contextlib.suppress(OSError):
                size = (cache_dir() / "drivers" / "unverified" / source.layout / source.filename).stat().st_size
        request = ChecksumConfirmation(host=ctx.host, step=self.kind, url=source.url, filename=source.filename,
                                       sha256=sha, size=size)
        if ctx.confirm_checksum is not None and await ctx.confirm_checksum(request):
            self._checksum = "confirmed"
            return sha
        raise StepFailed(
            f"NVIDIA publishes no checksum for {source.where}{source.filename}; the downloaded file has sha256 {sha}. "
            "It is not installed until that sha256 is confirmed",
            fix=f"compare it with a trusted copy, then pin it in the playbook: driver.userspace params: sha256: {sha} "
                "(a replay with --save records it in resolved; the TUI asks on screen)", exit_code=ExitCode.USAGE)

    async def _obtain(self, ctx: StepContext, version: str, arch: str) -> AsyncIterator[Any]:
        """Yields events, then the local verified installer Path last."""
        name = installer_name(version, arch)
        if self.params.driver_run:
            path = Path(self.params.driver_run).expanduser()
            if not path.is_file():
                raise StepFailed(f"driver_run {path} does not exist", exit_code=ExitCode.USAGE)
            expected = self.params.sha256
            if expected is None:
                side = path.with_name(path.name + ".sha256sum")
                if not side.exists():
                    raise StepFailed(f"{path} has no checksum: an operator-supplied installer is never trusted blindly",
                                     fix=f"add sha256: <hex> to the step or place {side.name} next to it", exit_code=ExitCode.USAGE)
                expected = dl.parse_sha256sum(side.read_text(), path.name)
            await self._verify(path, expected)
            self._record = {"version": version, "filename": path.name, "url": str(path), "sha256": expected.lower(),
                            "checksum": "pinned" if self.params.sha256 else "published"}
            yield path
            return
        source = await self._source(ctx, version)
        url = source.url
        cache = cache_dir() / "drivers"
        dest = cache / name
        expected = await self._expected(ctx, source)
        self._record = {"version": version, "filename": name, "url": published_url(url, self.params.driver_mirror),
                        "layout": source.layout,
                        "sha256": expected.lower(), "checksum": self._checksum}
        async with cache_lock(dest):  # the hosts of a fleet (and concurrent replays) share this cache file
            if dest.exists() and await asyncio.to_thread(dl.sha256_file, dest) == expected:
                yield ctx.info(f"using cached {dest}")
            else:
                if dest.exists():
                    dest.unlink()
                unverified = cache / "unverified" / source.layout / name
                if source.checksum_url is None and unverified.exists():
                    unverified.replace(dest)  # the copy whose sha256 was shown; verified below
                else:
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
            raise StepFailed(str(exc), fix="the download is corrupt or tampered with: check the mirror, then try again",
                             exit_code=ExitCode.FAILED) from None

    async def _prereqs(self, ctx: StepContext) -> AsyncIterator[Event]:
        ct = ctx.container()
        probe = await ct.run(["sh", "-c", f"for t in {' '.join(PREREQ_TOOLS)}; do command -v $t >/dev/null"
                                          " || echo missing:$t; done"], timeout=60, quiet=True)
        missing = [ln.split(":", 1)[1] for ln in probe.lines if ln.startswith("missing:")]
        if not missing:
            return
        yield ctx.info(f"installing installer prerequisites (missing: {', '.join(missing)})")
        backoff = retry.Backoff(attempts=6, first=1, cap=self.params.apt_lock_backoff_max_s)

        async def once() -> None:
            result = await ct.run(["sh", "-c", f"export DEBIAN_FRONTEND=noninteractive; {PREREQ_INSTALL}"],
                                  timeout=900)
            if result.ok:
                return
            if any("Could not get lock" in ln or "Unable to acquire the dpkg" in ln for ln in result.lines):
                raise _AptLocked
            raise StepFailed("installing kmod/pkg-config in the container failed", result=result,
                             fix="check the container's network and package sources (apt-get update)")

        def waiting(attempt: int, _exc: BaseException, _wait: float) -> None:
            ctx.bus.emit(ctx.warning(f"apt/dpkg lock held by another process; retrying ({attempt}/{backoff.attempts})"))

        try:
            await retry.acall(once, backoff, retry_on=(_AptLocked,), on_retry=waiting)
        except _AptLocked:
            raise StepFailed("the apt/dpkg lock in the container stayed held", fix="wait for the other apt run to "
                             f"finish (unattended-upgrades?), {ctx.words.retry}") from None

    async def _installer_failed(self, ctx: StepContext, result: CommandResult) -> None:
        log = await ctx.container().run(["cat", INSTALLER_LOG], timeout=60, quiet=True)
        lines = result.tail(10)
        try:
            parsed = installer_log.parse_installer_log(log.output) if log.ok and log.output.strip() else None
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

    def resolved(self, ctx: StepContext) -> JsonObject:
        """The installer this run used and the SHA-256 it verified (a later replay verifies against it)."""
        rec = getattr(self, "_record", None)
        if rec is None:
            earlier = ctx.resolved.driver
            return {"driver": earlier} if isinstance(earlier, dict) else {}
        return {"driver": dict(rec)}
