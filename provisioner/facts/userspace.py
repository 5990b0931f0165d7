"""The driver's userspace libraries (``libcuda.so.*``, ``libnvidia-ml.so.*``) a node or container holds."""

from __future__ import annotations

import re

from provisioner.facts.models import UserspaceLibs

# --- userspace driver libraries -------------------------------------------------------------

#: where the .run installer (and distribution packages) put the userspace libraries
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
_LIB_VERSION_RE = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)\b")


def parse_lib_versions(text: str) -> list[str]:
    """Versions from ``ls`` of ``libnvidia-ml.so.<version>`` files (the ``.so.1`` link is no version)."""
    return sorted(set(_LIB_VERSION_RE.findall(text)))


def parse_userspace_libs(text: str) -> UserspaceLibs:
    """Parse ``ls -1`` of ``libcuda.so.*`` and ``libnvidia-ml.so.*`` in `LIB_DIRS` (empty = none installed)."""
    files = tuple(line.strip() for line in text.splitlines() if line.strip().startswith("/"))
    return UserspaceLibs(files=files, versions=tuple(parse_lib_versions(text)))
