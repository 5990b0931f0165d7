"""Every read of outside input is bounded (issue 34 item 4; the caps: `provisioner.bounds`).

Each hostile input is built for real (a gzip of 128 MiB of lines for a hostile `nvidia-bug-report.sh`,
tar bytes with a 256 MiB PAX header or GNU long name, 600,000 members, a gzip bomb) and the CLI runs
on it in a child process whose peak RSS (`ru_maxrss` of the children of a small wrapper) must stay
under 300 MB — a bound, not a timing. Before the fix, the bug report took 442 MB at 128 MiB of output
(2.4 GB at 5.9 MB of gzip in the attack pass), the PAX header 816 MB and 26 s, the long name 559 MB,
600,000 members more than 300 s. The hostile archives are concatenated gzip members (a gzip reader
reads them as one stream), so that building one costs a fraction of a second.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from provisioner import bounds
from provisioner.download import DownloadError, fetch_text
from provisioner.support import archive
from provisioner.support.bundle import FORMAT, BundleError, read_bundle
from provisioner.transport.base import CAPPED_LINE, LineSplitter
from provisioner.transport.local import LocalTransport
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.sshd import Sshd

RSS_BOUND_MB = 300
MiB = 1 << 20
HOSTILE_LINE = b"NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus 0123456789\n"

# The child's peak resident set: the wrapper waits for it, then reads its children's ru_maxrss (KiB).
_WRAPPER = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.monotonic()\n"
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True, errors='replace')\n"
    "print(json.dumps({'rc': p.returncode, 'out': p.stdout[-20000:], 'err': p.stderr[-20000:],\n"
    "                  'rss_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,\n"
    "                  's': round(time.monotonic() - t, 1)}))\n"
)


def _measured(args: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> dict[str, object]:
    """Run `python -m provisioner ARGS` in a child and return its exit status, output and peak RSS (MB)."""
    done = subprocess.run([sys.executable, "-c", _WRAPPER, sys.executable, "-m", "provisioner", *args],
                          capture_output=True, text=True, env=env, timeout=timeout, check=True)
    result: dict[str, object] = json.loads(done.stdout)
    print(f"{args[0]}: peak RSS {result['rss_mb']:.0f} MB, {result['s']} s, exit {result['rc']}")  # the figures
    return result


# --- hostile inputs -------------------------------------------------------------------------------------

@functools.cache
def _gz(data: bytes) -> bytes:
    return gzip.compress(data, 6)


def _header(name: str, size: int, kind: bytes, fmt: Literal[0, 1, 2] = tarfile.USTAR_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mtime = size, kind, 0
    return info.tobuf(format=fmt)


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 512)


def _big_record(header: bytes, size: int, start: bytes = b"", end: bytes = b"") -> list[bytes]:
    """gzip members of `header`, then `size` bytes (`start`, 'A's, `end`), then its padding."""
    mib = _gz(b"A" * MiB)
    parts = [_gz(header + start)]
    left = size - len(start) - len(end)
    parts += [mib] * (left // MiB)
    parts += [_gz(b"A" * (left % MiB) + end + _pad(size))]
    return parts


def _manifest_member() -> bytes:
    data = json.dumps({"format": FORMAT, "format_version": 1}).encode()
    return _gz(_header("provisioner-bundle/manifest.json", len(data), tarfile.REGTYPE) + data + _pad(len(data))
               + b"\0" * 1024)


def hostile_bundle(kind: str) -> bytes:
    if kind == "pax-header":  # a PAX record `<len> path=AAAA…` of 256 MiB
        size = 256 * MiB
        value = size - len(" path=\n") - len(str(size))
        record = f"{size} path=".encode()
        assert len(record) + value + 1 == size
        parts = _big_record(_header("././@PaxHeader", size, tarfile.XHDTYPE), size, record, b"\n")
    elif kind == "gnu-longname":
        parts = _big_record(_header("././@LongLink", 256 * MiB, tarfile.GNUTYPE_LONGNAME, tarfile.GNU_FORMAT),
                            256 * MiB)
    elif kind == "600k-members":
        block = _gz(_header("provisioner-bundle/empty", 0, tarfile.REGTYPE) * 10_000)
        parts = [block] * 60
    elif kind == "gzip-bomb":  # members under the per-member cap that add up past the cap on all of them
        each = bounds.BUNDLE_MEMBER_BYTES - MiB
        zeros = _gz(b"\0" * MiB)
        parts = []
        for i in range((bounds.BUNDLE_KEPT_BYTES // each) + 2):
            parts.append(_gz(_header(f"provisioner-bundle/node/m{i}.txt", each, tarfile.REGTYPE)))
            parts += [zeros] * (each // MiB)
    elif kind == "oversized-member":  # a header that claims 1 GiB (and no data follows)
        parts = [_gz(_header("provisioner-bundle/node/big.txt", 1 << 30, tarfile.REGTYPE))]
    else:
        raise AssertionError(kind)
    return b"".join([*parts, _manifest_member()])


HOSTILE = ("pax-header", "gnu-longname", "600k-members", "gzip-bomb", "oversized-member")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_bundle_is_refused_within_bounds_naming_the_cap(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"{kind}.tar.gz"
    path.write_bytes(hostile_bundle(kind))
    result = _measured(["diagnose", "--bundle", str(path)])
    err = str(result["err"])
    assert result["rc"] == 2, err
    assert "cap on bundle archive" in err and "Traceback" not in err, err
    assert float(str(result["rss_mb"])) < RSS_BOUND_MB


def test_a_bundle_at_the_caps_is_diagnosed_within_bounds(tmp_path: Path) -> None:
    """The most a bundle may hold (members just under the per-member cap, adding up to just under the cap on
    all of them, bytes that are not UTF-8, each one a probe's output, the bug report among them) is read and
    diagnosed under the memory bound."""
    each = bounds.BUNDLE_MEMBER_BYTES - MiB
    names = ["node.nvidia_bug_report", "node.dmesg", "ct.installer_log", "node.nvidia_smi_q"]
    assert each * len(names) <= bounds.BUNDLE_KEPT_BYTES
    line = b"\xff" * 99 + b"\n"
    probes = [{"name": n, "target": "node", "where": "local", "command": "x", "status": "ok", "exit_status": 0,
               "file": f"node/m{i}.txt"} for i, n in enumerate(names)]
    manifest = json.dumps({"format": FORMAT, "format_version": 1, "collection": {"host": "h"},
                           "probes": probes, "members": []}).encode()
    path = tmp_path / "full.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for i, data in [*((i, line * (each // len(line))) for i in range(len(names))), (-1, manifest)]:
            info = tarfile.TarInfo(f"provisioner-bundle/node/m{i}.txt" if i >= 0 else "provisioner-bundle/manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    result = _measured(["diagnose", "--bundle", str(path), "--json"])
    assert result["rc"] == 0, result["err"]
    assert float(str(result["rss_mb"])) < RSS_BOUND_MB


def _hostile_bug_report(tmp_path: Path) -> dict[str, str]:
    """A PATH whose `nvidia-bug-report.sh` writes a 0.3 MB gzip that unpacks to 128 MiB of lines."""
    body = HOSTILE_LINE * ((64 * MiB) // len(HOSTILE_LINE))
    gz = tmp_path / "report.gz"
    gz.write_bytes(_gz(body) * 2)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvidia-bug-report.sh"
    script.write_text('#!/bin/sh\nout=""\nwhile [ $# -gt 0 ]; do [ "$1" = --output-file ] && out="$2"; shift; done\n'
                      f'cp "{gz}" "$out.gz"\n')
    script.chmod(0o755)
    return os.environ | {"PATH": f"{bindir}:{os.environ['PATH']}"}


def test_a_hostile_bug_report_is_collected_within_bounds(tmp_path: Path) -> None:
    """`provisioner bundle --local` runs the hostile report through the local transport for real: the
    command is stopped at the cap on command output, the bundle keeps the report's head and tail (read back
    from disk) with a line naming the cap, and memory stays bounded."""
    out = tmp_path / "b.tar.gz"
    result = _measured(["bundle", "--local", "--no-runs", "-o", str(out), "--json"], env=_hostile_bug_report(tmp_path))
    assert result["rc"] == 0, result["err"]
    assert float(str(result["rss_mb"])) < RSS_BOUND_MB
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("provisioner-bundle/manifest.json").read())  # type: ignore[union-attr]
        report = tar.extractfile("provisioner-bundle/node/nvidia-bug-report.log").read().decode()  # type: ignore[union-attr]
    (probe,) = [p for p in manifest["probes"] if p["name"] == "node.nvidia_bug_report"]
    assert probe["truncated"] and "cap on command output" in probe["error"]
    assert len(report.encode()) <= bounds.PROBE_OUTPUT_BYTES + 4096
    assert "cap on probe output" in report and report.rstrip("\n").endswith(CAPPED_LINE)
    assert report.startswith(HOSTILE_LINE.decode())


# --- command output ---------------------------------------------------------------------------------------

async def test_output_past_the_memory_cap_is_whole_on_disk() -> None:
    """200,000 lines: memory holds the head, a line saying how many are left out and the tail; the whole
    output is read back from disk, or its head and tail within a smaller limit."""
    n = 200_000
    assert n > bounds.COMMAND_MEMORY_LINES
    result = await LocalTransport().run(["seq", "1", str(n)], timeout=120)
    assert result.exit_status == 0 and not result.output_capped
    assert len(result.lines) == bounds.COMMAND_MEMORY_LINES + 1
    assert result.lines[0] == "1" and result.lines[-1] == str(n)
    assert any("not kept in memory" in line and "cap on command output" in line for line in result.lines)
    whole, cut = result.read_output(64 * MiB)
    assert not cut and whole == "".join(f"{i}\n" for i in range(1, n + 1))
    part, cut = result.read_output(100_000)
    assert cut and part.startswith("1\n") and part.endswith(f"{n}\n") and "cap on probe output" in part
    assert len(part) < 100_000 + 1000
    result.close()


async def test_output_past_the_stop_cap_stops_the_command(tmp_path: Path) -> None:
    """A command that never stops printing is stopped at the cap (its process group killed), and says so."""
    marker = tmp_path / "still-running"
    script = f"trap '' PIPE; yes 'endless line of output'; touch {marker}"
    result = await LocalTransport().run(["sh", "-c", script], timeout=300)
    assert result.output_capped and result.exit_status is None and not result.ok
    assert result.lines[-1] == CAPPED_LINE
    assert len(result.lines) <= bounds.COMMAND_MEMORY_LINES + 2
    assert result.spill is not None and result.spill.size <= bounds.COMMAND_MAX_BYTES
    await asyncio.sleep(0.5)
    assert not marker.exists()  # the shell was killed with `yes`, not left to go on
    text, cut = result.read_output(bounds.PROBE_OUTPUT_BYTES)
    assert cut and text.endswith(CAPPED_LINE + "\n")


def _running(marker: str) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


@pytest.mark.sshd
async def test_ssh_output_past_the_stop_cap_stops_the_remote_command(sshd: Sshd) -> None:
    """The same cap over a real sshd: the remote process group is killed, not left printing."""
    marker = "endless-remote-output-3b9f"
    t = SshTransport(SshTarget(host=sshd.host, port=sshd.port, user=sshd.user, key_file=str(sshd.client_key),
                               known_hosts=str(sshd.known_hosts)))
    try:
        result = await t.run(["sh", "-c", f"yes {marker}"], timeout=300)
    finally:
        await t.close()
    assert result.output_capped and result.exit_status is None and result.lines[-1] == CAPPED_LINE
    assert len(result.lines) <= bounds.COMMAND_MEMORY_LINES + 2
    for _ in range(100):  # the kill is sent before run returns; wait (with a deadline) for the exit
        if not [pid for pid in _running(marker) if pid != os.getpid()]:
            break
        await asyncio.sleep(0.1)
    assert not [pid for pid in _running(marker) if pid != os.getpid()]


def test_lines_split_linearly_and_crlf_across_chunks() -> None:
    lines: list[str] = []
    splitter = LineSplitter(lines.append)
    splitter.feed("a\r")
    splitter.feed("\nb\rc\r\n" + "x\n" * 100_000)
    splitter.feed("tail")
    splitter.close()
    assert lines[:2] == ["a", "c"] and len(lines) == 100_003 and lines[-1] == "tail"


# --- the archive reader agrees with tarfile on real archives ----------------------------------------------

def _legit_archive(fmt: Literal[0, 1, 2]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data in [("provisioner-bundle/manifest.json", b"{}"),
                           ("provisioner-bundle/" + "d" * 120 + "/long-name.txt", b"long\n"),
                           ("provisioner-bundle/ünïcode.txt", b"u\n"), ("provisioner-bundle/empty", b"")]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1.5
            tar.addfile(info, io.BytesIO(data))
        d = tarfile.TarInfo("provisioner-bundle/dir")
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
        link = tarfile.TarInfo("provisioner-bundle/link")
        link.type, link.linkname = tarfile.SYMTYPE, "manifest.json"
        tar.addfile(link)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def test_the_reader_agrees_with_tarfile(fmt: Literal[0, 1, 2]) -> None:
    raw = _legit_archive(fmt)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        expected = [(m.name, tar.extractfile(m).read()) for m in tar if m.isfile()]  # type: ignore[union-attr]
    data = gzip.compress(raw[:3000]) + gzip.compress(raw[3000:]) + b"\0" * 100  # two gzip members, padding
    got = [(m.name, m.data) for m in archive.members(io.BytesIO(data))]
    assert got == expected and len(got) == 4


@pytest.mark.parametrize("case", ["not-gzip", "bad-checksum", "cut-short", "bad-pax"])
def test_a_malformed_bundle_is_a_bundle_error(case: str, tmp_path: Path) -> None:
    raw = _legit_archive(tarfile.PAX_FORMAT)
    if case == "not-gzip":
        data = b"PK\x03\x04 not a tar.gz at all"
    elif case == "bad-checksum":
        data = gzip.compress(raw[:100] + b"X" + raw[101:])
    elif case == "cut-short":
        data = gzip.compress(_header("provisioner-bundle/manifest.json", 5000, tarfile.REGTYPE) + b"{")
    else:
        data = gzip.compress(_header("././@PaxHeader", 12, tarfile.XHDTYPE) + b"99 path=x\n\n" + _pad(12))
    path = tmp_path / "bad.tar.gz"
    path.write_bytes(data)
    with pytest.raises(BundleError) as err:
        read_bundle(path)
    assert "not a readable support bundle" in str(err.value)


def test_a_manifest_over_its_cap_is_refused(tmp_path: Path) -> None:
    data = json.dumps({"format": FORMAT, "notes": ["x" * 1000] * 2000}).encode()
    assert len(data) > bounds.BUNDLE_MANIFEST_BYTES
    path = tmp_path / "m.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("provisioner-bundle/manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(BundleError, match="cap on bundle archive"):
        read_bundle(path)


# --- HTTP text and the one statement of the caps ------------------------------------------------------------

@pytest.fixture
def big_page() -> Iterator[str]:
    body = b"0" * (bounds.HTTP_TEXT_BYTES + 10)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/SHA256SUMS"
    finally:
        server.shutdown()
        server.server_close()


def test_a_checksum_file_over_its_cap_is_refused(big_page: str) -> None:
    with pytest.raises(DownloadError, match="cap on HTTP text"):
        fetch_text(big_page)


def test_each_kind_of_input_states_its_caps_once() -> None:
    assert set(bounds.BOUNDS) == {"command output", "probe output", "log file", "bundle archive", "HTTP text"}
    for kind, sentence in bounds.BOUNDS.items():
        assert bounds.cap(kind) == f"cap on {kind}: {sentence}"
    assert bounds.size(bounds.COMMAND_MAX_BYTES) in bounds.BOUNDS["command output"]
    assert f"{bounds.BUNDLE_MEMBERS:,}" in bounds.BOUNDS["bundle archive"]
