"""The lab node's SSH endpoint through our SshTransport, its driver mirror and wheel index (real uv, offline)."""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import asyncssh
import pytest

from provisioner.lab.lab import LabServices
from provisioner.lab.state import LabState
from provisioner.transport.base import CommandTimeout, HostKeyError, TransportError
from provisioner.transport.container import ContainerTransport
from tests.support.lab import gpu_ct, start_lab
from tests.support.lab import ssh_transport as transport
from tests.support.require import require

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[LabServices, dict[str, Any]]]:
    services, conn = start_lab(tmp_path / "lab")
    yield services, conn
    services.stop()


async def test_exec_streams_lines_in_order_with_exit_status(lab: tuple[LabServices, dict[str, Any]]) -> None:
    _, conn = lab
    node = transport(conn)
    seen: list[tuple[float, str]] = []
    loop = asyncio.get_running_loop()
    try:
        r = await node.run(["bash", "-c", "echo one; sleep 0.4; echo two >&2; pveversion; exit 3"],
                           on_line=lambda line: seen.append((loop.time(), line)))
        assert r.exit_status == 3
        assert r.lines == ["one", "two", "pve-manager/8.4.1/2a5fa54a8503f96d (running kernel: 6.8.12-10-pve)"]
        assert seen[1][0] - seen[0][0] > 0.3  # streamed as produced, not at the end
        r = await node.run(["cat", "/sys/module/nvidia/version"])
        assert r.ok and r.lines == ["595.71.05"]
        r = await node.run(["cat"], stdin=b"through stdin\n")
        assert r.lines == ["through stdin"]
        r = await node.run(["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader"])
        assert r.lines == [f"{i}, 12.0" for i in range(8)]
    finally:
        await node.close()


async def test_sftp_put_lands_in_the_node_view_and_pct_push(lab: tuple[LabServices, dict[str, Any]],
                                                            tmp_path: Path) -> None:
    services, conn = lab
    gpu_ct(services.state, 200)
    node = transport(conn)
    src = tmp_path / "script.sh"
    src.write_text("#!/bin/sh\necho from-the-container $(. /etc/os-release; echo $VERSION_ID)\n")
    try:
        ct = ContainerTransport(node, 200)
        await ct.put(src, "/root/script.sh", 0o755)
        r = await ct.run(["/root/script.sh"])
        assert r.ok and r.lines == ["from-the-container 24.04"]
        r = await node.run(["bash", "-c", "ls /tmp/provisioner-push-* 2>/dev/null | wc -l"])
        assert r.lines == ["0"]  # the staging copy is gone
    finally:
        await node.close()


async def test_timeout_kills_the_remote_process_group(lab: tuple[LabServices, dict[str, Any]],
                                                      tmp_path: Path) -> None:
    _, conn = lab
    node = transport(conn)
    marker = tmp_path / "survived"
    pidfile = tmp_path / "child.pid"
    try:
        with pytest.raises(CommandTimeout):
            await node.run(["bash", "-c", f"(echo $BASHPID > {pidfile}; sleep 2; touch {marker}) & sleep 30"],
                           timeout=0.8)
        # Wait (with a deadline) until the backgrounded child is gone: killed with its group, it can
        # never create the marker; no fixed sleep that a loaded machine could outlast.
        deadline = asyncio.get_running_loop().time() + 30
        while (await node.run(["sh", "-c", f"kill -0 $(cat {pidfile}) 2>/dev/null"])).ok:
            assert asyncio.get_running_loop().time() < deadline, "the remote child survived the timeout"
            await asyncio.sleep(0.05)
        assert not marker.exists()
        r = await node.run(["true"])
        assert r.ok
    finally:
        await node.close()


async def test_host_key_and_client_key_are_checked(lab: tuple[LabServices, dict[str, Any]], tmp_path: Path) -> None:
    _, conn = lab
    wrong = tmp_path / "known_hosts"
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    wrong.write_text(f"[{conn['ssh']['host']}]:{conn['ssh']['port']} {other[0]} {other[1]}\n")
    with pytest.raises(HostKeyError, match="HOST KEY CHANGED"):
        await transport(conn, known_hosts=str(wrong)).run(["true"])
    with pytest.raises(HostKeyError, match="unknown host"):
        await transport(conn, known_hosts=str(tmp_path / "empty")).run(["true"])
    stranger = tmp_path / "stranger_key"
    stranger.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    with pytest.raises(TransportError, match="authentication failed"):
        await transport(conn, key_file=str(stranger)).run(["true"])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as resp:
        data: bytes = resp.read()
        return data


def test_driver_mirror_publishes_run_and_checksum_and_corrupts_once(tmp_path: Path) -> None:
    services, conn = start_lab(tmp_path / "lab", "corrupt-download")
    try:
        base = f"{conn['driver_mirror']}/XFree86/Linux-x86_64/595.71.05/NVIDIA-Linux-x86_64-595.71.05.run"
        published = _get(base + ".sha256sum").decode()
        assert re.fullmatch(r"[0-9a-f]{64}  NVIDIA-Linux-x86_64-595\.71\.05\.run\n", published)
        first, second = _get(base), _get(base)
        assert hashlib.sha256(first).hexdigest() != published.split()[0]
        assert hashlib.sha256(second).hexdigest() == published.split()[0]
        assert first.startswith(b"#!/bin/sh") and len(first) == len(second)
        assert _get(f"{conn['driver_mirror']}/XFree86/Linux-x86_64/latest.txt").decode() == (
            "595.71.05 595.71.05/NVIDIA-Linux-x86_64-595.71.05.run\n")
        with pytest.raises(urllib.error.HTTPError):
            _get(f"{conn['driver_mirror']}/XFree86/Linux-x86_64/1.2.3/NVIDIA-Linux-x86_64-1.2.3.run")
    finally:
        services.stop()


def test_wheel_index_is_pep503_with_matching_hashes(lab: tuple[LabServices, dict[str, Any]]) -> None:
    _, conn = lab
    page = _get(conn["index_url"] + "cu128/torch/").decode()
    links = re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page)
    names = {href.rsplit("/", 1)[1] for href, _ in links}
    cp = "cp" + conn["torch_python"].replace(".", "")  # the one CPython its real CPU torch is built for
    assert f"torch-2.11.0%2Bcu128-{cp}-{cp}-manylinux_2_28_x86_64.whl" in names
    href, digest = next(link for link in links if cp in link[0])
    # the page links its files on another host (as download.pytorch.org links download-r2.pytorch.org)
    assert hashlib.sha256(_get(urljoin(conn["index_url"] + "cu128/torch/", href))).hexdigest() == digest
    assert "torchvision" in _get(conn["index_url"] + "cu128/").decode()


async def _ct_run(conn: dict[str, Any], vmid: int, script: str, timeout: float = 120) -> Any:
    node = transport(conn)
    try:
        return await ContainerTransport(node, vmid).run(["bash", "-c", script], timeout=timeout)
    finally:
        await node.close()


async def test_userspace_install_then_uv_venv_from_the_index(lab: tuple[LabServices, dict[str, Any]]) -> None:
    require(shutil.which("uv") is not None, "uv is not installed")
    services, conn = lab
    gpu_ct(services.state, 200)
    v = "595.71.05"
    run_url = f"{conn['driver_mirror']}/XFree86/Linux-x86_64/{v}/NVIDIA-Linux-x86_64-{v}.run"
    r = await _ct_run(conn, 200, f"cd /tmp && curl -fsSLO {run_url} && curl -fsSLO {run_url}.sha256sum && "
                                 f"sha256sum -c NVIDIA-Linux-x86_64-{v}.run.sha256sum && "
                                 "apt-get install -y kmod pkg-config >/dev/null && "
                                 f"sh NVIDIA-Linux-x86_64-{v}.run --silent --no-kernel-modules && nvidia-smi -L | wc -l")
    assert r.ok, r.output
    assert r.lines[-1] == "8"
    r = await _ct_run(conn, 200, f"uv venv -q --python {conn['torch_python']} /opt/venv && uv pip install -q --python /opt/venv/bin/python "
                                 f"torch==2.11.0 torchvision==0.26.0 --index-url {conn['index_url']}cu128 && "
                                 "/opt/venv/bin/python -c 'import torch, torchvision; print(torch.__version__, "
                                 "torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count(), "
                                 "torch.cuda.get_device_capability(0), torch.cuda.get_arch_list()[-1], "
                                 "torchvision.__version__)'")
    assert r.ok, r.output
    assert r.lines[-1] == "2.11.0+cu128 12.8 True 8 (12, 0) sm_120 0.26.0+cu128"


async def test_ssh_drop_once_and_disk_full_uv_failure(tmp_path: Path) -> None:
    require(shutil.which("uv") is not None, "uv is not installed")
    services, conn = start_lab(tmp_path / "lab", "ssh-drop", "disk-full")
    try:
        gpu_ct(services.state, 200)
        install = (f"uv venv -q --python {conn['torch_python']} /opt/venv && uv pip install --python /opt/venv/bin/python "
                   f"torch==2.11.0 --index-url {conn['index_url']}cu128")
        with pytest.raises(TransportError, match="connection dropped"):
            await _ct_run(conn, 200, install)
        assert not (services.state.root / "run" / "once" / "ssh-drop").exists()
        r = await _ct_run(conn, 200, "rm -rf /opt/venv && " + install)
        assert r.exit_status not in (0, None)
        assert any("No space left on device" in line for line in r.lines), r.output
    finally:
        services.stop()
    assert LabState.load(services.state.root).has_scenario("disk-full")
