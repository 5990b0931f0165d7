"""lab.json's model: what the lab host is and has (profile, PVE version, GPUs, storages, templates,
the token's ACL), with the defaults a fresh lab starts from.

Below `state` (which reads and writes lab.json) and `profiles` (which turns the settings into a host), so
neither has to import the other's module to know the settings.
"""

from __future__ import annotations

import hashlib
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class StorageSpec(BaseModel):
    """One storage of the lab node (``/etc/pve/storage.cfg`` entry)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    type: Literal["dir", "lvmthin"]
    content: list[str]
    path: str | None = None
    total: int = 100 * 1024**3
    used: int = 10 * 1024**3


def default_storages() -> list[StorageSpec]:
    return [
        StorageSpec(id="local", type="dir", content=["vztmpl", "iso", "backup"], path="/var/lib/vz",
                    total=100_861_726_720, used=11_794_362_368),
        StorageSpec(id="local-lvm", type="lvmthin", content=["rootdir", "images"],
                    total=1_862_530_097_152, used=0),
    ]


DEFAULT_TEMPLATES = [
    "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst",
    "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
]

#: file sizes of the templates (bytes) as published on download.proxmox.com
TEMPLATE_SIZES = {
    "ubuntu-24.04-standard_24.04-2_amd64.tar.zst": 141_867_103,
    "debian-12-standard_12.7-1_amd64.tar.zst": 126_857_393,
    "ubuntu-22.04-standard_22.04-1_amd64.tar.zst": 129_824_858,
    "debian-13-standard_13.1-2_amd64.tar.zst": 132_504_421,
}


def _apl(os_: str, package: str, version: str, headline: str, description: str) -> dict[str, str]:
    template = f"{package}_{version}_amd64.tar.zst"
    return {
        "template": template,
        "os": os_,
        "package": package,
        "version": version,
        "type": "lxc",
        "section": "system",
        "headline": headline,
        "description": description,
        "location": f"http://download.proxmox.com/images/system/{template}",
        "source": "http://download.proxmox.com/images",
        "infopage": "https://pve.proxmox.com/wiki/Linux_Container#pct_supported_distributions",
        "maintainer": "Proxmox Support Team <support@proxmox.com>",
        "architecture": "amd64",
        # LAB: stand-in checksum (sha512 of the name), not the real file's
        "sha512sum": hashlib.sha512(template.encode()).hexdigest(),
    }


def default_aplinfo() -> list[dict[str, str]]:
    return [
        _apl("ubuntu-24.04", "ubuntu-24.04-standard", "24.04-2", "Ubuntu 24.04 Noble (standard)",
             "Ubuntu 24.04 Noble Numbat (standard)"),
        _apl("ubuntu-22.04", "ubuntu-22.04-standard", "22.04-1", "Ubuntu 22.04 Jammy (standard)",
             "Ubuntu 22.04 Jammy Jellyfish (standard)"),
        _apl("debian-12", "debian-12-standard", "12.7-1", "Debian 12 Bookworm (standard)",
             "A small Debian Bookworm system including all standard packages."),
        _apl("debian-13", "debian-13-standard", "13.1-2", "Debian 13 Trixie (standard)",
             "A small Debian Trixie system including all standard packages."),
    ]


class AclEntry(BaseModel):
    """One ACL entry of the lab's API token (``/etc/pve/user.cfg`` ``acl:<propagate>:<path>:<token>:<role>:``),
    with the role expanded to its privileges."""

    model_config = ConfigDict(extra="forbid")
    path: str
    privs: list[str]
    propagate: bool = True


class LabSettings(BaseModel):
    """lab.json: what the lab host is and has."""

    model_config = ConfigDict(extra="forbid")
    format: int = 1
    #: host profile (`provisioner.lab.profiles.PROFILES`)
    profile: str = "rtxpro6000-8x"
    node: str = "pve"
    pve_version: Literal["8.1", "8.4", "9"] = "8.4"
    scenarios: list[str] = Field(default_factory=list)
    driver_version: str = "595.71.05"
    gpu_count: int = 8
    gpu_name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    uvm_major: int = 511
    host_uvm_nodes: bool = True
    #: which non-UVM NVIDIA nodes exist: None = all the profile has (a host already in use); a list = only
    #: these paths (after a boot nothing exists until nvidia-modprobe creates a node)
    host_created_nodes: list[str] | None = None
    #: nvidia-modeset.ko loaded; None = as the profile boots (a headless HGX never loads it)
    modeset_loaded: bool | None = None
    #: nvidia-smi -pm state (a driver load resets it to Disabled)
    persistence: bool = True
    #: the node's nvidia-fabricmanager.service is active (HGX profiles)
    fabricmanager_active: bool = True
    #: boots since the lab was created (`provisioner lab reboot`)
    boots: int = 0
    storages: list[StorageSpec] = Field(default_factory=default_storages)
    templates: list[str] = Field(default_factory=lambda: list(DEFAULT_TEMPLATES))
    aplinfo: list[dict[str, str]] = Field(default_factory=default_aplinfo)
    task_delay: float = 0.1
    #: the API token's privilege separation (``pveum user token add root@pam lab --privsep``): False = the
    #: token has root@pam's privileges (never root@pam itself: devN stays refused); True = only `token_acl`
    token_privsep: bool = False
    token_acl: list[AclEntry] = Field(default_factory=list)
    created: float = Field(default_factory=time.time)
