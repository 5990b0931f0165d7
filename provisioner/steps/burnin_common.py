"""What `burnin.run` and `burnin.multinode` share: their common parameters (venv, backend, GEMM time,
NVML GPU-count check, fallback interpreter), the choice of interpreter, shipping the burn-in package
into the container, and reading the result document from the burn-in's output.

Helpers only: each step kind keeps its own check/apply/verify in its own file.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import Field, ValidationError, field_validator

from provisioner import validate
from provisioner.facts.base import FactUnavailable
from provisioner.facts.models import ParseError, TorchRuntime
from provisioner.facts.torch_runtime import torch_runtime
from provisioner.payloads import BurninReport, JsonObject
from provisioner.steps.base import Params
from provisioner.steps.context import StepContext

R = TypeVar("R", bound=BurninReport)

REMOTE_DIR = "/opt/gpu-provisioner/burnin"
#: what the burn-in writes in its result document's `tool` field
TOOL = "provisioner.burnin"


class BurninCommonParams(Params):
    """The parameters both burn-in steps take, with one validation each."""

    venv: str = "/opt/torch-venv"
    backend: Literal["auto", "nccl", "gloo"] = Field("auto", description="auto: nccl when the container's torch "
                                                                        "sees CUDA GPUs and has NCCL, else gloo")
    gemm_seconds: float | None = Field(None, ge=0, le=3600, description="GEMM stress per GPU (default: 30 s)")
    nvml_gpu_count_check: bool = Field(True, description="Fail the preflight unless NVML sees every GPU")
    fallback_python: str | None = Field(None, description="An interpreter (in the container) whose torch has "
                                                          "torch.distributed, used when the venv's torch has none")

    @field_validator("venv")
    @classmethod
    def _venv(cls, v: str) -> str:
        return validate.abs_path(v)

    @field_validator("fallback_python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        return None if v is None else validate.abs_path(v)

    @property
    def venv_python(self) -> str:
        return f"{self.venv}/bin/python"

    def burnin_extra_args(self, expected_gpus: int) -> list[str]:
        """The burn-in's `--expected-gpus` (the NVML count check) and `--gemm-seconds` arguments."""
        extra = ["--expected-gpus", str(expected_gpus)] if self.nvml_gpu_count_check else []
        if self.gemm_seconds is not None:
            extra += ["--gemm-seconds", str(self.gemm_seconds)]
        return extra


async def _runtime(ctx: StepContext, python: str) -> TorchRuntime | None:
    try:
        return await ctx.fact(ctx.container(), torch_runtime(python))
    except (FactUnavailable, ParseError):
        return None  # no such interpreter (yet)


async def choose_interpreter(ctx: StepContext, p: BurninCommonParams) -> tuple[str | None, TorchRuntime | None]:
    """The interpreter to run torchrun with and what its torch reports: the venv's, else
    `fallback_python` when the venv's torch has no torch.distributed. (None, the venv's runtime or
    None) when neither can run the burn-in."""
    runtime = await _runtime(ctx, p.venv_python)
    if runtime is not None and runtime.distributed:
        return p.venv_python, runtime
    if p.fallback_python:
        fallback = await _runtime(ctx, p.fallback_python)
        if fallback is not None and fallback.distributed:
            return p.fallback_python, fallback
    return None, runtime


def fallback_warning(p: BurninCommonParams, python: str) -> str:
    """The warning for a burn-in that runs with the fallback interpreter ('' for the venv's)."""
    if python == p.venv_python:
        return ""
    return f"the venv's torch has no torch.distributed; the burn-in runs with {python} (fallback_python)"


def package_tarball() -> bytes:
    """The burn-in package (stdlib + torch + pynvml only) as a tar.gz for the container."""
    import provisioner.burnin as pkg

    src = Path(pkg.__file__).parent
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("provisioner/__init__.py")
        info.size = 0
        tar.addfile(info, io.BytesIO(b""))
        for path in sorted(src.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                tar.add(path, arcname=f"provisioner/burnin/{path.relative_to(src)}", filter=_root_owned)
    return buf.getvalue()


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Files land in the container as root's, not as the controller user's uid (which the container's
    user namespace may not map: tar as root there fails to chown to it)."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


async def ship_package(ctx: StepContext) -> None:
    """Copy the burn-in package into the container and unpack it under `REMOTE_DIR`."""
    ct = ctx.container()
    with tempfile.TemporaryDirectory() as tmp:
        tarball = Path(tmp) / "burnin.tar.gz"
        tarball.write_bytes(package_tarball())
        await ct.run(["mkdir", "-p", REMOTE_DIR], timeout=60, check=True)
        await ct.put(tarball, f"{REMOTE_DIR}/burnin.tar.gz", 0o644)
    await ct.run(["tar", "-xzf", f"{REMOTE_DIR}/burnin.tar.gz", "-C", REMOTE_DIR], timeout=120, check=True)


def last_json(lines: list[str], tool: str | None = None) -> JsonObject | None:
    """The last line of `lines` that is a JSON object (warnings and logs before it are skipped); with
    `tool`, the last whose `tool` field names it (other JSON lines, e.g. torchrun's, are skipped too)."""
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(doc, dict) and (tool is None or doc.get("tool") == tool):
                return doc
    return None


def last_report(lines: list[str], model: type[R], tool: str | None = None) -> R | None:
    """`last_json`'s document parsed as `model` (None when there is none or it is not a burn-in report)."""
    raw = last_json(lines, tool)
    if raw is None:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None
