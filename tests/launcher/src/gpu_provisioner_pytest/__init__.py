"""`pytest` in a checkout of gpu-provisioner: the project's test group, installed by uv on first use, then pytest.

`uv run pytest` finds this script while the test group is not installed (`uv run provisioner demo` installs only
the controller and this launcher). It runs `uv run --group test -- <this python> -m pytest ARGS`: uv installs the
locked test group into the same environment and pytest runs with the arguments given, its exit status ours.
Installing pytest replaces this script with pytest's own; `[tool.uv] reinstall-package` puts it back on every
sync, so that a `uv sync` (which removes the test group, and pytest's script with it) never leaves the checkout
without a `pytest` command.
"""

from __future__ import annotations

import os
import shutil
import sys


def main() -> None:
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        sys.exit("pytest: uv is not on PATH; the tests run with `uv run pytest` (https://docs.astral.sh/uv/)")
    os.execv(uv, [uv, "run", "--group", "test", "--", sys.executable, "-m", "pytest", *sys.argv[1:]])
