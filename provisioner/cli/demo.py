"""`provisioner demo`: start the lab, replay the shipped Blackwell playbook headless twice, stop the lab.

Everything runs in this process (the lab daemon aside): the two replays go through the same click
commands as `provisioner replay`, without paying the controller's imports again. The burn-in of the
demo's copy of the playbook is sized for the lab's CPU stand-in (gloo on the CPU; the sizes and soak
the lab really runs), so its step description says what ran.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import click
from packaging.version import Version

from provisioner.cli.tree_removal import remove, survey
from provisioner.cli.verbosity import check_verbosity, verbosity_options
from provisioner.exitcodes import INTERRUPTED_ROW, ExitCode, exit_codes_epilog

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "blackwell-8gpu-lxc.yaml"
#: the playbook `demo --profile P` replays (rtxpro6000-8x keeps the shipped Blackwell one)
PROFILE_PLAYBOOKS = {name: PLAYBOOK.with_name(f"{name}.yaml") for name in (
    "h200-hgx-8x", "gh200-aarch64", "minors-shuffled", "pve9", "blackwell-proprietary")}
#: the burn-in the lab runs on its CPU stand-in (gloo): what the demo's playbook asks for


def _run(*args: str) -> int:
    """A provisioner command in this process; its exit status."""
    from provisioner.cli import main

    try:
        main.main(args=list(args), standalone_mode=False)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else ExitCode.FAILED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    return 0


def remove_lab_files(root: Path, *, quiet: bool = False) -> None:
    """Remove the demo's lab directory, saying what and how long (a bar on a terminal): its container's
    venv and uv cache are ~30,000 files (`provisioner.cli.tree_removal`)."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from provisioner.cli.common import stderr_console

    tree = survey(root)
    if not quiet:
        click.echo(f"LAB: removing its files ({tree.describe()}) from {root}", err=True)
    started = time.monotonic()
    console = stderr_console()
    with Progress(TextColumn("   removing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=quiet or not console.is_terminal) as bar:
        task = bar.add_task("remove", total=len(tree.files))
        remove(tree, lambda done, _total: bar.update(task, completed=done))
    if not quiet:
        click.echo(f"LAB: removed in {time.monotonic() - started:.1f}s", err=True)


def demo_playbook(source: Path, dest: Path) -> Path:
    """A copy of `source` whose burn-in asks for what the lab runs (`LAB_BURNIN`)."""
    import yaml

    from provisioner.lab.sandbox import discover_pythons
    from provisioner.session import LAB_BURNIN

    data: dict[str, object] = yaml.safe_load(source.read_text())  # the playbook as written (open YAML)
    pythons = discover_pythons()
    told: set[str] = set()
    steps = data.get("steps", [])
    for step in steps if isinstance(steps, list) else []:
        if not isinstance(step, dict):
            continue
        params = step.setdefault("params", {}) if step.get("kind") in ("burnin.run", "torch.resolve",
                                                                       "venv.build") else {}
        if step.get("kind") == "burnin.run":
            params.update(LAB_BURNIN)
        want = str(params.get("python", ""))
        if want and want not in pythons and pythons:
            # the lab's containers run the machine's Pythons (offline): use the newest one it has
            have = max(pythons, key=Version)
            if want not in told:
                told.add(want)
                click.echo(f"LAB: this machine has no Python {want} for the lab's containers; the demo uses "
                           f"{have}", err=True)
            params["python"] = have
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def pin_unpublished_driver(book: Path, profile: str, lab_root: Path) -> None:
    """Where the profile's driver is published with no checksum (tesla/), pin the lab file's sha256 in the
    demo's copy of the playbook, as an operator does once after comparing it (docs/lab-hosts.md); the
    engine refuses an unpinned, unconfirmed checksum (`replay` stops naming the sha256 to pin)."""
    import hashlib
    import urllib.request

    import yaml

    from provisioner.lab.profiles import get_profile
    from provisioner.session import lab_connection

    p = get_profile(profile)
    if p.driver_layout != "tesla":
        return
    conn = lab_connection(lab_root)
    name = f"NVIDIA-Linux-{p.arch}-{p.driver_version}.run"
    url = f"{str(conn['driver_mirror']).rstrip('/')}/tesla/{p.driver_version}/{name}"
    with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 - the lab's loopback mirror
        sha = hashlib.sha256(resp.read()).hexdigest()
    data: dict[str, object] = yaml.safe_load(book.read_text())  # the playbook as written (open YAML)
    steps = data.get("steps", [])
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict) and step.get("kind") == "driver.userspace":
            step.setdefault("params", {})["sha256"] = sha
    book.write_text(yaml.safe_dump(data, sort_keys=False))
    click.echo(f"LAB: tesla/{p.driver_version}/{name} has no published checksum; the demo pins the lab file's "
               f"sha256 {sha} (an operator pins it once: driver.userspace params sha256)", err=True)


@click.command("demo", epilog=exit_codes_epilog(
    (ExitCode.OK, "both replays ok, the second with no changes"),
    (ExitCode.FAILED, "a step failed, or the second replay changed something"),
    (ExitCode.USAGE, "the lab cannot run here (user namespaces refused) or a bad flag"),
    INTERRUPTED_ROW))
@click.option("--playbook", type=click.Path(dir_okay=False, exists=True), default=str(PLAYBOOK), show_default=True)
@click.option("--keep-lab", is_flag=True, help="Leave the lab running afterwards (stop it with `provisioner lab down`).")
@click.option("--scenario", multiple=True, help="Lab fault scenario(s) to demonstrate, e.g. driver-mismatch.")
@click.option("--profile", default=None, help="Lab host profile (docs/lab-hosts.md); its playbook is the default.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Lab root (default: $PROVISIONER_LAB_ROOT, else a fresh temporary directory removed afterwards).")
@verbosity_options
def command(playbook: str, keep_lab: bool, scenario: tuple[str, ...], profile: str | None, root: Path | None,
            verbose: bool, quiet: bool) -> None:
    """Start the LAB (a simulated Proxmox node with 8 x RTX PRO 6000 Blackwell), replay PLAYBOOK against it
    headless, replay it again to show that nothing changes, print the recaps, stop the lab.

    Example: provisioner demo
    """
    check_verbosity(verbose, quiet)

    def say(text: str) -> None:
        if not quiet:
            click.echo(text, err=True)

    env_root = os.environ.get("PROVISIONER_LAB_ROOT")
    given = root or (Path(env_root) if env_root else None)
    lab_root = given.resolve() if given else Path(tempfile.mkdtemp(prefix="gpu-provisioner-lab-"))
    lab_root.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in ("PROVISIONER_LAB_ROOT",)}
    os.environ["PROVISIONER_LAB_ROOT"] = str(lab_root)
    # the run logs go to the user's state dir (`provisioner.paths.runs_dir`), not into the lab root: they
    # outlive the demo's lab, at the path each replay prints
    work = Path(tempfile.mkdtemp(prefix="gpu-provisioner-demo-"))
    code = 0
    try:
        say(f"LAB: starting the lab in {lab_root}")
        up = ["lab", "up", "--root", str(lab_root), *(["--quiet"] if quiet else [])]
        if profile:
            from provisioner.lab.profiles import get_profile

            up += ["--profile", get_profile(profile).name]
            if playbook == str(PLAYBOOK):
                playbook = str(PROFILE_PLAYBOOKS.get(profile, PLAYBOOK))
        for s in scenario:
            up += ["--scenario", s]
        code = _run(*up)
        if code != 0:
            raise SystemExit(code)
        book = demo_playbook(Path(playbook), work / Path(playbook).name)
        if profile:
            pin_unpublished_driver(book, profile, lab_root)
        from provisioner.session import LAB_BURNIN

        say(f"LAB: burn-in sized for the lab's CPU stand-in: sizes {LAB_BURNIN['sizes']}, "
            f"soak {LAB_BURNIN['duration_s']}s")
        level = ["--verbose"] if verbose else ["--quiet"] if quiet else []
        try:
            say("LAB: first replay (applies every step)")
            code = _run("replay", str(book), "--lab", *level)
            if code == 0:
                say("LAB: second replay (must report no changes)")
                code = _run("replay", str(book), "--lab", *level)
        finally:
            if not keep_lab:
                say("LAB: stopping the lab")
                _run("lab", "down", "--root", str(lab_root), *(["--quiet"] if quiet else []))
                if given is None:
                    remove_lab_files(lab_root, quiet=quiet)  # nothing of the demo's lab stays in /tmp
            else:
                click.echo(f"LAB: still running; PROVISIONER_LAB_ROOT={lab_root}", err=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if code != 0:
        raise SystemExit(code)
