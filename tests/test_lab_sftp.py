"""The lab's SSH endpoint serves SFTP itself (no OpenSSH sftp-server needed) and exec keeps working on the
same connection; what SFTP writes lands in the node's own root, where its commands see it (issue #12)."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from pathlib import Path

import asyncssh
import pytest

from provisioner.lab.lab import Lab, LabServices
from provisioner.lab.sandbox import node_fs
from tests.support.require import require

pytestmark = pytest.mark.timeout(180)


def test_sftp_then_exec_on_one_connection(tmp_path: Path) -> None:
    require(subprocess.run(["unshare", "-Urm", "true"], capture_output=True, check=False).returncode == 0,
            "the lab needs user namespaces (`unshare -Urm`)")
    state = Lab(tmp_path / "lab").create_state()
    services = LabServices(state).start()
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
