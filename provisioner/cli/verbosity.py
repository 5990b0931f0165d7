"""`-v/--verbose` and `-q/--quiet`, the same on every command that runs steps (plan, replay, demo, import).

Default: one line per step, warnings and errors, what failed in full, then the answer (the plan, the
recap) on stdout. `-v` streams every command and its output; `-q` prints no progress, only what failed,
warnings and errors, and the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])


def verbosity_options(f: F) -> F:
    f = click.option("-q", "--quiet", is_flag=True,
                     help="No progress: only what failed, warnings and errors, and the answer (plan, recap).")(f)
    return click.option("-v", "--verbose", is_flag=True,
                        help="Stream every command and its output (default: one line per step).")(f)


def check_verbosity(verbose: bool, quiet: bool) -> None:
    if verbose and quiet:
        raise click.UsageError("-v/--verbose and -q/--quiet exclude each other")
