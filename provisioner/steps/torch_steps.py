"""`torch.resolve` (pick the wheel index) and `venv.build` (uv venv + locked install + proof on every GPU)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field, field_validator

from provisioner import quoting, validate
from provisioner.events import Event
from provisioner.steps.base import DependsOnEarlier, Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.lxc import ensure_inventory

PYTORCH_INDEX = "https://download.pytorch.org/whl/"
UV_PIN = "0.9.5"


class ResolveParams(Params):
    torch: str | None = Field("==2.11.0", description="PEP 440 specifier for torch (None: newest that works)")
    python: str = Field("3.12", pattern=r"^3\.\d{1,2}$")
    prefer: str = Field("lowest-cuda", pattern=r"^(lowest-cuda|newest-cuda)$")
    variant: str | None = Field(None, pattern=r"^(cu\d{3}|cpu)$", description="Override the resolver's choice")


def _gpus_for_resolve(ctx: StepContext, inv: dict[str, Any]) -> list[dict[str, Any]]:
    det = ctx.shared.get("gpu_detect")
    return list(det["gpus"]) if det else list(inv["gpus"])


@register
class TorchResolve(StepKind[ResolveParams]):
    """Choose torch version and CUDA variant from every GPU's capability, the driver, Python and arch."""

    kind = "torch.resolve"
    title = "Pick the PyTorch wheel"
    Params = ResolveParams

    async def check(self, ctx: StepContext) -> Plan:
        from provisioner.resolver import api as resolver_api

        inv = await ensure_inventory(ctx)
        gpus = _gpus_for_resolve(ctx, inv)
        ccs = [str(g["compute_cap"]) for g in gpus]
        outcome = resolver_api.resolve_dict(ccs=ccs, driver=inv["driver_version"], python=self.params.python,
                                            arch="x86_64", glibc=None, torch=self.params.torch,
                                            prefer=self.params.prefer)
        if "error" in outcome:
            err = outcome["error"]
            raise StepFailed(f"no PyTorch build fits this host: {err['message']}", fix=err.get("fix", ""), exit_code=3)
        if self.params.variant and self.params.variant != outcome["variant"]:
            outcome["reasons"] = [f"variant overridden by the playbook: {self.params.variant} "
                                  f"(resolver chose {outcome['variant']})", *outcome["reasons"]]
            outcome["variant"] = self.params.variant
            outcome["index_url"] = PYTORCH_INDEX + self.params.variant
        ctx.shared["resolution"] = outcome
        notes = [f"torch {outcome['torch']} from {outcome['index_url']} ({outcome['variant']})",
                 *[f"because: {r}" for r in outcome.get("reasons", [])[:6]]]
        notes += [f"rejected {r.get('variant')} {r.get('torch', '')}: {r.get('reason')}"
                  for r in outcome.get("rejected", [])[:6]]
        return Plan.no_change(*notes)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        return
        yield  # pragma: no cover

    def resolved(self, ctx: StepContext) -> dict[str, Any]:
        res = ctx.shared.get("resolution") or {}
        return {"torch": {k: res.get(k) for k in ("variant", "index_url", "torch", "torchvision")}}


class VenvParams(Params):
    path: str = Field("/opt/torch-venv", description="Absolute path of the venv in the container")
    python: str = Field("3.12", pattern=r"^3\.\d{1,2}$")
    torch: str | None = Field(None, description="Exact torch version; default: the resolver's")
    torchvision: str | None = Field(None, description="Exact torchvision version; default: the resolver's")
    index_url: str | None = Field(None, description="Override the wheel index URL")
    extra_packages: list[str] = Field(default_factory=lambda: ["nvidia-ml-py"])
    recreate: bool = Field(False, description="Allow deleting an existing venv at the path")
    smoke_test: bool = True

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        validate.abs_path(v)
        if v.rstrip("/") in ("", "/usr", "/opt", "/root", "/etc", "/var", "/home"):
            raise ValueError(f"refusing a system directory as venv path: {v!r}")
        return v

    @field_validator("extra_packages")
    @classmethod
    def _pkgs(cls, v: list[str]) -> list[str]:
        return [validate.package_spec(p) for p in v]

    @field_validator("torch", "torchvision")
    @classmethod
    def _ver(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d+\.\d+(\.\d+)?(\+[a-z0-9]+)?", v):
            raise ValueError(f"not an exact version: {v!r}")
        return v

    @field_validator("index_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"https?://[A-Za-z0-9.\-:\[\]]+(/[A-Za-z0-9._~\-/%]*)?", v):
            raise ValueError(f"not an http(s) URL: {v!r}")
        return v


VERIFY_SCRIPT = r"""
import json, sys
out = {}
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
    """SASS of the same major with minor ≤ the device's, or PTX of a lower or equal capability."""
    major, minor = (int(x) for x in cc.split("."))
    for entry in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", entry)
        if not m:
            continue
        kind, emaj, emin, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if suffix == "a" and (emaj, emin) != (major, minor):
            continue
        if kind == "sm" and emaj == major and emin <= minor:
            return True
        if kind == "compute" and (emaj, emin) <= (major, minor):
            return True
    return False


@register
class VenvBuild(StepKind[VenvParams]):
    """uv venv in the container, torch from the chosen index with a hashed lock, proven on every GPU."""

    kind = "venv.build"
    title = "Build the PyTorch venv with uv"
    Params = VenvParams

    def _target(self, ctx: StepContext) -> tuple[str, str | None, str]:
        res = ctx.shared.get("resolution") or ctx.resolved.get("torch") or {}
        torch_v = self.params.torch or res.get("torch")
        if not torch_v:
            raise StepFailed("no torch version: run torch.resolve before venv.build or set torch:", exit_code=2)
        index = self.params.index_url or res.get("index_url")
        if not index:
            raise StepFailed("no wheel index: run torch.resolve before venv.build or set index_url:", exit_code=2)
        lab_index = ctx.shared.get("lab_index_url")
        if lab_index and index.startswith(PYTORCH_INDEX):
            index = lab_index.rstrip("/") + "/" + index[len(PYTORCH_INDEX):]
        return torch_v, self.params.torchvision or res.get("torchvision"), index

    async def _state(self, ctx: StepContext) -> dict[str, Any]:
        p = quoting.join([self.params.path])
        result = await ctx.container().run(["sh", "-c", f"test -d {p} || {{ echo absent; exit 0; }}; "
                                                        f"cat {p}/runtime.json 2>/dev/null || echo no-runtime; "
                                                        f"test -e {p}/.provisioner-building && echo building; true"],
                                           timeout=60, quiet=True)
        if not result.ok:
            if ctx.mode == "plan":
                raise DependsOnEarlier("the container is not running yet")
            raise StepFailed(f"cannot inspect {self.params.path} in CT {ctx.vmid}", result=result)
        text = result.output.strip()
        if text == "absent":
            return {"state": "absent"}
        if "building" in result.lines:
            return {"state": "incomplete"}
        if "no-runtime" in result.lines:
            return {"state": "foreign"}
        try:
            return {"state": "built", "runtime": json.loads(result.lines[0])}
        except (json.JSONDecodeError, IndexError):
            return {"state": "foreign"}

    async def check(self, ctx: StepContext) -> Plan:
        torch_v, tv, index = self._target(ctx)
        state = await self._state(ctx)
        want = f"torch {torch_v}" + (f" + torchvision {tv}" if tv else "") + f" from {index}"
        if state["state"] == "built":
            rt = state["runtime"]
            if rt.get("torch", "").split("+")[0] == torch_v.split("+")[0] and rt.get("index_url") == index and \
                    rt.get("torchvision_requested") == tv:
                return Plan.no_change(f"{self.params.path} has {want}")
            if not self.params.recreate:
                raise StepFailed(f"{self.params.path} exists with torch {rt.get('torch')} from {rt.get('index_url')}; "
                                 f"the playbook wants {want}. It is left untouched.",
                                 fix="set recreate: true on the venv.build step, or choose another path")
            return Plan(changes=[f"recreate {self.params.path} (recreate: true) with {want}"])
        if state["state"] == "foreign":
            if not self.params.recreate:
                raise StepFailed(f"{self.params.path} exists and was not built by gpu-provisioner; it is left untouched",
                                 fix="choose another path, or set recreate: true to replace it")
            return Plan(changes=[f"replace {self.params.path} (recreate: true) with {want}"])
        if state["state"] == "incomplete":
            return Plan(changes=[f"finish the interrupted build of {self.params.path}: {want}"])
        return Plan(changes=[f"create {self.params.path} (Python {self.params.python}) with {want}"
                             + (f" + {', '.join(self.params.extra_packages)}" if self.params.extra_packages else "")])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        torch_v, tv, index = self._target(ctx)
        ct = ctx.container()
        path = self.params.path
        q = quoting.join
        state = await self._state(ctx)
        uv = await self._ensure_uv(ctx)
        if state["state"] != "absent":
            yield ctx.info(f"removing {path} ({state['state']})")
            await ct.run(["rm", "-rf", "--one-file-system", path], timeout=600, check=True)
        yield ctx.info(f"creating venv {path} with Python {self.params.python}")
        await ct.run(["mkdir", "-p", path], timeout=60, check=True)
        await ct.run(["touch", f"{path}/.provisioner-building"], timeout=60, check=True)
        await ct.run(["sh", "-c", f"{q([uv, 'venv', '--allow-existing', '--python', self.params.python, path])}"],
                     timeout=900, check=True)
        py = f"{path}/bin/python"
        groups: list[tuple[str, list[str], str | None]] = [
            ("torch", [f"torch=={torch_v}"] + ([f"torchvision=={tv}"] if tv else []), index)]
        if self.params.extra_packages:
            extra_index = ctx.shared.get("lab_pypi_url")
            groups.append(("extra", list(self.params.extra_packages), extra_index))
        locks: dict[str, Any] = dict(ctx.resolved.get("venv_lock") or {})
        for name, reqs, idx in groups:
            lock = locks.get(name)
            lockfile = f"{path}/.lock-{name}.txt"
            idx_args = ["--index-url", idx] if idx else []
            if lock and lock.get("requirements") == reqs and lock.get("index_url") == idx:
                yield ctx.info(f"installing {name} packages from the recorded lock")
                await ct.run(["sh", "-c", f"cat > {q([lockfile])}"], stdin=lock["text"].encode(), timeout=60, check=True)
            else:
                yield ctx.info(f"resolving {' '.join(reqs)} with hashes")
                await ct.run(["sh", "-c", f"printf '%s\\n' {q(reqs)} | {q([uv, 'pip', 'compile', '-', '--generate-hashes', '--python', py, '--quiet', *idx_args, '-o', lockfile])}"],
                             timeout=900, check=True)
            result = await ct.run([uv, "pip", "install", "--python", py, "--require-hashes", "-r", lockfile, *idx_args],
                                  timeout=3600)
            if not result.ok:
                if any("No solution found" in ln or "not found in the package registry" in ln or "no version of" in ln
                       for ln in result.lines):
                    raise StepFailed(f"the index {idx or 'PyPI'} has no build satisfying {' '.join(reqs)}",
                                     result=result, fix="check the resolver's choice and the index URL "
                                     "(resolver_failure); a mirror may lack this variant")
                raise StepFailed(f"uv pip install of {name} packages failed", result=result)
            text = (await ct.run(["cat", lockfile], timeout=60, quiet=True, check=True)).output
            locks[name] = {"requirements": reqs, "index_url": idx, "text": text}
        ctx.shared["venv_lock"] = locks
        freeze = await ct.run([uv, "pip", "freeze", "--python", py], timeout=120, quiet=True, check=True)
        ctx.shared["venv_freeze"] = freeze.lines
        runtime = {"torch": torch_v, "torchvision_requested": tv, "index_url": index, "python": self.params.python,
                   "packages": freeze.lines}
        ctx.shared["runtime"] = runtime
        await ct.run(["sh", "-c", f"cat > {q([path + '/runtime.json'])} && rm -f {q([path + '/.provisioner-building'])}"],
                     stdin=json.dumps(runtime).encode(), timeout=60, check=True)

    async def _ensure_uv(self, ctx: StepContext) -> str:
        ct = ctx.container()
        probe = await ct.run(["sh", "-c", "command -v uv || { test -x /opt/uv/bin/uv && echo /opt/uv/bin/uv; } || true"],
                             timeout=60, quiet=True)
        if probe.lines and probe.lines[-1].strip():
            return probe.lines[-1].strip()
        await ct.run(["sh", "-c", "python3 -m venv /opt/uv || { export DEBIAN_FRONTEND=noninteractive; apt-get install "
                                  "-y python3-venv && python3 -m venv /opt/uv; }"], timeout=900, check=True)
        await ct.run(["/opt/uv/bin/pip", "install", f"uv=={UV_PIN}"], timeout=900, check=True)
        return "/opt/uv/bin/uv"

    async def verify(self, ctx: StepContext) -> None:
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
        gpus = _gpus_for_resolve(ctx, inv)
        problems = []
        if info.get("cuda") is None:
            problems.append(f"torch {info['torch']} is a CPU-only build (torch.version.cuda is None)")
        if not info["available"]:
            problems.append("torch.cuda.is_available() is False")
        if info["count"] != len(gpus):
            problems.append(f"torch sees {info['count']} GPUs, {len(gpus)} were passed")
        for g in gpus:
            if not arch_covers(info["arch_list"], str(g["compute_cap"])):
                problems.append(f"GPU {g['index']} (sm_{str(g['compute_cap']).replace('.', '')}) is not in torch's "
                                f"arch list {' '.join(info['arch_list'])}")
                break
        if not all(info.get("matmul_ok", [])):
            problems.append(f"matmul check failed: {info.get('errors')}")
        if problems:
            raise StepFailed("; ".join(problems), evidence=[json.dumps(info)],
                             fix="see diagnose: the wheel must match the GPUs and the driver")
        runtime = dict(ctx.shared.get("runtime") or {})
        runtime.update({"cuda": info["cuda"], "torch": info["torch"], "gpus": [g.get("name") for g in gpus],
                        "driver": inv["driver_version"]})
        ctx.shared["runtime"] = runtime
        await ct.run(["sh", "-c", f"cat > {quoting.join([self.params.path + '/runtime.json'])}"],
                     stdin=json.dumps(runtime).encode(), timeout=60, quiet=True)

    def resolved(self, ctx: StepContext) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if ctx.shared.get("venv_lock"):
            out["venv_lock"] = ctx.shared["venv_lock"]
        if ctx.shared.get("runtime"):
            rt = ctx.shared["runtime"]
            out["runtime"] = {k: rt.get(k) for k in ("torch", "cuda", "index_url", "python", "driver")}
        return out
