"""A copy of a lab tree that shares what no test rewrites: the packages of its venvs and its uv caches.

The golden node (tests/support/lab.py) holds a container with a real torch venv and the uv cache it was
installed from: ~26,000 files, ~0.9 GB, the two hardlinked to each other (one file system: a real LXC rootfs,
where uv hardlinks). A copy of it per test (`cp -a`) wrote that GB again each time. Here the copy hardlinks
everything first (`cp -al`: directories are new, files are links), then gives every file outside the shared
parts its own inode again (`unshare`), so that what a test's lab writes in place (its logs, state, configs, the
venv's own records such as runtime.json) never reaches the golden node or another copy.

Shared, as uv itself treats them: the files under a venv's ``lib/`` (site-packages: uv installs by creating
files and removes by unlinking, never rewriting one in place) and under a uv cache's subdirectories (uv writes
its entries to a temporary name and renames them). A test that rewrote such a file in place would change
every copy: `fingerprint` records size and mtime of each shared file when the golden node is frozen, and
`changed` names any that differ at the end of the run (tests/support/lab.py fails the run on it).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path


def is_venv(files: list[str]) -> bool:
    """Whether a directory holding `files` is a virtual environment (also what `lab.relocate` leaves alone)."""
    return "pyvenv.cfg" in files


def is_uv_cache(path: Path) -> bool:
    """Whether `path` is a uv cache (`~/.cache/uv`; also what `lab.relocate` leaves alone)."""
    return path.name == "uv" and path.parent.name == ".cache"


def shared_roots(tree: Path) -> Iterator[Path]:
    """The directories whose files a copy shares: each venv's lib/, each uv cache's subdirectories."""
    for dirpath, dirnames, filenames in os.walk(tree):
        here = Path(dirpath)
        if is_venv(filenames):
            dirnames[:] = []
            if (here / "lib").is_dir() and not (here / "lib").is_symlink():
                yield here / "lib"
        elif is_uv_cache(here):
            dirnames[:] = []
            for entry in sorted(os.scandir(here), key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    yield Path(entry.path)


def _private_walk(tree: Path, shared: set[Path]) -> Iterator[Path]:
    """Every entry under `tree` (files, links, special files; not directories) outside `shared`."""
    for dirpath, dirnames, filenames in os.walk(tree):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in shared]
        for name in filenames:
            yield here / name
        for name in dirnames:
            if (here / name).is_symlink():
                yield here / name


def _unshare(path: Path) -> None:
    """Give `path` an inode of its own (same bytes, mode, owner, times)."""
    st = os.lstat(path)
    if st.st_nlink <= 1 or stat.S_ISLNK(st.st_mode):
        return  # (a symbolic link is never written through; relocating one replaces it)
    tmp = path.with_name(path.name + ".unshare~")
    if stat.S_ISREG(st.st_mode):
        shutil.copyfile(path, tmp, follow_symlinks=False)
    else:  # a device node, FIFO or socket: a new node of the same kind
        os.mknod(tmp, st.st_mode, st.st_rdev)
    os.chown(tmp, st.st_uid, st.st_gid, follow_symlinks=False)
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
    os.replace(tmp, path)


def copy_sharing(src: Path, dest: Path) -> None:
    """`dest` (which must not exist): a copy of `src` whose venv packages and uv cache entries are hardlinks to
    `src`'s and everything else its own."""
    subprocess.run(["cp", "-al", "--", str(src), str(dest)], check=True, capture_output=True)
    shared = set(shared_roots(dest))
    for path in _private_walk(dest, shared):
        _unshare(path)


def fingerprint(tree: Path) -> dict[str, list[int]]:
    """Each shared file under `tree` (relative path) -> [size, mtime_ns]."""
    out: dict[str, list[int]] = {}
    for top in shared_roots(tree):
        for dirpath, _dirnames, filenames in os.walk(top):
            for name in filenames:
                path = Path(dirpath) / name
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode):
                    out[str(path.relative_to(tree))] = [st.st_size, st.st_mtime_ns]
    return out


def changed(tree: Path, before: dict[str, list[int]]) -> list[str]:
    """The shared files of `tree` rewritten or removed since `before` (a `fingerprint`)."""
    now = fingerprint(tree)
    return sorted(rel for rel, meta in before.items() if now.get(rel) != meta)
