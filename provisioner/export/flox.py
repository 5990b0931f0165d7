"""The Flox rendering: `manifest.toml` of a Flox environment whose project folder is the export folder.

`cd EXPORT && flox init && flox edit -f manifest.toml && flox activate`: the hook finds the wheels in
`$FLOX_ENV_PROJECT/wheels`.

Fields follow Flox's manifest reference (flox/flox, cli/flox/doc/manifest.toml.md, "manifest.toml(5)"):
top-level `version`, `[install]` catalog descriptors (`pkg-path`, `version`, `systems`, `pkg-group`,
`priority`), `[vars]`, `[hook] on-activate` (run by bash on activation; should be idempotent),
`[profile]`, `[services]`, `[options]` (`systems`, `activate`, `allow`, `semver`, `cuda-detection`). With
`cuda-detection = true` Flox finds the host's libcuda when the machine has an NVIDIA device: the driver
stays the host's.

What it installs is pinned, two ways:

- **the catalog**, where the `flox-cuda` catalog holds the proven torch version (Flox's "CUDA packages in the
  Flox Catalog and binary cache": `flox-cuda/python3Packages.torch`, pre-built, CUDA libraries in its Nix
  closure; `flox show flox-cuda/python3Packages.torch` lists the versions it holds — the export is told, it
  cannot ask): torch (and torchvision) from `flox-cuda` at that version in one package group with the Python
  they were built for; the other wheels as below. A catalog build is not the proven wheel's bytes: `import`
  re-proves it with the burn-in.
- **the proven wheels**, otherwise: every pylock.toml wheel in the folder's `wheels/` (fetched by the
  export, each checked against the lock's sha256 and size, listed in `wheels/SHA256SUMS`); on activation the
  hook checks them against that list and builds the venv from them with no index and no network
  (`uv pip install --offline --no-index --find-links wheels/`), once: nothing is fetched at activation.
  manylinux wheels take libstdc++/libgcc_s and zlib from the system, which a Nix-built Python does not
  provide (flox/flox#1774; flox/flox#3061 `libstdc++.so.6: cannot open shared object file`):
  `gcc-unwrapped` (a version-1 manifest installs all of a package's outputs, its `lib` among them) and
  `zlib` are installed beside Python.

The hook first checks the host driver floor (`driver_floor`): below it, or with no driver, activation fails
with one line naming the driver and the floor.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import tomli_w
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from provisioner.export import driver_floor
from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.export.nix import comment
from provisioner.export.pylock import Wheel

MANIFEST = "manifest.toml"
WHEELS = "wheels"
SUMS = "wheels/SHA256SUMS"
CATALOG_TORCH = "flox-cuda/python3Packages.torch"
CATALOG_TORCHVISION = "flox-cuda/python3Packages.torchvision"
#: the distributions a flox-cuda torch brings in its closure (its CUDA libraries among them)
_CATALOG_PROVIDES = {"torch", "torchvision", "torchaudio", "triton", "pytorch-triton"}

#: the reference's field set (what tests hold the rendering to)
TOP_LEVEL = {"version", "install", "vars", "hook", "profile", "services", "options", "containerize"}
CATALOG_DESCRIPTOR = {"pkg-path", "pkg-group", "version", "systems", "priority"}
HOOK = {"on-activate"}
PROFILE = {"common", "bash", "zsh", "fish", "tcsh"}
OPTIONS = {"systems", "activate", "allow", "semver", "cuda-detection"}
SYSTEMS = {"x86_64-linux", "aarch64-linux", "x86_64-darwin", "aarch64-darwin"}


def _public(version: str, field: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        raise ValueError(f"{field}: not a version: {version!r}") from None


def catalog_holds(runtime: RuntimeProof, catalog_torch: str | None) -> bool:
    """Whether the flox-cuda catalog's torch (`catalog_torch`, the version `flox show` lists) is the proven
    version (the proven wheel's public version: `2.11.0` for `2.11.0+cu128`)."""
    if not catalog_torch:
        return False
    return _public(catalog_torch, "--flox-catalog-torch") == _public(runtime.torch, "runtime.json: torch")


def from_catalog(w: Wheel) -> bool:
    """A wheel the flox-cuda torch replaces: torch and its kin, and the CUDA library wheels (`nvidia-*`, not
    the NVML bindings `nvidia-ml-py`)."""
    name = canonicalize_name(w.name)
    return name in _CATALOG_PROVIDES or (name.startswith("nvidia-") and name != "nvidia-ml-py")


def sums(wheels: Sequence[Wheel]) -> str:
    """wheels/SHA256SUMS: `sha256sum -c` input of every wheel the venv is built from (checked file names)."""
    return "".join(f"{w.sha256}  {w.filename}\n" for w in wheels)


def _venv_hook(wheels: Sequence[Wheel]) -> list[str]:
    reqs = " ".join(shlex.quote(f"{w.name}=={w.version}") for w in wheels)
    return [
        "# the proven venv: built once from the export's wheels (checked against wheels/SHA256SUMS), offline",
        'if [ -z "${FLOX_ENV:-}" ] || [ -z "${FLOX_ENV_CACHE:-}" ] || [ -z "${FLOX_ENV_PROJECT:-}" ]; then',
        '  echo "gpu-provisioner: FLOX_ENV, FLOX_ENV_CACHE or FLOX_ENV_PROJECT is unset: activate with flox" >&2',
        "  exit 1",
        "fi",
        'gp_venv="$FLOX_ENV_CACHE/torch-runtime"',
        f'gp_wheels="$FLOX_ENV_PROJECT/{WHEELS}"',
        'gp_stamp="$gp_venv/.gpu-provisioner-SHA256SUMS"',
        'if [ ! -x "$gp_venv/bin/python" ] || [ ! -f "$gp_stamp" ] || '
        '[ "$(cat "$gp_wheels/SHA256SUMS")" != "$(cat "$gp_stamp")" ]; then',
        '  if ! (cd "$gp_wheels" && sha256sum -c SHA256SUMS >/dev/null 2>&1); then',
        '    echo "gpu-provisioner: a wheel in $gp_wheels is missing or does not match wheels/SHA256SUMS'
        ' (the sha256 of pylock.toml)" >&2',
        "    exit 1",
        "  fi",
        '  rm -rf -- "$gp_venv"',
        '  UV_PYTHON_DOWNLOADS=never uv venv --quiet --no-config --python "$FLOX_ENV/bin/python3" "$gp_venv" || exit 1',
        '  UV_NO_CONFIG=1 uv pip install --quiet --python "$gp_venv/bin/python" --offline --no-index --no-deps'
        f' --link-mode copy --find-links "$gp_wheels" {reqs} || exit 1',
        '  cp "$gp_wheels/SHA256SUMS" "$gp_stamp"',
        "fi",
        'export VIRTUAL_ENV="$gp_venv"',
        'export PATH="$gp_venv/bin:$PATH"',
    ]


def venv_wheels(runtime: RuntimeProof, wheels: Sequence[Wheel], catalog_torch: str | None = None) -> list[Wheel]:
    """The wheels the environment builds its venv from (all of them, or those the catalog does not give)."""
    if catalog_holds(runtime, catalog_torch):
        return [w for w in wheels if not from_catalog(w)]
    return list(wheels)


def render(runtime: RuntimeProof, host: HostNeeds, uv_version: str, wheels: Sequence[Wheel] = (),
           catalog_torch: str | None = None) -> str:
    """manifest.toml: the document built as data and written by tomli_w (every value escaped by TOML's
    rules), after a comment header whose text has no control character (a newline would end the comment)."""
    major_minor = "".join(runtime.python.split(".")[:2])
    system = f"{host.machine}-linux"
    catalog = catalog_holds(runtime, catalog_torch)
    local = venv_wheels(runtime, wheels, catalog_torch)
    install: dict[str, dict[str, object]] = {}
    if catalog:
        group = {"pkg-group": "pytorch-cuda", "systems": [system]}
        install["torch"] = {"pkg-path": CATALOG_TORCH, "version": _public(catalog_torch or "", "torch"), **group}
        if runtime.torchvision:
            install["torchvision"] = {"pkg-path": CATALOG_TORCHVISION,
                                      "version": _public(runtime.torchvision, "runtime.json: torchvision"), **group}
        install["python3"] = {"pkg-path": "python3", **group}
    else:
        install["python3"] = {"pkg-path": f"python{major_minor}", "version": runtime.python}
    install["uv"] = {"pkg-path": "uv", "version": uv_version}
    # what manylinux wheels take from the system (libstdc++.so.6, libgcc_s.so.1; libz.so.1)
    install["gcc-unwrapped"] = {"pkg-path": "gcc-unwrapped"}
    install["zlib"] = {"pkg-path": "zlib"}
    hook = [driver_floor.check_script(host).rstrip("\n")]
    if local:
        hook += _venv_hook(local)
    doc = {
        "version": 1,
        "install": install,
        "vars": {"GPU_PROVISIONER_TORCH": runtime.torch, "GPU_PROVISIONER_MIN_DRIVER": host.min_driver,
                 "GPU_PROVISIONER_TORCH_FROM": "flox-cuda catalog" if catalog else "proven wheels"},
        "hook": {"on-activate": "\n".join(hook) + "\n"},
        "options": {"systems": [system], "cuda-detection": True},
    }
    header = [
        "# Flox environment of a proven PyTorch runtime (gpu-provisioner export).",
        "# Use: cd EXPORT && flox init && flox edit -f manifest.toml && flox activate",
        f"# torch {comment(runtime.torch)} (CUDA {comment(str(runtime.cuda))}), proven {comment(runtime.proven.at)} "
        f"on {comment(runtime.proven.host)}; burn-in {comment(runtime.burnin.verdict)}.",
        f"# The host gives the driver: NVIDIA >= {comment(host.min_driver)} (proven on "
        f"{comment(host.driver_proven_on)}), checked on activation.",
        ("# torch from the flox-cuda catalog (not the proven wheel's bytes: re-prove with the burn-in)." if catalog
         else "# torch from the proven wheels in wheels/ (checked against wheels/SHA256SUMS), never fetched here."),
    ]
    return "\n".join(header) + "\n" + tomli_w.dumps(doc, multiline_strings=True)
