"""`venv.build`: a uv venv in the container, torch from the chosen index with a hashed lock, proven on every GPU.

venv.build installs in two groups, each resolved with `uv pip compile --generate-hashes` and installed
with `uv pip install --require-hashes`:

1. `torch` (+ `torchvision`) from the chosen PyTorch index only (`--index-url <index>`): PyPI is not
   consulted, so its default build can never shadow the chosen variant;
2. the playbook's extra packages from PyPI, with torch/torchvision constrained to what group 1
   installed and the PyTorch index as `--extra-index-url` (uv consults extra indexes *before*
   `--index-url` and stops at the first index that has a package), so an extra that depends on torch
   gets the same torch, never PyPI's.

The locks (exact versions and hashes) go to the playbook's `resolved.venv_lock`; a replay whose
requirements and indexes match installs from them instead of resolving again. `runtime.json` in the
venv records what was built and proven; a venv without it is not ours and is never deleted unless
the step says `recreate: true`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from provisioner import quoting, validate
from provisioner.events import Event
from provisioner.resolver.compat import arch_list_covers
from provisioner.resolver.versions import cc_from_text
from provisioner.steps.base import DependsOnEarlier, Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import ensure_inventory
from provisioner.steps.torch_resolve import PYTORCH_INDEX, _gpus_for_resolve
from provisioner.transport.base import CommandResult
from provisioner.words import Words

PYPI_INDEX = "https://pypi.org/simple"


UV_PIN = "0.13.9"


BUILDING_MARKER = ".provisioner-building"


RUNTIME_FILE = "runtime.json"


META_DIR = ".provisioner"


BUILT_BY = "gpu-provisioner"


TORCH_FAMILY = ("torch", "torchvision")


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
    extras_from_torch_index: bool = Field(False, description="Take extra_packages from the torch wheel index "
                                                             "(a site mirror that carries them; no PyPI)")
    extra_packages: list[str] = Field(default_factory=lambda: ["nvidia-ml-py"],
                                      description="Installed from PyPI after torch (second group)")
    recreate: bool = Field(False, description="Allow deleting an existing venv at the path")
    smoke_test: bool = True
    uv_dir: str = Field("/opt/uv", description="Where uv is installed (a venv) when the container has none")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return validate.deletable_path(v)  # normalised first: `/./opt`, `//etc` are the system dirs they name

    @field_validator("uv_dir")
    @classmethod
    def _uv_dir(cls, v: str) -> str:
        return validate.abs_path(v)

    @field_validator("extra_packages")
    @classmethod
    def _pkgs(cls, v: list[str]) -> list[str]:
        for p in v:
            validate.package_spec(p)
            if _req_name(p) in TORCH_FAMILY:
                raise ValueError(f"{p!r}: torch and torchvision come from the resolved index, not extra_packages")
        return v

    @field_validator("torch", "torchvision")
    @classmethod
    def _ver(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d+\.\d+(\.\d+)?(\+[a-z0-9]+)?", v):
            raise ValueError(f"not an exact version: {v!r}")
        return v

    @field_validator("index_url", "index_mirror", "pypi_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not _URL_RE.fullmatch(v):
            raise ValueError(f"not an http(s) URL: {v!r}")
        return v


VERIFY_SCRIPT = r"""
import json, platform, sys
out = {"python": platform.python_version()}
try:
    import torch
except Exception as exc:
    print(json.dumps({"error": f"import torch failed: {exc}"})); sys.exit(0)
out["torch"] = torch.__version__
out["cuda"] = torch.version.cuda
out["available"] = bool(torch.cuda.is_available())
out["count"] = torch.cuda.device_count() if out["available"] else 0
out["arch_list"] = list(torch.cuda.get_arch_list()) if out["available"] else []
out["capabilities"] = [".".join(map(str, torch.cuda.get_device_capability(i))) for i in range(out["count"])]
out["matmul_ok"] = []
for i in range(out["count"]):
    try:
        a = torch.ones((64, 64), device=f"cuda:{i}")
        out["matmul_ok"].append(bool(float((a @ a).sum().item()) == 64.0 * 64 * 64))
    except Exception as exc:  # report, do not crash
        out["matmul_ok"].append(False); out.setdefault("errors", []).append(f"cuda:{i}: {exc}")
print(json.dumps(out))
"""


def arch_covers(arch_list: list[str], cc: str) -> bool:
    """Whether torch's arch list runs on compute capability `cc` (`resolver.compat.arch_list_covers`)."""
    return arch_list_covers(arch_list, cc_from_text(cc))


def _req_name(spec: str) -> str:
    """Normalized project name of a requirement (PEP 503)."""
    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._\-]*", spec.strip())
    return re.sub(r"[-_.]+", "-", m.group(0)).lower() if m else ""


def parse_lock(text: str) -> dict[str, str]:
    """`name==version` pins of a `uv pip compile` output (or `uv pip freeze`), names normalized."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._\-]*)(\[[^\]]*\])?==([^\s\\;]+)", line.strip())
        if m:
            pins[_req_name(m.group(1))] = m.group(3)
    return pins


def parse_state(text: str) -> dict[str, Any]:
    """Output of the venv probe script → {"state": absent|empty|notdir|incomplete|foreign|built, ...}."""
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            sections.setdefault(current, [])
        elif current:
            sections[current].append(line)
    state = (sections.get("state") or ["foreign"])[0].strip()
    out: dict[str, Any] = {"state": state}
    if state == "built":
        try:
            runtime = json.loads("\n".join(sections.get("runtime", [])))
        except json.JSONDecodeError:
            runtime = None
        if not isinstance(runtime, dict) or runtime.get("built_by") != BUILT_BY:
            return {"state": "foreign"}
        out["runtime"] = runtime
        try:
            out["lock"] = json.loads("\n".join(sections.get("lock", []))) or None
        except json.JSONDecodeError:
            out["lock"] = None
    return out


def _probe_script(path: str) -> str:
    p = quoting.join([path])
    return quoting.script(
        f"p={p}",
        'if [ ! -e "$p" ]; then echo @@state; echo absent; exit 0; fi',
        'if [ ! -d "$p" ]; then echo @@state; echo notdir; exit 0; fi',
        'if [ -z "$(ls -A "$p")" ]; then echo @@state; echo empty; exit 0; fi',
        f'if [ -e "$p/{BUILDING_MARKER}" ]; then echo @@state; echo incomplete; exit 0; fi',
        f'if [ -f "$p/{RUNTIME_FILE}" ]; then',
        '  if [ ! -x "$p/bin/python" ]; then echo @@state; echo incomplete; exit 0; fi',
        f'  echo @@state; echo built; echo @@runtime; cat "$p/{RUNTIME_FILE}"; echo',
        f'  echo @@lock; cat "$p/{META_DIR}/lock.json" 2>/dev/null; echo; exit 0',
        "fi",
        "echo @@state; echo foreign",
    )


def _lines_match(result: CommandResult, *needles: str) -> bool:
    return any(n.lower() in line.lower() for line in result.lines for n in needles)


_NO_BUILD = ("no solution found", "no version of", "not found in the package registry",
             "was not found in the provided package locations", "unsatisfiable", "no matching distribution")


_UNREACHABLE = ("failed to fetch", "error sending request", "dns error", "connection refused", "client error (connect)",
                "network unreachable")


def _install_failure(what: str, reqs: list[str], index_desc: str, result: CommandResult,
                     words: Words | None = None) -> StepFailed:
    words = words or Words()
    """A uv failure as advice: missing build (resolver_failure), unreachable index, hash mismatch, other."""
    if _lines_match(result, *_NO_BUILD):
        fix = ("check torch.resolve's choice against the index (a mirror may lack this CUDA variant), "
               "set index_url: to an index that carries it, or pin another torch version") if what == "torch" else \
              ("check the names and versions in extra_packages; an extra that needs another torch than the one "
               "installed cannot be added to this venv")
        return StepFailed(f"resolver_failure: the index {index_desc} has no build satisfying {' '.join(reqs)} "
                          f"for this Python/platform ({what} packages)", fix=fix, result=result, exit_code=3)
    if _lines_match(result, *_UNREACHABLE):
        return StepFailed(f"cannot reach the package index {index_desc} from the container ({what})",
                          fix="check the container's network/DNS and proxy settings, or point index_url: at a "
                              "reachable mirror", result=result, exit_code=4)
    if _lines_match(result, "hash mismatch", "hashes do not match"):
        return StepFailed(f"a file from {index_desc} does not match the hash recorded in the lock ({what})",
                          fix="the index served different bytes than when the lock was made; check the mirror, or "
                              "remove resolved.venv_lock from the playbook to resolve afresh", result=result)
    if _lines_match(result, "No space left on device", "os error 28"):
        return StepFailed(f"the container ran out of disk space while installing the {what} packages "
                          "(No space left on device)",
                          fix=words.field("lxc.create", "rootfs_size_gb", "grow the container's disk (the Container "
                                          "step grows it in place)") + f" or free space, {words.retry}: the "
                              "interrupted build is finished", result=result)
    return StepFailed(f"uv failed while installing the {what} packages", result=result)


def _recorded_lock(ctx: StepContext, group: dict[str, Any], req: dict[str, Any]) -> dict[str, Any] | None:
    """The playbook's recorded lock for this group, if it was made for the same requirements, indexes and Python."""
    prior = ((ctx.resolved.get("venv_lock") or {}).get("groups") or {}).get(group["name"])
    if not isinstance(prior, dict) or not prior.get("text"):
        return None
    same = all(prior.get(k) == group[k] for k in ("requirements", "index_url", "extra_index_url"))
    return prior if same and prior.get("python") == req["python"] else None


@dataclass
class _Build:
    """What the phases of one `venv.build` apply hand on to each other."""

    req: dict[str, Any]
    uv: str = ""
    repair: bool = False
    locks: dict[str, Any] = field(default_factory=dict)
    pins: dict[str, str] = field(default_factory=dict)

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
    def _request(self, ctx: StepContext) -> dict[str, Any]:
        res = ctx.state.torch.recorded() if ctx.state.torch is not None else (ctx.resolved.get("torch") or {})
        torch_v = self.params.torch or res.get("torch")
        if not torch_v:
            raise StepFailed("no torch version: run torch.resolve before venv.build or set torch:", exit_code=2)
        index = self.params.index_url or res.get("index_url")
        if not index:
            raise StepFailed("no wheel index: run torch.resolve before venv.build or set index_url:", exit_code=2)
        mirror = self.params.index_mirror
        if mirror and index.startswith(PYTORCH_INDEX):
            index = mirror.rstrip("/") + "/" + index[len(PYTORCH_INDEX):]
        index = index.rstrip("/")
        tv = self.params.torchvision or (None if self.params.torch else res.get("torchvision"))
        python = self.params.python or res.get("python") or "3.12"
        pypi = index if self.params.extras_from_torch_index else (self.params.pypi_url or PYPI_INDEX)
        return {"torch": torch_v, "torchvision": tv, "index_url": index, "python": python,
                "extra_packages": list(self.params.extra_packages), "pypi_url": pypi.rstrip("/")}

    def _groups(self, req: dict[str, Any]) -> list[dict[str, Any]]:
        torch_reqs = [f"torch=={req['torch']}"] + ([f"torchvision=={req['torchvision']}"] if req["torchvision"] else [])
        groups = [{"name": "torch", "requirements": torch_reqs, "index_url": req["index_url"], "extra_index_url": None}]
        if req["extra_packages"]:
            groups.append({"name": "extra", "requirements": list(req["extra_packages"]), "index_url": req["pypi_url"],
                           "extra_index_url": None if req["pypi_url"] == req["index_url"] else req["index_url"]})
        return groups

    @staticmethod
    def _describe(req: dict[str, Any]) -> str:
        text = f"torch {req['torch']}" + (f" + torchvision {req['torchvision']}" if req["torchvision"] else "")
        text += f" from {req['index_url']}"
        if req["extra_packages"]:
            text += f" + {', '.join(req['extra_packages'])}"
        return text + f" (Python {req['python']})"

    # --- what is there ----------------------------------------------------------------------------
    async def _state(self, ctx: StepContext) -> dict[str, Any]:
        result = await ctx.container().run(["sh", "-c", _probe_script(self.params.path)], timeout=60, quiet=True)
        if not result.ok:
            if ctx.mode == "plan":
                raise DependsOnEarlier("the container is not running yet")
            raise StepFailed(f"cannot inspect {self.params.path} in CT {ctx.vmid}", result=result)
        return parse_state(result.output)

    async def check(self, ctx: StepContext) -> Plan:
        req = self._request(ctx)
        want = self._describe(req)
        state = await self._state(ctx)
        path = self.params.path
        kind = state["state"]
        if kind == "notdir":
            raise StepFailed(f"{path} exists in CT {ctx.vmid} and is not a directory; it is left untouched",
                             fix="choose another path for the venv", exit_code=2)
        if kind == "built":
            rt = state["runtime"]
            if rt.get("request") == req and (rt.get("verified") or not self.params.smoke_test):
                if state.get("lock"):
                    ctx.state.venv_lock = state["lock"]
                ctx.state.venv_runtime = rt
                return Plan.no_change(f"{path} has {want}", f"verified: torch {rt.get('torch')}, CUDA {rt.get('cuda')}")
            if rt.get("request") == req:
                return Plan(changes=[f"finish {path}: its last build did not pass verification ({want})"])
            if not self.params.recreate:
                have = self._describe(rt["request"]) if isinstance(rt.get("request"), dict) else "another set"
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
        build.uv = await self._ensure_uv(ctx, build.req)
        yield ctx.info(f"using {build.uv}")
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
        await ct.run(["mkdir", "-p", build.meta(path)], timeout=60, check=True)
        await ct.run(["touch", f"{path}/{BUILDING_MARKER}"], timeout=60, check=True)

    async def _create_venv(self, ctx: StepContext, build: _Build) -> AsyncIterator[Event]:
        ct, path, uv, python = ctx.container(), self.params.path, build.uv, build.req["python"]
        found = await ct.run([uv, "python", "find", python], timeout=120, quiet=True)
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

    async def _install_group(self, ctx: StepContext, build: _Build, group: dict[str, Any]) -> AsyncIterator[Event]:
        """Resolve (or take the recorded lock of) one group with hashes, then install exactly that."""
        ct, uv, req = ctx.container(), build.uv, build.req
        meta, py = build.meta(self.params.path), f"{self.params.path}/bin/python"
        name, reqs = group["name"], group["requirements"]
        idx_args = ["--index-url", group["index_url"]]
        if group["extra_index_url"]:
            idx_args += ["--extra-index-url", group["extra_index_url"]]
        index_desc = group["index_url"] + (f" (+ {group['extra_index_url']})" if group["extra_index_url"] else "")
        lockfile = f"{meta}/{name}.lock.txt"
        prior = _recorded_lock(ctx, group, req)
        if prior:
            yield ctx.info(f"installing the {name} group from the recorded lock")
            await ct.write_file(lockfile, str(prior["text"]).encode())
        else:
            yield ctx.info(f"resolving {' '.join(reqs)} from {index_desc} with hashes")
            infile = f"{meta}/{name}.in"
            await ct.write_file(infile, ("\n".join(reqs) + "\n").encode())
            cmd = [uv, "pip", "compile", infile, "--generate-hashes", "--no-header", "--no-annotate", "--python", py,
                   "--no-progress", *idx_args, "-o", lockfile]
            if name != "torch":
                constraints = f"{meta}/constraints.txt"
                text = "".join(f"{n}=={v}\n" for n, v in build.pins.items() if n in TORCH_FAMILY)
                await ct.write_file(constraints, text.encode())
                cmd += ["--constraint", constraints]
            compiled = await ct.run(cmd, timeout=900)
            if not compiled.ok:
                raise _install_failure(name, reqs, index_desc, compiled, ctx.words)
        installed = await ct.run([uv, "pip", "install", "--python", py, "--require-hashes", "--no-progress",
                                  *(["--reinstall"] if build.repair else []), "-r", lockfile, *idx_args], timeout=3600)
        if not installed.ok:
            raise _install_failure(name, reqs, index_desc, installed, ctx.words)
        text = (await ct.run(["cat", lockfile], timeout=60, quiet=True, check=True)).output
        build.pins.update(parse_lock(text))
        build.locks[name] = {**{k: group[k] for k in ("requirements", "index_url", "extra_index_url")},
                             "python": req["python"], "text": text}

    async def _record(self, ctx: StepContext, build: _Build) -> AsyncIterator[Event]:
        """The lock and runtime.json beside the venv (and in the run state), then the marker removed."""
        ct, path, req = ctx.container(), self.params.path, build.req
        lock = {"groups": build.locks}
        freeze = await ct.run([build.uv, "pip", "freeze", "--python", f"{path}/bin/python"], timeout=120, quiet=True,
                              check=True)
        runtime = {"built_by": BUILT_BY, "request": req, "verified": False, "torch": build.pins.get("torch"),
                   "index_url": req["index_url"], "python": req["python"],
                   "packages": [line for line in freeze.lines if "==" in line or " @ " in line]}
        ctx.state.venv_lock = lock
        ctx.state.venv_freeze = list(freeze.lines)
        ctx.state.venv_runtime = runtime
        await ct.write_file(f"{build.meta(path)}/lock.json", json.dumps(lock).encode())
        await self._write_runtime(ctx, runtime)
        await ct.run(["rm", "-f", f"{path}/{BUILDING_MARKER}"], timeout=60, check=True)
        yield ctx.info(f"installed {len(freeze.lines)} packages into {path}; lock recorded")

    async def _write_runtime(self, ctx: StepContext, runtime: dict[str, Any]) -> None:
        await ctx.container().write_file(f"{self.params.path}/{RUNTIME_FILE}", json.dumps(runtime, indent=1).encode())

    async def _ensure_uv(self, ctx: StepContext, req: dict[str, Any]) -> str:
        """uv from PATH, else the one we installed before, else pip-install the pinned uv into a venv."""
        ct = ctx.container()
        uv_bin = f"{self.params.uv_dir}/bin/uv"
        probe = await ct.run(["sh", "-c", f"command -v uv || {{ test -x {quoting.join([uv_bin])} && "
                                          f"echo {quoting.join([uv_bin])}; }} || true"], timeout=60, quiet=True)
        found = [ln.strip() for ln in probe.lines if ln.strip().startswith("/")]
        if found:
            return found[-1]
        d = quoting.join([self.params.uv_dir])
        made = await ct.run(["sh", "-c", f"python3 -m venv {d} || {{ export DEBIAN_FRONTEND=noninteractive; "
                                         f"apt-get update -qq && apt-get install -y -qq python3-venv && "
                                         f"python3 -m venv --clear {d}; }}"], timeout=900)
        if not made.ok:
            raise StepFailed("uv is not installed in the container and no Python venv could be made to install it",
                             result=made, fix="install python3 and python3-venv in the container, or install uv")
        pip = await ct.run([f"{self.params.uv_dir}/bin/pip", "install", "--disable-pip-version-check",
                            "--index-url", req["pypi_url"], f"uv=={UV_PIN}"], timeout=900)
        if not pip.ok:
            raise _install_failure("uv", [f"uv=={UV_PIN}"], req["pypi_url"], pip, ctx.words)
        version = await ct.run([uv_bin, "--version"], timeout=60, quiet=True)
        if not version.ok or UV_PIN not in version.output:
            raise StepFailed(f"the uv installed into {self.params.uv_dir} does not run as uv {UV_PIN}", result=version)
        return uv_bin

    async def verify(self, ctx: StepContext) -> None:
        runtime = dict(ctx.state.venv_runtime or {})
        if not self.params.smoke_test:
            return
        ct = ctx.container()
        result = await ct.run([f"{self.params.path}/bin/python", "-c", VERIFY_SCRIPT], timeout=600, quiet=True)
        try:
            info = json.loads(result.lines[-1])
        except (json.JSONDecodeError, IndexError):
            raise StepFailed("the torch check in the venv crashed", result=result) from None
        if "error" in info:
            raise StepFailed(info["error"], result=result)
        inv = await ensure_inventory(ctx)
        gpus = _gpus_for_resolve(ctx)
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
        ctx.state.venv_runtime = runtime
        await self._write_runtime(ctx, runtime)

    def resolved(self, ctx: StepContext) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if ctx.state.venv_lock:
            out["venv_lock"] = ctx.state.venv_lock
        if ctx.state.venv_runtime:
            rt = ctx.state.venv_runtime
            out["runtime"] = {k: rt.get(k) for k in ("torch", "cuda", "index_url", "python", "driver")}
        return out
