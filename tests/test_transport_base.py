"""What every transport offers, on a real local shell: the atomic `write_file`, line splitting that
never cuts a known secret in two, and the one host label."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from provisioner.events import Bus, Event, OutputLine
from provisioner.redaction import MASK, REDACTOR
from provisioner.transport.base import CommandFailed, LineSplitter, host_label
from provisioner.transport.local import LocalTransport


async def test_write_file_replaces_atomically_with_mode(tmp_path: Path) -> None:
    target = tmp_path / "conf" / "200.conf"
    target.parent.mkdir()
    target.write_text("old\n")
    transport = LocalTransport()
    await transport.write_file(str(target), b"new content\n", mode=0o640)
    assert target.read_text() == "new content\n"
    assert (target.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["200.conf"]  # no temporary file left


async def test_write_file_failure_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    missing_dir = tmp_path / "no-such-dir" / "x.json"
    with pytest.raises(CommandFailed):
        await LocalTransport().write_file(str(missing_dir), b"{}")
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "keep.txt").write_text("keep")
    os.chmod(ro, 0o500)
    try:
        if os.geteuid() != 0:  # root ignores directory permissions
            with pytest.raises(CommandFailed):
                await LocalTransport().write_file(str(ro / "keep.txt"), b"lost")
            assert (ro / "keep.txt").read_text() == "keep"
    finally:
        os.chmod(ro, 0o700)


async def test_path_with_spaces_and_quotes_is_one_argv_element(tmp_path: Path) -> None:
    odd = tmp_path / "a b'c\"d.txt"
    await LocalTransport().write_file(str(odd), b"x")
    assert odd.read_text() == "x"


def test_a_forced_flush_never_splits_a_known_secret() -> None:
    # issue #19: a secret straddling the 64 KiB flush of an endless line went out in two halves.
    secret = "Zq-split-canary-77aa"
    REDACTOR.add(secret)
    lines: list[str] = []
    splitter = LineSplitter(lines.append, max_line=64)
    text = "x" * 55 + secret + "y" * 30
    for i in range(0, len(text), 7):  # arrives in chunks, as from a socket
        splitter.feed(text[i:i + 7])
    splitter.close()
    assert "".join(lines) == text
    assert any(secret in line for line in lines)  # whole in one line, so redaction sees it
    assert all(len(line) <= 64 for line in lines)
    assert all(secret not in REDACTOR.text(line) and (secret not in line or MASK in REDACTOR.text(line))
               for line in lines)


async def test_command_output_with_a_long_secret_line_is_masked_on_the_bus() -> None:
    secret = "Zq-bus-canary-5511"
    REDACTOR.add(secret)
    seen: list[Event] = []
    transport = LocalTransport(Bus(seen.append), "local")
    await transport.run(["sh", "-c", f"printf '%065530d{secret}%0100d' 0 0"], timeout=60)
    out = "".join(e.line for e in seen if isinstance(e, OutputLine))
    assert secret not in out and MASK in out


def test_host_label_is_one_rule() -> None:
    assert host_label("pve1") == "pve1"
    assert host_label("pve1", 2222) == "pve1:2222"
    assert host_label("10.0.0.5", 22, "root") == "root@10.0.0.5"


async def test_a_command_that_exits_without_reading_its_stdin_reports_its_exit_status() -> None:
    # 4 MiB cannot fit a pipe: the write meets a closed pipe once `sh` has exited (seen under load with
    # write_file into a missing directory: ConnectionResetError instead of the command's failure)
    result = await LocalTransport().run(["sh", "-c", "echo gone; exit 3"], stdin=b"x" * (4 << 20))
    assert (result.exit_status, result.lines) == (3, ["gone"])


async def test_a_program_still_open_for_writing_runs_once_the_writer_lets_go(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """exec(2) refuses a file some process holds open for writing (ETXTBSY): a program `put` and run at once can meet
    a child another thread forked while the file was open. The transport retries; here the writer is this test, which
    lets go when the transport pauses to retry (the event, not a delay), and the second exec runs the program."""
    import provisioner.transport.local as local

    program = tmp_path / "prog"
    program.write_text("#!/bin/sh\necho ran\n")
    program.chmod(0o755)
    writer = open(program, "ab")  # held open across the first exec on purpose
    pauses: list[int] = []

    async def let_go(attempt: int) -> None:
        pauses.append(attempt)
        writer.close()

    monkeypatch.setattr(local, "_retry_pause", let_go)
    result = await LocalTransport().run([str(program)], timeout=60)
    assert result.ok and result.output.strip() == "ran" and pauses == [1]
    # a writer that never lets go: the error as the kernel gave it, after the bounded retries
    stuck = open(program, "ab")
    try:
        monkeypatch.setattr(local, "_retry_pause", lambda attempt: asyncio.sleep(0))
        with pytest.raises(OSError) as err:
            await LocalTransport().run([str(program)], timeout=60)
        assert err.value.errno == errno.ETXTBSY
    finally:
        stuck.close()
