"""Commands inside an LXC container go through its node: `pct exec <vmid> -- bash -lc <script>`."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path

from provisioner import quoting
from provisioner.transport.base import CommandFailed, LineCallback, Transport


class ContainerTransport(Transport):
    def __init__(self, node: Transport, vmid: int) -> None:
        super().__init__(node.bus, node.host_label)
        self.node = node
        self.vmid = vmid
        self.name = f"ct{vmid}@{node.name}"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The node-side argv that runs `argv` in the container through a login bash."""
        return quoting.pct_exec(self.vmid, quoting.bash_lc(quoting.join(argv)))

    async def _run(
        self, argv: Sequence[str], command: str, *, timeout: float | None, on_line: LineCallback,
        stdin: bytes | None,
    ) -> int | None:
        wrapped = self.wrap(argv)
        return await self.node._run(wrapped, quoting.join(wrapped), timeout=timeout, on_line=on_line, stdin=stdin)

    async def put(self, local: Path, remote: str, mode: int = 0o644) -> None:
        staging = f"/tmp/provisioner-push-{secrets.token_hex(6)}"
        await self.node.put(local, staging, 0o600)
        try:
            result = await self.node.run(quoting.pct_push(self.vmid, staging, remote, perms=f"{mode:o}"),
                                         timeout=600, quiet=True)
            if not result.ok:
                raise CommandFailed(result, self.node.name)
        finally:
            await self.node.run(["rm", "-f", staging], timeout=60, quiet=True)
