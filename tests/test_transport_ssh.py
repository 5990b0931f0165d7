"""asyncssh against a real OpenSSH sshd on 127.0.0.1 (fixture: tests/support/sshd.py)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest

from provisioner.events import Bus, CommandEnded, Event, OutputLine
from provisioner.transport.base import CommandTimeout, HostKeyError, TransportError
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.sshd import Sshd


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


async def test_trust_new_host_records_key_then_connects(sshd: Sshd, tmp_path: Path) -> None:
    kh = tmp_path / "kh"
    t = SshTransport(target(sshd, known_hosts=kh, trust_new_host=True))
    assert (await t.run(["echo", "hi"])).lines == ["hi"]
    await t.close()
    assert sshd.host_pub.read_text().split()[1] in kh.read_text()
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
