"""Process exit codes: a contract other programs rely on (ARCHITECTURE §8)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit status of every `provisioner` command."""

    OK = 0
    FAILED = 1
    USAGE = 2
    NO_SOLUTION = 3
    UNREACHABLE = 4
    PERMISSION_DENIED = 4  # the API user lacks privileges a step needs (listed before any change)
    CHANGES_PENDING = 10


EXIT_CODES_HELP = (
    "Exit codes: 0 ok · 1 failed · 2 usage or invalid input (bad playbook, bad flag) · "
    "3 no solution / unsupported (resolver) · 4 unreachable, authentication failed or missing privileges · "
    "10 plan has pending changes (plan --check)."
)
