"""`provisioner demo`: start the lab, replay the shipped Blackwell playbook headless twice, stop the lab."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from provisioner.exitcodes import ExitCode

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "blackwell-8gpu-lxc.yaml"


def _provisioner(*args: str, env: dict[str, str]) -> int:
    return subprocess.call([sys.executable, "-m", "provisioner", *args], env=env)


@click.command("demo")
@click.option("--playbook", type=click.Path(dir_okay=False, exists=True), default=str(PLAYBOOK), show_default=True)
@click.option("--keep-lab", is_flag=True, help="Leave the lab running afterwards (stop it with `provisioner lab down`).")
@click.option("--scenario", multiple=True, help="Lab fault scenario(s) to demonstrate, e.g. driver-mismatch.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Lab root (default: $PROVISIONER_LAB_ROOT, else a fresh temporary directory removed afterwards).")
def command(playbook: str, keep_lab: bool, scenario: tuple[str, ...], root: Path | None) -> None:
    """Start the LAB (a simulated Proxmox node with 8 x RTX PRO 6000 Blackwell), replay PLAYBOOK against it
    headless, replay it again to show that nothing changes, print the recaps, stop the lab.

    Example: provisioner demo
    """
    given = root or (Path(os.environ["PROVISIONER_LAB_ROOT"]) if os.environ.get("PROVISIONER_LAB_ROOT") else None)
    root = given.resolve() if given else Path(tempfile.mkdtemp(prefix="gpu-provisioner-lab-"))
    if given:
        root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PROVISIONER_LAB_ROOT=str(root))
    env.setdefault("PROVISIONER_STATE_DIR", str(root / "state"))
    click.echo(f"LAB: starting the lab in {root}", err=True)
    up = ["lab", "up", "--root", str(root)]
    for s in scenario:
        up += ["--scenario", s]
    if _provisioner(*up, env=env) != 0:
        raise SystemExit(ExitCode.FAILED)
    try:
        click.echo("LAB: first replay (applies every step)", err=True)
        first = _provisioner("replay", playbook, "--lab", env=env)
        if first != 0:
            raise SystemExit(first)
        click.echo("LAB: second replay (must report no changes)", err=True)
        second = _provisioner("replay", playbook, "--lab", env=env)
        if second != 0:
            raise SystemExit(second)
    finally:
        if not keep_lab:
            _provisioner("lab", "down", "--root", str(root), env=env)
            if given is None:
                shutil.rmtree(root, ignore_errors=True)  # nothing of the demo's lab stays in /tmp
        else:
            click.echo(f"LAB: still running; PROVISIONER_LAB_ROOT={root}", err=True)
