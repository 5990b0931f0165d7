"""torch for the tests that run PyTorch on this machine (the gloo burn-in tier, the local evidence probes).

The controller does not depend on torch (issue 22): these tests get a real CPU torch through the same
supply as the lab's wheel index (`provisioner.lab.torch_supply`: the configured find-links — `.ci/run`
names this machine's wheel folder — the cache, or the PyTorch CPU index), installed once into the test
environment with uv. Never PyPI's Linux torch (the CUDA build, several GB).
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import shutil
import subprocess
import sys

_DONE: list[bool] = []


def ensure_torch() -> str | None:
    """Make `import torch` work in this interpreter; None when it does, else why it cannot."""
    if importlib.util.find_spec("torch") is not None:
        return None
    if _DONE:
        return "torch could not be installed into the test environment (see the first failure)"
    from provisioner.lab.torch_supply import TorchSupplyError, supply
    from provisioner.paths import cache_dir

    _DONE.append(True)
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        wheel = supply([mine])
    except TorchSupplyError as exc:
        return str(exc)
    uv = shutil.which("uv")
    if uv is None:
        return "uv is not installed (it installs the supplied torch into the test environment)"
    with open(cache_dir() / ".test-torch-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # several pytest processes at once install it once
        if importlib.util.find_spec("torch") is None:
            done = subprocess.run([uv, "pip", "install", "--quiet", "--python", sys.executable, str(wheel.path)],
                                  capture_output=True, text=True, timeout=900, check=False)
            if done.returncode != 0:
                return f"uv pip install {wheel.path.name} failed: {done.stderr.strip()[-500:]}"
    importlib.invalidate_caches()
    return None if importlib.util.find_spec("torch") is not None else "torch is still not importable"
