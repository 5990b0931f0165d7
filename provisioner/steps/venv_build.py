"""`venv.build`: a uv venv in the container, torch from the chosen index with a hashed lock, proven on every GPU.

venv.build installs in two groups, each resolved with `uv pip compile --generate-hashes` and installed
with `uv pip install --require-hashes`, the way uv documents for PyTorch: PyPI is the index, the PyTorch
index is declared `explicit = true` and torch/torchvision are sourced from it (`[tool.uv.sources]` of a
generated request `pyproject.toml`), so nothing else is ever taken from the PyTorch index (whose old numpy,
pillow, filelock, … would win under uv's first-index rule as an extra index: astral-sh/uv#7554, #2840):

1. `torch` (+ `torchvision`): the chosen CUDA build from the PyTorch index, its dependencies from PyPI;
2. the playbook's extra packages from PyPI, with the torch group's pins requested again (sources apply to
   the request's own dependencies), so an extra that depends on torch gets the same torch, never PyPI's.

Each lock is installed the same way: its torch/torchvision lines from the PyTorch index, the rest from
PyPI, `--no-deps`. A site without PyPI (`extras_from_torch_index`) resolves everything from its wheel index.
A site's mirrors (`index_mirror`, `pypi_mirror`) are where the files are fetched; the request, the lock and
runtime.json name the indexes as published, so a mirror that moves is no drift.

The locks (exact versions and hashes) go to the playbook's `resolved.venv_lock`; a replay whose
requirements and indexes match installs from them instead of resolving again. `runtime.json` in the
venv records what was built and proven; a venv without it is not ours and is never deleted unless
the step says `recreate: true`. The venv path and `uv_dir` are resolved in the container before anything
else: a path that reaches elsewhere through a symbolic link, or a system directory, is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from packaging.utils import canonicalize_name
from pydantic import Field, field_validator

from provisioner import quoting, validate
from provisioner.events import Event
from provisioner.exitcodes import ExitCode
from provisioner.payloads import JsonObject, VenvLock, VenvRuntime, object_at
from provisioner.resolver.build_data import PYTORCH_INDEX
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import ensure_inventory
from provisioner.steps.venv_common import (
    BUILDING_MARKER,
    BUILT_BY,
    META_DIR,
    PY_VERSION,
    PYPI_INDEX,
    RUNTIME_FILE,
    VenvProbe,
    arch_covers,
    ensure_uv,
    install_failure,
    probe_venv,
    recorded_toolchain,
    smoke_test,
)
from provisioner.steps.venv_links import (
    LIST_LINKS,
    Listing,
    judge_unhashed,
    lock_entries,
    parse_listing,
    pick_file,
    project_page,
    unhashed_files,
)
from provisioner.transport.base import CommandResult

TORCH_FAMILY = ("torch", "torchvision")


class VenvRequest(TypedDict):
    """What venv.build is asked to build (kept as `request` in runtime.json: a replay compares it)."""

    torch: str
    torchvision: str | None
    index_url: str
    python: str
    extra_packages: list[str]
    pypi_url: str


class LockGroup(TypedDict, total=False):
    """One group to lock and install (`_groups`), and once locked its `resolved.venv_lock` entry (plus
    python and text; `name` is the key there)."""

    name: str
    requirements: list[str]
    index_url: str
    torch_index_url: str | None
    python: str
    text: str


class HashMismatch(TypedDict):
    """uv's "Hash mismatch" report: the file, the hashes the lock allows and the one its bytes have."""

    name: str
    version: str
    expected: list[str]
    computed: str | None


def _text(value: object) -> str | None:
    """A recorded string value (None when absent or empty)."""
    return str(value) if value else None


_FILE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!\-]*\.(whl|tar\.gz|zip)")
_URL_RE = re.compile(r"https?://[A-Za-z0-9.\-:\[\]]+(/[A-Za-z0-9._~\-/%+]*)?")


class VenvParams(Params):
    path: str = Field("/opt/torch-venv", description="Absolute path of the venv in the container")
    python: str | None = Field(None, pattern=r"^3\.[0-9]{1,2}$", description="default: torch.resolve's Python, else 3.12")
    torch: str | None = Field(None, description="Exact torch version; default: the resolver's")
    torchvision: str | None = Field(None, description="Exact torchvision version; default: the resolver's")
    index_url: str | None = Field(None, description="Override the wheel index URL")
    index_mirror: str | None = Field(None, description="A site mirror of https://download.pytorch.org/whl "
                                                       "(replaces that prefix of the index URL)")
    pypi_url: str | None = Field(None, description="Simple index for extra_packages (default: PyPI)")
    pypi_mirror: str | None = Field(None, description="A site mirror of https://pypi.org/simple (fetched from in its "
                                                      "place; the venv still records PyPI)")
    extras_from_torch_index: bool = Field(False, description="Take extra_packages from the torch wheel index "
                                                             "(a site mirror that carries them; no PyPI)")
    extra_packages: list[str] = Field(default_factory=lambda: ["nvidia-ml-py"],
                                      description="Installed from PyPI after torch (second group)")
    recreate: bool = Field(False, description="Allow deleting an existing venv at the path")
    smoke_test: bool = True
    uv_dir: str = Field("/opt/uv", description="Where uv is installed (a venv) when the container has none")
    trusted_hashes: dict[str, str] = Field(
        default_factory=dict, description="file name: sha256 you checked, for files the index links without one "
                                          "(venv.build refuses those otherwise)")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return validate.deletable_path(v)  # normalised first: `/./opt`, `//etc` are the system dirs they name

    @field_validator("uv_dir")
    @classmethod
    def _uv_dir(cls, v: str) -> str:
        # the same rules as the venv path: uv's venv is made (and re-made) there
        try:
            return validate.deletable_path(v)
        except ValueError as exc:
            raise ValueError(str(exc).replace("as venv path", "as uv_dir")) from None

    @field_validator("extra_packages")
    @classmethod
    def _pkgs(cls, v: list[str]) -> list[str]:
        for p in v:
            validate.package_spec(p)
            if _req_name(p) in TORCH_FAMILY:
                raise ValueError(f"{p!r}: torch and torchvision come from the resolved index, not extra_packages")
        return v

    @field_validator("trusted_hashes")
    @classmethod
    def _trusted(cls, v: dict[str, str]) -> dict[str, str]:
        out = {}
        for name, digest in v.items():
            if not _FILE_RE.fullmatch(name):
                raise ValueError(f"{name!r}: not a wheel or sdist file name")
            sha = digest.strip().lower().removeprefix("sha256:")
            if not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise ValueError(f"{name}: {digest!r} is not a sha256 (64 hex digits)")
            out[name] = sha
        return out

    @field_validator("torch", "torchvision")
    @classmethod
    def _ver(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d+\.\d+(\.\d+)?(\+[a-z0-9]+)?", v):
            raise ValueError(f"not an exact version: {v!r}")
        return v

    @field_validator("index_url", "index_mirror", "pypi_url", "pypi_mirror")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not _URL_RE.fullmatch(v):
            raise ValueError(f"not an http(s) URL: {v!r}")
        return v

    def fetch_url(self, url: str) -> str:
        """Where `url` (an index the request names) is fetched from on this site: its mirror, if one is set."""
        mirror, real = self.index_mirror, PYTORCH_INDEX.rstrip("/")
        if mirror and (url == real or url.startswith(real + "/")):
            return mirror.rstrip("/") + url[len(real):]
        if self.pypi_mirror and url.rstrip("/") == PYPI_INDEX:
            return self.pypi_mirror.rstrip("/")
        return url


def _req_name(spec: str) -> str:
    """Normalized project name of a requirement (PEP 503)."""
    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._\-]*", spec.strip())
    return canonicalize_name(m.group(0)) if m else ""


def parse_lock(text: str) -> dict[str, str]:
    """`name==version` pins of a `uv pip compile` output (or `uv pip freeze`), names normalized."""
    return {name: version for name, (version, _) in lock_entries(text).items()}


def toolchain_drift(recorded: Mapping[str, object], state: VenvProbe, *, vmid: int,
                    uv_dir: str) -> tuple[list[str], list[str]]:
    """(changes, notes) for a built venv whose container's toolchain differs from the playbook's record: a uv
    other than the recorded one (neither on PATH nor in uv_dir) is installed into uv_dir at the recorded
    version; a venv whose Python is another patch release is named (its repair is `recreate: true`)."""
    changes, notes = [], []
    want_uv = object_at(recorded, "uv").get("version")
    have = [v for v in (state.get("uv_path_version"), state.get("uv_dir_version")) if v]
    if want_uv and want_uv not in have:
        seen = f"uv {have[0]} in CT {vmid}" if have else f"no uv in CT {vmid}"
        changes.append(f"install uv {want_uv} into {uv_dir}: {seen}, the playbook recorded {want_uv}")
    want_py = object_at(recorded, "python").get("version")
    if want_py and state.get("venv_python") and state["venv_python"] != want_py:
        notes.append(f"warning: drift: Python {state['venv_python']} in the venv of CT {vmid}, the playbook "
                     f"recorded {want_py}; set recreate: true to rebuild it with the recorded Python")
    return changes, notes


def request_pyproject(requirements: list[str], torch_index: str) -> str:
    """The request as uv documents it for PyTorch: the PyTorch index explicit, torch/torchvision from it."""
    deps = "".join(f"  {json.dumps(r)},\n" for r in requirements)
    sources = "".join(f'{n} = {{ index = "pytorch" }}\n' for n in TORCH_FAMILY)
    return (f'[project]\nname = "gpu-provisioner-venv"\nversion = "0"\ndependencies = [\n{deps}]\n\n'
            f"[tool.uv.sources]\n{sources}\n"
            f'[[tool.uv.index]]\nname = "pytorch"\nurl = {json.dumps(torch_index)}\nexplicit = true\n')


def split_lock(text: str) -> dict[str, str]:
    """A `uv pip compile` lock split into its torch/torchvision entries ("torch") and the rest ("pypi")."""
    out = {"torch": [], "pypi": []}  # type: dict[str, list[str]]
    current = "pypi"
    for line in text.splitlines():
        if line.strip() and not line[0].isspace() and not line.startswith("#"):
            current = "torch" if _req_name(line) in TORCH_FAMILY else "pypi"
        out[current].append(line)
    return {k: "\n".join(v) + "\n" if v else "" for k, v in out.items()}


_MISMATCH_RE = re.compile(r"Hash mismatch for `([A-Za-z0-9._\-]+)==([^`\s]+)`")
_SHA_RE = re.compile(r"sha256:([0-9a-f]{64})")


def parse_hash_mismatch(text: str) -> HashMismatch | None:
    """uv's "Hash mismatch for `name==version`" with its Expected/Computed sha256 lines (None: not one)."""
    m = _MISMATCH_RE.search(text)
    if m is None:
        return None
    rest = text[m.end():]
    expected_part, _, computed_part = rest.partition("Computed:")
    return {"name": _req_name(m.group(1)), "version": m.group(2), "expected": _SHA_RE.findall(expected_part),
            "computed": (_SHA_RE.findall(computed_part) or [None])[0]}


def _recorded_lock(ctx: StepContext, group: LockGroup, req: VenvRequest) -> JsonObject | None:
    """The playbook's recorded lock for this group, if it was made for the same requirements, indexes and Python."""
    lock = ctx.resolved.venv_lock
    recorded = lock.groups.get(group["name"]) if lock is not None else None
    if recorded is None or not recorded.text:
        return None
    prior = recorded.dump()
    same = (prior.get("requirements") == group["requirements"] and prior.get("index_url") == group["index_url"]
            and prior.get("torch_index_url") == group["torch_index_url"])
    return prior if same and prior.get("python") == req["python"] else None


@dataclass
class _Build:
    """What the phases of one `venv.build` apply hand on to each other."""

    req: VenvRequest
    uv: str = ""
    uv_version: str = ""
    uv_source: str = ""
    python_provided: str = ""
    repair: bool = False
    locks: dict[str, LockGroup] = field(default_factory=dict)
    pins: dict[str, str] = field(default_factory=dict)
    hash_checked: set[str] = field(default_factory=set)  # name==version whose links' hashes were checked

    @staticmethod
    def meta(path: str) -> str:
        return f"{path}/{META_DIR}"


@register
class VenvBuild(StepKind[VenvParams]):
    """uv venv in the container, torch from the chosen index with a hashed lock, proven on every GPU."""

    kind = "venv.build"
    title = "Build the PyTorch venv with uv"
    Params = VenvParams

    # --- what is wanted ---------------------------------------------------------------------------
    def _request(self, ctx: StepContext) -> VenvRequest:
        res: Mapping[str, object] = (ctx.state.torch.recorded() if ctx.state.torch is not None
                                     else dict(ctx.resolved.torch or {}))
        torch_v = self.params.torch or _text(res.get("torch"))
        if not torch_v:
            raise StepFailed("no torch version: run torch.resolve before venv.build or set torch:", exit_code=ExitCode.USAGE)
        index = self.params.index_url or _text(res.get("index_url"))
        if not index:
            raise StepFailed("no wheel index: run torch.resolve before venv.build or set index_url:", exit_code=ExitCode.USAGE)
        index = index.rstrip("/")
        tv = self.params.torchvision or (None if self.params.torch else _text(res.get("torchvision")))
        python = self.params.python or _text(res.get("python")) or "3.12"
        pypi = index if self.params.extras_from_torch_index else (self.params.pypi_url or PYPI_INDEX)
        # What the user asked for (the real index URLs): a site's mirror is where they are fetched from
        # (`VenvParams.fetch_url`), never part of the request, so a mirror that moves is not drift.
        return {"torch": torch_v, "torchvision": tv, "index_url": index, "python": python,
                "extra_packages": list(self.params.extra_packages), "pypi_url": pypi.rstrip("/")}

    def _groups(self, req: VenvRequest) -> list[LockGroup]:
        """torch (+ torchvision), then the extras; each resolved with PyPI as the index and the PyTorch index
        explicit for torch/torchvision (None when the site has no PyPI: then the PyTorch index is the index)."""
        torch_reqs = [f"torch=={req['torch']}"] + ([f"torchvision=={req['torchvision']}"] if req["torchvision"] else [])
        explicit = None if req["pypi_url"] == req["index_url"] else req["index_url"]
        groups: list[LockGroup] = [{"name": "torch", "requirements": torch_reqs, "index_url": req["pypi_url"],
                                    "torch_index_url": explicit}]
        if req["extra_packages"]:
            groups.append({"name": "extra", "requirements": list(req["extra_packages"]), "index_url": req["pypi_url"],
                           "torch_index_url": explicit})
        return groups

    @staticmethod
    def _describe(req: Mapping[str, object]) -> str:
        """A request (ours, or one a runtime.json recorded) in words."""
        text = f"torch {req.get('torch')}" + (f" + torchvision {req['torchvision']}" if req.get("torchvision") else "")
        text += f" from {req.get('index_url')}"
        extras = req.get("extra_packages")
        if isinstance(extras, list) and extras:
            text += f" + {', '.join(map(str, extras))}"
        return text + f" (Python {req.get('python')})"

    # --- what is there ----------------------------------------------------------------------------
    async def _state(self, ctx: StepContext) -> VenvProbe:
        """What is at the venv path, with the venv path and uv_dir resolved in the container and guarded
        (`_guard_resolved`) before anything else runs: one read-only command."""
        state, result = await probe_venv(ctx, self.params.path, self.params.uv_dir)
        self._guard_resolved(ctx, state, result)
        return state

    def _guard_resolved(self, ctx: StepContext, state: VenvProbe, result: CommandResult) -> None:
        """The venv path and uv_dir as the container resolves them: a path that reaches another directory
        through a symbolic link (`/opt/link -> /`) or a system directory is refused before any command
        changes anything, and every later command uses the path as given, which is then the real one."""
        for name, given, real in (("path", self.params.path, state.get("real")),
                                  ("uv_dir", self.params.uv_dir, state.get("uv_real"))):
            if not real or not real.startswith("/"):
                raise StepFailed(f"cannot resolve {name} {given} in CT {ctx.vmid} (realpath/readlink)",
                                 result=result, fix="check that coreutils or busybox is installed in the container")
            try:
                (validate.deletable_path if name == "path" else VenvParams._uv_dir)(real)
            except ValueError as exc:
                raise StepFailed(f"{name} {given} is {real} in CT {ctx.vmid}: {exc}; nothing was changed",
                                 fix=f"choose another {name}", exit_code=ExitCode.USAGE) from None
            if real != given:
                raise StepFailed(f"{name} {given} resolves to {real} in CT {ctx.vmid} through a symbolic link; "
                                 "it is left untouched (a venv is created, replaced or removed only at its real "
                                 "path)", fix=f"set {name}: {real} if that is the directory you mean", exit_code=ExitCode.USAGE)

    async def check(self, ctx: StepContext) -> Plan:
        req = self._request(ctx)
        want = self._describe(req)
        state = await self._state(ctx)
        path = self.params.path
        kind = state["state"]
        if kind == "notdir":
            raise StepFailed(f"{path} exists in CT {ctx.vmid} and is not a directory; it is left untouched",
                             fix="choose another path for the venv", exit_code=ExitCode.USAGE)
        if kind == "built":
            rt = state["runtime"]
            if rt.get("request") == req and (rt.get("verified") or not self.params.smoke_test):
                if state.get("lock"):
                    ctx.state.venv_lock = VenvLock.model_validate(state["lock"])
                ctx.state.venv_runtime = VenvRuntime.model_validate(rt)
                changes, drift_notes = toolchain_drift(recorded_toolchain(ctx.resolved), state, vmid=ctx.vmid,
                                                       uv_dir=self.params.uv_dir)
                if changes:
                    return Plan(changes=changes, notes=drift_notes)
                return Plan.no_change(f"{path} has {want}", f"verified: torch {rt.get('torch')}, CUDA {rt.get('cuda')}",
                                      *drift_notes)
            if rt.get("request") == req:
                return Plan(changes=[f"finish {path}: its last build did not pass verification ({want})"])
            if not self.params.recreate:
                prior = rt.get("request")
                have = self._describe(prior) if isinstance(prior, dict) else "another set"
                raise StepFailed(f"{path} exists with {have}; the playbook wants {want}. It is left untouched.",
                                 fix="set recreate: true on the venv.build step, or choose another path")
            return Plan(changes=[f"recreate {path} (recreate: true): {want}"])
        if kind == "foreign":
            if not self.params.recreate:
                raise StepFailed(f"{path} exists in CT {ctx.vmid} and was not built by gpu-provisioner; "
                                 "it is left untouched",
                                 fix="choose another path, or set recreate: true to replace it")
            return Plan(changes=[f"replace {path} (recreate: true; not built by gpu-provisioner): {want}"])
        locked = [g["name"] for g in self._groups(req) if _recorded_lock(ctx, g, req)]
        notes = [f"{', '.join(locked)} group(s) install from the lock in the playbook's resolved section"] if locked else []
        if kind == "incomplete":
            return Plan(changes=[f"finish the interrupted build of {path}: {want}"], notes=notes)
        return Plan(changes=[f"create {path} with {want}"], notes=notes)

    # --- doing it ---------------------------------------------------------------------------------
    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        """prepare (uv, a stale venv removed, the building marker) → create the venv → install each
        group from its lock → record the lock and runtime."""
        build = _Build(req=self._request(ctx))
        state = await self._state(ctx)
        rt: JsonObject = state.get("runtime") or {}
        if (state["state"] == "built" and rt.get("request") == build.req
                and (rt.get("verified") or not self.params.smoke_test)):
            # a current venv whose uv drifted: install the recorded uv, nothing else
            build.uv = await self._ensure_uv(ctx, build.req, build)
            runtime: JsonObject = {**rt, "toolchain": {**object_at(rt, "toolchain"), "uv": self._uv_record(build)}}
            ctx.state.venv_runtime = VenvRuntime.model_validate(runtime)
            await self._write_runtime(ctx, runtime)
            yield ctx.info(f"using {build.uv} (uv {build.uv_version}); {self.params.path} is unchanged")
            return
        async for event in self._prepare(ctx, build):
            yield event
        async for event in self._create_venv(ctx, build):
            yield event
        for group in self._groups(build.req):
            async for event in self._install_group(ctx, build, group):
                yield event
        async for event in self._record(ctx, build):
            yield event

    async def _prepare(self, ctx: StepContext, build: _Build) -> AsyncIterator[Event]:
        ct, path = ctx.container(), self.params.path
        state = await self._state(ctx)
        build.uv = await self._ensure_uv(ctx, build.req, build)
        yield ctx.info(f"using {build.uv} (uv {build.uv_version})")
        stale = state["state"] == "foreign" or (state["state"] == "built"
                                                 and state["runtime"].get("request") != build.req)
        # A build cut short (disk full, dropped connection) can leave half-copied packages that uv considers
        # installed: finishing it reinstalls every package of the lock.
        build.repair = state["state"] == "incomplete" or (state["state"] == "built" and not stale
                                                           and not state["runtime"].get("verified"))
        if stale:  # check() only lets these through with recreate: true
            if not self.params.recreate:
                raise StepFailed(f"{path} changed since the check; it is left untouched")
            yield ctx.info(f"removing {path} ({state['state']}, recreate: true)")
            await ct.run(["rm", "-rf", "--one-file-system", path], timeout=600, check=True)
        # The "ours" marker is the first thing in the directory: a run killed at any point leaves the path
        # absent, empty, or marked as an interrupted build of ours (never a half-made venv called foreign).
        p = quoting.join([path])
        await ct.run(["sh", "-c", f'mkdir -p {p} && : > {p}/{BUILDING_MARKER} && mkdir -p {p}/{META_DIR}'],
                     timeout=60, check=True)

    async def _create_venv(self, ctx: StepContext, build: _Build) -> AsyncIterator[Event]:
        ct, path, uv, python = ctx.container(), self.params.path, build.uv, build.req["python"]
        rec = object_at(recorded_toolchain(ctx.resolved), "python")
        if (str(rec.get("provided_by", "")).startswith("uv") and str(rec.get("version", "")).startswith(python + ".")):
            python = str(rec["version"])  # uv provided it: the same patch release again
        found = await ct.run([uv, "python", "find", python], timeout=120, quiet=True)
        build.python_provided = ("uv-managed Python" if "/uv/python/" in found.output else "the container's Python"
                                 ) if found.ok else "uv python install"
        if not found.ok:
            yield ctx.info(f"Python {python} is not in the container: installing it with uv")
            installed_py = await ct.run([uv, "python", "install", python], timeout=900)
            if not installed_py.ok:
                raise StepFailed(f"uv could not install Python {python} in the container", result=installed_py,
                                 fix=f"install python{python} from the distribution, or give the container "
                                     "access to uv's Python downloads (github.com)")
        yield ctx.info(f"creating venv {path} with Python {python}")
        created = await ct.run([uv, "venv", "--allow-existing", "--python", python, path], timeout=900)
        if not created.ok:
            raise StepFailed(f"uv could not create a Python {python} venv at {path}", result=created,
                             fix=f"install Python {python} in the container, or allow uv to download it "
                                 "(network access to GitHub; UV_PYTHON_DOWNLOADS not 'never')")

    async def _install_group(self, ctx: StepContext, build: _Build, group: LockGroup) -> AsyncIterator[Event]:
        """Resolve (or take the recorded lock of) one group with hashes, then install exactly that.

        With a PyTorch index and a PyPI, the resolution is uv's documented one for PyTorch: a request
        (`pyproject.toml`) with the PyTorch index declared `explicit = true` and torch/torchvision sourced from
        it (`[tool.uv.sources]`), everything else from PyPI (`--index-url`); never the PyTorch index as an
        extra index, whose old numpy/pillow/… would win under uv's first-index rule (astral-sh/uv#7554). The
        lock is installed the same way: its torch/torchvision lines from the PyTorch index, the rest from PyPI,
        each with `--require-hashes --no-deps`."""
        ct, uv, req = ctx.container(), build.uv, build.req
        meta, py = build.meta(self.params.path), f"{self.params.path}/bin/python"
        name, reqs = group["name"], group["requirements"]
        default = self.params.fetch_url(group["index_url"])
        explicit = self.params.fetch_url(group["torch_index_url"]) if group["torch_index_url"] else None
        index_desc = default + (f" (torch, torchvision: {explicit})" if explicit else "")
        lockfile = f"{meta}/{name}.lock.txt"
        prior = _recorded_lock(ctx, group, req)
        if prior:
            yield ctx.info(f"installing the {name} group from the recorded lock")
            await ct.write_file(lockfile, str(prior["text"]).encode())
        else:
            yield ctx.info(f"resolving {' '.join(reqs)} from {index_desc} with hashes")
            if explicit:
                infile = f"{meta}/{name}-request/pyproject.toml"
                await ct.run(["mkdir", "-p", f"{meta}/{name}-request"], timeout=60, check=True)
                # uv applies a source to the request's own dependencies only: the torch group's pins are
                # requested again, so an extra that depends on torch gets exactly that torch, from that index
                pinned = [f"{n}=={v}" for n, v in build.pins.items() if n in TORCH_FAMILY and name != "torch"]
                await ct.write_file(infile, request_pyproject([*reqs, *pinned], explicit).encode())
            else:
                infile = f"{meta}/{name}.in"
                await ct.write_file(infile, ("\n".join(reqs) + "\n").encode())
            cmd = [uv, "pip", "compile", infile, "--generate-hashes", "--no-header", "--no-annotate", "--python", py,
                   "--no-progress", "--index-url", default, "-o", lockfile]
            if name != "torch":
                constraints = f"{meta}/constraints.txt"
                text = "".join(f"{n}=={v}\n" for n, v in build.pins.items() if n in TORCH_FAMILY)
                await ct.write_file(constraints, text.encode())
                cmd += ["--constraint", constraints]
            compiled = await ct.run(cmd, timeout=900)
            if not compiled.ok:  # torch and torchvision come from the PyTorch index alone: name that one
                mismatch = parse_hash_mismatch(compiled.output)  # a file uv downloaded to read its metadata
                if mismatch is not None:
                    linked_by = explicit if explicit and mismatch["name"] in TORCH_FAMILY else default
                    raise await self._hash_failure(ctx, mismatch, linked_by, compiled, recorded=False,
                                                   python=req["python"])
                raise install_failure(name, reqs, explicit if explicit and name == "torch" else index_desc, compiled,
                                       ctx.words)
        text = (await ct.run(["cat", lockfile], timeout=60, quiet=True, check=True)).output
        parts = split_lock(text) if explicit else {"": text}
        for part, part_text in parts.items():
            if not part_text.strip():
                continue
            source = explicit if part == "torch" else default
            if not prior and (part == "torch" or not explicit):  # the files of a wheel index, freshly locked
                async for event in self._check_hashes(ctx, build, part_text, str(source)):
                    yield event
            part_file = lockfile if not explicit else f"{meta}/{name}.{part}.lock.txt"
            if explicit:
                await ct.write_file(part_file, part_text.encode())
            installed = await ct.run([uv, "pip", "install", "--python", py, "--require-hashes", "--no-progress",
                                      *(["--no-deps"] if explicit else []), *(["--reinstall"] if build.repair else []),
                                      "-r", part_file, "--index-url", str(source)], timeout=3600)
            if not installed.ok:
                mismatch = parse_hash_mismatch(installed.output)
                if mismatch is not None:
                    raise await self._hash_failure(ctx, mismatch, str(source), installed, recorded=bool(prior),
                                                   python=req["python"])
                raise install_failure(name, reqs, str(source), installed, ctx.words)
        build.pins.update(parse_lock(text))
        build.locks[name] = {"requirements": group["requirements"], "index_url": group["index_url"],
                             "torch_index_url": group["torch_index_url"], "python": req["python"], "text": text}

    async def _listing(self, ctx: StepContext, pages: list[str]) -> Listing:
        """The links of these project pages, as the container reads them (`LIST_LINKS`, the venv's Python)."""
        result = await ctx.container().run([f"{self.params.path}/bin/python", "-c", LIST_LINKS, *pages],
                                           timeout=120 + 10 * len(pages), quiet=True)
        if result.ok:
            return parse_listing(result.output)
        why = (result.tail(1) or [f"exit status {result.exit_status}"])[0]
        return Listing(errors={page: why for page in pages})

    async def _check_hashes(self, ctx: StepContext, build: _Build, lock_text: str, index: str
                            ) -> AsyncIterator[Event]:
        """A freshly locked file that its wheel index links without a sha256 carries only the hash uv made of
        the bytes it downloaded: refused unless the playbook's trusted_hashes names that sha256."""
        pins = {name: version for name, version in parse_lock(lock_text).items()
                if f"{name}=={version}" not in build.hash_checked}  # the extra group re-locks torch: once is enough
        if not pins:
            return
        listing = await self._listing(ctx, [project_page(index, name) for name in pins])
        found = unhashed_files(lock_text, listing, index, build.req["python"])
        build.hash_checked.update(f"{name}=={version}" for name, version in pins.items())
        for page, why in listing.errors.items():
            yield ctx.warning(f"could not read {page} to check its links' hashes: {why}")
        verdict = judge_unhashed(found, self.params.trusted_hashes, where=ctx.words.where(self.kind, "trusted_hashes"),
                                 retry=ctx.words.retry)
        if verdict["refused"]:
            raise StepFailed("; ".join(verdict["refused"]), exit_code=ExitCode.FAILED, fix=verdict["fix"],
                             offer=verdict["offer"])
        for accepted in verdict["trusted"]:
            yield ctx.info(f"linked without a sha256, trusted by the playbook: {accepted}")

    async def _hash_failure(self, ctx: StepContext, mismatch: HashMismatch, index: str, result: CommandResult, *,
                            recorded: bool, python: str) -> StepFailed:
        """A file whose bytes are not the sha256 the lock holds: which file, from which host, and whose the
        fault is. The link's own hash (read from the index page) tells an index that links a wrong hash
        (pytorch/vision#9243) from a file that changed since the playbook's lock was recorded."""
        name, version = mismatch["name"], mismatch["version"]
        page = project_page(index, name)
        listing = await self._listing(ctx, [page])
        links = listing.pages.get(page)
        found = pick_file(links, page, name, version, python, listing.machine) if links else None
        what = (f"{found['file']} from {found['host']}" if found
                else f"the file of {name}=={version} (linked by {page})")
        got = f"; its bytes have sha256 {mismatch['computed']}" if mismatch.get("computed") else ""
        if found and found["sha256"] and found["sha256"] not in mismatch["expected"] and recorded:
            return StepFailed(
                f"{what} is not the file the playbook's lock recorded for {name}=={version}: the index now links "
                f"sha256 {found['sha256']}{got} (linked by {page})", result=result, exit_code=ExitCode.FAILED,
                fix="the file was re-published since the lock was recorded: if that is expected, remove "
                    "resolved.venv_lock from the playbook to lock afresh; otherwise ask the index's owner")
        if found and found["sha256"] and mismatch.get("computed") and found["sha256"] != mismatch["computed"]:
            return StepFailed(
                f"{what} does not match the sha256 the index links it with ({found['sha256']}{got}): the index "
                f"{page} itself publishes a wrong hash for this file (as pytorch/vision#9243 did), not your "
                "mirror or network", result=result, exit_code=ExitCode.FAILED,
                fix=f"pin another {name} version or Python (another file), or wait until the index is fixed; "
                    "report it to the index's owner with this file name")
        return StepFailed(f"{what} does not match the hash in the lock ({', '.join(mismatch['expected'])[:200]}"
                          f"{got})", result=result, exit_code=ExitCode.FAILED,
                          fix="compare the file on its host with the index's link; if the file was re-published, "
                              "remove resolved.venv_lock from the playbook to lock afresh")

    async def _record(self, ctx: StepContext, build: _Build) -> AsyncIterator[Event]:
        """The lock and runtime.json beside the venv (and in the run state), then the marker removed."""
        ct, path, req = ctx.container(), self.params.path, build.req
        lock = {"groups": build.locks}
        freeze = await ct.run([build.uv, "pip", "freeze", "--python", f"{path}/bin/python"], timeout=120, quiet=True,
                              check=True)
        pyver = await ct.run([f"{path}/bin/python", "-c", PY_VERSION], timeout=120, quiet=True, check=True)
        toolchain = {"uv": self._uv_record(build),
                     "python": {"version": pyver.output.strip(), "provided_by": build.python_provided}}
        runtime: JsonObject = {"built_by": BUILT_BY, "request": dict(req), "verified": False, "torch": build.pins.get("torch"),
                   "index_url": req["index_url"], "python": req["python"], "toolchain": toolchain,
                   "packages": [line for line in freeze.lines if "==" in line or " @ " in line]}
        ctx.state.venv_lock = VenvLock.model_validate(lock)
        ctx.state.venv_freeze = list(freeze.lines)
        ctx.state.venv_runtime = VenvRuntime.model_validate(runtime)
        await ct.write_file(f"{build.meta(path)}/lock.json", json.dumps(lock).encode())
        await self._write_runtime(ctx, runtime)
        await ct.run(["rm", "-f", f"{path}/{BUILDING_MARKER}"], timeout=60, check=True)
        yield ctx.info(f"installed {len(freeze.lines)} packages into {path}; lock recorded")

    async def _write_runtime(self, ctx: StepContext, runtime: Mapping[str, object]) -> None:
        await ctx.container().write_file(f"{self.params.path}/{RUNTIME_FILE}", json.dumps(runtime, indent=1).encode())

    @staticmethod
    def _uv_record(build: _Build) -> dict[str, str]:
        return {"version": build.uv_version, "source": build.uv_source}

    async def _ensure_uv(self, ctx: StepContext, req: VenvRequest, build: _Build) -> str:
        """`ensure_uv` with this step's uv_dir, from PyPI (or the site's PyPI mirror, never the PyTorch index)."""
        pypi = self.params.fetch_url(req["pypi_url"] if not self.params.extras_from_torch_index else PYPI_INDEX)
        uv = await ensure_uv(ctx, uv_dir=self.params.uv_dir, pypi=pypi)
        build.uv_version, build.uv_source = uv.version, uv.source
        return uv.path

    async def verify(self, ctx: StepContext) -> None:
        runtime = ctx.state.venv_runtime.dump() if ctx.state.venv_runtime is not None else {}
        if not self.params.smoke_test:
            return
        info = await smoke_test(ctx.container(), self.params.path)
        inv = await ensure_inventory(ctx)
        gpus = ctx.state.gpus
        problems = []
        if info.get("cuda") is None:
            problems.append(f"torch {info['torch']} is a CPU-only build (torch.version.cuda is None)")
        if not info["available"]:
            problems.append("torch.cuda.is_available() is False")
        if info["count"] != len(gpus):
            problems.append(f"torch sees {info['count']} GPUs, {len(gpus)} were passed")
        uncovered = sorted({str(g.compute_cap) for g in gpus
                            if g.compute_cap and not arch_covers(info["arch_list"], str(g.compute_cap))})
        if uncovered:
            problems.append(f"compute capability {', '.join(uncovered)} is not covered by torch's arch list "
                            f"{' '.join(info['arch_list'])}")
        if not all(info.get("matmul_ok", [])):
            problems.append(f"matmul check failed: {info.get('errors')}")
        if problems:
            raise StepFailed("; ".join(problems), evidence=[json.dumps(info)],
                             fix="see diagnose: the wheel must match the GPUs and the driver")
        runtime.update({"verified": True, "cuda": info["cuda"], "torch": info["torch"], "python": info["python"],
                        "arch_list": info["arch_list"], "driver": inv.driver_version,
                        "gpus": [g.model_dump(include={"index", "name", "compute_cap"}) for g in gpus]})
        ctx.state.venv_runtime = VenvRuntime.model_validate(runtime)
        await self._write_runtime(ctx, runtime)

    def resolved(self, ctx: StepContext) -> JsonObject:
        out: JsonObject = {}
        if ctx.state.venv_lock is not None:
            out["venv_lock"] = ctx.state.venv_lock.dump()
        if ctx.state.venv_runtime is not None:
            out["runtime"] = ctx.state.venv_runtime.recorded()
            if ctx.state.venv_runtime.toolchain:
                out["toolchain"] = ctx.state.venv_runtime.toolchain
            elif ctx.resolved.toolchain:  # a venv built before the record keeps it
                out["toolchain"] = ctx.resolved.toolchain
        return out
