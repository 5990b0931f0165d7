"""Commands inside an LXC container go through its node: `pct exec <vmid> -- bash -lc <script>`.

Facts read through `for_facts()`: the same container, but `pct exec <vmid> -- <argv>` with no
shell at all, so that nothing a login shell prints (/etc/profile.d, ~/.profile; merged into the
output with stderr) reaches a parser. `pct exec` runs `lxc-attach --clear-env`, which gives the
command a default PATH (https://man7.org/linux/man-pages/man1/lxc-attach.1.html; the lab models
the same, `provisioner.lab.sandbox.CT_PATH`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path

from provisioner import quoting
from provisioner.transport.base import CommandFailed, LineCallback, Transport


class ContainerTransport(Transport):
    def __init__(self, node: Transport, vmid: int, *, login: bool = True) -> None:
        super().__init__(node.bus, node.host_label)
        self.node = node
        self.vmid = vmid
        self.login = login
        self.name = f"ct{vmid}@{node.name}"
        self._facts: ContainerTransport | None = None if login else self

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The node-side argv that runs `argv` in the container: through a login bash, or (facts) directly."""
        if not self.login:
            return quoting.pct_exec(self.vmid, list(argv))
        return quoting.pct_exec(self.vmid, quoting.bash_lc(quoting.join(argv)))

    def for_facts(self) -> ContainerTransport:
        """The same container without a login shell (same name: facts cache under it)."""
        if self._facts is None:
            self._facts = ContainerTransport(self.node, self.vmid, login=False)
        return self._facts

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
