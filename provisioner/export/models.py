"""What an export states: `runtime.json` (what was proven) and `host.json` (what a host must give)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from provisioner.resolver.versions import driver_at_least, parse_driver

EXPORT_SCHEMA = 1
FORMATS = ("pylock", "flox", "nix", "oci")
Format = Literal["pylock", "flox", "nix", "oci"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuProof(_Model):
    index: int
    name: str
    compute_cap: str


class BurninProof(_Model):
    verdict: Literal["pass"]
    summary: str | None = None


class Provenance(_Model):
    """When and where the runtime was proven."""

    at: str = Field(description="ISO 8601 UTC time of the run that proved it")
    run_id: str
    host: str = Field(description="the Proxmox node the run reached")
    container: int | None = None
    playbook: str


class RuntimeProof(_Model):
    """runtime.json: torch, CUDA, arch list, GPUs, the burn-in verdict and where it was proven."""

    schema_version: Literal[1] = 1
    torch: str
    torchvision: str | None = None
    cuda: str | None
    variant: str
    python: str = Field(description="the venv's exact Python version (platform.python_version())")
    index_url: str = Field(description="the torch wheel index the venv was built from")
    arch_list: list[str]
    gpus: list[GpuProof]
    venv: str = Field(description="the venv's path in the container")
    burnin: BurninProof
    proven: Provenance


class HostNeeds(_Model):
    """host.json: what a host must give the exported runtime (the driver is the host's, never exported)."""

    schema_version: Literal[1] = 1
    driver_proven_on: str
    min_driver: str = Field(description="the lowest driver the CUDA variant runs on (resolver data)")
    min_driver_why: list[str] = []
    machine: Literal["x86_64", "aarch64"]
    glibc_floor: str = Field(description="the highest of the variant's floor and the wheels' manylinux tags")
    compute_capabilities: list[str]
    driver_userspace: str = ("not exported: the host provides libcuda/libnvidia-ml (LXC passthrough, CDI "
                             "`--device nvidia.com/gpu=all`, or NixOS /run/opengl-driver/lib)")


def floor_problem(driver: str, host: HostNeeds) -> str | None:
    """Why this host driver cannot run the export, or None."""
    if driver_at_least(parse_driver(driver), host.min_driver):
        return None
    why = "; ".join(host.min_driver_why) or "the CUDA variant's floor"
    return (f"the host driver {driver} is below the export's floor {host.min_driver} (host.json: {why}; "
            f"proven on {host.driver_proven_on})")
