"""A stub nixpkgs that records its calls, and the evaluation of an exported flake against it.

`nix-instantiate --eval --strict --json` (Debian's nix-bin) evaluates the flake's `outputs` function with
`nixpkgs` bound to the stub: no network, no store daemon (`--store dummy://`, `--readonly-mode`), no flake
support needed. The stub holds only the attributes the flake may use (a use of any other fails the
evaluation, naming it); each call returns a derivation-like set whose `_call` records the function and its
arguments, and `calls` collects every record reachable from the outputs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

STUB = r"""
{ system, ... }@imported:
let
  hash = "00000000000000000000000000000000";
  record = fn: args: name: { outPath = "/nix/store/${hash}-${name}"; inherit name; _call = { inherit fn args; }; };
  pkg = name: record name { } name;
  python = v: pkg "python3-${v}" // { sitePackages = "lib/python${v}/site-packages"; pythonVersion = v; };
  # nixpkgs' lib.escapeShellArg and lib.concatMapStringsSep (lib/strings.nix)
  escapeShellArg = arg:
    let s = toString arg; in
    if builtins.match "[[:alnum:],._+:@%/-]+" s == null
    then "'${builtins.replaceStrings [ "'" ] [ "'\\''" ] s}'"
    else s;
in {
  _imported = imported;
  lib = {
    inherit escapeShellArg;
    concatMapStringsSep = sep: f: list: builtins.concatStringsSep sep (map f list);
  };
  fetchurl = args: record "fetchurl" args args.name;
  linkFarm = name: entries: record "linkFarm" { inherit name entries; } name;
  writeShellScriptBin = name: text: record "writeShellScriptBin" { inherit name text; } name;
  mkShell = args: record "mkShell" args "nix-shell";
  stdenv = {
    mkDerivation = args: record "mkDerivation" args "${args.pname}-${args.version}";
    cc.cc.lib = pkg "gcc-lib";
  };
  uv = pkg "uv";
  zlib = pkg "zlib";
  autoPatchelfHook = pkg "auto-patchelf-hook";
  autoAddDriverRunpath = pkg "auto-add-driver-runpath-hook";
  python310 = python "3.10";
  python311 = python "3.11";
  python312 = python "3.12";
  python313 = python "3.13";
  python314 = python "3.14";
}
"""

PROBE = r"""
let
  flake = import (/. + @FLAKE@);
  out = flake.outputs { self = { }; nixpkgs = { outPath = /. + @STUB@; }; };
  walk = v:
    if builtins.isList v then builtins.concatMap walk v
    else if builtins.isAttrs v then
      (if v ? _call then [ v._call ] ++ walk v._call.args else builtins.concatMap walk (builtins.attrValues v))
    else [ ];
in {
  description = flake.description;
  nixpkgs = flake.inputs.nixpkgs.url;
  outputs = builtins.mapAttrs (_: builtins.mapAttrs (_: builtins.attrNames)) out;
  app = out.apps;
  calls = walk out;
}
"""


def _nix_path_str(path: Path) -> str:
    """An absolute path as a Nix string (appended to `/.`): the test's own temporary path, no `${` in it."""
    text = str(path.resolve())
    assert "${" not in text and '"' not in text and "\\" not in text, text
    return '"' + text + '"'


def nix_instantiate() -> str | None:
    return shutil.which("nix-instantiate")


def evaluate(flake: Path, work: Path) -> dict[str, Any]:
    """The flake's outputs evaluated against the stub nixpkgs written under `work`: its description, nixpkgs
    url, output names, apps and every recorded call (`fn`, `args`)."""
    stub = work / "stub-nixpkgs"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "default.nix").write_text(STUB)
    probe = work / "probe.nix"
    probe.write_text(PROBE.replace("@FLAKE@", _nix_path_str(flake)).replace("@STUB@", _nix_path_str(stub)))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), "NIX_REMOTE": ""}
    proc = subprocess.run([nix_instantiate() or "nix-instantiate", "--store", "dummy://", "--readonly-mode",
                           "--eval", "--strict", "--json", str(probe)],
                          capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"nix-instantiate failed ({proc.returncode}): {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def calls_of(result: dict[str, Any], fn: str) -> list[dict[str, Any]]:
    return [c["args"] for c in result["calls"] if c["fn"] == fn]
