"""``pveversion [-v]`` stand-in: the lab host's PVE version (rendered by `provisioner.lab.render`)."""

from __future__ import annotations

import sys

from provisioner.lab import render
from provisioner.lab.commands._common import die, out, state
from provisioner.lab.sandbox import lab_host


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in ("-v", "--verbose") for a in args)
    unknown = [a for a in args if a not in ("-v", "--verbose")]
    if unknown:
        die(f"Unknown option: {unknown[0].lstrip('-')}\nUSAGE: pveversion [--verbose]", 255)
    out(render.render_pveversion(lab_host(state().settings()), verbose=verbose))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
