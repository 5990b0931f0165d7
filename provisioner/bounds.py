"""How much outside input is read, once per kind of input (issue 34 item 4).

Everything a host, a container, a bundle or a log says is hostile input: each reader takes at most
what is stated here, in bytes (characters of decoded text count as bytes), lines and members, and
says so — a marker in the output, a finding or an error naming the cap — when a cap is hit. Never a
traceback, never memory that grows with the input. `BOUNDS` holds one sentence per kind (shown by
messages and docs); the readers import the numbers from here.

- command output (every transport: local, SSH, `pct exec`): `provisioner.transport.base.OutputCapture`
- the output a probe keeps (`provisioner bundle`, `diagnose --host`; NVIDIA's bug report is one): `support.collect`
- a log to diagnose (`diagnose --log`, stdin, the wizard's paste): `provisioner.diagnose.source`
- a support bundle (`diagnose --bundle`): `provisioner.support.archive` and `support.bundle`
- an HTTP text body (a checksum file): `provisioner.download.fetch_text`
"""

from __future__ import annotations

from typing import Final

KiB: Final = 1 << 10
MiB: Final = 1 << 20

# --- command output (any transport) -----------------------------------------------------------------
#: a line longer than this is cut into pieces (never through a known secret: `LineSplitter`)
COMMAND_LINE_CHARS: Final = 64 * KiB
#: output up to this much is kept whole in memory ...
COMMAND_MEMORY_BYTES: Final = 4 * MiB
COMMAND_MEMORY_LINES: Final = 50_000
#: ... past it, memory keeps its first quarter and last three quarters (head + rolling tail) and the
#: whole output goes to an unlinked temporary file on disk (`CommandResult.read_output` reads it back)
COMMAND_HEAD_SHARE: Final = 4  # head = the memory cap / 4, tail = the rest
#: past this much in all the command is stopped (its process group killed) and its result says so
COMMAND_MAX_BYTES: Final = 64 * MiB
COMMAND_MAX_LINES: Final = 1_000_000

# --- what a probe keeps (each member of a bundle, NVIDIA's bug report included) ---------------------
#: a probe's output beyond this is kept as its head and tail, read back from disk (marked truncated)
PROBE_OUTPUT_BYTES: Final = 8 * MiB

# --- a log to diagnose (`provisioner.diagnose.source` holds the head/tail split) --------------------
LOG_FILE_BYTES: Final = 64 * MiB  # a larger file is read as its head and tail
LOG_STREAM_BYTES: Final = 256 * MiB  # stdin is not read past this

# --- a support bundle (tar.gz) ----------------------------------------------------------------------
#: the tar stream after gunzip: a gzip bomb stops here
BUNDLE_ARCHIVE_BYTES: Final = 256 * MiB
#: entries in the archive (files, directories, links and extended headers each count)
BUNDLE_MEMBERS: Final = 10_000
#: one PAX extended header or GNU long-name/long-link record, checked before it is read
BUNDLE_HEADER_BYTES: Final = 64 * KiB
#: one member read into memory, and all of them together
BUNDLE_MEMBER_BYTES: Final = 12 * MiB
BUNDLE_KEPT_BYTES: Final = 48 * MiB
#: the manifest (ours is tens of KiB; JSON objects cost ~10x their text in memory)
BUNDLE_MANIFEST_BYTES: Final = 1 * MiB

# --- an HTTP text body (a published checksum file) --------------------------------------------------
HTTP_TEXT_BYTES: Final = 1 * MiB


def size(n: int) -> str:
    """A cap as people read it: `64 MiB`, `64 KiB`, `512 bytes`."""
    for unit, mult in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {unit}"
    return f"{n} bytes"


BOUNDS: Final[dict[str, str]] = {
    "command output": (
        f"kept whole in memory up to {size(COMMAND_MEMORY_BYTES)} or {COMMAND_MEMORY_LINES:,} lines, then as "
        f"its head and tail with the rest on disk; a line is cut at {size(COMMAND_LINE_CHARS)}; past "
        f"{size(COMMAND_MAX_BYTES)} or {COMMAND_MAX_LINES:,} lines the command is stopped"),
    "probe output": f"each probe's output (NVIDIA's bug report too) is kept up to {size(PROBE_OUTPUT_BYTES)}, "
                    "as its head and tail when longer",
    "log file": f"a log over {size(LOG_FILE_BYTES)} is diagnosed from its head and tail; stdin is read up to "
                f"{size(LOG_STREAM_BYTES)}",
    "bundle archive": (
        f"at most {size(BUNDLE_ARCHIVE_BYTES)} unpacked, {BUNDLE_MEMBERS:,} members, {size(BUNDLE_HEADER_BYTES)} "
        f"per PAX or GNU long-name header, {size(BUNDLE_MEMBER_BYTES)} per member read and "
        f"{size(BUNDLE_KEPT_BYTES)} in all, a manifest of {size(BUNDLE_MANIFEST_BYTES)}"),
    "HTTP text": f"a fetched text (checksum file) is read up to {size(HTTP_TEXT_BYTES)}",
}


def cap(kind: str) -> str:
    """`cap on <kind>: <sentence>` for a message that names the cap it hit."""
    return f"cap on {kind}: {BOUNDS[kind]}"
