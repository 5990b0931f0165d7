"""Fleets: the same playbook on many Proxmox nodes at once, failures isolated per host.

Inventory (YAML)::

    hosts:
      - name: pve1                # label in the recap (default: host)
        host: 10.0.0.11           # SSH / API address
        node: pve1                # Proxmox node name
        container: 200            # optional: override the playbook's CT id
        ssh: {port: 22, key_file: ~/.ssh/id_ed25519}
        api: {password: env:PVE_NODE1_PASSWORD}
        site: /etc/gpu-provisioner/berlin.yaml   # optional: this host's site profile (provisioner.site)

A running lab is a host like any other: `provisioner lab inventory --root DIR` prints its entry (its
endpoints, and its own site profile as `site:`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provisioner import interrupts
from provisioner.events import Bus, Message
from provisioner.exitcodes import ExitCode
from provisioner.paths import state_dir
from provisioner.playbook import (
    ApiSettings,
    Playbook,
    PlaybookError,
    SshSettings,
    Target,
    line_of,
    read_yaml,
    target_file_problems,
)
from provisioner.runner import HostResult, run_host, unfinished
from provisioner.session import LabNotRunning, allow_lab_secrets, node_transport, pve_factory
from provisioner.site import SiteProfile, apply_site, load_site


class InventoryHost(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    host: str | None = None
    node: str | None = None
    container: int | None = None
    ssh: SshSettings | None = None
    api: ApiSettings | None = None
    site: str | None = None  # a site profile file (mirrors, sizes) applied to this host at run time

    @property
    def label(self) -> str:
        return self.name or self.host or "?"


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hosts: list[InventoryHost] = Field(min_length=1)


def _allow_named_labs(data: Any, base: Path) -> None:
    """An entry whose `site:` is a running lab's own site profile (`provisioner lab inventory` writes such
    entries) names that lab's password file: the lab's directory is allowed for it, as `--lab` allows it
    (`session.allow_lab_secrets`). Only labs the inventory names explicitly; nothing else is widened."""
    hosts = data.get("hosts") if isinstance(data, dict) else None
    for entry in hosts if isinstance(hosts, list) else []:
        site = entry.get("site") if isinstance(entry, dict) else None
        if not isinstance(site, str):
            continue
        private = (base / Path(site).expanduser()).parent  # a lab keeps its site.yaml in <root>/private/
        lab_root = private.parent
        if private.name == "private" and (lab_root / "lab.json").is_file() and (private / "connection.json").is_file():
            with contextlib.suppress(LabNotRunning, OSError, ValueError):
                allow_lab_secrets(lab_root)


def load_inventory(path: str | Path, *, check_files: bool = True) -> Inventory:
    """Validate an inventory like a playbook's target: every problem as `file:line: field: message` (exit 2).
    `check_files=False`: the schema only, not the files of this machine it names (an example inventory)."""
    p = Path(path)
    root, data = read_yaml(p)  # bounded like a playbook: size, aliases, depth, UTF-8, duplicate keys
    _allow_named_labs(data, p.parent)
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as exc:
        raise PlaybookError([f"{p}:{line_of(root, tuple(e['loc']))}: {'.'.join(map(str, e['loc']))}: {e['msg']}"
                             for e in exc.errors(include_url=False, include_input=False)]) from None
    problems = []
    for i, entry in enumerate(inv.hosts if check_files else []):  # the files each entry names (key, known_hosts, CA) as for a playbook
        if entry.ssh is None and entry.api is None:
            continue
        target = Target(host="localhost", ssh=entry.ssh or SshSettings(), api=entry.api)
        for loc, msg in target_file_problems(target):
            where = ("hosts", i, *loc[1:])
            if entry.ssh is None and loc[1] == "ssh":
                continue  # the playbook's own SSH settings apply; checked with the playbook
            problems.append(f"{p}:{line_of(root, where)}: {'.'.join(map(str, where))}: {msg}")
    if problems:
        raise PlaybookError(problems)
    labels = [h.label for h in inv.hosts]
    dupes = {x for x in labels if labels.count(x) > 1}
    if dupes:
        raise PlaybookError([f"{p}: duplicate host names {sorted(dupes)}"])
    return inv


def playbook_for(playbook: Playbook, entry: InventoryHost, site: SiteProfile | None = None) -> Playbook:
    """The playbook with its target replaced by the inventory entry (validated again) and the site profile
    applied: `site` (the command's `--site`) with the entry's own `site:` file on top."""
    update: dict[str, object] = {k: v for k, v in
                              {"host": entry.host, "node": entry.node, "container": entry.container,
                               "ssh": entry.ssh, "api": entry.api}.items() if v is not None}
    target = type(playbook.target).model_validate({**playbook.target.model_dump(), **{
        k: (v.model_dump() if isinstance(v, BaseModel) else v) for k, v in update.items()}})
    own = load_site(entry.site) if entry.site else None
    profile = site.merged(own) if site is not None else own
    return apply_site(playbook.model_copy(update={"target": target}), profile, target_from=playbook)


def report_path(playbook_path: str, inventory_path: str) -> Path:
    key = hashlib.sha256(f"{Path(playbook_path).resolve()}|{Path(inventory_path).resolve()}".encode()).hexdigest()[:16]
    d = state_dir() / "fleet"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{key}.json"


def failed_hosts(path: Path) -> set[str]:
    if not path.exists():
        return set()
    doc = json.loads(path.read_text())
    return {h for h, counts in doc.get("hosts", {}).items() if unfinished(counts)}


async def run_fleet(playbook: Playbook, entries: list[InventoryHost], bus: Bus, *, mode: str, parallel: int,
                    trust_new_host: bool = False, site: SiteProfile | None = None) -> list[HostResult]:
    # Proxmox task waits hold a worker thread each: size the pool for `parallel` hosts, not for the CPUs.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2 * max(1, parallel) + 4))
    sem = asyncio.Semaphore(max(1, parallel))

    def failed(entry: InventoryHost, error: str, code: int) -> HostResult:
        bus.emit(Message(host=entry.label, level="error", text=error))
        return HostResult(host=entry.label).fail(error, code)

    async def one(entry: InventoryHost) -> HostResult:
        try:
            return await one_host(entry)
        except asyncio.CancelledError:  # SIGINT/SIGTERM before this host started: it is skipped
            if interrupts.interrupting() is None:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            r = HostResult(host=entry.label, by_index=dict.fromkeys(range(len(playbook.steps)), "skipped"))
            r.error = f"not started: interrupted by {interrupts.name()}"
            r.exit_code = interrupts.exit_code() or 1
            return r

    async def one_host(entry: InventoryHost) -> HostResult:
        async with sem:
            try:
                pb = playbook_for(playbook, entry, site)
                node = node_transport(pb.target, bus, trust_new_host=trust_new_host)
            except (ValidationError, ValueError) as exc:  # the entry (or its site file) is not valid
                return failed(entry, str(exc), ExitCode.USAGE)
            except (RuntimeError, OSError) as exc:  # a lab that is not running, an unreadable key
                return failed(entry, str(exc), ExitCode.UNREACHABLE)
            node.host_label = entry.label
            try:
                return await run_host(pb, bus, node, mode=mode, host=entry.label,  # type: ignore[arg-type]
                                      pve_factory=pve_factory(pb.target))
            except Exception as exc:  # one host's crash must not take the fleet down
                return failed(entry, f"{type(exc).__name__}: {exc}", ExitCode.FAILED)

    tasks = [asyncio.create_task(one(e)) for e in entries]
    with interrupts.cancel_on_signals(tasks=tasks):  # each host records its interruption; the recap still comes
        return list(await asyncio.gather(*tasks))


class FleetRun(TypedDict):
    """One fleet run's part of the fleet report."""

    hosts: dict[str, dict[str, int]]
    errors: dict[str, str]
    status: str
    duration_s: float


class FleetReport(TypedDict, total=False):
    """The fleet report file: every host's last counts and error (a --limit run keeps the others')."""

    hosts: dict[str, dict[str, int]]
    errors: dict[str, str]
    status: str
    duration_s: float
    last_run: FleetRun


def write_report(path: Path, results: list[HostResult], started: float) -> FleetRun:
    """Merge this run's hosts into the fleet report (a --limit run must not forget earlier failures);
    returns this run's part."""
    doc: FleetRun = {"hosts": {r.host: dict(r.counts) for r in results},
           "errors": {r.host: r.error for r in results if r.error},
           "status": "failed" if any(r.failed for r in results) else "ok",
           "duration_s": round(time.time() - started, 3)}
    merged: FleetReport = {"hosts": {}, "errors": {}}
    if path.exists():
        try:
            previous = json.loads(path.read_text())
            merged["hosts"].update(previous.get("hosts", {}))
            merged["errors"].update(previous.get("errors", {}))
        except (OSError, json.JSONDecodeError):
            pass
    for r in results:
        merged["errors"].pop(r.host, None)
    merged["hosts"].update(doc["hosts"])
    merged["errors"].update(doc["errors"])
    merged["status"] = "failed" if any(unfinished(c) for c in merged["hosts"].values()) else "ok"
    merged["duration_s"] = doc["duration_s"]  # of the last run
    merged["last_run"] = doc
    path.write_text(json.dumps(merged, indent=2))
    return doc
