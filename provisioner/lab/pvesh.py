"""The lab's ``pvesh``: ``python -m provisioner.lab.pvesh <get|create|set|delete> /path [--key value ...]``.

Runs the SAME handlers as the lab's HTTPS API (`provisioner.lab.pve_api.LabApi`) as ``root@pam``
with CLI semantics (no authentication, booleans may be ``yes/no/true/false``, workers run in the
foreground), against the lab at ``$PROVISIONER_LAB_ROOT``. Output matches what proxmoxer's
command backends (``proxmoxer/backends/command_base.py``) expect from PVE's pvesh:

* they run ``pvesh <get|create|set|delete> <path> -key value ... --output-format json``;
* success: the result as JSON on stdout, exit 0 (nothing for ``null`` results);
* a task: the worker runs in the foreground; its log lines go to stdout, a failure's error text
  to stderr (PVE's ``tee_worker``), then the UPID as a JSON string; exit 0;
* errors on stderr, exit 255: ``400 Parameter verification failed.`` + ``key: message`` lines +
  usage for parameter errors, ``403 Permission check failed (...)``, or the bare ``die`` text
  (proxmoxer turns a leading ``NNN text`` line into the status, else 500).

`write_pvesh_wrapper(bin_dir, lab_root)` writes a ``pvesh`` shell script for a PATH directory.
Everything here is LAB.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from provisioner.lab.pve_api import CLI_IDENTITY, ApiResult, LabApi
from provisioner.lab.state import LAB_ROOT_ENV, LabState
from provisioner.proxmox.schema import load_schema
from provisioner.proxmox.tasks import exitstatus_is_ok, exitstatus_warnings

METHODS = {"get": "GET", "create": "POST", "set": "PUT", "delete": "DELETE"}
FORMAT_OPTIONS = {"output-format", "quiet", "human-readable", "noborder", "noheader", "noproxy"}
USAGE = "USAGE: pvesh <get|create|set|delete> <api_path> [OPTIONS] [FORMAT_OPTIONS]\n"


class UsageError(Exception):
    pass


def parse_args(argv: Sequence[str], version: str) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """-> (command, path, API params, format options). Options: ``-k v``, ``--k v``, ``--k=v``."""
    args = list(argv)
    while args and args[0] in ("--noproxy", "--nooutput"):
        args.pop(0)
    if len(args) < 2 or args[0] not in METHODS:
        raise UsageError(USAGE)
    cmd, path = args[0], args[1]
    found = load_schema(version).method(METHODS[cmd], path)
    props = found[0] if found else None
    params: dict[str, str] = {}
    fmt: dict[str, str] = {}
    i = 2
    while i < len(args):
        token = args[i]
        if not token.startswith("-") or token in ("-", "--"):
            raise UsageError(f"unexpected argument '{token}'\n{USAGE}")
        key = token.lstrip("-")
        value: str | None = None
        if "=" in key:
            key, value = key.split("=", 1)
        schema = props.property_schema(key) if props else None
        is_bool = key in ("quiet", "human-readable", "noborder", "noheader", "noproxy") or (
            schema is not None and schema.get("type") == "boolean"
        )
        if value is None:
            nxt = args[i + 1] if i + 1 < len(args) else None
            if is_bool and (nxt is None or nxt.startswith("-")):
                value = "1"
            elif nxt is None:
                raise UsageError(f"option '{key}' requires an argument\n{USAGE}")
            else:
                value = nxt
                i += 1
        (fmt if key in FORMAT_OPTIONS else params)[key] = value
        i += 1
    return cmd, path, params, fmt


def _print_data(data: Any, returns_type: str | None, fmt: dict[str, str], out: TextIO) -> None:
    if data is None and returns_type in (None, "null"):
        return
    style = fmt.get("output-format", "text")
    if style == "json":
        out.write(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    elif style == "json-pretty":
        out.write(json.dumps(data, sort_keys=True, indent=4) + "\n")
    elif isinstance(data, (dict, list)):
        out.write(json.dumps(data, sort_keys=True, indent=2) + "\n")
    elif data is not None:
        out.write(f"{data}\n")


def _print_task(state: LabState, upid: str, out: TextIO, err: TextIO) -> None:
    rec = state.get_task(upid)
    if rec is None or rec.status != "stopped":
        return  # still running (LAB api-timeout scenario)
    lines = state.task_log(upid)
    if lines and lines[-1].startswith("TASK "):
        lines = lines[:-1]
        if lines and lines[-1] == "" and rec.exitstatus != "OK":
            lines = lines[:-1]
    for line in lines:
        out.write(line + "\n")
    exitstatus = rec.exitstatus or "unexpected status"
    if exitstatus_is_ok(exitstatus):
        if n := exitstatus_warnings(exitstatus):
            err.write(f"Task finished with {n} warning(s)!\n")
    else:
        err.write(exitstatus + "\n")


def _print_error(result: ApiResult, cmd: str, path: str, err: TextIO) -> int:
    message = result.message or "error"
    if result.status == 501:
        err.write(f"No '{cmd}' handler defined for '{path}'\n")
        return 1
    if result.status in (400, 401, 403):
        err.write(f"{result.status} {message}" + ("" if message.endswith("\n") else "\n"))
        for key, value in sorted((result.errors or {}).items()):
            err.write(f"{key}: {value.rstrip(chr(10))}\n")
        if result.status == 400:
            err.write(f"pvesh {cmd} {path} [OPTIONS] [FORMAT_OPTIONS]\n")
    else:
        err.write(message + ("" if message.endswith("\n") else "\n"))
    return 255


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        state = LabState.load()
    except FileNotFoundError as exc:
        err.write(f"LAB pvesh: {exc}\n")
        return 2
    version = state.settings().pve_version
    try:
        cmd, path, params, fmt = parse_args(argv, version)
    except UsageError as exc:
        err.write(str(exc))
        return 255
    api = LabApi(state, sync_tasks=True)
    result = api.call(METHODS[cmd], path, params, CLI_IDENTITY, wire="cli")
    if result.status >= 400:
        return _print_error(result, cmd, path, err)
    if fmt.get("quiet") == "1":
        return 0
    if result.upid:
        _print_task(state, result.upid, out, err)
    found = load_schema(version).method(METHODS[cmd], path)
    returns_type = found[0].returns.get("type") if found else None
    _print_data(result.data, returns_type, fmt, out)
    return 0


def write_pvesh_wrapper(bin_dir: Path, lab_root: Path, python: str | None = None) -> Path:
    """Write ``<bin_dir>/pvesh`` running this module against `lab_root`; returns its path."""
    import provisioner

    bin_dir.mkdir(parents=True, exist_ok=True)
    src_root = Path(provisioner.__file__).resolve().parents[1]
    script = bin_dir / "pvesh"
    script.write_text(
        "#!/bin/sh\n"
        "# LAB pvesh (gpu-provisioner lab) - not Proxmox's pvesh\n"
        f"PROVISIONER_LAB_ROOT=${{{LAB_ROOT_ENV}:-{shlex.quote(str(lab_root))}}}\n"
        f"export {LAB_ROOT_ENV}\n"
        f"PYTHONPATH={shlex.quote(str(src_root))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        "export PYTHONPATH\n"
        f"exec {shlex.quote(python or sys.executable)} -m provisioner.lab.pvesh \"$@\"\n"
    )
    script.chmod(0o755)
    return script


if __name__ == "__main__":
    sys.exit(main())
