"""Reading a support bundle's tar.gz within bounds (`provisioner.bounds`, "bundle archive").

Python's `tarfile` reads a PAX extended header or a GNU long name whole into memory before it looks at
it (and parses a large one slowly), keeps every member it has seen in a list, and inflates without
limit: a 3 MB bundle took 3 GB and a minute. This reader streams the gzip (concatenated members
too) through zlib with a cap on the inflated bytes, walks the 512-byte ustar headers itself, refuses
a PAX or GNU long-name record larger than `BUNDLE_HEADER_BYTES` before reading it, stops at
`BUNDLE_MEMBERS` entries, and keeps only regular files' data (each at most `BUNDLE_MEMBER_BYTES`, all
together `BUNDLE_KEPT_BYTES`). Every refusal is an `ArchiveError` whose message names the cap.

What it understands is what `tarfile` writes in PAX, GNU and ustar formats: PAX `path`/`size`
records, GNU long names, the ustar prefix, octal and base-256 numbers. Sparse members are refused.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from provisioner import bounds

BLOCK = 512
READ_CHUNK = 1 << 16  # compressed bytes read at a time
INFLATE_CHUNK = 1 << 20  # most inflated bytes one zlib call may return
REGULAR = (b"0", b"\0", b"7")  # regular file, old regular file, contiguous file
NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, directories, FIFOs: any size field is ignored
PAX = (b"x", b"g")
GNU_LONG = (b"L", b"K")


class ArchiveError(ValueError):
    """The archive is not a readable tar.gz, or it passes a cap (the message names it)."""


def _capped(what: str) -> ArchiveError:
    return ArchiveError(f"{what} ({bounds.cap('bundle archive')})")


@dataclass(frozen=True)
class Member:
    """A regular file of the archive and its data."""

    name: str
    data: bytes


def _inflate(fh: BinaryIO, limit: int) -> Iterator[bytes]:
    """The gunzipped bytes of `fh` (one gzip member or several in a row), at most `limit` of them."""
    d = zlib.decompressobj(31)
    total = 0
    pending = b""
    while True:
        if not pending:
            pending = fh.read(READ_CHUNK)
            if not pending:
                return  # a stream cut short ends the archive, as tarfile reads it
        try:
            out = d.decompress(pending, INFLATE_CHUNK)
        except zlib.error as exc:
            raise ArchiveError(f"not a gzip stream: {exc}") from None
        pending = d.unconsumed_tail
        if d.eof:  # another gzip member may follow (trailing zeros are padding)
            pending = d.unused_data + pending
            if not pending.strip(b"\0"):
                rest = fh.read(READ_CHUNK)
                while rest and not rest.strip(b"\0"):
                    rest = fh.read(READ_CHUNK)
                pending = rest
            d = zlib.decompressobj(31)
        total += len(out)
        if total > limit:
            raise _capped(f"the archive unpacks to more than {bounds.size(limit)}")
        if out:
            yield out


class _Stream:
    """Exact reads and skips over the inflated stream."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = bytearray()
        self.offset = 0

    def read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        self.offset += len(data)
        return data

    def skip(self, n: int) -> int:
        """Drop `n` bytes without keeping them; how many there were."""
        done = 0
        while done < n:
            if not self._buf:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                self._buf += chunk
            take = min(n - done, len(self._buf))
            del self._buf[:take]
            done += take
        self.offset += done
        return done


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _nts(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _number(field: bytes) -> int:
    """A header number: octal text, or base-256 (GNU) when the first byte has its high bit set."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - (256 ** (len(field) - 1)) if field[:1] == b"\xff" else value
    text = field.split(b"\0", 1)[0].strip(b" \0")
    if not text:
        return 0
    try:
        return int(text.decode("ascii"), 8)
    except (UnicodeDecodeError, ValueError):
        raise ArchiveError(f"a header holds a malformed number {field!r}") from None


def _checksum_ok(block: bytes) -> bool:
    stored = _number(block[148:156])
    rest = block[:148] + block[156:]
    unsigned = 8 * 0x20 + sum(rest)  # the checksum field counts as spaces
    if stored == unsigned:
        return True
    return stored == unsigned - 256 * sum(1 for b in rest if b >= 0x80)  # old tars summed signed bytes (tarfile too)


def _pax_records(data: bytes) -> dict[str, str]:
    """`LEN KEY=VALUE\\n` records (POSIX pax); malformed ones refuse the archive."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        space = data.find(b" ", pos, pos + 20)
        try:
            length = int(data[pos:space]) if space > pos else 0
        except ValueError:
            length = 0
        record = data[pos:pos + length]
        if length <= space - pos or len(record) != length or not record.endswith(b"\n") or b"=" not in record:
            raise ArchiveError("a PAX extended header is malformed")
        key, _, value = record[space - pos + 1:-1].partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _extension(stream: _Stream, size: int, what: str) -> bytes:
    if size > bounds.BUNDLE_HEADER_BYTES:
        raise _capped(f"a {what} of {size:,} bytes at offset {stream.offset - BLOCK:,} is larger than "
                      f"{bounds.size(bounds.BUNDLE_HEADER_BYTES)}")
    data = stream.read(size)
    if len(data) < size:
        raise ArchiveError(f"the archive ends inside a {what}")
    stream.skip(_padded(size) - size)
    return data


def members(fh: BinaryIO) -> Iterator[Member]:
    """The regular files of the tar.gz read from `fh`, in order, each with its data (see the module)."""
    stream = _Stream(_inflate(fh, bounds.BUNDLE_ARCHIVE_BYTES))
    entries = 0
    kept = 0
    pax: dict[str, str] = {}
    long_name: str | None = None
    while True:
        block = stream.read(BLOCK)
        if len(block) < BLOCK or not block.strip(b"\0"):
            return  # end of archive: a zero block, or the stream ends
        entries += 1
        if entries > bounds.BUNDLE_MEMBERS:
            raise _capped(f"the archive has more than {bounds.BUNDLE_MEMBERS:,} members")
        if not _checksum_ok(block):
            raise ArchiveError(f"bad tar header checksum at offset {stream.offset - BLOCK:,}")
        kind = block[156:157]
        size = _number(block[124:136])
        if size < 0:
            raise ArchiveError(f"a negative member size at offset {stream.offset - BLOCK:,}")
        if kind in PAX:
            records = _pax_records(_extension(stream, size, "PAX extended header"))
            if kind == b"x":
                pax = records
            continue
        if kind in GNU_LONG:
            data = _extension(stream, size, "GNU long name")
            if kind == b"L":
                long_name = _nts(data)
            continue
        name = _nts(block[0:100])
        if block[257:263] == b"ustar\0" and block[345:500].strip(b"\0"):
            name = _nts(block[345:500]) + "/" + name
        name = pax.get("path", long_name if long_name is not None else name)
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError:
                raise ArchiveError("a PAX size record is not a number") from None
        pax, long_name = {}, None
        if kind in NO_DATA:
            continue
        if kind not in REGULAR:
            raise ArchiveError(f"member {name!r} has a type this reader does not take ({kind!r})")
        if size > bounds.BUNDLE_MEMBER_BYTES:
            raise _capped(f"member {name} is {size:,} bytes, more than {bounds.size(bounds.BUNDLE_MEMBER_BYTES)}")
        kept += size
        if kept > bounds.BUNDLE_KEPT_BYTES:
            raise _capped(f"the members add up to more than {bounds.size(bounds.BUNDLE_KEPT_BYTES)}")
        data = stream.read(size)
        if len(data) < size:
            raise ArchiveError(f"the archive ends inside member {name}")
        stream.skip(_padded(size) - size)
        yield Member(name, data)
