"""The Nix rendering: `flake.nix` and its `flake.lock` (nixpkgs pinned by rev and narHash).

The flake builds the proven venv as a derivation in the store, the way nixpkgs builds `torch-bin`
(NixOS/nixpkgs pkgs/development/python-modules/torch/bin/default.nix: `format = "wheel"`, the wheel a
`fetchurl`, `autoPatchelfHook` with `autoPatchelfIgnoreMissingDeps = [ "libcuda.so.1" ]`,
`autoAddDriverRunpath`, `addAutoPatchelfSearchPath .../torch/lib`, `dontStrip`):

- every pylock.toml wheel is one fixed-output `fetchurl` whose `name` is the wheel's real file name (uv and
  pip read a wheel's name, version and tags from its file name: a `/nix/store/<hash>-…` path is refused,
  "invalid version: expected version to start with a number"), gathered under those names by `linkFarm`;
- the venv is built from that folder with no index and no network (`uv pip install --offline --no-index
  --find-links`), ELF files patched against the venv's own libraries, libstdc++ and zlib (what manylinux
  wheels take from the system), `/run/opengl-driver/lib` added to their runpath;
- libcuda is the host's: on NixOS from `/run/opengl-driver/lib`; elsewhere the `torch-runtime` wrapper puts
  `GPU_PROVISIONER_DRIVER_LIBS` on LD_LIBRARY_PATH, or nixGL runs it (the flake's header says how);
- the wrapper and the dev shell check the host driver floor first (`driver_floor`).

Every value from the export goes into the flake through `nix_str` (a Nix string literal, no interpolation).
"""

from __future__ import annotations

import json
import re

from provisioner.export import driver_floor
from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.export.pylock import Wheel

FLAKE = "flake.nix"
LOCK = "flake.lock"
#: nixos-25.05 as two public flake.lock files pin it (rev, narHash and lastModified agree): a tree with
#: python312, uv, linkFarm, autoPatchelfHook and autoAddDriverRunpath. Another rev needs its narHash
#: (`nix flake prefetch github:NixOS/nixpkgs/<rev>` prints it).
NIXPKGS_REV = "ac62194c3917d5f474c1a844b6fd6da2db95077d"
NIXPKGS_NAR_HASH = "sha256-16KkgfdYqjaeRGBaYsNrhPRRENs0qzkQVUooNHtoy2w="
NIXPKGS_LAST_MODIFIED = 1767313136
_REV = re.compile(r"[0-9a-f]{40}")
_NAR_HASH = re.compile(r"sha256-[A-Za-z0-9+/]{43}=")
#: the characters of a Nix store path name (and no leading dot); at most 211 of them
_STORE_NAME = re.compile(r"[A-Za-z0-9+\-_?=][A-Za-z0-9+\-._?=]{0,210}")


def nix_str(s: str) -> str:
    """`s` as a Nix double-quoted string: `\\`, `"` and `${` escaped (no interpolation), newline, CR and tab as
    their escapes; a NUL (which Nix strings cannot hold) is refused."""
    if "\0" in s:
        raise ValueError("a NUL byte cannot be written into a Nix string")
    out = s.replace("\\", "\\\\").replace('"', '\\"').replace("${", "\\${")
    return '"' + out.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'


_str = nix_str


def comment(s: str) -> str:
    """Text for a `#` comment line: control characters (a newline would end the comment) replaced."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", s)


def store_name(w: Wheel, field: str = "pylock.toml: wheel") -> str:
    """The wheel's real file name as the fetch's store name; refused (naming the wheel) when Nix cannot hold it
    (a `!` epoch, over 211 characters): never renamed, since uv would not accept another name."""
    if not _STORE_NAME.fullmatch(w.filename):
        raise ValueError(f"{field} {w.filename!r}: not a Nix store name (letters, digits, +-._?= only, at most "
                         "211): the flake cannot fetch it under its real file name")
    return w.filename


def store_version(version: str) -> str:
    """The torch version as the venv derivation's `version` (part of its store path): a character a store
    name cannot hold (never in a checked version) becomes `_`, so the path stays one shell word."""
    return re.sub(r"[^A-Za-z0-9+\-._]", "_", version)[:100] or "unknown"


def requirement(w: Wheel) -> str:
    """`name==version`: what the venv build asks uv for from the folder of wheels."""
    return f"{w.name}=={w.version}"


_TEMPLATE = """\
# Nix flake of a proven PyTorch runtime (gpu-provisioner export).
# torch @C_TORCH@ (CUDA @C_CUDA@), proven @C_AT@ on @C_HOST@; nixpkgs pinned in flake.lock.
#
#   nix build .#venv   the proven venv as a store path: the wheels below (fixed-output fetches, each checked
#                      against its pylock.toml sha256) installed with no index and no network
#   nix run . -- -c 'import torch; print(torch.cuda.is_available())'
#                      the venv's python, after the host driver floor check (NVIDIA >= @C_FLOOR@)
#   nix develop        a shell with that python first on PATH (same check)
#
# The driver is the host's and never in the closure. ELF files are patched as nixpkgs' torch-bin is
# (pkgs/development/python-modules/torch/bin/default.nix): autoPatchelfHook leaves libcuda.so.1 to the host,
# autoAddDriverRunpath adds /run/opengl-driver/lib, where NixOS puts the driver's libraries.
# Hosts other than NixOS have no /run/opengl-driver/lib:
#   - GPU_PROVISIONER_DRIVER_LIBS=DIR nix run .   with DIR the folder of the host's libcuda.so.1 and
#     libnvidia-ml.so.1 (`ldconfig -p | grep libcuda.so.1`: /usr/lib/x86_64-linux-gnu on Debian and Ubuntu,
#     /usr/lib64 on RHEL); a folder of links to just the driver's libraries keeps the host's others out;
#   - or nixGL (its driver libraries matched to the host's):
#     nix run --impure github:nix-community/nixGL#nixGLNvidia -- "$(nix build --print-out-paths .)/bin/torch-runtime"
{
  description = @DESCRIPTION@;

  inputs.nixpkgs.url = @NIXPKGS_URL@;

  outputs = { self, nixpkgs }:
    let
      system = @SYSTEM@;
      pkgs = import nixpkgs { inherit system; };
      inherit (pkgs) lib;
      python = pkgs.@PYTHON_ATTR@;
      # one fixed-output fetch per pylock.toml wheel, named by the wheel's real file name
      wheelFiles = [
@FETCHES@
      ];
      # the wheels in one folder under their real names (a store path's "<hash>-" prefix is no wheel name)
      wheels = pkgs.linkFarm "proven-wheels" (map (w: { name = w.name; path = w; }) wheelFiles);
      # what the venv asks uv for from that folder (name==version of each wheel)
      requirements = [
@REQUIREMENTS@
      ];
      venv = pkgs.stdenv.mkDerivation {
        pname = "torch-runtime-venv";
        version = @VERSION@;
        dontUnpack = true;
        dontConfigure = true;
        dontBuild = true;
        nativeBuildInputs = [ python pkgs.uv pkgs.autoPatchelfHook pkgs.autoAddDriverRunpath ];
        # what manylinux wheels take from the system: libstdc++ and libgcc_s, zlib
        buildInputs = [ pkgs.stdenv.cc.cc.lib pkgs.zlib ];
        # the hardware-dependent userspace driver comes from the host at run time (as for torch-bin)
        autoPatchelfIgnoreMissingDeps = [ "libcuda.so.1" ];
        # torch-bin: stripping gives "ELF load command address/offset not properly aligned"
        dontStrip = true;
        installPhase = ''
          runHook preInstall
          export HOME="$TMPDIR" UV_CACHE_DIR="$TMPDIR/uv-cache" UV_PYTHON_DOWNLOADS=never UV_NO_CONFIG=1
          uv venv --python ${python}/bin/python3 "$out"
          uv pip install --python "$out/bin/python" --offline --no-index --no-deps --link-mode copy \\
            --find-links ${wheels} ${lib.concatMapStringsSep " " lib.escapeShellArg requirements}
          runHook postInstall
        '';
        postFixup = ''
          addAutoPatchelfSearchPath "$out/${python.sitePackages}/torch/lib"
        '';
      };
      # the host driver floor (host.json): refuses to start below it
      floorCheck = @FLOOR_CHECK@;
      runtime = pkgs.writeShellScriptBin "torch-runtime" (floorCheck + ''
        if [ -n "''${GPU_PROVISIONER_DRIVER_LIBS:-}" ]; then
          export LD_LIBRARY_PATH="$GPU_PROVISIONER_DRIVER_LIBS''${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        elif [ ! -d /run/opengl-driver/lib ]; then
          echo "torch-runtime: no /run/opengl-driver/lib (not NixOS): set GPU_PROVISIONER_DRIVER_LIBS to the folder of the host's libcuda.so.1, or run it through nixGL (flake.nix says how)" >&2
        fi
        exec "${venv}/bin/python" "$@"
      '');
    in {
      packages.${system} = {
        default = runtime;
        inherit venv wheels;
      };
      apps.${system}.default = { type = "app"; program = "${runtime}/bin/torch-runtime"; };
      devShells.${system}.default = pkgs.mkShell {
        packages = [ venv ];
        shellHook = floorCheck;
      };
    };
}
"""


def render(runtime: RuntimeProof, host: HostNeeds, wheels: list[Wheel], rev: str = NIXPKGS_REV) -> str:
    if not _REV.fullmatch(rev):
        raise ValueError(f"not a nixpkgs commit: {rev!r}")
    py = "python" + "".join(runtime.python.split(".")[:2])
    if not re.fullmatch(r"python3[0-9]{1,2}", py):
        raise ValueError(f"runtime.json: python: not a CPython 3 version: {runtime.python!r}")
    fetches = "\n".join(
        f"        (pkgs.fetchurl {{ name = {_str(store_name(w, f'pylock.toml: wheel {i}'))}; url = {_str(w.url)}; "
        f"sha256 = {_str(w.sha256)}; }})" for i, w in enumerate(wheels))
    values = {
        "C_TORCH": comment(runtime.torch), "C_CUDA": comment(str(runtime.cuda)), "C_AT": comment(runtime.proven.at),
        "C_HOST": comment(runtime.proven.host), "C_FLOOR": comment(host.min_driver),
        "DESCRIPTION": _str(f"PyTorch {runtime.torch} runtime proven by gpu-provisioner"),
        "NIXPKGS_URL": _str(f"github:NixOS/nixpkgs/{rev}"),
        "SYSTEM": _str(f"{host.machine}-linux"),
        "PYTHON_ATTR": py,
        "FETCHES": fetches,
        "REQUIREMENTS": "\n".join(f"        {_str(requirement(w))}" for w in wheels),
        "VERSION": _str(store_version(runtime.torch)),
        "FLOOR_CHECK": _str(driver_floor.check_script(host)),
    }
    # one pass: a value holding "@NAME@" is never expanded again
    return re.sub(r"@([A-Z_]+)@", lambda m: values[m.group(1)], _TEMPLATE)


def lock(rev: str = NIXPKGS_REV, nar_hash: str | None = None) -> str:
    """flake.lock (version 7) pinning nixpkgs to `rev` with its narHash: the default rev's is known; another
    rev needs `nar_hash` (refused without: a lock with no narHash pins nothing)."""
    if not _REV.fullmatch(rev):
        raise ValueError(f"not a nixpkgs commit: {rev!r}")
    if nar_hash is None:
        if rev != NIXPKGS_REV:
            raise ValueError(f"--nixpkgs-rev {rev} needs its narHash (--nixpkgs-narhash sha256-...: "
                             f"`nix flake prefetch github:NixOS/nixpkgs/{rev}` prints it)")
        nar_hash = NIXPKGS_NAR_HASH
    if not _NAR_HASH.fullmatch(nar_hash):
        raise ValueError(f"not a narHash (sha256-<base64>): {nar_hash!r}")
    locked: dict[str, object] = {"narHash": nar_hash, "owner": "NixOS", "repo": "nixpkgs", "rev": rev,
                                 "type": "github"}
    if rev == NIXPKGS_REV and nar_hash == NIXPKGS_NAR_HASH:
        locked["lastModified"] = NIXPKGS_LAST_MODIFIED
    doc = {"nodes": {"nixpkgs": {"locked": dict(sorted(locked.items())),
                                 "original": {"owner": "NixOS", "repo": "nixpkgs", "rev": rev, "type": "github"}},
                     "root": {"inputs": {"nixpkgs": "nixpkgs"}}},
           "root": "root", "version": 7}
    return json.dumps(doc, indent=2) + "\n"
