"""asyncssh against a real OpenSSH sshd on 127.0.0.1 (fixture: tests/support/sshd.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.events import Bus, CommandEnded, Event, OutputLine
from provisioner.exitcodes import ExitCode
from provisioner.transport.base import CommandTimeout, HostKeyError, TransportError
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.known_hosts import config_dir, config_known_hosts
from tests.support.sshd import Sshd, start_sshd, stop_sshd


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def target(sshd: Sshd, **kw: object) -> SshTarget:
    return SshTarget(host=sshd.host, port=sshd.port, user=sshd.user, key_file=str(sshd.client_key),
                     known_hosts=str(kw.pop("known_hosts", sshd.known_hosts)), **kw)  # type: ignore[arg-type]


async def test_streams_lines_in_order_with_exit_status(sshd: Sshd) -> None:
    events: list[Event] = []
    t = SshTransport(target(sshd), Bus(events.append))
    res = await t.run(["sh", "-c", "echo one; echo two >&2; printf 'three\\nfour'; exit 7"])
    await t.close()
    assert res.exit_status == 7
    assert res.lines == ["one", "two", "three", "four"]
    streamed = [e.line for e in events if isinstance(e, OutputLine)]
    assert streamed == ["one", "two", "three", "four"]
    ended = [e for e in events if isinstance(e, CommandEnded)]
    assert ended[0].exit_status == 7 and ended[0].duration_s >= 0


async def test_a_real_sshd_takes_aes_gcm_and_streams_whole_in_large_packets(sshd: Sshd, tmp_path: Path) -> None:
    """The client offers AES-GCM first (OpenSSH supports it; half chacha20-poly1305's CPU in asyncssh) and opens an
    export's stream channel with 128 KiB packets: a real sshd sends in them, every byte arrives, in order."""
    import hashlib

    from provisioner.export.ct_stream import _over_ssh

    t = SshTransport(target(sshd))
    conn = await t.connect()
    assert conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
    assert conn.get_extra_info("recv_cipher") == "aes128-gcm@openssh.com"
    data = tmp_path / "data"
    data.write_bytes(os.urandom(1 << 20) * 24 + b"tail")  # 24 MiB and 4 bytes: the last packet is a short one
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        size = await _over_ssh(t, f"cat {data}", fh, 1 << 30)
    await t.close()
    assert size == data.stat().st_size
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(data.read_bytes()).digest()


async def test_lines_arrive_while_command_runs(sshd: Sshd, tmp_path: Path) -> None:
    # The command prints "a", then waits until the test has seen "a" (it creates the flag file):
    # buffered until exit, "a" would never arrive and the command would hit its timeout.
    flag = tmp_path / "seen-a"
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        if line == "a":
            flag.touch()

    t = SshTransport(target(sshd))
    await t.run(["sh", "-c", f"echo a; while [ ! -e {flag} ]; do sleep 0.05; done; echo b"], on_line=on_line,
                timeout=60)
    await t.close()
    assert lines == ["a", "b"]


async def test_hostile_arguments_are_not_interpreted(sshd: Sshd, tmp_path: Path) -> None:
    t = SshTransport(target(sshd))
    hostile = ["$(touch /tmp/pwned-provisioner)", "`id`", "a;b", "'quoted'", '"dq"', "new\nline", "*", "$HOME"]
    res = await t.run(["printf", "%s|", *hostile])
    await t.close()
    assert res.output.rstrip("\n") == "|".join(hostile) + "|"
    assert not Path("/tmp/pwned-provisioner").exists()


async def test_unknown_host_refused_without_trust_flag(sshd: Sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts_empty"
    t = SshTransport(target(sshd, known_hosts=empty))
    with pytest.raises(HostKeyError, match="unknown host"):
        await t.run(["true"])
    assert not empty.exists() or sshd.host_pub.read_text().split()[1] not in empty.read_text()


async def test_trust_new_host_records_key_then_connects(sshd: Sshd, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    kh = config_known_hosts(tmp_path, monkeypatch)
    events: list[Event] = []
    t = SshTransport(target(sshd, known_hosts=kh, trust_new_host=True), Bus(events.append))
    assert (await t.run(["echo", "hi"])).lines == ["hi"]
    await t.close()
    assert sshd.host_pub.read_text().split()[1] in kh.read_text()
    # the fingerprint trusted is shown (the one of the key written)
    assert any(_fp(sshd.host_pub) in getattr(e, "text", "") and "trusted the new host key" in getattr(e, "text", "")
               for e in events)
    # Second contact works without the flag: the key is now known.
    t2 = SshTransport(target(sshd, known_hosts=kh))
    assert (await t2.run(["true"])).exit_status == 0
    await t2.close()


async def test_changed_host_key_refused_loudly(sshd: Sshd, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pub = (tmp_path / "other_key.pub").read_text().split()
    kh = tmp_path / "kh"
    kh.write_text(f"[{sshd.host}]:{sshd.port} {pub[0]} {pub[1]}\n")
    t = SshTransport(target(sshd, known_hosts=kh, trust_new_host=True))  # trust flag must not override a change
    with pytest.raises(HostKeyError, match="HOST KEY CHANGED"):
        await t.run(["true"])


async def test_timeout_kills_remote_command(sshd: Sshd, tmp_path: Path) -> None:
    marker = f"provisioner-timeout-{time.time_ns()}"
    t = SshTransport(target(sshd))
    with pytest.raises(CommandTimeout):
        await t.run(["sh", "-c", f"sleep 30; echo {marker}"], timeout=1.0)
    deadline = time.monotonic() + 30  # the kill is asynchronous: wait for the process to be gone
    while (ps := subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)).stdout.strip():
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    await t.close()
    assert ps.stdout.strip() == "", f"remote command still running: {ps.stdout}"


async def test_dropped_connection_is_a_clear_error(sshd: Sshd) -> None:
    t = SshTransport(target(sshd))
    assert (await t.run(["true"])).exit_status == 0

    started = asyncio.Event()

    async def kill_sshd_soon() -> None:
        await started.wait()  # the remote command runs: now break the connection
        # kill the server and every per-connection sshd process it forked: the TCP connection breaks
        for pid in descendants(sshd.process.pid):
            subprocess.run(["kill", "-KILL", str(pid)], check=False)
        sshd.process.kill()

    killer = asyncio.create_task(kill_sshd_soon())
    with pytest.raises(TransportError, match=r"connection|dropped|lost"):
        await t.run(["sh", "-c", "echo started; sleep 20"], timeout=15,
                    on_line=lambda line: started.set() if line == "started" else None)
    await killer
    await t.close()


async def test_unreachable_port_is_transport_error(tmp_path: Path) -> None:
    t = SshTransport(SshTarget(host="127.0.0.1", port=1, known_hosts=str(tmp_path / "kh")))
    with pytest.raises(TransportError, match="cannot connect"):
        await t.run(["true"])


# --- trust on first use records what was confirmed (issue 23 item 5) ------------------------------------

class SwitchingProxy:
    """A TCP relay in front of two real OpenSSH servers: the first `first_n` connections go to `a`, every
    later one to `b` (a host whose key changes between the probe and the connection)."""

    def __init__(self, a: Sshd, b: Sshd, first_n: int = 1) -> None:
        self.a, self.b, self.first_n = a, b, first_n
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> SwitchingProxy:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = self.a if self.connections < self.first_n else self.b
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(upstream.host, upstream.port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@pytest.fixture
def second_sshd(sshd: Sshd, tmp_path: Path) -> Iterator[Sshd]:
    """Another real sshd with its own host key that accepts the first one's client key."""
    other = start_sshd(tmp_path / "sshd-b")
    (other.workdir / "authorized_keys").write_text((sshd.workdir / "id_ed25519.pub").read_text())
    yield other
    stop_sshd(other)


def _fp(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub), "-E", "sha256"], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]  # the fingerprint exactly as OpenSSH prints it


async def test_key_switched_after_the_probe_is_never_written(sshd: Sshd, second_sshd: Sshd, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """--trust-new-host: the probe sees key A (the fingerprint shown), the connection is offered key B →
    refused, known_hosts untouched (before the fix, B was appended without anyone seeing it)."""
    kh = config_known_hosts(tmp_path, monkeypatch)
    async with SwitchingProxy(sshd, second_sshd) as proxy:
        t = SshTransport(SshTarget(host="127.0.0.1", port=proxy.port, user=sshd.user, key_file=str(sshd.client_key),
                                   known_hosts=str(kh), trust_new_host=True))
        with pytest.raises(HostKeyError, match="between connections") as info:
            await t.run(["true"])
        await t.close()
        assert proxy.connections >= 2  # the switch really happened
    assert _fp(sshd.host_pub) in str(info.value) and _fp(second_sshd.host_pub) in str(info.value)
    assert not kh.exists() or kh.read_text() == ""


async def test_tui_confirmed_fingerprint_is_the_only_key_trusted(sshd: Sshd, second_sshd: Sshd,
                                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """The wizard's dialog showed and the user confirmed A; the host now offers B → refused, nothing written.
    Confirming the key actually offered writes exactly that key."""
    from provisioner.transport.ssh import probe_host_key

    kh = config_known_hosts(tmp_path, monkeypatch)
    async with SwitchingProxy(sshd, second_sshd) as proxy:
        base = SshTarget(host="127.0.0.1", port=proxy.port, user=sshd.user, key_file=str(sshd.client_key),
                         known_hosts=str(kh))
        shown, status = await probe_host_key(base)  # what the dialog shows (connection 1: A)
        assert (shown, status) == (_fp(sshd.host_pub), "unknown")
        t = SshTransport(SshTarget(**{**base.__dict__, "trust_new_host": True, "confirmed_fingerprint": shown}))
        with pytest.raises(HostKeyError, match="HOST KEY CHANGED") as info:
            await t.run(["true"])
        await t.close()
        assert shown in str(info.value) and _fp(second_sshd.host_pub) in str(info.value)
        assert not kh.exists() or kh.read_text() == ""
        # B confirmed (its fingerprint shown and accepted): B, and only B, is written
        t = SshTransport(SshTarget(**{**base.__dict__, "trust_new_host": True,
                                      "confirmed_fingerprint": _fp(second_sshd.host_pub)}))
        assert (await t.run(["echo", "b"])).lines == ["b"]
        await t.close()
    kind, data = second_sshd.host_pub.read_text().split()[:2]
    assert kh.read_text() == f"[127.0.0.1]:{proxy.port} {kind} {data}\n"


async def test_revoked_key_is_named_revoked(sshd: Sshd, tmp_path: Path) -> None:
    kind, data = sshd.host_pub.read_text().split()[:2]
    kh = tmp_path / "kh"
    kh.write_text(f"@revoked [{sshd.host}]:{sshd.port} {kind} {data}\n")
    t = SshTransport(target(sshd, known_hosts=kh, trust_new_host=True))
    with pytest.raises(HostKeyError, match="HOST KEY REVOKED") as info:
        await t.run(["true"])
    await t.close()
    assert "CHANGED" not in str(info.value) and "@revoked" in str(info.value)
    assert kh.read_text() == f"@revoked [{sshd.host}]:{sshd.port} {kind} {data}\n"


def test_cli_refuses_a_switched_key_with_exit_4(sshd: Sshd, second_sshd: Sshd, tmp_path: Path) -> None:
    """The same attack through `provisioner plan --trust-new-host`: exit 4, known_hosts untouched."""
    kh = config_dir(tmp_path) / "gpu-provisioner" / "kh"
    pb = tmp_path / "pb.yaml"

    async def scenario() -> subprocess.CompletedProcess[str]:
        async with SwitchingProxy(sshd, second_sshd) as proxy:
            pb.write_text(f"schema_version: 1\ntarget:\n  host: 127.0.0.1\n  ssh:\n    port: {proxy.port}\n"
                          f"    key_file: {sshd.client_key}\n    known_hosts: {kh}\nsteps:\n  - kind: node.connect\n")
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PROVISIONER_STATE_DIR": str(tmp_path / "st"),
                   "XDG_CONFIG_HOME": str(config_dir(tmp_path))}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "provisioner", "plan", str(pb), "--trust-new-host", env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 120)
            assert proc.returncode is not None
            return subprocess.CompletedProcess([], proc.returncode, out.decode(), err.decode())

    res = asyncio.run(scenario())
    assert res.returncode == ExitCode.UNREACHABLE, res.stderr
    assert "between connections" in res.stderr and "Traceback" not in res.stderr
    assert not kh.exists() or kh.read_text() == ""
