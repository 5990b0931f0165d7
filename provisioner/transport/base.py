"""What every transport offers: run an argv, stream merged output lines, report the exit status."""

from __future__ import annotations

import abc
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import quoting
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


class HostKeyError(TransportError):
    """The host key is unknown (without --trust-new-host) or does not match known_hosts."""


class CommandTimeout(TransportError):
    """The command ran past its timeout and was killed."""


@dataclass
class CommandResult:
    command: str
    exit_status: int | None
    lines: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def output(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines else "")

    def tail(self, n: int = 20) -> list[str]:
        return self.lines[-n:]


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
        lines: list[str] = []

        def _line(line: str) -> None:
            lines.append(line)
            if on_line is not None:
                on_line(line)
            if self.bus is not None and not quiet:
                self.bus.emit(OutputLine(host=self.host_label, cmd_id=cmd_id, line=line))

        if self.bus is not None and not quiet:
            self.bus.emit(CommandStarted(host=self.host_label, target=self.name, command=command, cmd_id=cmd_id))
        start = time.monotonic()
        timed_out = False
        status: int | None = None
        try:
            status = await self._run(argv, command, timeout=timeout, on_line=_line, stdin=stdin)
        except CommandTimeout:
            timed_out = True
        finally:
            duration = time.monotonic() - start
            if self.bus is not None and not quiet:
                self.bus.emit(CommandEnded(host=self.host_label, target=self.name, command=command, cmd_id=cmd_id,
                                           exit_status=status, duration_s=duration, timed_out=timed_out))
        result = CommandResult(command, status, lines, duration, timed_out)
        if timed_out:
            _line(f"[provisioner] command timed out after {timeout:.0f}s and was killed")
            raise CommandTimeout(f"[{self.name}] `{command}` timed out after {timeout}s")
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
    """Feeds decoded chunks, yields complete lines (\\r\\n, \\n and lone \\r end a line)."""

    def __init__(self, emit: LineCallback, max_line: int = 65536) -> None:
        self._buf = ""
        self._emit = emit
        self._max = max_line

    def feed(self, chunk: str) -> None:
        self._buf += chunk.replace("\r\n", "\n")
        while True:
            idx = self._buf.find("\n")
            if idx < 0:
                break
            line, self._buf = self._buf[:idx], self._buf[idx + 1:]
            self._emit(line.rsplit("\r", 1)[-1] if "\r" in line else line)
        if len(self._buf) > self._max:  # a line without end: flush, but never through a known secret
            from provisioner.redaction import REDACTOR

            cut = REDACTOR.safe_cut(self._buf, self._max)
            self._emit(self._buf[:cut])
            self._buf = self._buf[cut:]
            if len(self._buf) > self._max:
                self.feed("")

    def close(self) -> None:
        if self._buf:
            self._emit(self._buf)
            self._buf = ""
