"""Bounded reading of a log to diagnose (issue 23 item 2).

A log is read only from a regular file or from a pipe/terminal on stdin; a FIFO, a device or a
socket given as a path is refused at once (`/dev/zero` would never end, a FIFO would block). At most
`MAX_BYTES` are kept (`provisioner.bounds`, "log file"): a larger file is read as its first `HEAD_BYTES` and its last `TAIL_BYTES`
(a failure is usually last, the context first), a stream keeps its head and a rolling tail and
stops after `MAX_STREAM_BYTES`. `LogInput.note` says what was left out, and the output repeats it.
Line length is capped later, by `normalize.clean_log` (`MAX_LINE_CHARS`).
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from typing import BinaryIO

from provisioner import bounds

MAX_BYTES = bounds.LOG_FILE_BYTES  # a file up to this size is read whole
HEAD_BYTES = MAX_BYTES // 8  # a larger one: its head ...
TAIL_BYTES = MAX_BYTES - HEAD_BYTES  # ... and its tail
MAX_STREAM_BYTES = bounds.LOG_STREAM_BYTES  # stdin stops being read after this much
CHUNK = 1 << 20
GAP_MARK = "[... {mb:.1f} MB of the log not read: diagnosed from its first {head:.1f} MB and last {tail:.1f} MB ...]"


class LogRefused(ValueError):
    """The path is not something a log can be read from (FIFO, device, socket, directory)."""


@dataclass(frozen=True)
class LogInput:
    """The text to diagnose and what the reader left out."""

    text: str
    size: int  # bytes in the source (bytes read for a stream)
    read: int  # bytes kept
    note: str = ""  # empty when the whole log was read

    @property
    def partial(self) -> bool:
        return self.read < self.size

    def to_dict(self) -> dict[str, object]:
        return {"bytes": self.size, "bytes_read": self.read, "partial": self.partial, "note": self.note}


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _decode(head: bytes, tail: bytes, skipped: int, size: int) -> LogInput:
    """Head and tail of a log with a line saying what lies between them (`skipped` bytes)."""
    cut_head = head[: head.rfind(b"\n") + 1] or head  # whole lines only
    nl = tail.find(b"\n")
    cut_tail = tail[nl + 1 :] if 0 <= nl < len(tail) - 1 else tail
    kept = len(cut_head) + len(cut_tail)
    gap = size - kept
    note = GAP_MARK.format(mb=gap / 1e6, head=len(cut_head) / 1e6, tail=len(cut_tail) / 1e6)
    text = cut_head.decode("utf-8", errors="replace") + note + "\n" + cut_tail.decode("utf-8", errors="replace")
    return LogInput(text, size, kept, note.strip("[]. "))


def _read_regular(fd: int, size: int) -> LogInput:
    if size <= MAX_BYTES:
        data = _read_exact(fd, 0, MAX_BYTES)
        return LogInput(data.decode("utf-8", errors="replace"), max(size, len(data)), len(data))
    head = _read_exact(fd, 0, HEAD_BYTES)
    tail = _read_exact(fd, size - TAIL_BYTES, TAIL_BYTES)
    return _decode(head, tail, size - HEAD_BYTES - TAIL_BYTES, size)


def _read_exact(fd: int, offset: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        b = os.pread(fd, min(CHUNK, limit - got), offset + got)
        if not b:
            break
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def _read_stream(stream: BinaryIO) -> LogInput:
    head = bytearray()
    tail = bytearray()
    total = 0
    dropped = 0
    while total < MAX_STREAM_BYTES:
        b = stream.read(CHUNK)
        if not b:
            break
        total += len(b)
        if len(head) < HEAD_BYTES:
            take = HEAD_BYTES - len(head)
            head += b[:take]
            b = b[take:]
        tail += b
        if len(tail) > TAIL_BYTES:
            dropped += len(tail) - TAIL_BYTES
            del tail[: len(tail) - TAIL_BYTES]
    more = total >= MAX_STREAM_BYTES and bool(stream.read(1))
    if dropped:
        result = _decode(bytes(head), bytes(tail), dropped, total)
    else:
        data = bytes(head + tail)
        result = LogInput(data.decode("utf-8", errors="replace"), total, total)
    if more:
        note = f"stdin read up to {MAX_STREAM_BYTES >> 20} MiB and no further" + (f"; {result.note}" if result.note else "")
        return LogInput(result.text, total + 1, result.read, note)
    return result


def read_log(source: str) -> LogInput:
    """Read a log from a path or '-' (stdin), bounded. Raises LogRefused for a FIFO/device/socket path
    (stdin may be a pipe or a terminal, not a device), OSError when it cannot be opened."""
    if source == "-":
        try:
            fd = sys.stdin.fileno()
        except (AttributeError, OSError, ValueError):  # not a file descriptor (an in-memory stream)
            return _read_stream(sys.stdin.buffer)
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return _read_regular(fd, os.fstat(fd).st_size)
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
            raise LogRefused(f"stdin is {_kind(mode)}: pipe a log or redirect a regular file")
        return _read_stream(sys.stdin.buffer)
    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # a FIFO must not block the open
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LogRefused(f"{source} is {_kind(st.st_mode)}, not a log file")
        return _read_regular(fd, st.st_size)
    finally:
        os.close(fd)


def bound_text(text: str, max_chars: int = MAX_BYTES) -> str:
    """Pasted text (the TUI's F5) cut like a file: its head and tail when longer than `max_chars`."""
    if len(text) <= max_chars:
        return text
    head = max_chars * HEAD_BYTES // MAX_BYTES
    tail = max_chars - head
    gap = len(text) - head - tail
    mark = GAP_MARK.format(mb=gap / 1e6, head=head / 1e6, tail=tail / 1e6)
    return text[:head] + "\n" + mark + "\n" + text[-tail:]
