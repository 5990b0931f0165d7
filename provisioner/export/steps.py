"""The step kinds of `provisioner import`: the host's driver against the export's floor, then the venv.

`export.preflight` runs right after `node.inventory`, before any step that changes the host: a driver below
`host.json`'s floor is refused with the reason and nothing is created or installed. `export.install` builds
the venv from the export's pylock.toml: every wheel fetched from its URL in the container and checked
against the lock's sha256 and size, installed by uv with no index (`--offline --no-deps`: the lock lists
every package), then proven with venv.build's smoke test; `burnin.run` follows as in any playbook.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

from pydantic import Field, field_validator

from provisioner import quoting, validate
from provisioner.events import Event
from provisioner.exitcodes import ExitCode
from provisioner.export import pylock, trust, write
from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.export.rules import import_problems
from provisioner.payloads import JsonObject, VenvRuntime
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import ensure_inventory
from provisioner.steps.venv_build import VenvParams
from provisioner.steps.venv_common import (
    BUILDING_MARKER,
    BUILT_BY,
    META_DIR,
    PYPI_INDEX,
    RUNTIME_FILE,
    arch_covers,
    ensure_uv,
    probe_venv,
    smoke_test,
)

_T = TypeVar("_T")

#: in the container: fetch each wheel (http(s) only), its size enforced while streaming (past the lock's size
#: the download stops), check sha256 and size, print {"sha256": ..., "size": ...} per file; a partial file is
#: removed on any failure; the name is a checked plain file name (`pylock.wheels`), opened without following
#: a link the container may have planted
FETCH_SCRIPT = r"""
import hashlib, json, os, re, sys, urllib.request
dest, wheels = sys.argv[1], json.loads(sys.argv[2])
class Https(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not newurl.startswith(("https://", "http://")):
            raise ValueError("redirected to a non-http URL")
        return super().redirect_request(req, fp, code, msg, headers, newurl)
opener = urllib.request.build_opener(Https)
out = []
for w in wheels:
    name = w["filename"]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+!-]*[.]whl", name) or ".." in name:
        print(json.dumps({"error": "wheel file name refused"})); sys.exit(0)
    if not w["url"].startswith(("https://", "http://")):
        print(json.dumps({"error": f"{name}: not an http(s) URL"})); sys.exit(0)
    path = os.path.join(dest, name)
    part = path + ".part"
    h, n, err = hashlib.sha256(), 0, None
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with opener.open(w["url"], timeout=600) as r, os.fdopen(fd, "wb") as f:
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    break
                n += len(chunk)
                if n > w["size"]:
                    err = f"{name}: the body is larger than the lock's size {w['size']}: download stopped"
                    break
                h.update(chunk); f.write(chunk)
        if err is None and (h.hexdigest() != w["sha256"] or n != w["size"]):
            err = f"{name}: sha256 {h.hexdigest()} ({n} bytes), the lock says {w['sha256']} ({w['size']} bytes)"
    except Exception as exc:
        err = f"{name}: {type(exc).__name__}: {exc}"
    if err is not None:
        try:
            os.unlink(part)
        except OSError:
            pass
        print(json.dumps({"error": err})); sys.exit(0)
    os.replace(part, path)
    out.append({"filename": name, "sha256": h.hexdigest(), "size": n})
print(json.dumps({"wheels": out}))
"""


class ExportDir(Params):
    export_dir: str = Field(description="The export folder on the controller (pylock.toml, runtime.json, host.json)")

    @field_validator("export_dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        if not Path(v).is_dir():
            raise ValueError(f"{v}: not an export folder")
        return v

    def _folder(self) -> Path:
        return Path(self.export_dir)

    def host(self) -> HostNeeds:
        return self._read(write.read_host)

    def runtime(self) -> RuntimeProof:
        return self._read(write.read_runtime)

    def pylock_text(self) -> str:
        return self._read(write.read_pylock_text)

    def wheels(self) -> list[pylock.Wheel]:
        return self._read(lambda folder: write.read_wheels(write.read_pylock_text(folder)))

    def _read(self, reader: Callable[[Path], _T]) -> _T:
        """A file of the export folder, read without following links and checked; a refusal names the
        file and field (exit 2: the folder is not one this engine can import)."""
        try:
            return reader(self._folder())
        except write.ExportInvalid as exc:
            raise StepFailed(f"the export folder is refused: {exc}", exit_code=ExitCode.USAGE) from None


@register
class ExportPreflight(StepKind[ExportDir]):
    """The host's NVIDIA driver against host.json's floor, before anything is changed."""

    kind = "export.preflight"
    title = "Check the host against the export's needs"
    Params = ExportDir

    async def check(self, ctx: StepContext) -> Plan:
        inv = await ensure_inventory(ctx)
        host, runtime = self.params.host(), self.params.runtime()
        self.params.wheels()  # the lock is read and checked before anything changes
        ccs = [str(g.compute_cap) for g in inv.gpus if g.compute_cap]
        problems = import_problems(runtime, host, ccs, inv.driver_version)
        if problems:
            raise StepFailed("; ".join(problems) + "; nothing was installed", exit_code=ExitCode.NO_SOLUTION,
                             fix="upgrade the host's NVIDIA driver to what the resolver names (`provisioner resolve "
                                 "--driver … --cc …` says the same), or export a runtime proven with another "
                                 "CUDA variant")
        return Plan.no_change(f"host driver {inv.driver_version} >= {host.min_driver} (export floor); the resolver's "
                              f"rules pass for torch {runtime.torch} ({runtime.variant}) on CC "
                              f"{', '.join(sorted(set(ccs))) or 'none found'}")

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        return
        yield  # pragma: no cover - an async generator with nothing to do


class InstallParams(ExportDir):
    path: str = Field("/opt/torch-venv", description="Absolute path of the venv in the container")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return validate.deletable_path(v)


@register
class ExportInstall(StepKind[InstallParams]):
    """A venv from the export's pylock.toml, each wheel checked against its sha256, proven like venv.build."""

    kind = "export.install"
    title = "Build the venv from the export"
    Params = InstallParams

    def _sha(self) -> str:
        return hashlib.sha256(self.params.pylock_text().encode()).hexdigest()

    async def check(self, ctx: StepContext) -> Plan:
        state, _ = await probe_venv(ctx, self.params.path, VenvParams().uv_dir)
        want = f"{self.params.path} from the export (pylock sha256 {self._sha()[:12]})"
        if state["state"] == "built":
            rt = state["runtime"]
            if rt.get("export_sha256") == self._sha() and rt.get("verified"):
                ctx.state.venv_runtime = VenvRuntime.model_validate(rt)
                return Plan.no_change(f"{want} is built and verified")
            if rt.get("export_sha256") != self._sha():
                raise StepFailed(f"{self.params.path} exists with another set of packages; it is left untouched",
                                 fix="import into another path (--venv) or another container")
        elif state["state"] in ("foreign", "notdir"):
            raise StepFailed(f"{self.params.path} exists in CT {ctx.vmid} and was not built by gpu-provisioner; "
                             "it is left untouched", fix="import into another path (--venv)")
        return Plan(changes=[f"create {want}"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        ct, path = ctx.container(), self.params.path
        runtime = self.params.runtime()
        wheels = self.params.wheels()  # read without following links, every name, host and size checked
        doc = pylock.load(self.params.pylock_text())
        meta = f"{path}/{META_DIR}"
        # the "ours" marker first, in one command (as venv.build): a kill leaves nothing the next run calls foreign
        await ct.run(["sh", "-c", f"mkdir -p {quoting.join([path])} && : > {quoting.join([path + '/' + BUILDING_MARKER])}"
                                  f" && mkdir -p {quoting.join([meta + '/wheels'])}"], timeout=60, check=True)
        # uv from the same PyPI the export's other wheels came from (a site's mirror stays that site's)
        pypi = str(pylock.tool(doc).get("pypi-index") or PYPI_INDEX)
        site = VenvParams(path=path, pypi_mirror=None if pypi.rstrip("/") == PYPI_INDEX else pypi)
        uv = (await ensure_uv(ctx, uv_dir=site.uv_dir, pypi=site.fetch_url(PYPI_INDEX))).path
        py = ".".join(runtime.python.split(".")[:2])
        yield ctx.info(f"creating venv {path} with Python {py} (proven on {runtime.python})")
        found = await ct.run([uv, "python", "find", py], timeout=120, quiet=True)
        if not found.ok:
            installed_py = await ct.run([uv, "python", "install", py], timeout=900)
            if not installed_py.ok:
                raise StepFailed(f"uv could not install Python {py} in the container", result=installed_py)
        created = await ct.run([uv, "venv", "--allow-existing", "--python", py, path], timeout=900)
        if not created.ok:
            raise StepFailed(f"uv could not create a Python {py} venv at {path}", result=created)
        await ct.write_file(f"{meta}/{pylock.PYLOCK}", self.params.pylock_text().encode())
        yield ctx.info(f"fetching {len(wheels)} wheels and checking each against the lock's sha256 and size")
        spec = json.dumps([{"filename": w.filename, "url": w.url, "sha256": w.sha256, "size": w.size} for w in wheels])
        fetched = await ct.run([f"{path}/bin/python", "-c", FETCH_SCRIPT, f"{meta}/wheels", spec], timeout=3600,
                               quiet=True)
        try:
            got = json.loads(fetched.lines[-1])
        except (json.JSONDecodeError, IndexError):
            raise StepFailed("fetching the export's wheels failed in the container", result=fetched) from None
        if not isinstance(got, dict) or "wheels" not in got:
            error = got.get("error") if isinstance(got, dict) else None
            raise StepFailed(f"a wheel does not match the export's lock: {trust.shown(error, 400)}", result=fetched)
        files = [f"{meta}/wheels/{w.filename}" for w in wheels]
        installed = await ct.run([uv, "pip", "install", "--python", f"{path}/bin/python", "--offline", "--no-deps",
                                  "--no-progress", *files], timeout=3600)
        if not installed.ok:
            raise StepFailed("uv could not install the export's wheels", result=installed)
        rt: JsonObject = {"built_by": BUILT_BY, "request": {"from_export": self._sha()}, "verified": False,
                              "export_sha256": self._sha(), "torch": runtime.torch, "index_url": runtime.index_url,
                              "python": py, "wheels": got["wheels"]}
        ctx.state.venv_runtime = VenvRuntime.model_validate(rt)
        await ct.write_file(f"{path}/{RUNTIME_FILE}", json.dumps(rt, indent=1).encode())
        await ct.run(["rm", "-f", f"{path}/{BUILDING_MARKER}"], timeout=60, check=True)
        yield ctx.info(f"installed {len(files)} wheels into {path} from the export")

    async def verify(self, ctx: StepContext) -> None:
        ct, path = ctx.container(), self.params.path
        want = self.params.runtime()
        wheels = self.params.wheels()
        sums = await ct.run(["sh", "-c", f"cd {quoting.join([path + '/' + META_DIR + '/wheels'])} && sha256sum -- *.whl"],
                            timeout=600, quiet=True)
        have = {line.split()[0] for line in sums.lines if line.strip()}
        if have != {w.sha256 for w in wheels}:
            raise StepFailed(f"the wheels in {path} are not the export's: {sorted(have ^ {w.sha256 for w in wheels})}",
                             result=sums)
        info = await smoke_test(ct, path)
        inv = await ensure_inventory(ctx)
        problems = []
        if info.get("torch") != want.torch or info.get("cuda") != want.cuda:
            problems.append(f"torch {info.get('torch')} (CUDA {info.get('cuda')}) is not the export's {want.torch} "
                            f"(CUDA {want.cuda})")
        if not info.get("available"):
            problems.append("torch.cuda.is_available() is False")
        uncovered = sorted({g for g in info.get("capabilities", []) if not arch_covers(info["arch_list"], g)})
        if uncovered:
            problems.append(f"compute capability {', '.join(uncovered)} is not covered by {info['arch_list']}")
        if not all(info.get("matmul_ok", [])):
            problems.append(f"matmul check failed: {info.get('errors')}")
        if problems:
            raise StepFailed("; ".join(problems), evidence=[json.dumps(info)])
        rt = ctx.state.venv_runtime.dump() if ctx.state.venv_runtime is not None else {}
        rt.update({"verified": True, "cuda": info["cuda"], "torch": info["torch"], "python": info["python"],
                   "arch_list": info["arch_list"], "driver": inv.driver_version,
                   "gpus": [{"index": i, "compute_cap": c} for i, c in enumerate(info.get("capabilities", []))]})
        ctx.state.venv_runtime = VenvRuntime.model_validate(rt)
        await ct.write_file(f"{path}/{RUNTIME_FILE}", json.dumps(rt, indent=1).encode())

    def resolved(self, ctx: StepContext) -> JsonObject:
        rt = ctx.state.venv_runtime.dump() if ctx.state.venv_runtime is not None else {}
        return {"imported": {k: rt.get(k) for k in ("torch", "cuda", "python", "export_sha256", "wheels")}}
