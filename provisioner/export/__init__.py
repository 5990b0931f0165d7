"""The proven runtime, exported: pylock.toml, runtime.json, host.json and a Flox, Nix or OCI rendering.

`provisioner export` reads what a run proved (its run log or a recorded playbook), asks uv inside the
container for a PEP 751 lock of exactly the locked wheels, and writes one folder; `provisioner import`
builds and proves a venv from such a folder on another container. The driver userspace never travels:
`host.json` states the host driver the export needs.
"""
