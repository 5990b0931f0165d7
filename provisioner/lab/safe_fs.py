"""File operations beneath a directory handle that never follow a link a view planted.

Two callers: the lab server (outside the views) writing into parts of the lab root (the node's /etc
upper layer, the containers' roots, ``run/``, ``tasks/``...), and the stand-ins that act for a
container (``apt-get``: its package list and the kmod tools, beneath the container's ``/``). A
symlink planted there must never take one of their writes (or reads) elsewhere, a
``/proc/<pid>/root/...`` link into another view included. Every path below the root is resolved
by ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` from the
root's descriptor (Linux 5.6+); where the kernel has no ``openat2`` (ENOSYS, or a seccomp filter
answering EPERM) each component is opened with ``O_NOFOLLOW`` through the previous component's
descriptor instead. A link, a ``..`` or something that is not a plain directory on the way, or a
final component that is a link or not a regular file, is refused with `UnsafePath`; replacements
are made with a rename inside the opened directory. The root itself is the caller's (the user
named it, or it is the caller's own ``/``).

    write_bytes(root, path, data, mode=0o644, in_place=False)   # in place: the inode stays (bind mounts)
    append_bytes(root, path, data); open_append(root, path) -> fd; read_bytes(root, path)
    make_dirs(root, path); remove_tree(root, path); mknod(root, path, mode, device); chmod(root, path, mode)
    symlink(root, path, target)   # a link made (or replaced) at `path`; `target` is never resolved here
    open_dir(root, path, create=False) -> fd   (the caller closes it)
    open_beneath(dirfd, relpath, flags, mode=0) -> fd   (the resolver itself)
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: openat2(2): the syscall number is the same on every architecture (it came after the unified table)
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
#: answers meaning "this kernel (or its seccomp filter) has no openat2": use the component walk
_NO_OPENAT2 = (errno.ENOSYS, errno.EPERM)
#: answers of openat2 meaning "a link or a way out on the path" (ELOOP: a link; EXDEV: out of the root)
_REFUSED = (errno.ELOOP, errno.EXDEV)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_openat2_state: dict[str, bool] = {}


class UnsafePath(OSError):
    """A path beneath the root leads through a link or to something that is not a plain file."""


def _syscall_openat2(dirfd: int, rel: str, flags: int, mode: int, resolve: int) -> tuple[int, int]:
    """(fd, 0) or (-1, errno)."""
    how = _OpenHow(flags, mode if flags & (os.O_CREAT | getattr(os, "O_TMPFILE", 0)) else 0, resolve)
    fd = int(_LIBC.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), ctypes.c_char_p(os.fsencode(rel)),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how))))
    return (fd, 0) if fd >= 0 else (-1, ctypes.get_errno())


def openat2_available() -> bool:
    """Whether this kernel lets this process call openat2 with RESOLVE_BENEATH (probed once)."""
    if "works" not in _openat2_state:
        fd, err = _syscall_openat2(-100, "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0, 0)  # AT_FDCWD
        if fd >= 0:
            os.close(fd)
        _openat2_state["works"] = fd >= 0 or err not in _NO_OPENAT2
    return _openat2_state["works"]


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int:
    """openat2(dirfd, rel, flags, RESOLVE); -1 where the kernel has none (then the caller walks)."""
    if not openat2_available():
        return -1
    for _ in range(64):
        fd, err = _syscall_openat2(dirfd, rel, flags, mode, RESOLVE)
        if fd >= 0:
            return fd
        if err in (errno.EINTR, errno.EAGAIN):  # EAGAIN: a rename raced a RESOLVE_BENEATH lookup; again
            continue
        if err in _REFUSED:
            raise UnsafePath(err, f"LAB: refusing {rel!r}: a link or a way out of the directory on the path")
        raise OSError(err, os.strerror(err), rel)
    return -1  # renames kept racing it: the component walk decides


def _walk_open(dirfd: int, parts: list[str], flags: int, mode: int) -> int:
    """The fallback: each directory component with O_NOFOLLOW through the previous one's fd."""
    fd = os.dup(dirfd)
    try:
        for name in parts[:-1]:
            nxt = _open_dir_component(name, fd)
            os.close(fd)
            fd = nxt
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(exc.errno, f"LAB: refusing {parts[-1]!r}: a link") from None
            raise
    finally:
        os.close(fd)


def open_beneath(dirfd: int, rel: str | os.PathLike[str], flags: int, mode: int = 0) -> int:
    """Open `rel` beneath directory `dirfd`: no link followed on the way or at the end, no ``..``, no
    absolute path (`UnsafePath`). `flags` as for os.open (O_NOFOLLOW and O_CLOEXEC are added)."""
    text = os.fspath(rel)
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if text.startswith("/") or ".." in parts or not parts:
        raise UnsafePath(errno.EXDEV, f"LAB: refusing {text!r}: not a path beneath the directory")
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    fd = _openat2(dirfd, "/".join(parts), flags, mode)
    return fd if fd >= 0 else _walk_open(dirfd, parts, flags, mode)


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


def _open_dir_component(name: str, fd: int) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnsafePath(f"LAB: refusing {name!r}: not a plain directory ({exc.strerror})") from None


def _open_subdir(fd: int, parts: list[str]) -> int:
    """fd of directory ``parts`` beneath `fd` (resolved beneath it, no link followed)."""
    try:
        return open_beneath(fd, "/".join(parts), os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, UnsafePath):
        raise
    except OSError as exc:  # ENOTDIR: a file where a directory should be
        raise UnsafePath(f"LAB: refusing {'/'.join(parts)!r}: not a plain directory ({exc.strerror})") from None


def _walk_from(dirfd: int, parts: list[str], *, create: bool, mode: int = 0o755) -> int:
    """A new fd of the directory ``parts...`` beneath directory `dirfd` (left open); resolved without following
    a link, the missing directories made (`mode`) where `create`."""
    if not parts:
        return os.dup(dirfd)
    try:
        return _open_subdir(dirfd, parts)
    except FileNotFoundError:
        if not create:
            raise
    fd = os.dup(dirfd)
    try:
        for name in parts:  # one component at a time, making what is missing
            try:
                nxt = _open_subdir(fd, [name])
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=fd)
                nxt = _open_subdir(fd, [name])
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _walk(root: Path, parts: list[str], *, create: bool, mode: int = 0o755) -> int:
    """fd of the directory ``root/parts...``; resolved beneath the root without following a link,
    the missing directories made (`mode`) where `create`."""
    fd = _open_root(root)
    try:
        return _walk_from(fd, parts, create=create, mode=mode)
    finally:
        os.close(fd)


def open_dir_at(dirfd: int, rel: str, *, create: bool = False) -> int:
    """A new fd of directory `rel` beneath directory `dirfd` (no link followed, no ``..``), made (0755) where
    missing when `create`; FileNotFoundError where missing otherwise."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if rel.startswith("/") or ".." in parts:
        raise UnsafePath(errno.EXDEV, f"LAB: refusing {rel!r}: not a path beneath the directory")
    return _walk_from(dirfd, parts, create=create)


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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def make_dirs(root: Path, path: Path, mode: int = 0o755) -> None:
    os.close(_walk(root, _parts(root, path), create=True, mode=mode))


def write_bytes(root: Path, path: Path, data: bytes, mode: int = 0o644, *, in_place: bool = False) -> None:
    """Write `data` to `path`: by a rename inside the directory (atomic), or with `in_place` into the
    existing inode (live bind mounts of the file keep showing it). A link at `path` is never followed."""
    with _parent(root, path, create=True) as (dfd, name):
        if in_place:
            fd = open_beneath(dfd, name, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, mode)
            try:
                _check_regular(fd, path)
                os.ftruncate(fd, 0)
                _write_all(fd, data)
            finally:
                os.close(fd)
            return
        tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = open_beneath(dfd, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            try:
                _write_all(fd, data)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


def symlink(root: Path, path: Path, target: str) -> None:
    """Make `path` a symlink to `target` (replacing a file or link there by a rename inside its
    directory; a directory there is refused). `target` is stored, never resolved here."""
    with _parent(root, path, create=True) as (dfd, name):
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.lstat(name, dir_fd=dfd).st_mode):
                raise UnsafePath(f"LAB: refusing {path}: a directory is there")
        tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.lnk"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        os.symlink(target, tmp, dir_fd=dfd)
        try:
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


def open_append(root: Path, path: Path, mode: int = 0o644) -> int:
    """An fd appending to regular file `path` (made where missing); the caller closes it."""
    with _parent(root, path, create=True) as (dfd, name):
        fd = open_beneath(dfd, name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, mode)
        try:
            _check_regular(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return fd


def append_bytes(root: Path, path: Path, data: bytes, mode: int = 0o644) -> None:
    fd = open_append(root, path, mode)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def read_bytes(root: Path, path: Path) -> bytes:
    """The bytes of regular file `path` (FileNotFoundError where it is missing)."""
    with _parent(root, path, create=False) as (dfd, name):
        fd = open_beneath(dfd, name, os.O_RDONLY | os.O_NONBLOCK)
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
        fd = open_beneath(dfd, name, os.O_PATH)
        try:
            os.chmod(f"/proc/self/fd/{fd}", mode & 0o7777)
        finally:
            os.close(fd)


def chmod(root: Path, path: Path, mode: int) -> None:
    """chmod of regular file `path` (never through a link)."""
    with _parent(root, path, create=False) as (dfd, name):
        fd = open_beneath(dfd, name, os.O_RDONLY | os.O_NONBLOCK)
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
