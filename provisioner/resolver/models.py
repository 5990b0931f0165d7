"""Request and result models of the resolver (pydantic v2)."""

from __future__ import annotations

from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator

from provisioner.resolver.versions import CC, normalize_python, parse_cc, parse_driver, parse_glibc

Prefer = Literal["lowest-cuda", "newest-cuda"]
Arch = Literal["x86_64", "aarch64"]


def normalize_torch_requirement(text: str) -> str:
    """A PEP 440 specifier ('==2.11.0', '>=2.7,<2.10'); a bare version '2.11.0' means '==2.11.0'."""
    value = text.strip()
    if value.startswith("torch"):
        value = value[len("torch") :].strip()
    try:
        Version(value)
    except InvalidVersion:
        pass
    else:
        value = f"=={value}"
    try:
        SpecifierSet(value)
    except InvalidSpecifier as exc:
        raise ValueError(f"not a PEP 440 torch requirement: {text!r} (e.g. '==2.11.0' or '>=2.7,<2.12')") from exc
    if not value:
        raise ValueError("empty torch requirement")
    return value


class ResolveRequest(BaseModel):
    """What the resolver needs to know about the host (every GPU, not just the first)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cc: list[str] = Field(min_length=1, description="compute capability of every GPU, e.g. ['12.0', '12.0']")
    driver: str = Field(description="NVIDIA driver version, e.g. 595.71.05")
    python: str = Field(description="target Python, e.g. 3.12 (3.13t for free-threaded)")
    arch: Arch = "x86_64"
    glibc: str | None = Field(default=None, description="target glibc, e.g. 2.39; None = modern")
    torch: str | None = Field(default=None, description="PEP 440 requirement on torch, e.g. ==2.11.0")
    prefer: Prefer = "lowest-cuda"

    @field_validator("cc", mode="before")
    @classmethod
    def _cc(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list | tuple):
            return [str(parse_cc(str(v))) for v in value]
        return value

    @field_validator("driver")
    @classmethod
    def _driver(cls, value: str) -> str:
        parse_driver(value)
        return value.strip()

    @field_validator("python")
    @classmethod
    def _python(cls, value: str) -> str:
        return normalize_python(value)

    @field_validator("glibc")
    @classmethod
    def _glibc(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        major, minor = parse_glibc(value)
        return f"{major}.{minor}"

    @field_validator("torch")
    @classmethod
    def _torch(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return normalize_torch_requirement(value)

    def ccs(self) -> list[CC]:
        return [parse_cc(c) for c in self.cc]

    def driver_tuple(self) -> tuple[int, ...]:
        return parse_driver(self.driver)


class Rejected(BaseModel):
    """A candidate (torch version on one variant) that was not chosen, and why."""

    model_config = ConfigDict(frozen=True)

    variant: str
    torch: str
    reason: str
    kinds: list[str] = Field(default_factory=list, description="failed checks; empty = compatible")


class OtherTool(BaseModel):
    """What another installer would pick for this host (only reported when it differs)."""

    model_config = ConfigDict(frozen=True)

    tool: str
    variant: str | None
    torch: str | None
    index_url: str | None
    works: bool | None
    note: str


class Resolution(BaseModel):
    """The chosen wheel index and torch version, with the reasoning."""

    model_config = ConfigDict(frozen=True)

    variant: str
    cuda: str
    index_url: str
    torch: str
    torchvision: str | None
    reasons: list[str]
    rejected: list[Rejected]
    verified: bool
    warnings: list[str] = Field(default_factory=list)
    others: list[OtherTool] = Field(default_factory=list)
    data_version: str = ""

    def contract(self) -> dict[str, object]:
        """The `provisioner resolve --json` object (ARCHITECTURE §8) plus `others`/`warnings`."""
        return {
            "variant": self.variant,
            "index_url": self.index_url,
            "torch": self.torch,
            "torchvision": self.torchvision,
            "cuda": self.cuda,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "rejected": [r.model_dump(include={"variant", "torch", "reason"}) for r in self.rejected],
            "verified": self.verified,
            "others": [o.model_dump() for o in self.others],
            "data_version": self.data_version,
        }


ErrorCode = Literal[
    "driver_too_old",
    "driver_too_new",
    "mixed_gpus",
    "gpu_unsupported",
    "pin_unsatisfiable",
    "unknown_torch_version",
    "python_unsupported",
    "glibc_too_old",
    "platform_unsupported",
    "no_solution",
]


class ResolveError(BaseModel):
    """No official wheel can work on this host as asked; `fix` says what would change that."""

    model_config = ConfigDict(frozen=True)

    code: ErrorCode
    message: str
    fix: str
    reasons: list[str] = Field(default_factory=list)
    rejected: list[Rejected] = Field(default_factory=list)
    others: list[OtherTool] = Field(default_factory=list)
    data_version: str = ""

    def contract(self) -> dict[str, object]:
        """`{"error": {"code","message","fix"}}` plus the rejected candidates."""
        return {
            "error": {"code": self.code, "message": self.message, "fix": self.fix},
            "reasons": self.reasons,
            "rejected": [r.model_dump(include={"variant", "torch", "reason"}) for r in self.rejected],
            "others": [o.model_dump() for o in self.others],
            "data_version": self.data_version,
        }
