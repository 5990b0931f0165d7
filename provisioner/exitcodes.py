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


def exit_codes_epilog(*rows: tuple[int, str]) -> str:
    """A command's own exit codes for its --help (click keeps the lines as written after `\\b`)."""
    return "\b\nExit codes:\n" + "\n".join(f"  {code:>3}  {what}" for code, what in rows)


INTERRUPTED_ROW = (130, "interrupted by SIGINT (143: SIGTERM): the step in progress is `interrupted`, the rest "
                        "`skipped`; replay resumes")
PLAN_EXIT_CODES = exit_codes_epilog(
    (ExitCode.OK, "the plan was shown (with --check: the host matches the playbook)"),
    (ExitCode.FAILED, "a check failed (e.g. a foreign container, an unsupported host)"),
    (ExitCode.USAGE, "invalid playbook or flag (file:line:field named)"),
    (ExitCode.NO_SOLUTION, "no PyTorch build fits these GPUs and this driver"),
    (ExitCode.UNREACHABLE, "node unreachable, host key or TLS refused, authentication failed"),
    (ExitCode.CHANGES_PENDING, "--check: changes are pending (drift or steps not applied)"),
    INTERRUPTED_ROW)
REPLAY_EXIT_CODES = exit_codes_epilog(
    (ExitCode.OK, "every step ok (a second replay reports no changes)"),
    (ExitCode.FAILED, "a step failed (the recap and run log name it)"),
    (ExitCode.USAGE, "invalid playbook, inventory or flag (file:line:field named)"),
    (ExitCode.NO_SOLUTION, "no PyTorch build fits these GPUs and this driver"),
    (ExitCode.UNREACHABLE, "node unreachable, host key or TLS refused, authentication failed"),
    INTERRUPTED_ROW)
