"""`export --format oci`: the image made from the proving container (its root file system and its venv,
read through `pct exec` as tar streams into spool files under the export folder) and the export folder's
own files; see `oci_image` for what the image holds.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from provisioner import atomic
from provisioner.export import oci_image, rootfs_layer, write
from provisioner.export.ct_stream import StreamFailed, spool_path, stream_to
from provisioner.export.oci import epoch_of
from provisioner.export.oci_image import Base, ImageRefused
from provisioner.export.rootfs_script import SCRIPT
from provisioner.steps.burnin_common import package_tarball
from provisioner.steps.venv_common import VERIFY_SCRIPT
from provisioner.transport.container import ContainerTransport

#: what one container's tar may hold before the export stops reading it
STREAM_LIMIT = 128 << 30


async def _spooled(ct: ContainerTransport, python: str, mode: str, venv: str, path: Path) -> Path:
    try:
        with open(path, "wb") as fh:
            await stream_to(ct, [python, "-c", SCRIPT, mode, venv, "[]"], fh, limit=STREAM_LIMIT)
    except (StreamFailed, TimeoutError) as exc:
        path.unlink(missing_ok=True)
        raise ImageRefused(f"reading the container's {mode} files failed: {exc or 'timed out'}") from None
    return path


async def build_image(ct: ContainerTransport, folder: Path, *, base: str = "container",
                      rootfs: str = "full") -> dict[str, Any]:
    """The image layout `folder/image` and archive `folder/image.oci.tar` of the export in `folder` and the
    container it was proven in; what was made (manifest digest, layers, files left out). The compression and
    the writing (a GB of venv) run in a worker thread: the caller's event loop (the wizard's screen) goes on."""
    folder = folder.absolute()
    runtime, host, _ = write.read_export(folder)  # read without following links, every field checked
    if rootfs not in oci_image.ROOTFS_MODES:
        raise ImageRefused(f"--rootfs must be one of {', '.join(oci_image.ROOTFS_MODES)}")
    mtime = epoch_of(runtime.proven.at)
    out = folder / oci_image.LAYOUT
    blobs = oci_image.fresh_layout(out)
    python = f"{runtime.venv}/bin/python"
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[host.machine]
    with oci_image.temp_dir(folder) as tmp:
        work = Path(tmp)
        if base == "container":
            spool = await _spooled(ct, python, rootfs, runtime.venv, spool_path(work, "base"))
            base_layer = await asyncio.to_thread(oci_image.layer_from_spool, blobs, spool, mtime, mount_dirs=True)
            spool.unlink()
            name = f"CT {runtime.proven.container} of {runtime.proven.host} ({rootfs} root file system)"
            the_base = Base(name=name, layers=[base_layer.descriptor()], diff_ids=[base_layer.diff_id],
                            history=[{"created_by": f"gpu-provisioner export: {name}, less the NVIDIA driver's "
                                                    "files and the venv"}])
            dropped = base_layer.dropped
        else:
            the_base, dropped = await asyncio.to_thread(oci_image.named_base, base, blobs, arch, work), []
        spool = await _spooled(ct, python, "venv", runtime.venv, spool_path(work, "venv"))
        venv_layer = await asyncio.to_thread(oci_image.layer_from_spool, blobs, spool, mtime)
        spool.unlink()
    export_files = {name: (folder / name).read_bytes() for name in ("pylock.toml", "runtime.json", "host.json")}
    tools = oci_image.tool_entries(export_files, VERIFY_SCRIPT, package_tarball())
    tool_layer = await asyncio.to_thread(rootfs_layer.write_layer, blobs, tools, mtime)
    digest = await asyncio.to_thread(oci_image.write_layout, out, blobs, the_base, [
        (venv_layer, f"the proven venv {runtime.venv} and its interpreter"),
        (tool_layer, f"/{oci_image.PREFIX}: entrypoint, smoke test, burn-in, the export")], runtime, host)
    archive_sha = await asyncio.to_thread(oci_image.write_archive, out, folder / oci_image.ARCHIVE, mtime)
    info = {"manifest": digest, "layout": str(out), "archive": str(folder / oci_image.ARCHIVE),
            "archive_sha256": archive_sha, "base": the_base.name, "base_layers": len(the_base.layers),
            "venv_files": venv_layer.files, "driver_files_left_out": sorted({*dropped, *venv_layer.dropped}),
            "env": oci_image.env_of(runtime, host)}
    atomic.write_text(folder / "image.json", json.dumps(info, indent=1, sort_keys=True) + "\n")
    return info
