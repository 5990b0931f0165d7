"""``pvesm path <volume>`` stand-in: the file system path of a volume, as pve-storage computes it.

Source: github:proxmox/pve-storage @0c56bad ("bump version to 9.1.7"):
- src/PVE/CLI/pvesm.pm ``path``: ``print PVE::Storage::path($cfg, $volume) . "\\n"``;
- src/PVE/Storage.pm ``path``: ``parse_volume_id`` (``<storage>:<volname>``), ``storage_config`` (dies
  "storage '<id>' does not exist"), then the plugin's ``path``;
- src/PVE/Storage/Plugin.pm ``filesystem_path``: ``get_subdir($scfg, $vtype) . "/$name"``, where ``get_subdir``
  is ``<path>/<$vtype_subdirs{$vtype}>`` (vztmpl: ``template/cache``); ``parse_volname`` knows
  ``vztmpl/<name>`` only for names matching ``$VZTMPL_EXT_RE_1`` (``.tar`` since PVE 9.1, pve-storage 0d392b2),
  else dies "unable to parse directory volume name '<volname>'".
The path is computed, not checked: the file need not exist (an upload's destination). Only ``path`` of a
vztmpl/iso volume on a dir storage is modelled; anything else says LAB.
"""

from __future__ import annotations

import re
import sys

from provisioner.lab.commands._common import die, out, state
from provisioner.lab.oci_template import VZTMPL_RE_8, VZTMPL_RE_9
from provisioner.lab.sandbox import CONTENT_SUBDIRS

_VOLUME_ID = re.compile(r"([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)\Z", re.I)  # pve-storage parse_volume_id
_USAGE = "USAGE: pvesm path <volume>"


def volume_path(volume: str) -> str:
    """What `pvesm path <volume>` prints (without the newline), or SystemExit as pvesm dies."""
    m = _VOLUME_ID.match(volume)
    if m is None:
        die(f"unable to parse volume ID '{volume}'", 255)
    storage_id, volname = m.group(1), m.group(2)
    settings = state().settings()
    spec = next((s for s in settings.storages if s.id == storage_id), None)
    if spec is None:
        die(f"storage '{storage_id}' does not exist", 255)
    if spec.type != "dir" or not spec.path:
        die(f"LAB: pvesm path of a {spec.type} volume is not modelled", 255)
    vztmpl = VZTMPL_RE_9 if settings.pve_version == "9" else VZTMPL_RE_8
    kind, _, name = volname.partition("/")
    if kind == "vztmpl" and vztmpl.fullmatch(name):
        return f"{spec.path}/{CONTENT_SUBDIRS['vztmpl']}/{name}"
    if kind == "iso" and re.fullmatch(r"[^/]+\.(?:iso|img)", name, re.I):
        return f"{spec.path}/{CONTENT_SUBDIRS['iso']}/{name}"
    die(f"unable to parse directory volume name '{volname}'", 255)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        die(f"ERROR: no command specified\n{_USAGE}", 255)
    if args[0] != "path":
        die(f"LAB: pvesm {args[0]} is not modelled (the lab's pvesm has `path` only)", 255)
    if len(args) != 2:
        die(f"400 wrong number of arguments\n{_USAGE}", 255)
    out(volume_path(args[1]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
