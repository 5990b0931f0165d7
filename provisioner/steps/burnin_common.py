"""What `burnin.run` and `burnin.multinode` share: their common parameters (venv, backend, GEMM time,
NVML GPU-count check), the venv's interpreter and what its torch reports, shipping the burn-in package
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

    @field_validator("venv")
    @classmethod
    def _venv(cls, v: str) -> str:
        return validate.abs_path(v)

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


async def venv_runtime(ctx: StepContext, p: BurninCommonParams) -> TorchRuntime | None:
    """What the venv's own torch reports (None: no venv Python, or it cannot import torch). The burn-in
    runs with the venv's Python and nothing else: it proves the venv that venv.build built."""
    return await _runtime(ctx, p.venv_python)


def runtime_problem(runtime: TorchRuntime | None) -> str | None:
    """Why the venv's torch cannot run the burn-in (None: it can)."""
    if runtime is None:
        return "did not run (no interpreter?)"
    if not runtime.imported:
        return f"cannot import torch ({runtime.error or 'no error text'})"
    if not runtime.distributed:
        return f"has torch {runtime.version} without torch.distributed" + (f" ({runtime.error})" if runtime.error else "")
    return None


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
