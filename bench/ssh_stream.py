"""What streaming a large command output over SSH costs in CPU, by cipher and channel packet size.

    uv run python bench/ssh_stream.py [--mib 512] [--reps 3]

An asyncssh server on 127.0.0.1 (as the lab's node is) writes `--mib` MiB to a command's stdout; the client
reads it as `provisioner.export.ct_stream` does. Each row is the CPU seconds of this one process (both ends),
median of `--reps`, and the ratio against the baseline measured in the same run: asyncssh's defaults
(chacha20-poly1305, 32 KiB packets). The last row is what the client now asks for
(`provisioner.transport.ssh.cipher_preference`, `ct_stream.STREAM_PKTSIZE`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncssh

from provisioner.export.ct_stream import STREAM_PKTSIZE, STREAM_WINDOW
from provisioner.transport.ssh import cipher_preference

CHUNK = b"\x5a" * (1 << 20)


class _Server(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False


async def _one(keys: Path, mib: int, cipher: str, pktsize: int, window: int) -> float:
    async def handle(proc: Any) -> None:
        for _ in range(mib):
            proc.stdout.write(CHUNK)
            await proc.stdout.drain()
        proc.exit(0)

    server = await asyncssh.create_server(_Server, "127.0.0.1", 0, server_host_keys=[str(keys / "host")],
                                          process_factory=handle, encoding=None)
    port = server.sockets[0].getsockname()[1]
    cpu = time.process_time()
    async with asyncssh.connect("127.0.0.1", port, known_hosts=None, username="bench",
                                encryption_algs=[cipher]) as conn:
        proc = await conn.create_process("stream", encoding=None, max_pktsize=pktsize, window=window)
        got = 0
        while block := await proc.stdout.read(1 << 20):
            got += len(block)
    spent = time.process_time() - cpu
    server.close()
    assert got == mib << 20, got
    return spent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    chosen = cipher_preference()[0]
    rows = [("asyncssh defaults (baseline)", "chacha20-poly1305@openssh.com", 32768, 2 << 20),
            ("AES-GCM, 32 KiB packets", chosen, 32768, 2 << 20),
            ("chacha20-poly1305, stream packets", "chacha20-poly1305@openssh.com", STREAM_PKTSIZE, STREAM_WINDOW),
            ("what the client asks for", chosen, STREAM_PKTSIZE, STREAM_WINDOW)]
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp)
        asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(keys / "host"))
        results = []
        for label, cipher, pkt, window in rows:
            runs = [asyncio.run(_one(keys, args.mib, cipher, pkt, window)) for _ in range(args.reps)]
            results.append((label, cipher, pkt, statistics.median(runs)))
    base = results[0][3]
    print(f"{args.mib} MiB over SSH on 127.0.0.1, CPU seconds of both ends (median of {args.reps})")
    print(f"{'flow':36} {'cipher':30} {'packet':>7} {'cpu s':>7} {'vs baseline':>12}")
    for label, cipher, pkt, spent in results:
        print(f"{label:36} {cipher:30} {pkt >> 10:>5}Ki {spent:7.2f} {base / spent:11.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
