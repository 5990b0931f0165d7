"""Context regexes several rule families share."""

from __future__ import annotations

# Docker names a container's host after the first 12 hex digits of its ID unless told otherwise (docker run
# reference, `--hostname`): the shell prompt `root@3a7cddb6f838:/#` and a program printing its hostname (TensorFlow/XLA's
# cuda_diagnostics "hostname: 3a7cddb6f838") say the log ran in one.
DOCKER_HOSTNAME = r"\broot@[0-9a-f]{12}:|\bhostname:\s*[0-9a-f]{12}\b"
# HPC's container runtimes: enroot (Slurm's pyxis: `srun --container-image`) and Apptainer/Singularity (`--nv`)
HPC_CONTAINER = r"\benroot (?:start|create|import)\b|--container-image\b|\b(?:apptainer|singularity) (?:exec|run|shell)\b"
CONTAINER_CONTEXT = (
    r"\b(?:docker|podman|lxc|lxd|pct|containerd|kubernetes|k8s|kubectl|container|nvidia-container|enroot|pyxis"
    r"|apptainer|singularity)|" + DOCKER_HOSTNAME
)
IN_CONTAINER = (
    r"\b(?:lxc|lxd|pct (?:exec|enter)|docker (?:run|exec)|docker[ -]compose|podman (?:run|exec)|kubectl exec)\b"
    r"|inside (?:the |a |an |my )?(?:\w+ )?(?:container|CT|LXC)\b|" + DOCKER_HOSTNAME + "|" + HPC_CONTAINER
)
# a docker/podman/Kubernetes container run by the NVIDIA toolkit's runtime (its variables name it too)
RUNTIME_CONTEXT = (
    r"\b(?:docker|podman|containerd|kubernetes|k8s|kubectl|kubelet|nvidia-container[\w-]*|NVIDIA_DRIVER_CAPABILITIES"
    r"|NVIDIA_VISIBLE_DEVICES)\b|" + DOCKER_HOSTNAME
)
# a docker/podman/Kubernetes container being started (the daemon's own error prefix included): not a bare word
# "docker" in a path (an LXC container's docker-data volume)
RUNTIME_START = (
    r"\b(?:docker|podman) (?:run|start|compose|create)\b|\bdocker-compose\b|Error response from daemon|"
    r"\bkubectl\b|OCI runtime create failed"
)
# an LXC/LXD/Incus/Proxmox container: its setup is proxmox_lxc's
LXC_CONTEXT = r"\b(?:proxmox|pve|lxc|lxd|incus)\b|\bpct (?:exec|enter)\b|/etc/pve/|\bCT ?\d{3,9}\b"
# WSL 2, in what its machines print and the name reporters give it ("from WSL2"; not a bare "WSL", not
# libnvidia-container's debug line "attempting to load dxcore to see if we are running under Windows Subsystem for Linux
# (WSL)", printed on every host): its kernel's name, its driver directory (the Windows driver's libraries:
# /usr/lib/wsl/lib), the Windows drives it mounts (drvfs: /mnt/c/Users), wsl.exe's own commands and variables, and a
# prompt on a Windows machine's generated name (Windows setup names a computer DESKTOP- and seven capitals or digits; a
# WSL distribution takes the Windows host's name). A reporter comparing a WSL 2 laptop with a Linux server reads as WSL.
WSL_CONTEXT = (
    r"microsoft-standard|/usr/lib/wsl/|/mnt/[a-z]/(?:Users|Windows|Program Files)/|\bWSL_DISTRO_NAME\b|\bWSL\s?2\b"
    r"|\bwsl(?:\.exe)? (?:-l\b|--list|--update|--shutdown|--install|--status|--version)|\bWSL version:"
    r"|(?-i:@DESKTOP-[A-Z0-9]{7}:)"
)
#: a Hyper-V GPU-PV guest (not WSL): the dxgkrnl module built out of tree (staralt/dxgkrnl-dkms) and loaded, as its
#: kernel log says ("dxgkrnl: loading out-of-tree module taints kernel.", "dxgkrnl: module verification failed")
GPU_PV_GUEST = r"\bdxgkrnl:[^\n]{0,40}(?:out-of-tree|module verification failed)|\bdxgkrnl-dkms\b|\bdkms\b[^\n]{0,80}\bdxgkrnl\b"
#: how each container runtime is asked for the GPU (the fixes of the rules and evidence that find it was not asked)
GPU_REQUEST_STEPS = (
    "`docker run --gpus all` (the NVIDIA Container Toolkit configured for docker: `nvidia-ctk runtime configure "
    "--runtime=docker`; compose: `deploy.resources.reservations.devices` with `capabilities: [gpu]`), podman "
    "`--device nvidia.com/gpu=all` (CDI), Apptainer/Singularity `--nv`, enroot/pyxis `NVIDIA_VISIBLE_DEVICES=all` "
    "(images not built from NVIDIA's CUDA bases do not set it); Kubernetes: request `nvidia.com/gpu` and the nvidia "
    "runtime class")
#: libnvidia-container's debug output on a host that is not WSL
NOT_WSL = r"continuing assuming a non-WSL environment"

#: a GPU extra of a Python package (`jax[cuda12]`, `…[gpu]`, `…[cu121]`, TensorFlow's `and-cuda`), as pip's "does not
#: provide the extra" and uv's "does not have an extra named" name it (resolver.gpu_extra_not_provided, its field)
GPU_EXTRA = r"(?:cuda|cu\d|gpu|cudnn|nvidia|tensorrt|nccl|and-cuda)"
#: a CUDA driver API or NVML entry point's name as a Windows loader names it (case matters: `(?-i:…)` around it)
DRIVER_ENTRY_NAME = r"cu[A-Z]\w*|nvml[A-Z]\w*"
