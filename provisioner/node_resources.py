"""What a node offers the fields of a playbook: storages (with their content types), bridges, templates, CPU
cores and memory, read from the Proxmox API; and the fields a value of the node does not fit.

The wizard reads them once the inventory ran and checks each field as it is typed (`field_problems`: a storage
that does not exist is refused with the storages that would do); an API error at apply that names a value of
the node (`500 storage 'local-lvmm' does not exist`) becomes a finding naming the field and the fix
(`api_error_finding`). What the node says is data: ids are matched against their own syntax before use.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from provisioner.validate import BRIDGE_RE
from provisioner.words import Words

#: the content type each storage field needs (PVE's `content` list of a storage)
STORAGE_FIELDS: dict[tuple[str, str], str] = {("lxc.create", "rootfs_storage"): "rootdir"}
_ID = re.compile(r"^[A-Za-z][A-Za-z0-9\-_.]{0,63}$")  # PVE's storage id syntax (pve-storage-id)
_TEMPLATE = re.compile(r"^[A-Za-z][A-Za-z0-9\-_.]*:vztmpl/[A-Za-z0-9][A-Za-z0-9._+\-]*$")
_LIST = re.compile(r"^[a-z0-9,;\s]*$")  # a storage's content list: `rootdir,images`
#: the interface types a container's netN may name (`type=any_bridge` answers these; `vnet`: an SDN vnet)
BRIDGE_TYPES = ("bridge", "OVSBridge", "vnet")
SHOWN = 6  # how many offered values a message lists
MAX_ITEMS = 4096  # the most entries of one answer read (a node has a handful of storages and bridges)
MAX_CORES = 1 << 20
MAX_MEMORY = 1 << 60  # bytes


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Storage(_Model):
    id: str
    type: str = ""
    content: frozenset[str] = frozenset()


class NodeResources(_Model):
    """What `gather` read; a list that could not be read is None (then nothing is checked against it)."""

    node: str
    storages: tuple[Storage, ...] | None = None
    bridges: tuple[str, ...] | None = None
    templates: tuple[str, ...] | None = None  # volume ids: `local:vztmpl/<file>`
    cores: int | None = None
    memory_mib: int | None = None

    def storages_for(self, content: str) -> list[str]:
        return sorted(s.id for s in self.storages or () if content in s.content)


def _listing(values: list[str]) -> str:
    shown = ", ".join(values[:SHOWN])
    return shown + (f" (+{len(values) - SHOWN} more)" if len(values) > SHOWN else "") if values else "none"


def _int(value: object, limit: int) -> int | None:
    """A positive JSON integer up to `limit`; anything else (a string, a bool, a float, 0) is no answer."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit:
        return None
    return value


def _items(listed: object) -> list[dict[str, Any]] | None:
    """The objects of a JSON list answer, at most MAX_ITEMS of them; None when the answer is not a list."""
    if not isinstance(listed, list):
        return None
    return [item for item in listed[:MAX_ITEMS] if isinstance(item, dict)]


def _text(item: Mapping[str, Any], key: str, pattern: re.Pattern[str], limit: int = 255) -> str | None:
    """`item[key]` when it is a string of at most `limit` characters matching `pattern`."""
    value = item.get(key)
    return value if isinstance(value, str) and len(value) <= limit and pattern.match(value) else None


async def node_bridges(pve: Any, node: str) -> list[str] | None:
    """The bridges of `node` the caller may use, sorted; None when the API does not answer with a list.
    pve-manager PVE::API2::Network `index`: type=any_bridge lists Linux and OVS bridges and the SDN vnets the
    caller may use; each is an object with `iface` and `type` (hostile input: names of their own syntax only)."""
    try:
        listed = await asyncio.to_thread(pve.request, "GET", f"nodes/{node}/network", {"type": "any_bridge"})
    except Exception:  # an API without that path, a missing privilege: the bridges are not checked
        return None
    network = _items(listed)
    if network is None:
        return None
    return sorted({iface for i in network if i.get("type") in BRIDGE_TYPES
                   and (iface := _text(i, "iface", BRIDGE_RE)) is not None})


async def gather(pve: Any, node: str) -> NodeResources:
    """Read the node's storages, bridges, templates, cores and memory through the Proxmox API client `pve`
    (`provisioner.proxmox.client.PveClient`); what cannot be read stays None.

    Every answer is hostile input: only lists of objects are read, at most MAX_ITEMS of each, every id must be
    a string of its own syntax (storage id, template volume id, interface name) and every number a JSON integer
    in range; anything else is skipped, never guessed."""

    async def read(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except Exception:  # an API without that path, a missing privilege: that list is not checked
            return None

    storages: list[Storage] | None = None
    listed = _items(await read(pve.storages, node))
    if listed is not None:
        storages = []
        for item in listed:
            sid = _text(item, "storage", _ID)
            if sid is None:
                continue
            content = frozenset(c for c in re.split(r"[,;\s]+", _text(item, "content", _LIST) or "") if c)
            storages.append(Storage(id=sid, type=_text(item, "type", _ID) or "", content=content))
    templates: list[str] | None = None
    if storages is not None:
        templates = []
        for store in storages:
            if "vztmpl" not in store.content:
                continue
            items = _items(await read(pve.storage_content, store.id, "vztmpl", node)) or []
            templates += [volid for i in items if (volid := _text(i, "volid", _TEMPLATE)) is not None]
    bridges = await node_bridges(pve, node)
    cores = memory = None
    for item in _items(await read(pve.nodes)) or []:
        if item.get("node") == node:
            cores = _int(item.get("maxcpu"), MAX_CORES)
            mem = _int(item.get("maxmem"), MAX_MEMORY)
            memory = mem // (1024 * 1024) if mem else None
    return NodeResources(node=node, storages=None if storages is None else tuple(sorted(storages, key=lambda s: s.id)),
                         bridges=None if bridges is None else tuple(bridges),
                         templates=None if templates is None else tuple(sorted(set(templates))), cores=cores,
                         memory_mib=memory)


def field_problems(kind: str, params: Mapping[str, object], res: NodeResources | None) -> dict[str, str]:
    """{field: why, with what the node offers} for the values of step `kind` that the node cannot hold."""
    if res is None:
        return {}
    out: dict[str, str] = {}
    for (step, field), content in STORAGE_FIELDS.items():
        value = params.get(field)
        if step != kind or res.storages is None or not isinstance(value, str):
            continue
        fits = res.storages_for(content)
        if value not in fits:
            known = any(s.id == value for s in res.storages)
            why = f"storage {value!r} does not hold {content}" if known else \
                f"storage {value!r} does not exist on {res.node}"
            out[field] = f"{why}; storages with {content}: {_listing(fits)}"
    if kind != "lxc.create":
        return out
    template = params.get("template")
    if isinstance(template, str) and res.storages is not None:
        store = template.partition(":")[0]
        fits = res.storages_for("vztmpl")
        if store not in fits:
            out["template"] = f"storage {store!r} " + \
                ("does not hold templates" if any(s.id == store for s in res.storages) else
                 f"does not exist on {res.node}") + f"; storages with templates: {_listing(fits)}"
        elif res.templates is not None and template not in res.templates and not params.get("download_template"):
            out["template"] = f"not on {store} (turn on download template, or use one of: " \
                              f"{_listing(list(res.templates))})"
    net = params.get("net")
    bridge = getattr(net, "bridge", None) if not isinstance(net, Mapping) else net.get("bridge")
    if isinstance(bridge, str) and res.bridges is not None and bridge not in res.bridges:
        out["net"] = f"bridge {bridge!r} does not exist on {res.node}; bridges: {_listing(list(res.bridges))}"
    cores = params.get("cores")
    if isinstance(cores, int) and res.cores is not None and cores > res.cores:
        out["cores"] = f"{res.node} has {res.cores} cores: at most {res.cores}"
    memory = params.get("memory")
    if isinstance(memory, int) and res.memory_mib is not None and memory > res.memory_mib:
        out["memory"] = f"{res.node} has {res.memory_mib // 1024}G of memory: at most {res.memory_mib // 1024}G"
    return out


#: API errors that name a value of the node, and the field of `lxc.create` that holds it
_API_ERRORS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"storage '([^']+)' does not exist"), "rootfs_storage", "storage {0!r} does not exist on the node"),
    (re.compile(r"storage '([^']+)' does not support container directories"), "rootfs_storage",
     "storage {0!r} does not hold container disks (rootdir)"),
    (re.compile(r"bridge '([^']+)' does not exist"), "net", "bridge {0!r} does not exist on the node"),
    (re.compile(r"volume '([^']+:vztmpl/[^']+)' does not exist"), "template", "template {0!r} is not on the node"),
)


def api_error_finding(kind: str, message: str, params: Mapping[str, object], words: Words,
                      res: NodeResources | None = None) -> dict[str, object] | None:
    """A diagnosis finding (the shape of `Finding.to_dict()`) for an API error of step `kind` that names a value
    of the node: which field holds it and what to set instead (None when the error names no such value)."""
    if kind != "lxc.create":
        return None
    for pattern, field, said in _API_ERRORS:
        match = pattern.search(message)
        if match is None:
            continue
        value = match.group(1)
        if field == "rootfs_storage" and params.get("template", "").__str__().startswith(f"{value}:"):
            field = "template"  # the template's storage, not the rootfs'
        offer = ""
        if res is not None:
            fits = res.storages_for("vztmpl" if field == "template" else "rootdir") if field != "net" else \
                list(res.bridges or ())
            offer = f" ({'bridges' if field == 'net' else 'storages that fit'}: {_listing(fits)})" if fits else ""
        return {"category": "node_value", "root_cause": said.format(value),
                "fix": words.field(kind, field, f"choose one the node has{offer}") + f", {words.retry}",
                "evidence": [message.splitlines()[0][:300]]}
    return None
