"""``provisioner lab up|down|status|inventory|reboot|upgrade-driver``: the embedded Proxmox VE lab (a simulated
node on loopback). What a command is asked for goes to stdout, progress and errors to stderr (issue 36)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from provisioner.cli.verbosity import check_verbosity
from provisioner.exitcodes import EXIT_CODES_HELP, ExitCode
from provisioner.lab.lab import ALL_SCENARIOS, PVE_CHOICES, Lab, LabError
from provisioner.lab.profiles import DEFAULT_PROFILE, PROFILES
from provisioner.lab.state import LabState
from provisioner.render.safe_text import guard

F = TypeVar("F", bound=Callable[..., object])

_root_option = click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
                            help="Lab directory (default: the state dir's lab/, or $PROVISIONER_LAB_ROOT).")


def _console() -> Console:
    """Progress and errors: stderr."""
    return guard(Console(stderr=True, highlight=False, soft_wrap=True, emoji=False, markup=False))


def _answer() -> Console:
    """What `lab up` and `lab status` are asked for (where the lab is, how to reach it): stdout."""
    return guard(Console(highlight=False, soft_wrap=True, emoji=False, markup=False))


def _day2_verbosity(what: str, more: str) -> Callable[[F], F]:
    """`-q`/`-v` of `lab reboot` and `lab upgrade-driver`, the flags of the commands that run steps
    (`provisioner.cli.verbosity`): -q no progress, only `what` failed and the answer; -v also `more`."""
    def add(f: F) -> F:
        f = click.option("-q", "--quiet", is_flag=True, help=f"No progress: only the answer ({what}).")(f)
        return click.option("-v", "--verbose", is_flag=True, help=f"Also {more}.")(f)
    return add


def _describe(conn: dict[str, Any]) -> list[str]:
    ssh, api = conn["ssh"], conn["api"]
    return [
        f"LAB node '{conn['node']}' (PVE {conn.get('pve', '?')}, scenarios: {', '.join(conn.get('scenarios') or []) or 'none'})",
        f"  ssh      {ssh['user']}@{ssh['host']} -p {ssh['port']} -i {ssh['key_file']} "
        f"-o UserKnownHostsFile={ssh['known_hosts']}",
        f"  api      https://{ssh['host']}:{api['port']}/api2/json  user {api['user']}  password {api['password']}",
        f"  ca       {api['ca_file']}  (fingerprint {api['fingerprint']})",
        f"  wheels   {conn['index_url']}<variant>/  (torch for Python {conn.get('torch_python') or '?'}: the lab's "
        "containers use it)",
        f"  drivers  {conn['driver_mirror']}/XFree86/Linux-x86_64/<ver>/NVIDIA-Linux-x86_64-<ver>.run",
        f"  root     {conn['root']}  (pid {conn['pid']})",
    ]


@click.group(name="lab", epilog=EXIT_CODES_HELP)
def command() -> None:
    """Run the embedded LAB: a simulated Proxmox VE node with 8 NVIDIA GPUs on 127.0.0.1.

    Everything it prints says LAB; nothing in it touches real hardware.
    """


@command.command("up")
@click.option("--scenario", "scenarios", multiple=True, type=click.Choice(ALL_SCENARIOS),
              help="Fault scenario (repeatable).")
@click.option("--pve", type=click.Choice(PVE_CHOICES), default=None,
              help="PVE version to simulate (default: the profile's, 8.4 for the default host).")
@click.option("--profile", type=click.Choice(list(PROFILES)), default=DEFAULT_PROFILE, show_default=True,
              help="Host profile to play (docs/lab-hosts.md).")
@_root_option
@click.option("--json", "json_out", is_flag=True, help="Print the connection info as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing once the lab runs (`lab status` shows it).")
def up(scenarios: tuple[str, ...], pve: str | None, profile: str, root: Path | None, json_out: bool,
       quiet: bool) -> None:
    """Start the lab in the background (returns once every service answers); how to reach it on stdout."""
    from provisioner.lab.sandbox import SandboxUnavailable, unshare_prefix

    lab = Lab(root, list(scenarios), pve, profile=profile)
    try:
        unshare_prefix()
    except SandboxUnavailable as exc:
        _console().print(str(exc).splitlines()[0], markup=False)
        raise SystemExit(ExitCode.USAGE) from None
    try:
        conn, started = lab.up()
    except LabError as exc:
        _console().print(str(exc), markup=False)
        raise SystemExit(ExitCode.FAILED) from None
    if json_out:
        from provisioner.cli.common import echo_json

        echo_json({**conn, "started": started})
        return
    if not started:
        _console().print(f"LAB: already running at {lab.root} (pid {conn['pid']}); `provisioner lab down` stops it",
                         markup=False)
    if quiet:
        return
    answer = _answer()
    for line in _describe(conn):
        answer.print(line, markup=False)


@command.command("down")
@_root_option
@click.option("-q", "--quiet", is_flag=True, help="Print nothing.")
def down(root: Path | None, quiet: bool) -> None:
    """Stop the lab."""
    lab = Lab(root)
    stopped = lab.down()
    if not quiet:
        _console().print(f"LAB: stopped ({lab.root})" if stopped else f"LAB: not running ({lab.root})",
                         markup=False)


@command.command("status")
@_root_option
@click.option("--json", "json_out", is_flag=True, help="Print the status as JSON.")
def status(root: Path | None, json_out: bool) -> None:
    """Is the lab running, where, with which scenarios and containers, on stdout (exit 1 when not running).

    Example: provisioner lab status | grep ssh
    """
    lab = Lab(root)
    info = lab.status()
    if json_out:
        from provisioner.cli.common import echo_json

        echo_json(info)
    else:
        console = _answer()
        if info["running"] and info.get("connection"):
            for line in _describe(info["connection"]):
                console.print(line, markup=False)
            for ct in info.get("containers", []):
                console.print(f"  CT {ct['vmid']}  {ct['status']}", markup=False)
        else:
            console.print(f"LAB: not running ({lab.root})", markup=False)
    if not info["running"]:
        raise SystemExit(ExitCode.FAILED)


@command.command("inventory")
@_root_option
@click.option("--name", default=None, help="The host's name in the inventory (default: the lab root's name).")
@click.option("--container", type=int, default=None, help="Override the playbook's CT id for this host.")
def inventory(root: Path | None, name: str | None, container: int | None) -> None:
    """Print an inventory (YAML) whose one host is the running lab: its endpoints and its site profile.

    Example: provisioner lab inventory --root /tmp/lab-a --name a > hosts.yaml
    """
    import yaml

    from provisioner.lab.lab import inventory_entry

    lab = Lab(root)
    try:
        entry = inventory_entry(lab.root, name, container)
    except LabError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(yaml.safe_dump({"hosts": [entry]}, sort_keys=False), nl=False)


def _lab_state(root: Path | None) -> LabState:
    lab = Lab(root)
    if lab.running_pid() is None:
        _console().print(f"LAB: not running ({lab.root}); `provisioner lab up` starts it", markup=False)
        raise SystemExit(ExitCode.FAILED)
    return LabState.load(lab.root)


@command.command("reboot")
@_root_option
@_day2_verbosity("the boot and what failed in it", "the node's kernel module and device nodes after the boot")
def reboot_cmd(root: Path | None, verbose: bool, quiet: bool) -> None:
    """Reboot the LAB node: modules load as at boot, device nodes are gone until created, persistence
    mode resets, boot units run, containers with onboot=1 start in PVE's order (docs/lab-hosts.md).

    What the boot did on stdout (each boot unit, each container start; -q: only what failed, -v: also the
    node's kernel module and device nodes after it); progress on stderr.

    Example: provisioner lab reboot | grep failed
    """
    from provisioner.lab.day2 import reboot
    from provisioner.lab.profiles import host_devices

    check_verbosity(verbose, quiet)
    state = _lab_state(root)
    if not quiet:
        _console().print(f"LAB: rebooting the node ({state.root}): units, then onboot containers", markup=False)
    report = reboot(state)
    answer = _answer()
    answer.print(f"LAB: node rebooted (boot {report.boot})", markup=False)
    # the log's lines of what failed (as `provisioner.lab.day2.reboot` writes them): all that -q prints of it
    failed = {f"{name}: failed (exit {rc})" for name, rc in [*report.units_before_guests, *report.units_after_guests]
              if rc != 0} | {f"Starting CT {vmid} failed: {why}" for vmid, why in report.failed}
    for line in report.log:
        if not quiet or line in failed:
            answer.print(f"  {line}", markup=False)
    if verbose:
        settings = state.settings()
        answer.print(f"  kernel module {settings.driver_version}; device nodes: "
                     f"{', '.join(sorted(host_devices(settings))) or 'none'}", markup=False)


@command.command("upgrade-driver")
@click.argument("version")
@_root_option
@_day2_verbosity("old -> new", "the containers that keep their userspace")
def upgrade_driver_cmd(version: str, root: Path | None, verbose: bool, quiet: bool) -> None:
    """Replace the LAB host's NVIDIA kernel module with VERSION (containers keep their userspace).

    The change (old -> new) on stdout (-v: also the containers that keep their userspace); progress on stderr.
    """
    from provisioner.lab.day2 import upgrade_driver

    check_verbosity(verbose, quiet)
    state = _lab_state(root)
    if not quiet:
        _console().print(f"LAB: replacing the host's NVIDIA kernel module with {version}", markup=False)
    try:
        old, new = upgrade_driver(state, version)
    except ValueError as exc:
        _console().print(f"LAB: {exc}", markup=False)
        raise SystemExit(ExitCode.USAGE) from None
    answer = _answer()
    answer.print(f"LAB: host kernel module {old} -> {new}", markup=False)
    if verbose:
        cts = state.list_cts()
        answer.print("  containers keep their userspace: " + (", ".join(f"CT {v}" for v in cts) if cts else "none"),
                     markup=False)
