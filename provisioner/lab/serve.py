"""``python -m provisioner.lab.serve --root ROOT``: the lab daemon (started by ``provisioner lab up``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from provisioner.lab.lab import serve_forever


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="provisioner.lab.serve", description="LAB: run the lab's services")
    parser.add_argument("--root", required=True, type=Path)
    args = parser.parse_args(argv)
    return serve_forever(args.root.resolve())


if __name__ == "__main__":
    raise SystemExit(main())
