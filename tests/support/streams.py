"""`plan`/`replay` as the lab tests read them: with `-v` (every command, what each applied step changes),
as they printed by default before issue 36 made one line per step the default. A plan's text (its
steps, what each will change) is on stdout, on stderr under `--json` (stdout then holds only the JSON)."""

from __future__ import annotations

from collections.abc import Sequence

QUIET = ("-q", "--quiet")


def streamed(args: Sequence[str]) -> list[str]:
    """`args` of a `provisioner` command line, with `-v` added to plan and replay (unless asked quiet)."""
    if args and args[0] in ("plan", "replay") and not any(a in QUIET for a in args):
        return [*args, "-v"]
    return list(args)
