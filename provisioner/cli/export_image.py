"""`export --format oci`: the image read from the playbook's container (see provisioner.export.image_collect)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


async def build_from(pb: Any, proof: Any, out: Path, base: str, rootfs: str, trust_new_host: bool) -> dict[str, Any]:
    """The OCI image of the export in `out`, its base and venv read from the container the run proved."""
    from provisioner.events import Bus
    from provisioner.export.image_collect import build_image
    from provisioner.session import node_transport
    from provisioner.transport.container import ContainerTransport

    vmid = pb.target.container or proof.resolved.get("vmid")
    if vmid is None:
        raise click.ClickException("the playbook names no container and the run recorded none")
    node = node_transport(pb.target, Bus(), trust_new_host=trust_new_host)
    try:
        return await build_image(ContainerTransport(node, int(vmid), login=False), out, base=base, rootfs=rootfs)
    finally:
        await node.close()


def written(info: dict[str, Any], base: str = "container", rootfs: str = "full") -> dict[str, str]:
    """What the image wrote (name -> what): the engine's list, the one the wizard's plan names
    (`provisioner.export.offer.image_files`)."""
    from provisioner.export.offer import image_files

    return dict(image_files(base, rootfs, str(info["manifest"])))
