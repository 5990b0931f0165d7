"""Writing a file atomically: a private temporary file beside the target, fsync, the final mode, a rename
over the target, fsync of the directory. A crash, a full disk or an exception leaves the old file (or
none), never half a file; the temporary file is 0600 until the rename, so secrets never sit readable.

    with atomic.AtomicWriter(path, mode=0o600) as fh:   # a binary file object
        fh.write(...)
    atomic.write_text(path, text)                       # mode: what open() would give (0666 & ~umask)

The target may be named late (a content-addressed blob): set `writer.path` before the block ends. A relative
path is taken relative to the working directory when the writer is made.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO


def default_mode() -> int:
    """The mode a plain `open(path, "w")` would create: 0666 less the process umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


class AtomicWriter:
    """Context manager yielding a binary file; on a clean exit it replaces `path` with what was written."""

    def __init__(self, path: str | Path, *, mode: int | None = None) -> None:
        # Resolved against the working directory now (never following links): tempfile names its file by
        # absolute path, so a relative target (`-o out/b.tar.gz`) and its temporary file share one directory.
        self.path = Path(os.path.abspath(path))
        self.mode = mode
        self._tmp: str | None = None
        self._fh: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self._fh = os.fdopen(fd, "wb")
        return self._fh

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        assert self._fh is not None and self._tmp is not None
        tmp, fh = self._tmp, self._fh
        try:
            try:
                if exc_type is None:
                    fh.flush()
                    os.fsync(fh.fileno())
            finally:
                fh.close()
            if exc_type is not None:
                return
            self.path = Path(os.path.abspath(self.path))  # named late, possibly relative
            if self.path.parent != Path(tmp).parent:
                raise ValueError(f"{self.path} is not in {Path(tmp).parent}: a rename there would not be atomic")
            os.chmod(tmp, default_mode() if self.mode is None else self.mode)
            os.replace(tmp, self.path)
            tmp = ""
            _fsync_dir(self.path.parent)
        finally:
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (best effort: some filesystems refuse to fsync a directory)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes(path: str | Path, data: bytes, *, mode: int | None = None) -> None:
    with AtomicWriter(path, mode=mode) as fh:
        fh.write(data)


def write_text(path: str | Path, text: str, *, mode: int | None = None) -> None:
    write_bytes(path, text.encode("utf-8"), mode=mode)
