"""An export folder of real wheel files (the lab's wheel builder), for the export tests.

The wheels are served by a real HTTP server (`tests.support.wheel_server.serve`) and the lock names that
server's origin as the host its wheels may come from (`[tool.gpu-provisioner] hosts`), as an export made
on a site with an http mirror does.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import quote

from provisioner.export import pylock, write
from provisioner.export.collect import Export
from provisioner.export.models import BurninProof, GpuProof, HostNeeds, Provenance, RuntimeProof

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "blackwell-8gpu-lxc.yaml"


def runtime() -> RuntimeProof:
    return RuntimeProof(
        torch="2.11.0+cu128", torchvision="0.26.0", cuda="12.8", variant="cu128", python="3.12.3",
        index_url="https://download.pytorch.org/whl/cu128", arch_list=["sm_75", "sm_80", "sm_90", "sm_100", "sm_120"],
        gpus=[GpuProof(index=i, name="NVIDIA RTX PRO 6000 Blackwell Server Edition", compute_cap="12.0")
              for i in range(2)],
        venv="/opt/torch-venv", burnin=BurninProof(verdict="pass", summary="pass"),
        proven=Provenance(at="2026-12-03T08:45:04Z", run_id="20261203T084504-16857c", host="pve1:22", container=200,
                          playbook=str(PLAYBOOK)))


def host() -> HostNeeds:
    return HostNeeds(driver_proven_on="595.71.05", min_driver="525.60.13",
                     min_driver_why=["CUDA 12.x minor-version compatibility"], machine="x86_64", glibc_floor="2.28",
                     compute_capabilities=["12.0"])


def make_wheels(folder: Path) -> list[Path]:
    """A torch and an nvidia-ml-py wheel (real zip files with a RECORD) in `folder`."""
    from provisioner.lab.wheels import make_wheel

    folder.mkdir(parents=True, exist_ok=True)
    return sorted([make_wheel(folder, "torch", "2.11.0+cu128", "cp312-cp312-manylinux_2_28_x86_64",
                              {"torch/__init__.py": b"__version__ = '2.11.0+cu128'\n"}),
                   make_wheel(folder, "nvidia-ml-py", "13.595.45", "py3-none-any", {"pynvml.py": b"# stand-in\n"})])


def lock_dict(files: list[Path], base_url: str) -> dict[str, object]:
    """The pylock.toml table of `files` served at `base_url` (each URL's last segment percent-encoded)."""
    packages = []
    for f in files:
        name, version = f.name.split("-")[:2]
        packages.append({"name": name.replace("_", "-"), "version": version, "index": base_url + "/simple",
                         "wheels": [{"url": f"{base_url}/{quote(f.name)}",
                                     "hashes": {"sha256": hashlib.sha256(f.read_bytes()).hexdigest()},
                                     "size": f.stat().st_size}]})
    return {"lock-version": "1.0", "created-by": "gpu-provisioner", "requires-python": "==3.12.*",
            "packages": packages,
            "tool": {"gpu-provisioner": {"torch-variant": "cu128", "indexes": [base_url + "/simple"],
                                         "hosts": [base_url]}}}


def export_folder(tmp: Path, files: list[Path], base_url: str) -> tuple[Path, list[pylock.Wheel]]:
    """An export folder at tmp/export of `files` served at `base_url`; its checked wheels."""
    doc = pylock.parse(lock_dict(files, base_url))
    out = tmp / "export"
    write.write_core(out, Export(runtime=runtime(), host=host(), pylock=doc))
    return out, pylock.wheels(doc)
