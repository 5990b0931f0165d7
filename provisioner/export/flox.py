"""The Flox rendering: a `manifest.toml` that pins Python and uv and builds the venv from pylock.toml.

Fields follow Flox's manifest reference (flox/flox, cli/flox/doc/manifest.toml.md, "manifest.toml(5)"):
top-level `version`, `[install]` catalog descriptors (`pkg-path`, `version`, `systems`, `pkg-group`,
`priority`), `[vars]`, `[hook] on-activate` (sourced by bash on activation; should be idempotent),
`[profile]`, `[services]`, `[options]` (`systems`, `activate`, `allow`, `semver`, `cuda-detection`). With
`cuda-detection = true` Flox finds the host's libcuda when the machine has an NVIDIA device: the driver
stays the host's.
"""

from __future__ import annotations

import tomli_w

from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.export.nix import comment
from provisioner.export.pylock import PYLOCK

MANIFEST = "manifest.toml"

#: the reference's field set (what tests hold the rendering to)
TOP_LEVEL = {"version", "install", "vars", "hook", "profile", "services", "options", "containerize"}
CATALOG_DESCRIPTOR = {"pkg-path", "pkg-group", "version", "systems", "priority"}
HOOK = {"on-activate"}
PROFILE = {"common", "bash", "zsh", "fish", "tcsh"}
OPTIONS = {"systems", "activate", "allow", "semver", "cuda-detection"}
SYSTEMS = {"x86_64-linux", "aarch64-linux", "x86_64-darwin", "aarch64-darwin"}


def render(runtime: RuntimeProof, host: HostNeeds, uv_version: str) -> str:
    """manifest.toml: the document built as data and written by tomli_w (every value escaped by TOML's
    rules), after a comment header whose text has no control character (a newline would end the comment)."""
    major_minor = "".join(runtime.python.split(".")[:2])
    system = f"{host.machine}-linux"
    venv = "$FLOX_ENV_CACHE/torch-venv"
    hook = "\n".join([
        "# the venv of the exported, proven runtime: built once from pylock.toml (hashes checked by uv)",
        f'venv="{venv}"',
        f'lock="$FLOX_ENV_PROJECT/{PYLOCK}"',
        'if [ ! -f "$venv/.pylock.sha256" ] || ! sha256sum --status -c "$venv/.pylock.sha256" 2>/dev/null; then',
        '  uv venv --allow-existing --python "$(command -v python3)" "$venv"',
        '  uv pip install --python "$venv/bin/python" -r "$lock"',
        '  (cd "$(dirname "$lock")" && sha256sum "$lock") > "$venv/.pylock.sha256"',
        "fi",
        'export VIRTUAL_ENV="$venv"',
        'export PATH="$venv/bin:$PATH"',
    ]) + "\n"
    doc = {
        "version": 1,
        "install": {
            "python3": {"pkg-path": f"python{major_minor}", "version": runtime.python},
            "uv": {"pkg-path": "uv", "version": uv_version},
        },
        "vars": {"GPU_PROVISIONER_TORCH": runtime.torch, "GPU_PROVISIONER_MIN_DRIVER": host.min_driver},
        "hook": {"on-activate": hook},
        "options": {"systems": [system], "cuda-detection": True},
    }
    header = [
        "# Flox environment of a proven PyTorch runtime (gpu-provisioner export).",
        f"# torch {comment(runtime.torch)} (CUDA {comment(str(runtime.cuda))}), proven {comment(runtime.proven.at)} "
        f"on {comment(runtime.proven.host)}; burn-in {comment(runtime.burnin.verdict)}.",
        f"# The host gives the driver: NVIDIA >= {comment(host.min_driver)} (proven on "
        f"{comment(host.driver_proven_on)}).",
    ]
    return "\n".join(header) + "\n" + tomli_w.dumps(doc, multiline_strings=True)
