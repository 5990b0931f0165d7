"""Copying a program that a test then runs.

A file open for writing cannot be executed (ETXTBSY, "Text file busy"), and a descriptor this process opens is
inherited by any child another thread forks before that child execs: the suite's lab servers and asyncio subprocesses
fork while a test copies, so an in-process copy (`shutil.copy2`) left CI's chroot of a fresh busybox failing with "Text
file busy" (CI run 46, tests/test_lxc_real.py). `cp` writes the copy in its own process, which has exited, with every
descriptor closed, before the caller runs the file."""

from __future__ import annotations

import subprocess
from pathlib import Path


def copy_executable(src: Path | str, dest: Path) -> None:
    """`src` copied to `dest` with its mode and times, by a `cp` child: no descriptor of this process writes it."""
    subprocess.run(["cp", "-p", "--", str(src), str(dest)], check=True, capture_output=True, timeout=120)
