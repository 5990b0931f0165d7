"""Inventories whose hosts are running labs: each entry is the lab's endpoints and its site profile
(`provisioner lab inventory`); the inventory format knows no lab."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from provisioner.lab.lab import inventory_entry


def write_lab_inventory(path: Path, roots: Mapping[str, Path], containers: Mapping[str, int] | None = None) -> Path:
    """Write an inventory of the labs running at `roots` (name -> lab root); call it once they are up."""
    hosts = [inventory_entry(root, name, (containers or {}).get(name)) for name, root in roots.items()]
    path.write_text(yaml.safe_dump({"hosts": hosts}, sort_keys=False))
    return path
