"""What the OCI image (`oci_image`, `image_collect`) and the renderings that carry wheels (`write.copy_wheels`)
share: a wheel fetched from its lock entry (https redirects only, sha256 and size checked while streaming), the
proof's time as an epoch (every layer's one mtime) and the proof as image labels (`io.gpu-provisioner.*`).
"""

from __future__ import annotations

import hashlib
import urllib.request
from calendar import timegm
from pathlib import Path
from time import strptime
from typing import Any

from provisioner import atomic
from provisioner.export import trust
from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.export.pylock import Wheel


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to another https URL (never file://, ftp:// or plain http)."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        if not newurl.startswith("https://"):
            raise ValueError(f"{req.full_url}: redirected to {trust.shown(newurl)}, not an https URL: refused")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_HttpOnlyRedirects)


def fetch_wheel(w: Wheel, cache: Path) -> Path:
    """The wheel's bytes from its URL (cached by sha256), checked against the lock's sha256 and size; the
    size is enforced while streaming (past it the download stops and the partial file is deleted)."""
    if not w.url.startswith(("https://", "http://")):  # pylock.wheels checked it; this function refuses on its own
        raise ValueError(f"{trust.shown(w.url)}: not an http(s) URL: refused")
    trust.sha256(w.sha256, field=f"{w.filename} sha256")
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / w.sha256
    if path.is_file() and not path.is_symlink() and path.stat().st_size == w.size:
        return path
    digest = hashlib.sha256()
    size = 0
    with atomic.AtomicWriter(path, mode=0o600) as tmp:  # a private cache; on any error the temporary file goes
        with _OPENER.open(w.url, timeout=600) as resp:
            while chunk := resp.read(1 << 20):
                size += len(chunk)
                if size > w.size:
                    raise ValueError(f"{trust.shown(w.url)}: the body is larger than the lock's size {w.size}: "
                                     "download stopped, the partial file deleted")
                digest.update(chunk)
                tmp.write(chunk)
        if digest.hexdigest() != w.sha256 or size != w.size:  # the temporary file goes, the cache keeps nothing
            raise ValueError(f"{trust.shown(w.url)}: got sha256 {digest.hexdigest()} ({size} bytes), the lock says "
                             f"{w.sha256} ({w.size} bytes)")
    return path


def epoch_of(iso: str) -> int:
    return timegm(strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))


def proof_labels(runtime: RuntimeProof, host: HostNeeds) -> dict[str, str]:
    """The proof as image labels (`io.gpu-provisioner.*`), shared by the layout and the runnable image."""
    return {
        "io.gpu-provisioner.torch": runtime.torch,
        "io.gpu-provisioner.cuda": str(runtime.cuda),
        "io.gpu-provisioner.variant": runtime.variant,
        "io.gpu-provisioner.python": runtime.python,
        "io.gpu-provisioner.arch-list": " ".join(runtime.arch_list),
        "io.gpu-provisioner.compute-capabilities": " ".join(host.compute_capabilities),
        "io.gpu-provisioner.burnin": runtime.burnin.verdict,
        "io.gpu-provisioner.proven": f"{runtime.proven.at} {runtime.proven.host} run {runtime.proven.run_id}",
        "io.gpu-provisioner.min-driver": host.min_driver,
        "io.gpu-provisioner.driver-proven-on": host.driver_proven_on,
        "io.gpu-provisioner.glibc-floor": host.glibc_floor,
    }
