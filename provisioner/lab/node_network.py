"""The lab node's ``GET /nodes/{node}/network``: its ``/etc/network/interfaces`` as PVE lists it.

pve-manager ``PVE::API2::Network`` ``index`` (PVE/API2/Network.pm): it reads the interfaces file
(pve-common ``PVE::INotify::read_file('interfaces')``), drops ``lo``, and with ``type`` keeps the
interfaces of that type — ``any_bridge``/``any_local_bridge`` keep Linux and OVS bridges, ``vnet`` and
``fabric`` list SDN objects only (the lab has no SDN: none), ``include_sdn`` keeps every local interface
and adds the SDN ones; then it always removes the bridges the caller may not use (since pve-manager
d2894179, PVE 8.0: root@pam sees all, anyone else needs ``SDN.Audit`` or ``SDN.Use`` on
``/sdn/zones/localnetwork/<bridge>``, ``PVE::RPCEnvironment::check_sdn_bridge``) and answers
``hash_to_array($ifaces, 'iface')``: one object per interface, sorted by name, with the keys the file
parser sets (``type``, ``method``/``method6``, ``families``, ``priority``, ``active``/``autostart``/
``exists`` as 1, ``bridge_ports``, ``bridge_stp``/``bridge_fd``, ``address``/``netmask``/``cidr``,
``gateway``), the shape a PVE 9.1 node answers. The interfaces are the profile's
(`provisioner.lab.profiles.HostProfile.network`). Everything here is LAB.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provisioner.lab.profiles import NetIface

_BRIDGE_TYPES = ("bridge", "OVSBridge")
_SDN_ONLY = ("vnet", "fabric")  # filters that list SDN objects, never a local interface


def _entry(priority: int, nic: NetIface) -> dict[str, Any]:
    out: dict[str, Any] = {"iface": nic.iface, "type": nic.type, "method": nic.method, "method6": "manual",
                           "families": ["inet"], "priority": priority}
    if nic.active:
        out["active"] = 1
    if nic.autostart:
        out["autostart"] = 1
    if nic.exists:
        out["exists"] = 1
    if nic.type in _BRIDGE_TYPES:
        out.update(bridge_ports=nic.bridge_ports or "", bridge_stp="off", bridge_fd="0")
    if nic.cidr:
        address, _, bits = nic.cidr.partition("/")
        out.update(address=address, netmask=bits, cidr=nic.cidr)
    if nic.gateway:
        out["gateway"] = nic.gateway
    if nic.comments:
        out["comments"] = nic.comments
    return out


def bridge_names(network: tuple[NetIface, ...]) -> set[str]:
    """The bridges of the node (what ``/sys/class/net/<bridge>/mtu`` exists for)."""
    return {nic.iface for nic in network if nic.type in _BRIDGE_TYPES}


def network_index(network: tuple[NetIface, ...], type_filter: str | None,
                  may_use_bridge: Callable[[str], bool]) -> list[dict[str, Any]]:
    """The answer to ``GET /nodes/{node}/network`` (``type=<type_filter>``) for a caller that may use the
    bridges `may_use_bridge` accepts."""
    out = []
    # priority: the order in the file, after lo (INotify counts each iface as it reads it; lo is first)
    for priority, nic in enumerate(network, start=2):
        if type_filter in _SDN_ONLY:
            continue
        if type_filter not in (None, "include_sdn"):
            any_bridge = type_filter in ("any_bridge", "any_local_bridge") and nic.type in _BRIDGE_TYPES
            if type_filter != nic.type and not any_bridge:
                continue
        if nic.type in _BRIDGE_TYPES and not may_use_bridge(nic.iface):
            continue
        out.append(_entry(priority, nic))
    return sorted(out, key=lambda e: str(e["iface"]))
