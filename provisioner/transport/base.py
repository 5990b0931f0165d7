"""What every transport offers: run an argv, stream merged output lines, report the exit status."""

from __future__ import annotations

import abc
import itertools
import os
import tempfile
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from provisioner import bounds, quoting
from provisioner.events import Bus, CommandEnded, CommandStarted, OutputLine

LineCallback = Callable[[str], None]


def host_label(host: str, port: int = 22, user: str | None = None) -> str:
    """How a host is named in events, recaps and messages: `[user@]host[:port]` (the port only when
    it is not SSH's 22). The one implementation (targets, SSH transports, bundle targets use it)."""
    return (f"{user}@" if user else "") + host + (f":{port}" if port != 22 else "")


def _token() -> str:
    import secrets

    return secrets.token_hex(4)

_cmd_ids = itertools.count(1)


class TransportError(Exception):
    """The target could not be reached or the connection broke (exit code 4 territory)."""


class CopyFailed(Exception):
    """The target is reached but refused a file copy (no such directory, permission denied, disk full): the step
    that asked for the copy failed; nothing was interrupted."""


class HostKeyError(TransportError):
    """The host key is unknown (without --trust-new-host) or does not match known_hosts."""


class CommandTimeout(TransportError):
    """The command ran past its timeout and was killed (`result`: what it printed, when `Transport.run` raised it)."""

    result: CommandResult | None = None


class OutputCapExceeded(Exception):
    """Raised from a line callback when a command's output passes `bounds.COMMAND_MAX_BYTES`/`_LINES`: the
    transport stops the command (kills its process group) and re-raises; `Transport.run` turns it into a
    result that says so. Internal to the transports."""


CAPPED_LINE = (f"[provisioner] output passed the cap on command output ({bounds.size(bounds.COMMAND_MAX_BYTES)} or "
               f"{bounds.COMMAND_MAX_LINES:,} lines): the command was stopped")


class _Spill:
    """The whole output of a command past the memory cap, in an unlinked temporary file (gone with it)."""

    def __init__(self) -> None:
        self.file: BinaryIO = tempfile.TemporaryFile(prefix="provisioner-output-")
        self.size = 0
        self._finalizer = weakref.finalize(self, self.file.close)

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        self.file.write(data)
        self.size += len(data)

    def read(self, offset: int, limit: int) -> bytes:
        self.file.flush()
        return os.pread(self.file.fileno(), limit, offset)

    def close(self) -> None:
        self._finalizer()


class OutputCapture:
    """A command's output lines, bounded (`provisioner.bounds`, "command output").

    Up to `COMMAND_MEMORY_BYTES`/`_LINES` every line is kept in memory. Past that, memory keeps the head
    (a quarter) and a rolling tail (the rest), and the whole output goes to an unlinked temporary file.
    Past `COMMAND_MAX_BYTES`/`_LINES` in all, `add` raises `OutputCapExceeded` (the command is stopped).
    A line costs a few operations: lines past the memory cap are written and trimmed in blocks."""

    BLOCK = 4096  # lines written to disk (and added to the tail) at a time

    def __init__(self) -> None:
        self.head: list[str] = []
        self.lines_seen = 0
        self.chars_seen = 0  # characters, one more per line end
        self.capped = False
        self.spill: _Spill | None = None
        self._head_chars = 0
        self._blocks: deque[tuple[list[str], int]] = deque()  # the tail, in blocks: (lines, characters)
        self._tail_chars = 0
        self._tail_lines = 0
        self._pending: list[str] = []
        self._pending_chars = 0
        self._head_max = bounds.COMMAND_MEMORY_BYTES // bounds.COMMAND_HEAD_SHARE
        self._head_max_lines = bounds.COMMAND_MEMORY_LINES // bounds.COMMAND_HEAD_SHARE
        self._tail_max = bounds.COMMAND_MEMORY_BYTES - self._head_max
        self._tail_max_lines = bounds.COMMAND_MEMORY_LINES - self._head_max_lines
        self._notes: list[str] = []

    def add(self, line: str) -> None:
        if self.capped:
            return
        n = len(line) + 1
        if self.lines_seen >= bounds.COMMAND_MAX_LINES or self.chars_seen + n > bounds.COMMAND_MAX_BYTES:
            self.capped = True
            raise OutputCapExceeded
        self.lines_seen += 1
        self.chars_seen += n
        if self.spill is not None:
            self._pending.append(line)
            self._pending_chars += n
            if len(self._pending) >= self.BLOCK:
                self._flush()
            return
        self.head.append(line)
        self._head_chars += n
        if self._head_chars > bounds.COMMAND_MEMORY_BYTES or len(self.head) > bounds.COMMAND_MEMORY_LINES:
            self._start_spill()

    def note(self, line: str) -> None:
        """A line of our own (the timeout note): kept last, outside the caps."""
        self._notes.append(line)

    def _start_spill(self) -> None:
        self.spill = _Spill()
        keep = kept_chars = 0
        for line in self.head:  # the head: whole lines up to its share
            if keep >= self._head_max_lines or kept_chars + len(line) + 1 > self._head_max:
                break
            keep += 1
            kept_chars += len(line) + 1
        self.spill.write("\n".join(self.head[:keep]) + "\n" if keep else "")
        self._pending = self.head[keep:]
        self._pending_chars = self._head_chars - kept_chars
        del self.head[keep:]
        self._head_chars = kept_chars
        self._flush()

    def _flush(self) -> None:
        if not self._pending or self.spill is None:
            return
        block, chars = self._pending, self._pending_chars
        self.spill.write("\n".join(block) + "\n")
        self._pending, self._pending_chars = [], 0
        self._blocks.append((block, chars))
        self._tail_chars += chars
        self._tail_lines += len(block)
        while len(self._blocks) > 1:  # drop whole blocks while the rest still fills the tail's share
            first, first_chars = self._blocks[0]
            if (self._tail_chars - first_chars < self._tail_max
                    and self._tail_lines - len(first) < self._tail_max_lines):
                break
            self._blocks.popleft()
            self._tail_chars -= first_chars
            self._tail_lines -= len(first)

    def _tail(self) -> list[str]:
        """The last lines within the tail's share."""
        self._flush()
        out: list[str] = []
        chars = 0
        for block, _ in reversed(self._blocks):
            for line in reversed(block):
                if len(out) >= self._tail_max_lines or chars + len(line) + 1 > self._tail_max:
                    out.reverse()
                    return out
                out.append(line)
                chars += len(line) + 1
        out.reverse()
        return out

    def lines(self) -> list[str]:
        """The lines kept in memory: all of them, or the head, one line saying what is left out, the tail."""
        if self.spill is None:
            out = list(self.head)
        else:
            tail = self._tail()
            left_out = self.lines_seen - len(self.head) - len(tail)
            out = [*self.head,
                   f"[provisioner] {left_out:,} lines of output not kept in memory (cap on command output: "
                   f"{bounds.size(bounds.COMMAND_MEMORY_BYTES)} or {bounds.COMMAND_MEMORY_LINES:,} lines)", *tail]
        if self.capped:
            out.append(CAPPED_LINE)
        return out + self._notes


@dataclass
class CommandResult:
    command: str
    exit_status: int | None
    lines: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    timed_out: bool = False
    #: the output passed `bounds.COMMAND_MAX_BYTES`/`_LINES` and the command was stopped (exit_status None)
    output_capped: bool = False
    #: the whole output on disk when it passed the memory cap (`lines` then holds its head and tail)
    spill: _Spill | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def output(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines else "")

    def tail(self, n: int = 20) -> list[str]:
        return self.lines[-n:]

    def read_output(self, limit: int, kind: str = "probe output") -> tuple[str, bool]:
        """(the output, whether some was left out), at most about `limit` bytes: the whole output when it
        fits, else its first quarter and last three quarters (from disk where it was spilled) with a line
        between them naming the cap (`bounds.BOUNDS[kind]`)."""
        if self.spill is None:
            text = self.output
            if len(text) <= limit:
                return text, self.output_capped
            data = text.encode("utf-8", "replace")
            head, tail, size = data[: limit // 4], data[len(data) - (limit - limit // 4):], len(data)
        else:
            size = self.spill.size
            if size <= limit:
                text = self.spill.read(0, size).decode("utf-8", "replace")
                return text + (CAPPED_LINE + "\n" if self.output_capped else ""), self.output_capped
            head = self.spill.read(0, limit // 4)
            tail = self.spill.read(size - (limit - limit // 4), limit - limit // 4)
        text = _joined(head, tail, size, kind)
        return text + (CAPPED_LINE + "\n" if self.output_capped and self.spill is not None else ""), True

    def close(self) -> None:
        """Remove the spilled output now (it goes with the result otherwise)."""
        if self.spill is not None:
            self.spill.close()


def _joined(head: bytes, tail: bytes, size: int, kind: str) -> str:
    """Head and tail of an output (whole lines of each) with a line saying what lies between them."""
    head = head[: head.rfind(b"\n") + 1] or head
    nl = tail.find(b"\n")
    tail = tail[nl + 1:] if 0 <= nl < len(tail) - 1 else tail
    gap = size - len(head) - len(tail)
    mark = (f"[provisioner] {gap:,} bytes of output left out here (kept: the first {len(head):,} and the last "
            f"{len(tail):,}; {bounds.cap(kind)})\n")
    return head.decode("utf-8", "replace") + mark + tail.decode("utf-8", "replace")


class CommandFailed(Exception):
    """A command exited non-zero where success was required."""

    def __init__(self, result: CommandResult, target: str) -> None:
        self.result = result
        self.target = target
        tail = "\n".join(result.tail(12))
        super().__init__(f"[{target}] `{result.command}` exited {result.exit_status}\n{tail}")


class Transport(abc.ABC):
    """Runs argv lists on one target. Subclasses implement `_run` and `put`."""

    name: str = "transport"

    def __init__(self, bus: Bus | None = None, host_label: str = "") -> None:
        self.bus = bus
        self.host_label = host_label

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = 600.0,
        on_line: LineCallback | None = None,
        stdin: bytes | None = None,
        check: bool = False,
        quiet: bool = False,
    ) -> CommandResult:
        """Run `argv`; stream lines to the event bus (unless quiet) and `on_line`."""
        command = quoting.join(argv)
        cmd_id = next(_cmd_ids)
        capture = OutputCapture()
        bus = self.bus if not quiet else None

        def _line(line: str) -> None:
            capture.add(line)  # raises OutputCapExceeded past the cap: the transport stops the command
            if on_line is not None:
                on_line(line)
            if bus is not None:
                bus.emit(OutputLine(host=self.host_label, cmd_id=cmd_id, line=line))

        if bus is not None:
            bus.emit(CommandStarted(host=self.host_label, target=self.name, command=command, cmd_id=cmd_id))
        start = time.monotonic()
        timed_out = False
        status: int | None = None
        try:
            status = await self._run(argv, command, timeout=timeout, on_line=_line, stdin=stdin)
        except CommandTimeout:
            timed_out = True
        except OutputCapExceeded:
            status = None
        finally:
            duration = time.monotonic() - start
            if bus is not None:
                bus.emit(CommandEnded(host=self.host_label, target=self.name, command=command, cmd_id=cmd_id,
                                      exit_status=status, duration_s=duration, timed_out=timed_out))
        if timed_out:
            note = f"[provisioner] command timed out after {timeout:.0f}s and was killed"
            capture.note(note)
            if on_line is not None:
                on_line(note)
            if bus is not None:
                bus.emit(OutputLine(host=self.host_label, cmd_id=cmd_id, line=note))
        result = CommandResult(command, status, capture.lines(), duration, timed_out, capture.capped, capture.spill)
        if capture.capped and bus is not None:
            bus.emit(OutputLine(host=self.host_label, cmd_id=cmd_id, line=CAPPED_LINE))
        if timed_out:
            exc = CommandTimeout(f"[{self.name}] `{command}` timed out after {timeout}s")
            exc.result = result
            raise exc
        if check and status != 0:
            raise CommandFailed(result, self.name)
        return result

    async def write_file(self, path: str, data: bytes, *, mode: int | None = None, timeout: float = 60.0,
                         quiet: bool = True) -> None:
        """Write `data` to `path` on the target atomically: a temporary file beside it, then `mv -f`
        (a rename within one filesystem: readers see the old or the new file, never half of one).
        `path` travels as an argv element (one quoting layer); on failure the temporary file is removed."""
        tmp = f"{path}.tmp-provisioner-{_token()}"
        script = ('cat > "$1" || { rm -f "$1"; exit 1; }; '
                  'if [ -n "$3" ]; then chmod "$3" "$1" || { rm -f "$1"; exit 1; }; fi; '
                  'mv -f "$1" "$2" || { rm -f "$1"; exit 1; }')
        await self.run(["sh", "-c", script, "write_file", tmp, path, f"{mode:o}" if mode is not None else ""],
                       stdin=data, timeout=timeout, check=True, quiet=quiet)

    @abc.abstractmethod
    async def _run(
        self, argv: Sequence[str], command: str, *, timeout: float | None, on_line: LineCallback,
        stdin: bytes | None,
    ) -> int | None:
        """Run and stream; return the exit status. Raise CommandTimeout after killing on timeout."""

    @abc.abstractmethod
    async def put(self, local: Path, remote: str, mode: int = 0o644) -> None:
        """Copy a local file to the target."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""

    def for_facts(self) -> Transport:
        """The transport facts are read through: one whose output carries no login-shell noise
        (a container overrides it; a node's commands run without a login shell already)."""
        return self


class LineSplitter:
    """Feeds decoded chunks, yields complete lines (\\r\\n and \\n end a line; of a line holding lone \\r,
    the progress-bar redraws, the text after the last \\r is kept). Linear in the input: a chunk is split
    once (not re-sliced per line), and a line without end is flushed in pieces of `max_line` characters."""

    def __init__(self, emit: LineCallback, max_line: int = bounds.COMMAND_LINE_CHARS) -> None:
        self._buf = ""
        self._emit = emit
        self._max = max_line

    def feed(self, chunk: str) -> None:
        buf = self._buf + chunk
        if buf.endswith("\r"):  # maybe the first half of a \r\n split across chunks
            buf, hold = buf[:-1], "\r"
        else:
            hold = ""
        if "\n" in buf:
            parts = buf.split("\n")
            rest = parts.pop()
            emit = self._emit
            for line in parts:
                if "\r" in line:
                    line = line[:-1] if line.endswith("\r") else line  # \r\n
                    line = line.rsplit("\r", 1)[-1]
                emit(line)
        else:
            rest = buf
        self._buf = rest + hold
        while len(self._buf) > self._max:  # a line without end: flush, but never through a known secret
            from provisioner.redaction import REDACTOR

            cut = REDACTOR.safe_cut(self._buf, self._max)
            self._emit(self._buf[:cut])
            self._buf = self._buf[cut:]

    def close(self) -> None:
        if self._buf:
            line, self._buf = self._buf, ""
            self._emit(line)
