"""Context regexes several rule families share."""

from __future__ import annotations

# Docker names a container's host after the first 12 hex digits of its ID unless told otherwise (docker run
# reference, `--hostname`): the shell prompt `root@3a7cddb6f838:/#` and a program printing its hostname (TensorFlow/XLA's
# cuda_diagnostics "hostname: 3a7cddb6f838") say the log ran in one.
DOCKER_HOSTNAME = r"\broot@[0-9a-f]{12}:|\bhostname:\s*[0-9a-f]{12}\b"
CONTAINER_CONTEXT = (
    r"\b(?:docker|podman|lxc|lxd|pct|containerd|kubernetes|k8s|kubectl|container|nvidia-container)|" + DOCKER_HOSTNAME
)
IN_CONTAINER = (
    r"\b(?:lxc|lxd|pct (?:exec|enter)|docker (?:run|exec)|docker[ -]compose|podman (?:run|exec)|kubectl exec)\b"
    r"|inside (?:the |a |an |my )?(?:\w+ )?(?:container|CT|LXC)\b|" + DOCKER_HOSTNAME
)
