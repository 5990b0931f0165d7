"""``pct`` stand-in for the lab node: exec, push, pull, status, config, pending, set, start, stop, list.

``pct exec`` / ``pct push`` / ``pct pull`` run in the container's sandbox
(`provisioner.lab.sandbox.held_ct_argv`: the running container's held view); output and stdin are the command's and so is the exit
status (128+N when it dies from signal N), as with ``lxc-attach``. Errors print what pct prints
(a Perl ``die``: message on stderr, exit 255). ``set``/``start``/``stop`` go through the lab's
API handlers as ``root@pam`` (the CLI identity), like the real pct.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import NoReturn

from provisioner.lab.commands._common import die, out, state
from provisioner.lab.sandbox import held_ct_argv, stop_ct_holder
from provisioner.lab.state import CtNotFound, LabState
from provisioner.proxmox.lxc_conf import encode_text

USAGE = "USAGE: pct <COMMAND> [ARGS] [OPTIONS]"


def _vmid(lab: LabState, text: str | None) -> int:
    if text is None:
        die("400 not enough arguments\n" + USAGE)
    if not text.isdigit() or not 100 <= int(text) <= 999_999_999:
        die("400 Parameter verification failed.\nvmid: invalid format - value does not look like a valid VM ID\n")
    vmid = int(text)
    if not lab.has_ct(vmid):
        die(f"Configuration file 'nodes/{lab.settings().node}/lxc/{vmid}.conf' does not exist")
    return vmid


def _running(lab: LabState, vmid: int) -> bool:
    try:
        return lab.get_status(vmid).status == "running"
    except CtNotFound:
        return False


def _exec_in_ct(lab: LabState, vmid: int, argv: list[str]) -> NoReturn:
    """Run in the container and exit with its status; a signal death becomes 128+N, as lxc-attach reports it."""
    full = held_ct_argv(lab, vmid, argv)
    sys.stdout.flush()
    sys.stderr.flush()
    rc = subprocess.run(full, check=False).returncode
    raise SystemExit(128 - rc if rc < 0 else rc)


def cmd_exec(lab: LabState, args: list[str]) -> int:
    vmid = _vmid(lab, args[0] if args else None)
    rest = args[1:]
    while rest and rest[0] != "--" and rest[0].startswith("--keep-env"):
        rest = rest[2:] if rest[0] == "--keep-env" else rest[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not _running(lab, vmid):
        die(f"container '{vmid}' not running!")
    if not rest:
        die("missing command")
    _exec_in_ct(lab, vmid, rest)


def _options(args: list[str], names: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    positional: list[str] = []
    opts: dict[str, str] = {}
    it = iter(args)
    for a in it:
        if a.startswith("--") and a[2:].split("=", 1)[0] in names:
            key, _, value = a[2:].partition("=")
            opts[key] = value if value else next(it, "")
        else:
            positional.append(a)
    return positional, opts


def cmd_push(lab: LabState, args: list[str]) -> int:
    pos, opts = _options(args, ("perms", "user", "group"))
    if len(pos) != 3:
        die("400 wrong number of arguments\nUSAGE: pct push <vmid> <file> <destination> [OPTIONS]")
    vmid = _vmid(lab, pos[0])
    if not _running(lab, vmid):
        die("can only push files to a running CT")
    src, dst = pos[1], pos[2]
    try:
        fd = os.open(src, os.O_RDONLY)
    except OSError as exc:
        die(f"failed to open {src} for reading: {exc.strerror}")
    perms = opts.get("perms", "0644")
    owner = f"{opts.get('user', '0')}:{opts.get('group', '0')}"
    os.dup2(fd, 0)
    script = 'cat > "$1" && chmod "$2" "$1" && chown "$3" "$1"'
    _exec_in_ct(lab, vmid, ["sh", "-c", script, "pct-push", dst, perms, owner])


def cmd_pull(lab: LabState, args: list[str]) -> int:
    pos, _ = _options(args, ("perms", "user", "group"))
    if len(pos) != 3:
        die("400 wrong number of arguments\nUSAGE: pct pull <vmid> <path> <destination> [OPTIONS]")
    vmid = _vmid(lab, pos[0])
    if not _running(lab, vmid):
        die("can only pull files from a running CT")
    try:
        fd = os.open(pos[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        die(f"failed to open {pos[2]} for writing: {exc.strerror}")
    os.dup2(fd, 1)
    _exec_in_ct(lab, vmid, ["cat", pos[1]])


def cmd_status(lab: LabState, args: list[str]) -> int:
    vmid = _vmid(lab, args[0] if args else None)
    out(f"status: {lab.get_status(vmid).status}\n")
    return 0


def cmd_config(lab: LabState, args: list[str]) -> int:
    vmid = _vmid(lab, args[0] if args else None)
    conf = lab.read_conf(vmid)
    lines = []
    if (descr := conf.description) is not None:
        lines.append("description: " + descr.replace("\n", "\\n"))
    current = "--current" in args[1:] or "--current=1" in args[1:]
    # vm_config: pending values unless --current
    options = conf.options() if current else conf.effective()
    lines += [f"{k}: {v}" for k, v in sorted(options.items())]
    lines += [f"{k}: {v}" for k, v in conf.raw_lines()]
    out("\n".join(lines) + "\n")
    return 0


def cmd_pending(lab: LabState, args: list[str]) -> int:
    """`pct pending <vmid>`: the API's vm_pending printed by PVE::GuestHelpers::format_pending
    (``cur``/``new``/``del`` lines, sorted by key, digest left out)."""
    vmid = _vmid(lab, args[0] if args else None)
    data = _api(lab, "GET", f"/nodes/{lab.settings().node}/lxc/{vmid}/pending", {})
    lines: list[str] = []
    for item in sorted(data if isinstance(data, list) else [], key=lambda i: str(i["key"])):
        key = str(item["key"])
        if key == "digest":
            continue
        value, new = item.get("value"), item.get("pending")
        if key == "description":
            value = encode_text(str(value)) if value is not None else None
            new = encode_text(str(new)) if new is not None else None
        if value is not None:
            if item.get("delete"):
                lines.append(f"del {key}: {value}")
            elif new is not None:
                lines += [f"cur {key}: {value}", f"new {key}: {new}"]
            else:
                lines.append(f"cur {key}: {value}")
        elif new is not None:
            lines.append(f"new {key}: {new}")
    out("".join(line + "\n" for line in lines))
    return 0


def cmd_list(lab: LabState, args: list[str]) -> int:
    rows = [f"{'VMID':<10} {'Status':<10} {'Lock':<12} {'Name':<20}"]
    for vmid in lab.list_cts():
        conf = lab.read_conf(vmid)
        rows.append(f"{vmid:<10} {lab.get_status(vmid).status:<10} {conf.get('lock') or '':<12} "
                    f"{conf.get('hostname') or '':<20}")
    out("\n".join(rows) + "\n")
    return 0


def _api(lab: LabState, method: str, path: str, params: dict[str, object]) -> object:
    from provisioner.lab.pve_api import CLI_IDENTITY, LabApi

    api = LabApi(lab, sync_tasks=True)
    result = api.call(method, path, params, CLI_IDENTITY)
    if result.status >= 400:
        text = f"{result.status} {result.message or result.reason}".rstrip("\n")
        if result.errors:
            text += "\n" + "\n".join(f"{k}: {v}" for k, v in result.errors.items())
        if result.status >= 500 and result.message:
            text = result.message.rstrip("\n")
        die(text)
    if isinstance(result.data, str) and result.data.startswith("UPID:"):
        task = lab.get_task(result.data)
        if task is not None and task.exitstatus not in (None, "OK") and not str(task.exitstatus).startswith("WARN"):
            for line in lab.task_log(result.data):
                if line.startswith("TASK "):
                    continue
                sys.stderr.write(line + "\n")
            die(str(task.exitstatus))
    return result.data


def cmd_set(lab: LabState, args: list[str]) -> int:
    vmid = _vmid(lab, args[0] if args else None)
    params: dict[str, object] = {}
    it = iter(args[1:])
    for a in it:
        if not a.startswith("--"):
            die("400 too many arguments\nUSAGE: pct set <vmid> [OPTIONS]")
        key, eq, value = a[2:].partition("=")
        params[key] = value if eq else next(it, "")
    node = lab.settings().node
    _api(lab, "PUT", f"/nodes/{node}/lxc/{vmid}/config", params)
    return 0


def cmd_unlock(lab: LabState, args: list[str]) -> int:
    """`pct unlock <vmid>`: remove the config's `lock:` (PVE::LXC::Config->remove_lock; no API call)."""
    vmid = _vmid(lab, args[0] if args else None)
    with lab.config_lock(vmid), lab.lock():  # remove_lock runs under lock_config
        conf = lab.read_conf(vmid)
        conf.delete("lock")
        lab.write_conf(vmid, conf)
    return 0


def cmd_power(lab: LabState, action: str, args: list[str]) -> int:
    vmid = _vmid(lab, args[0] if args else None)
    node = lab.settings().node
    _api(lab, "POST", f"/nodes/{node}/lxc/{vmid}/status/{action}", {})
    if action in ("stop", "shutdown", "reboot"):
        stop_ct_holder(lab.root, vmid)  # its held view ends with it (a reboot's next command builds a new one)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        die(USAGE)
    lab = state()
    cmd, rest = args[0], args[1:]
    handlers = {"exec": cmd_exec, "push": cmd_push, "pull": cmd_pull, "status": cmd_status, "config": cmd_config,
                "list": cmd_list, "pending": cmd_pending, "set": cmd_set, "unlock": cmd_unlock}
    if cmd in handlers:
        return handlers[cmd](lab, rest)
    if cmd in ("start", "stop", "shutdown", "reboot"):
        return cmd_power(lab, cmd, rest)
    die(f"unknown command 'pct {cmd}'\n{USAGE}")


if __name__ == "__main__":
    raise SystemExit(main())
