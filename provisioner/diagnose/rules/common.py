"""Context regexes several rule families share."""

from __future__ import annotations

CONTAINER_CONTEXT = r"\b(?:docker|podman|lxc|lxd|pct|containerd|kubernetes|k8s|kubectl|container|nvidia-container)"
IN_CONTAINER = (
    r"\b(?:lxc|lxd|pct (?:exec|enter)|docker (?:run|exec)|podman (?:run|exec)|kubectl exec)\b"
    r"|inside (?:the |a |an |my )?(?:\w+ )?(?:container|CT|LXC)\b"
)
