"""File operations of the lab's server beneath the lab root that never follow a link a view planted.

The lab's node and containers write into parts of the lab root (the node's /etc upper layer, the
containers' roots, ``run/``, ``tasks/``...). The lab server runs outside their namespaces, so a
symlink planted there must never take one of its writes (or reads) out of the lab root: every
path component below the root is opened with ``O_NOFOLLOW`` (a directory through the previous
component's descriptor), a final component that is a link or not a regular file is refused with
`UnsafePath`, and replacements are made with a rename inside the opened directory. The root
itself is the caller's (the user named it).

    write_bytes(root, path, data, mode=0o644, in_place=False)   # in place: the inode stays (bind mounts)
    append_bytes(root, path, data); open_append(root, path) -> fd; read_bytes(root, path)
    make_dirs(root, path); remove_tree(root, path); mknod(root, path, mode, device); chmod(root, path, mode)
    open_dir(root, path, create=False) -> fd   (the caller closes it)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path under the lab root leads through a link or to something that is not a plain file."""


def _parts(root: Path, path: Path) -> list[str]:
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        raise UnsafePath(f"LAB: {path} is not under the lab root {root}") from None
    parts = [p for p in rel.parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafePath(f"LAB: {path} leaves the lab root")
    return parts


def _open_root(root: Path) -> int:
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _walk(root: Path, parts: list[str], *, create: bool, mode: int = 0o755) -> int:
    """fd of the directory ``root/parts...``; every component opened without following a link."""
    fd = _open_root(root)
    try:
        for name in parts:
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=fd)
                nxt = _open_dir_component(name, fd)
            except OSError as exc:
                raise UnsafePath(f"LAB: refusing {name!r} under {root}: not a plain directory ({exc.strerror})") from None
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_dir_component(name: str, fd: int) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise UnsafePath(f"LAB: refusing {name!r}: not a plain directory ({exc.strerror})") from None


def open_dir(root: Path, path: Path, *, create: bool = False) -> int:
    """An fd of directory `path` (beneath `root`), made (0755) where missing when `create`."""
    return _walk(root, _parts(root, path), create=create)


@contextlib.contextmanager
def _parent(root: Path, path: Path, *, create: bool) -> Iterator[tuple[int, str]]:
    parts = _parts(root, path)
    if not parts:
        raise UnsafePath(f"LAB: {path} is the lab root itself")
    fd = _walk(root, parts[:-1], create=create)
    try:
        yield fd, parts[-1]
    finally:
        os.close(fd)


def _check_regular(fd: int, path: Path) -> None:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise UnsafePath(f"LAB: refusing {path}: not a regular file")


def make_dirs(root: Path, path: Path, mode: int = 0o755) -> None:
    os.close(_walk(root, _parts(root, path), create=True, mode=mode))


def write_bytes(root: Path, path: Path, data: bytes, mode: int = 0o644, *, in_place: bool = False) -> None:
    """Write `data` to `path`: by a rename inside the directory (atomic), or with `in_place` into the
    existing inode (live bind mounts of the file keep showing it). A link at `path` is never followed."""
    with _parent(root, path, create=True) as (dfd, name):
        if in_place:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode,
                         dir_fd=dfd)
            try:
                _check_regular(fd, path)
                os.ftruncate(fd, 0)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            return
        tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


def open_append(root: Path, path: Path, mode: int = 0o644) -> int:
    """An fd appending to regular file `path` (made where missing); the caller closes it."""
    with _parent(root, path, create=True) as (dfd, name):
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     mode, dir_fd=dfd)
        try:
            _check_regular(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return fd


def append_bytes(root: Path, path: Path, data: bytes, mode: int = 0o644) -> None:
    fd = open_append(root, path, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def read_bytes(root: Path, path: Path) -> bytes:
    """The bytes of regular file `path` (FileNotFoundError where it is missing)."""
    with _parent(root, path, create=False) as (dfd, name):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        try:
            _check_regular(fd, path)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read()
        finally:
            os.close(fd)


def remove_tree(root: Path, path: Path) -> None:
    """Remove `path` (a tree or a file; a link is removed, never followed); nothing where it is missing."""
    try:
        ctx = _parent(root, path, create=False)
        dfd, name = ctx.__enter__()
    except (FileNotFoundError, UnsafePath):
        return
    try:
        try:
            st = os.lstat(name, dir_fd=dfd)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dfd)
    finally:
        ctx.__exit__(None, None, None)


def mknod(root: Path, path: Path, mode: int, device: int) -> None:
    with _parent(root, path, create=True) as (dfd, name):
        os.mknod(name, mode, device, dir_fd=dfd)
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        try:
            os.chmod(f"/proc/self/fd/{fd}", mode & 0o7777)
        finally:
            os.close(fd)


def chmod(root: Path, path: Path, mode: int) -> None:
    """chmod of regular file `path` (never through a link)."""
    with _parent(root, path, create=False) as (dfd, name):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        try:
            _check_regular(fd, path)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def exists(root: Path, path: Path) -> bool:
    """Whether `path` exists beneath `root` without following a link on the way (a link itself counts)."""
    try:
        with _parent(root, path, create=False) as (dfd, name):
            os.lstat(name, dir_fd=dfd)
            return True
    except (OSError, UnsafePath):
        return False
