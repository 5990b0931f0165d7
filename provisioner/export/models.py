"""What an export states: `runtime.json` (what was proven) and `host.json` (what a host must give)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from provisioner.resolver.versions import driver_at_least, parse_driver

EXPORT_SCHEMA = 1
FORMATS = ("pylock", "flox", "nix", "oci")
Format = Literal["pylock", "flox", "nix", "oci"]


# Every string of runtime.json/host.json comes from the proving container or an export folder (a stranger's):
# each field holds only what its kind of value may hold, so a `$(…)`, a quote or a newline is refused here,
# naming the field, before any rendering (which escapes by its own format's rules as well).
Version = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+){0,3}(\+[a-z0-9.]+)?$", max_length=40)]
Driver = Annotated[str, StringConstraints(pattern=r"^([0-9]{2,4}(\.[0-9]{1,3}){0,2})?$")]
CudaVersion = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$")]
Cc = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$")]
Arch = Annotated[str, StringConstraints(pattern=r"^(sm|compute)_[0-9]{2,3}[a-z]?$")]
PythonVersion = Annotated[str, StringConstraints(pattern=r"^3\.[0-9]{1,2}\.[0-9]{1,3}([a-z]{1,2}[0-9]{0,2})?\+?$")]
Url = Annotated[str, StringConstraints(pattern=r"^https?://[A-Za-z0-9.\-:\[\]]+(/[A-Za-z0-9._~\-/%+]*)?$",
                                       max_length=2000)]
AbsPath = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9._+/-]*$", max_length=4096)]
#: free text (a GPU's name, a node's label, a playbook's path): no control character (newline, escape), bounded
Text = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]*$", max_length=1000)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuProof(_Model):
    index: int = Field(ge=0, le=1024)
    name: Text
    compute_cap: Cc


class BurninProof(_Model):
    verdict: Literal["pass"]
    summary: Text | None = None


class Provenance(_Model):
    """When and where the runtime was proven."""

    at: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$",
                    description="ISO 8601 UTC time of the run that proved it")
    run_id: str = Field(pattern=r"^[A-Za-z0-9._-]{1,100}$")
    host: Text = Field(description="the Proxmox node the run reached")
    container: int | None = None
    playbook: Text


class RuntimeProof(_Model):
    """runtime.json: torch, CUDA, arch list, GPUs, the burn-in verdict and where it was proven."""

    schema_version: Literal[1] = 1
    torch: Version
    torchvision: Version | None = None
    cuda: CudaVersion | None
    variant: str = Field(pattern=r"^[a-z0-9.]{1,16}$")
    python: PythonVersion = Field(description="the venv's exact Python version (platform.python_version())")
    index_url: Url = Field(description="the torch wheel index the venv was built from")
    arch_list: list[Arch] = Field(max_length=64)
    gpus: list[GpuProof] = Field(max_length=1024)
    venv: AbsPath = Field(description="the venv's path in the container")
    burnin: BurninProof
    proven: Provenance


class HostNeeds(_Model):
    """host.json: what a host must give the exported runtime (the driver is the host's, never exported)."""

    schema_version: Literal[1] = 1
    driver_proven_on: Driver
    min_driver: Driver = Field(description="the lowest driver the CUDA variant runs on (resolver data)")
    min_driver_why: list[Text] = []
    machine: Literal["x86_64", "aarch64"]
    glibc_floor: str = Field(pattern=r"^[0-9]\.[0-9]{1,3}$",
                             description="the highest of the variant's floor and the wheels' manylinux tags")
    compute_capabilities: list[Cc] = Field(max_length=64)
    driver_userspace: Text = ("not exported: the host provides libcuda/libnvidia-ml (LXC passthrough, CDI "
                             "`--device nvidia.com/gpu=all`, or NixOS /run/opengl-driver/lib)")


def floor_problem(driver: str, host: HostNeeds) -> str | None:
    """Why this host driver cannot run the export, or None."""
    if driver_at_least(parse_driver(driver), host.min_driver):
        return None
    why = "; ".join(host.min_driver_why) or "the CUDA variant's floor"
    return (f"the host driver {driver} is below the export's floor {host.min_driver} (host.json: {why}; "
            f"proven on {host.driver_proven_on})")
