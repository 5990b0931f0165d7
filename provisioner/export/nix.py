"""The Nix rendering: a `flake.nix` with a pinned nixpkgs, one fixed-output fetch per pylock wheel, an FHS env.

Every wheel is a `fetchurl` with its sha256 (a fixed-output derivation: Nix checks the bytes); the FHS
environment (`buildFHSEnv`) holds Python and uv and installs those store paths into a venv with no index.
libcuda comes from the host at run time (`/run/opengl-driver/lib` on NixOS, where the driver's userspace
lives): it is put on LD_LIBRARY_PATH, never fetched, so no driver enters the closure.
"""

from __future__ import annotations

import re

from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.export.pylock import Wheel

FLAKE = "flake.nix"
#: a nixpkgs commit (github.com/NixOS/nixpkgs) whose tree has buildFHSEnv, python3xx and uv; override with
#: `export --nixpkgs-rev`
NIXPKGS_REV = "09b82b349a12789585fcc4afb4a181c0388409d9"
_NAME_OK = re.compile(r"[^A-Za-z0-9+\-._?=]")


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


def store_name(w: Wheel) -> str:
    return _NAME_OK.sub("_", w.filename)


def render(runtime: RuntimeProof, host: HostNeeds, wheels: list[Wheel], rev: str = NIXPKGS_REV) -> str:
    if not re.fullmatch(r"[0-9a-f]{40}", rev):
        raise ValueError(f"not a nixpkgs commit: {rev!r}")
    py = "python" + "".join(runtime.python.split(".")[:2])
    system = f"{host.machine}-linux"
    fetches = "\n".join(
        f"        (pkgs.fetchurl {{ name = {_str(store_name(w))}; url = {_str(w.url)}; sha256 = {_str(w.sha256)}; }})"
        for w in wheels)
    return f"""# Nix flake of a proven PyTorch runtime (gpu-provisioner export).
# torch {comment(runtime.torch)} (CUDA {comment(str(runtime.cuda))}), proven {comment(runtime.proven.at)} on {comment(runtime.proven.host)}.
# The host gives the driver (NVIDIA >= {comment(host.min_driver)}): libcuda from /run/opengl-driver/lib, never in the closure.
{{
  description = {_str(f"PyTorch {runtime.torch} runtime proven by gpu-provisioner")};

  inputs.nixpkgs.url = {_str(f"github:NixOS/nixpkgs/{rev}")};

  outputs = {{ self, nixpkgs }}:
    let
      system = {_str(system)};
      pkgs = import nixpkgs {{ inherit system; }};
      python = pkgs.{py};
      # one fixed-output fetch per pylock.toml wheel (url + sha256)
      wheels = [
{fetches}
      ];
      # the venv's folder name (a Nix string, put into the shell below by lib.escapeShellArg)
      venvName = {_str("torch-venv-" + runtime.torch)};
    in {{
      packages.${{system}}.default = pkgs.buildFHSEnv {{
        name = "torch-runtime";
        targetPkgs = p: [ python p.uv p.zlib p.stdenv.cc.cc.lib ];
        profile = ''
          export LD_LIBRARY_PATH=/run/opengl-driver/lib''${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}
          venv="$HOME/.cache/gpu-provisioner/"${{pkgs.lib.escapeShellArg venvName}}
          if [ ! -x "$venv/bin/python" ]; then
            uv venv --python ${{python}}/bin/python "$venv"
            uv pip install --python "$venv/bin/python" --offline --no-deps ${{pkgs.lib.concatMapStringsSep " " (w: pkgs.lib.escapeShellArg "${{w}}") wheels}}
          fi
          export PATH="$venv/bin:$PATH"
        '';
        runScript = "bash";
      }};
    }};
}}
"""


_FETCH = re.compile(r"fetchurl \{([^{}]*)\}")
_ATTR = re.compile(r'(\w+) = "([^"]*)";')


def fetches(text: str) -> list[tuple[str, str]]:
    """(url, sha256) of every fetchurl of a flake, as rendered or as `nix-instantiate --parse` prints it."""
    out = []
    for m in _FETCH.finditer(text):
        attrs = dict(_ATTR.findall(m.group(1)))
        out.append((attrs.get("url", ""), attrs.get("sha256", "")))
    return out
