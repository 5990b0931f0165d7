"""The lab's SSH endpoint serves SFTP itself (no OpenSSH sftp-server needed) and exec keeps working on the
same connection; what SFTP writes lands in the node's own root, where its commands see it (issue #12)."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from pathlib import Path

import asyncssh
import pytest

from provisioner.lab.lab import Lab
from provisioner.lab.sandbox import node_fs
from tests.support.lab import start_services
from tests.support.require import require

pytestmark = pytest.mark.timeout(180)


def test_sftp_then_exec_on_one_connection(tmp_path: Path) -> None:
    require(subprocess.run(["unshare", "-Urm", "true"], capture_output=True, check=False).returncode == 0,
            "the lab needs user namespaces (`unshare -Urm`)")
    state = Lab(tmp_path / "lab").create_state()
    services = start_services(state)
    name = f"lab-sftp-{secrets.token_hex(6)}"
    payload = tmp_path / "payload"
    payload.write_text("LAB payload\n")
    try:
        c = services.connection()["ssh"]

        async def go() -> tuple[int | None, str]:
            async with asyncssh.connect(c["host"], c["port"], username="root", client_keys=[c["key_file"]],
                                        known_hosts=c["known_hosts"]) as conn:
                async with conn.start_sftp_client() as sftp:
                    await sftp.put(str(payload), f"/tmp/{name}")
                    await sftp.chmod(f"/tmp/{name}", 0o600)
                r = await conn.run(f"cat /tmp/{name}; stat -c %a /tmp/{name}", check=False)
                return r.exit_status, str(r.stdout)

        status, out = asyncio.run(go())
    finally:
        services.stop()
    assert status == 0, out
    assert out == "LAB payload\n600\n"
    assert (node_fs(state.root) / "tmp" / name).read_text() == "LAB payload\n"
    assert not (Path("/tmp") / name).exists()  # the node's /tmp is its own, not the machine's


def test_a_refused_copy_is_a_failed_copy_and_pvesm_path_names_the_template_folder(tmp_path: Path) -> None:
    """SFTP answering "no such file" is a refused copy (`CopyFailed`: the step fails), not a broken link
    (`TransportError`: the step is interrupted, replay resumes); the node's `local` storage has its template folder
    (pve-storage activate_storage) and `pvesm path` names a template's file there, as PVE 8.4 parses the name."""
    from provisioner.events import Bus
    from provisioner.transport.base import CopyFailed, TransportError
    from tests.support.lab import ssh_transport, start_lab

    services, conn = start_lab(tmp_path / "lab")
    payload = tmp_path / "payload"
    payload.write_text("LAB payload\n")
    node = ssh_transport(conn)
    node.bus = Bus()

    async def go() -> tuple[BaseException | None, list[tuple[int | None, str]]]:
        refused: BaseException | None = None
        try:
            await node.put(payload, "/no/such/dir/file")
        except (CopyFailed, TransportError) as exc:
            refused = exc
        said = []
        for volume in ("local:vztmpl/gpu-runtime-0123.tar.zst", "local:vztmpl/gpu-runtime-0123.tar", "nas:vztmpl/a.tar.zst"):
            r = await node.run(["pvesm", "path", volume], timeout=60, quiet=True)
            said.append((r.exit_status, r.output))
        await node.put(payload, "/var/lib/vz/template/cache/payload")  # the folder is there
        await node.close()
        return refused, said

    try:
        refused, said = asyncio.run(go())
    finally:
        services.stop()
    assert isinstance(refused, CopyFailed) and not isinstance(refused, TransportError), repr(refused)
    assert "copy to /no/such/dir/file failed: No such file" in str(refused), str(refused)
    assert said[0] == (0, "/var/lib/vz/template/cache/gpu-runtime-0123.tar.zst\n")
    assert said[1] == (255, "unable to parse directory volume name 'vztmpl/gpu-runtime-0123.tar'\n")  # PVE 8.4
    assert said[2] == (255, "storage 'nas' does not exist\n")
    assert (node_fs(services.state.root) / "var/lib/vz/template/cache/payload").read_text() == "LAB payload\n"
