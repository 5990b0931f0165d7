"""container_device_missing: the GPU device nodes or runtime did not reach the container."""

from __future__ import annotations

from provisioner.diagnose.model import Rule
from provisioner.diagnose.rules.common import (
    CONTAINER_CONTEXT,
    GPU_REQUEST_STEPS,
    IN_CONTAINER,
    LXC_CONTEXT,
    RUNTIME_CONTEXT,
)

RULES: tuple[Rule, ...] = (
    Rule(
        name="container.nvidia_container_cli_cgroup",
        category="container_device_missing",
        patterns=(
            r"bpf_prog_query\(BPF_CGROUP_DEVICE\) failed",
            r"nvidia-container-cli(?:\.real)?: mount error",
            r"failed to add device rules",
            r"nvidia-container-cli(?:\.real)?: device error",
        ),
        confidence=0.88,
        root_cause=(
            "The NVIDIA container runtime could not set up the GPU devices for the container (device cgroup/mount)."
        ),
        fix=(
            "In nested setups (Docker in LXC) set no-cgroups = true in /etc/nvidia-container-runtime/config.toml "
            "and pass /dev/nvidia* explicitly (or use CDI); otherwise check the toolkit version and cgroup driver."
        ),
        fix_lxc=(
            "Docker inside the LXC container cannot set the device cgroup: inside the container set `no-cgroups = "
            "true` under [nvidia-container-cli] in /etc/nvidia-container-runtime/config.toml, give the container "
            "the nodes ({lxc_words}), and pass them on to docker with `--device /dev/nvidiaX` (or CDI)."
        ),
        examples=(
            "nvidia-container-cli: mount error: failed to add device rules: unable to find any existing device "
            "filters attached to the cgroup: bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not permitted: "
            "unknown.",
        ),
    ),
    Rule(
        name="container.uvm_missing",
        category="container_device_missing",
        patterns=(
            r"/dev/nvidia-uvm(?:-tools)?[\"']?:? (?:No such file or directory|does not exist)",
            r"(?:failed to open|could not open|cannot open|unable to open) [\"']?/dev/nvidia-uvm",
            r"Device /dev/nvidia[\w-]* does not exist",
            r"Could not get mode or device ID of /dev/nvidia",
            r"cudaGetDeviceCount returned 30\b",
            r"Failed to mount [\"']?[^\"'\s]{0,200}(?:/dev/|dev-)nvidia[\w-]*[\"']? (?:onto|on) ",
            r"lstat /dev/nvidia[\w-]*: no such file or directory",
            # strace(1) prints a failed call as `name(args) = -1 ERRNO (strerror)`: the CUDA runtime's own
            # stat/open of the UVM node, as a traced process shows it
            r"\b(?:open|openat|stat|lstat|newfstatat|statx|access|faccessat2?)\([^\n]{0,40}[\"']/dev/nvidia-uvm(?:-tools)?"
            r"[\"'][^\n]{0,120}\) = -1 ENOENT\b",
        ),
        confidence=0.85,
        root_cause=(
            "A GPU device node the container needs (typically /dev/nvidia-uvm) is missing, on the host or in the "
            "container."
        ),
        fix=(
            "Create the UVM nodes on the host at boot (`nvidia-modprobe -u -c=0`) and pass /dev/nvidia-uvm and "
            "/dev/nvidia-uvm-tools (plus every /dev/nvidiaN and /dev/nvidiactl) into the container."
        ),
        fix_lxc=(
            "Create the UVM nodes on the host at boot (`nvidia-modprobe -u -c=0`, e.g. from a systemd unit) and "
            "pass them into the container: {lxc_words}."
        ),
        examples=(
            "cudaGetDeviceCount returned 30\n-> unknown error\nResult = FAIL",
            "Error response from daemon: linux runtime spec devices: error gathering device information while "
            "adding custom device \"/dev/nvidia-uvm-tools\": lstat /dev/nvidia-uvm-tools: no such file or directory",
        ),
    ),
    Rule(
        name="container.cuda_unknown_error",
        category="container_device_missing",
        patterns=(
            r"CUDA unknown error - this may be due to an incorrectly set up environment",
            r"cudaGetDeviceCount\(\)[^\n]{0,200}Error 999",
            r"cuda runtime error \(999\)",
            r"cuInit\(0\) (?:failed|returned) (?:with )?999",
            r"cuInit\(?0?\)?[^\n]{0,60}(?:\b999\b|CUDA_ERROR_UNKNOWN)",
            r"failed to initiali[sz]e CUDA: unknown error",
            r"CUDA error 999\b",
            r"CUDA_ERROR_UNKNOWN\b",
            r"cudaErrorUnknown\b",
            r"initialization error: cuda error: unknown error",
            r"cuInit failed: unknown",
        ),
        confidence=0.7,
        root_cause=(
            "CUDA initialisation fails with an unknown error while the driver answers: usually /dev/nvidia-uvm is "
            "missing or the uvm module is wedged."
        ),
        fix=(
            "Load/create nvidia-uvm (`nvidia-modprobe -u -c=0`, or reload nvidia_uvm) and make sure /dev/nvidia-uvm* "
            "reach the container."
        ),
        examples=(
            "ggml_cuda_init: failed to initialize CUDA: unknown error",
            "CUDA error 999 at /go/src/github.com/jmorganca/ollama/llm/llama.cpp/ggml-cuda.cu:495: unknown error",
            "UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up "
            "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the "
            "available devices to be zero.",
        ),
    ),
    Rule(
        # NVML_ERROR_OPERATING_SYSTEM ("blocked by the operating system/cgroups", nvml.h) inside a container: the runtime
        # found the GPU (the container started) and the container's device cgroup denies it; under WSL 2 the toolkit's
        # `no-cgroups = true` does it (NVIDIA/nvidia-container-toolkit#85, microsoft/WSL#9938)
        name="container.nvml_blocked_in_container",
        category="container_device_missing",
        patterns=(),
        messages=("nvml.operating_system",),
        context=CONTAINER_CONTEXT,
        confidence=0.75,
        root_cause=("NVML inside the container is blocked by the device cgroup: the runtime passed the GPU but the "
                    "container may not open its control device."),
        fix=("Compare with the toolkit's cgroup setting: `no-cgroups` in /etc/nvidia-container-runtime/config.toml "
             "(`false` unless the runtime is rootless; under WSL 2 set it back to `false`), the cgroup driver "
             "(systemd's daemon-reload drops the rules: CDI or the cgroupfs driver), and for LXC the "
             "`lxc.cgroup2.devices.allow: c 195:* rwm` line."),
        examples=("$ sudo docker run --rm --runtime=nvidia --gpus all ubuntu nvidia-smi\n"
                  "Failed to initialize NVML: GPU access blocked by the operating system",),
    ),
    Rule(
        name="container.nvml_unknown_or_permission",
        category="container_device_missing",
        patterns=(
            r"Failed to initialize NVML: Unknown Error",
            r"Failed to initialize NVML: Insufficient Permissions",
            r"/dev/nvidia(?:\d+|ctl|-uvm|-uvm-tools|-caps/[\w-]+)[\"']?:? (?:Operation not permitted|Permission denied)",
        ),
        confidence=0.7,
        root_cause=(
            "The container can see the NVIDIA device nodes but the device cgroup (or permissions) denies opening "
            "them."
        ),
        fix=(
            "Allow the devices: lxc.cgroup2.devices.allow for major 195 and the nvidia-uvm major (or devN lines) "
            "on Proxmox; for Docker keep the cgroup rules across daemon-reload (CDI or systemd cgroup driver fix)."
        ),
        fix_lxc=(
            "Allow the devices in the container's cgroup (`lxc.cgroup2.devices.allow: c 195:* rwm` and `c <nvidia-uvm "
            "major>:* rwm`, the major from /proc/devices) or pass them with entries that allow them: {lxc_words}; "
            "in an unprivileged container the nodes also need a mode it can open (devN `mode=0666`)."
        ),
        examples=("Failed to initialize NVML: Unknown Error",),
    ),
    Rule(
        # CDI (the Container Device Interface library podman, docker >= 25, containerd and CRI-O vendor): the runtime
        # resolves `nvidia.com/gpu=...` from the specs in /etc/cdi and /var/run/cdi, which nvidia-ctk writes
        name="container.cdi_device_unresolvable",
        category="container_device_missing",
        # the wrapping the CDI package's own documentation gives its callers (pkg/cdi doc.go), which moby's daemon uses
        patterns=(r"CDI device injection failed",),
        messages=("cdi.unresolvable_devices", "cdi.host_device_missing", "cdi.load_spec_failed"),
        confidence=0.85,
        root_cause=("The container runtime could not resolve the GPU as a CDI device: no CDI spec it could load "
                    "defines it (none generated, one generated before the driver or devices changed, or one written "
                    "in a newer CDI spec version than this runtime's CDI library reads), or the spec names a device "
                    "node the host does not have."),
        fix=("List what the runtime can see: `nvidia-ctk cdi list`; regenerate the spec after every driver upgrade "
             "(`sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`, or the toolkit's nvidia-cdi-refresh "
             "service); if the spec lists the device but the runtime still refuses it, the runtime's CDI library is "
             "older than the spec's `cdiVersion`: update the runtime (podman, docker, containerd) or use a toolkit "
             "release that writes the older version."),
        examples=("Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=0",),
    ),
    Rule(
        # the reporter's own words for the cgroup-v2 device rules that systemd re-applies on `daemon-reload` without
        # the nodes the toolkit's hook added (nvidia-container-toolkit#48): a long-running container loses its GPUs
        # after hours and falls back to the CPU, and NVML then says "Unknown Error" (container.nvml_unknown_or_permission)
        name="container.gpu_lost_after_a_while",
        category="container_device_missing",
        patterns=(
            r"\bafter (?:some time|a (?:few |couple of )?(?:hours?|days?|while)|(?:sometimes )?\d+\s*(?:hours?|days?|h)\b)"
            r"[^\n]{0,120}\b(?:stops? using|no longer (?:uses?|sees?|finds?|detects?)|loses?|lost|drops?)\b[^\n]{0,30}\bGPUs?\b",
            r"\b(?:stops? using|loses?|lost|drops?)\b[^\n]{0,30}\bGPUs?\b[^\n]{0,120}\bafter (?:some time|a (?:few )?"
            r"(?:hours?|days?|while)|\d+\s*(?:hours?|days?|h)\b)",
        ),
        messages=("nvml.unknown",),
        context=CONTAINER_CONTEXT,
        confidence=0.6,
        root_cause=("A long-running container loses its GPUs after a while: with Docker's systemd cgroup driver, every "
                    "`systemctl daemon-reload` re-applies the container's device rules without the NVIDIA nodes the "
                    "toolkit's hook added, so the GPU disappears (NVML: \"Unknown Error\") and the application falls "
                    "back to the CPU."),
        fix=("Give Docker the cgroupfs driver (`\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]` in "
             "/etc/docker/daemon.json, restart docker), or pass the GPUs as CDI devices / explicit `--device "
             "/dev/nvidia*` and create the /dev/char links (`nvidia-ctk system create-dev-char-symlinks --create-all`); "
             "restarting the container restores it until the next reload."),
        examples=("after sometimes 12 hours and other times a day plus Ollama will stop using the GPU and revert to CPU "
                  "only (docker compose)",),
    ),
    Rule(
        # PyTorch's "no driver" (libcuda not loadable) inside a docker/podman/enroot/Apptainer container that started:
        # the host's driver is fine (a GPU request on a host without one fails before the container starts); the
        # container was started without asking for the GPU, so its runtime injected neither nodes nor libcuda
        name="container.no_driver_in_container",
        category="container_device_missing",
        patterns=(r"Found no NVIDIA driver on your system",),
        messages=("torch.no_driver",),
        context=IN_CONTAINER,
        unless=LXC_CONTEXT,
        confidence=0.9,
        demotes=("no_driver_loaded",),
        root_cause=("The container was started without the GPU: its runtime injected neither the /dev/nvidia* nodes "
                    "nor the driver's libcuda, so PyTorch finds no driver inside it (the host's driver is not in "
                    "question: a GPU request on a host without a driver fails before the container starts)."),
        fix="Ask the runtime for the GPU: " + GPU_REQUEST_STEPS + ".",
        examples=("$ srun --gpus=2 --container-image=myimage --pty bash -i\nRuntimeError: Found no NVIDIA driver on your "
                  "system. Please check that you have an NVIDIA GPU and installed a driver from "
                  "http://www.nvidia.com/Download/index.aspx",),
    ),
    Rule(
        # Compose refusing the file's GPU request: docker-compose 1.x before 1.28.0 has no
        # deploy.resources.reservations.devices, and `runtime:` exists only in file formats 2.3/2.4
        name="container.compose_cannot_request_gpu",
        category="container_device_missing",
        patterns=(),
        messages=("compose.gpu_key_rejected",),
        confidence=0.85,
        root_cause=("docker-compose refused the Compose file's GPU request: this docker-compose (1.x before 1.28.0) or "
                    "the file's format version has no such key, so the service cannot be given the GPU."),
        fix=("Use Compose v2 (`docker compose`, the Docker CLI plugin) or docker-compose 1.28.0 or later, and request "
             "the GPU under `deploy.resources.reservations.devices` (`driver: nvidia`, `count: all` or `device_ids`, "
             "`capabilities: [gpu]`); with an older docker-compose, `runtime: nvidia` works only in a file of format "
             "version 2.3 or 2.4."),
        examples=("ERROR: The Compose file './docker-compose.yml' is invalid because:\nservices.testserver.deploy."
                  "resources.reservations value Additional properties are not allowed ('devices' was unexpected)",),
    ),
    Rule(
        # the log's own `docker run`/`podman run` asks for no GPU (no --gpus, no nvidia runtime, no CDI or /dev/nvidia
        # device, no NVIDIA_VISIBLE_DEVICES) and CUDA then sees none: a GPU image does not bring the GPU by itself, the
        # runtime injects it only when asked (floydhub/dockerfiles#3: `docker run … floydhub/pytorch:…-gpu-py3`,
        # torch.cuda.is_available() False; the fix was nvidia-docker)
        name="container.run_without_gpu_request",
        category="container_device_missing",
        # torch.cuda's answer on the next line (the REPL's, IPython's `Out[n]:`), after at most two other printed
        # values of a `python -c` (no prompt between: not another call's False), or printed beside its name
        patterns=(
            r"\bcuda\.is_available\(\)[^\n]{0,120}\n\s*(?:>>>\s*|Out\[\d+\]:\s*)?False\b",
            r"\bpython3?\s+-c\s[^\n]{0,300}\bcuda\.is_available\(\)\)?;?\s*[\"']\s*(?:\n[^\n>$#]{0,60}){1,2}\n\s*False\s*$",
            r"\bcuda\.is_available\(\)\)?\s*[:=]\s*False\b",
        ),
        messages=("torch.no_gpus",),
        requires=(r"(?:^|[$#>]\s*)(?:sudo\s+)?(?:docker|podman)\s+(?:container\s+)?run\s",),
        # the GPU asked for (the flags, the runtime as the daemon's default, the OCI hook, Kubernetes), another
        # vendor's GPU (ROCm's /dev/kfd, Intel's /dev/dri), or a torch that is not a CUDA build (whatever the flags)
        unless=(r"--gpus\b|--runtime[= ]+nvidia|nvidia\.com/gpu|--device[= ]+[\"']?/dev/(?:nvidia|kfd|dri)"
                r"|NVIDIA_VISIBLE_DEVICES|nvidia-docker|\bcapabilities:|default-runtime|--hooks-dir|\bkubectl\b"
                r"|\brocm|\+cpu\b|CUDA used to build PyTorch\s*:\s*(?:None|Could not collect)"
                r"|torch\.version\.cuda\)?[^\n]{0,20}\n\s*None\b|\bcpu_py\d"),
        confidence=0.8,
        demotes=("no_driver_loaded",),
        root_cause=("The container was started without asking for the GPU (its `docker run`/`podman run` has no `--gpus`, "
                    "nvidia runtime or GPU device), so the runtime injected neither the /dev/nvidia* nodes nor the "
                    "driver's libraries and CUDA sees no GPU in it; a GPU image does not bring the GPU by itself."),
        fix="Ask for the GPU when starting it: " + GPU_REQUEST_STEPS + ".",
        examples=("$ sudo docker run -t -i floydhub/pytorch:latest-gpu-py3 ipython\nIn [2]: torch.cuda.is_available()\n"
                  "Out[2]: False",),
    ),
    Rule(
        name="container.device_file_missing",
        category="container_device_missing",
        patterns=(
            r"cannot access '?/dev/nvidia",
            r"could not open the device file /dev/nvidia(?:\d+|ctl)",
            r"/dev/nvidia(?:\d+|ctl)[\"']?:? No such file or directory",
        ),
        confidence=0.65,
        root_cause="GPU device nodes (/dev/nvidiaN, /dev/nvidiactl) are missing where CUDA runs.",
        fix=(
            "Pass every /dev/nvidiaN plus /dev/nvidiactl and /dev/nvidia-uvm* into the container (devN entries on "
            "PVE >= 8.1)."
        ),
        fix_lxc="Pass every /dev/nvidiaN plus /dev/nvidiactl and /dev/nvidia-uvm* into the container: {lxc_words}.",
        examples=("NVIDIA: could not open the device file /dev/nvidiactl (No such file or directory).",),
    ),
    Rule(
        name="container.gpu_runtime_missing",
        category="container_device_missing",
        patterns=(
            r"The NVIDIA Driver was not detected\. GPU functionality will not be available",
            r"could not select device driver \"[^\"]*\" with capabilities: \[\[[\w ]*\]",  # %v of [][]string
            r"unknown or invalid runtime name: nvidia",
            r"Insufficient nvidia\.com/gpu",
        ),
        confidence=0.85,
        root_cause="The container engine has no GPU runtime configured, so no GPU devices were given to the container.",
        fix=(
            "Install nvidia-container-toolkit, run `nvidia-ctk runtime configure` for the engine and restart it (or "
            "use the device plugin on Kubernetes)."
        ),
        examples=(
            "WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.\n   Use the "
            "NVIDIA Container Toolkit to start this container with GPU support; see\n   "
            "https://docs.nvidia.com/datacenter/cloud-native/ .",
            'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
        ),
    ),
    Rule(
        # Kubernetes asked the node's CRI runtime for the NVIDIA runtime handler (`runtimeClassName: nvidia`, or the GPU
        # Operator making it the default) and the runtime's config has none: containerd's "no runtime for %q is
        # configured" (wrapped "failed to get sandbox runtime: …"), CRI-O's "failed to find runtime handler %s from
        # runtime list %v" (canonical/microk8s#2474: the 1.21 GPU addon never registered it)
        name="container.cri_runtime_handler_missing",
        category="container_device_missing",
        patterns=(),
        messages=("cri.containerd_no_runtime", "cri.crio_no_runtime_handler"),
        # the handler quoted, or quoted and escaped inside a journal's error="…" field
        requires=(r"\bno runtime for \\?[\"'`]?nvidia|\bfailed to find runtime handler \\?[\"'`]?nvidia",),
        # below a driver that failed to build or load: the GPU Operator's toolkit registers the runtime only once the
        # driver is up, so the handler is missing because of it
        confidence=0.8,
        root_cause=("The pod asks for the NVIDIA runtime handler and the node's container runtime (containerd or "
                    "CRI-O) has no such runtime in its configuration, so no pod sandbox starts."),
        fix=("Register the handler on the node and restart the runtime: `nvidia-ctk runtime configure "
             "--runtime=containerd` (or `--runtime=crio`), `systemctl restart containerd`; k3s/RKE2 and MicroK8s keep "
             "their own containerd config (k3s: config.toml.tmpl under /var/lib/rancher/k3s/agent/etc/containerd/; "
             "MicroK8s: its GPU addon); with the GPU Operator, check its toolkit daemonset on that node. The "
             "RuntimeClass's `handler` must name the runtime as configured."),
        examples=('Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no '
                  'runtime for "nvidia" is configured',),
    ),
    Rule(
        # TrueNAS SCALE's apps (Docker compose since 24.10 ElectricEel) render the GPU reservation from the app's
        # nvidia_gpu_selection, which must hold the GPU's UUID; selections migrated from the Kubernetes apps held only
        # the PCI slot (truenas/apps#785, TrueNAS NAS-132086)
        name="container.truenas_gpu_uuid_missing",
        category="container_device_missing",
        patterns=(),
        messages=("truenas.gpu_uuid_missing",),
        confidence=0.9,
        root_cause=("The TrueNAS app's GPU selection names the GPU's PCI slot without its UUID (selections migrated from "
                    "the Kubernetes apps to Docker in 24.10 lacked it), so the app's compose file with the NVIDIA GPU "
                    "cannot be rendered and the app does not start with the GPU."),
        fix=("Edit the app: under its GPU configuration clear the NVIDIA GPU, save, then select it again so TrueNAS "
             "stores its UUID (the GPU must be listed: the NVIDIA driver enabled in the Apps settings, `nvidia-smi -L` "
             "on the host); a TrueNAS release with NAS-132086 fixed re-reads it on update."),
        examples=("[EFAULT] Failed to render compose templates: base_v1_1_5.utils.TemplateException: Expected [uuid] to "
                  "be set for GPU inslot [0000:02:00.0] in [nvidia_gpu_selection]",),
    ),
    Rule(
        # JetPack 4 (L4T r32): the l4t-base images hold no CUDA/cuDNN/TensorRT; the NVIDIA runtime mounts the host's
        # (its CSV mount lists) into the container (NVIDIA's l4t-base image notes, dusty-nv/jetson-containers' README:
        # "default-runtime": "nvidia"). A CUDA library missing there is the runtime not used, or a host without JetPack.
        name="container.l4t_runtime_mounts_missing",
        category="container_device_missing",
        patterns=(r"\blib(?:cu\w+|nv\w+|cudnn\w*)\.so[\d.]*: cannot open shared object file",),
        messages=("ld.cannot_open_shared_object",),
        requires=(r"\bl4t[-_ ]?r?32\.\d|\bL4T R?32\b|JetPack 4\.\d",),
        context=IN_CONTAINER + r"|Downloaded newer image for",
        unless=r"libnvidia-ml\.so",  # Jetson has no NVML, in a container or not
        confidence=0.9,
        demotes=("missing_shared_lib",),
        root_cause=("This JetPack 4 (L4T r32) container has no CUDA libraries of its own: the NVIDIA container runtime "
                    "mounts them from the host, and it did not (the container was not started with it, or the host "
                    "lacks JetPack's CUDA)."),
        fix=("Start the container with the NVIDIA runtime (`--runtime nvidia`, or `\"default-runtime\": \"nvidia\"` in "
             "/etc/docker/daemon.json for builds and compose), and check the host has JetPack's CUDA, cuDNN and "
             "TensorRT (`ls /usr/local/cuda/lib64`, the CSV lists under /etc/nvidia-container-runtime/host-files-for-"
             "container.d/)."),
        examples=(
            # dusty-nv/jetson-containers#93
            "Status: Downloaded newer image for dustynv/ros:noetic-pytorch-l4t-r32.5.0\n"
            "OSError: libcurand.so.10: cannot open shared object file: No such file or directory",
        ),
    ),
    Rule(
        name="container.driver_unreachable_in_container",
        category="container_device_missing",
        patterns=(
            r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
            r"NVIDIA-SMI couldn't find libnvidia-ml\.so library",
        ),
        confidence=0.78,
        context=IN_CONTAINER,
        unless=LXC_CONTEXT,  # an LXC container's config is plumbing.lxc_driver_unreachable's
        root_cause=(
            "Inside the container nvidia-smi cannot reach the driver: the /dev/nvidia* nodes (or the driver "
            "libraries) were not passed in, or the host driver itself is not loaded."
        ),
        fix=(
            "Check `nvidia-smi` on the host first; then pass /dev/nvidiactl, every /dev/nvidiaN and /dev/nvidia-uvm* "
            "into the container and install the userspace driver at exactly the host's version."
        ),
        examples=(
            # in an LXC container the same words are plumbing.lxc_driver_unreachable's
            "$ docker run --rm --gpus all nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi\nNVIDIA-SMI has failed "
            "because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is "
            "installed and running.",
        ),
    ),
    Rule(
        name="container.lxc_userspace_missing",
        category="proxmox_lxc",  # an LXC container's own setup (its userspace, its config), as evidence.py says
        patterns=(
            r"load library failed: libnvidia-ml\.so\.1",
            r"libnvidia-ml\.so(?:\.1)?: cannot open shared object file",
            r"NVIDIA-SMI couldn't find libnvidia-ml\.so library",
        ),
        confidence=0.9,
        # the context steers: inside a Proxmox/LXC/LXD container whose host has the driver, a missing
        # libnvidia-ml is the container's userspace (this project's first hypothesis), not "no driver"
        context=LXC_CONTEXT,
        demotes=("no_driver_loaded",),
        root_cause=(
            "Inside the LXC container the NVIDIA driver's userspace (libnvidia-ml.so.1) is missing: the host has "
            "the kernel module, the container needs the user-space libraries at exactly the host's version."
        ),
        fix=(
            "Check `nvidia-smi` on the Proxmox host and note its driver version; in the container install only the "
            "userspace at that version (`NVIDIA-Linux-x86_64-<host version>.run --no-kernel-modules --silent`), with "
            "/dev/nvidia* passed in; then nvidia-container-toolkit inside the container finds libnvidia-ml.so.1."
        ),
        examples=(
            "Proxmox / LXC: Unable to start docker container, nvidia-container-cli: initialization error: load "
            "library failed: libnvidia-ml.so.1",
        ),
    ),
    Rule(
        name="container.smi_works_cuda_unavailable",
        category="container_device_missing",
        patterns=(r"is_available\(\)[^\n]{0,120}(?:\n[^\n]{0,300}){0,3}\n\s*(?:>>>\s*)?False\b",),
        confidence=0.8,
        # a join of two facts in one container log: NVML works (nvidia-smi needs only /dev/nvidiactl and
        # /dev/nvidiaN) while CUDA does not initialise (it needs /dev/nvidia-uvm too)
        requires=(r"NVIDIA-SMI \d+\.\d+|nvidia-smi[^\n]{0,40}\b(?:works?|worked|working|fine)\b",),
        context=r"\b(?:container|docker|podman|lxc|lxd|incus|pct|kubernetes|k8s|kubectl)\b",
        unless=r"\+cpu\b|CUDA used to build PyTorch\s*:\s*None|torch\.version\.cuda\)?[^\n]{0,20}\n\s*None",
        demotes=("cpu_only_wheel", "no_driver_loaded"),
        root_cause=(
            "nvidia-smi works in the container but CUDA does not: the container has /dev/nvidiactl and /dev/nvidiaN "
            "(all NVML needs) but not /dev/nvidia-uvm and /dev/nvidia-uvm-tools, which CUDA needs."
        ),
        fix=(
            "Create the UVM nodes on the host (`nvidia-modprobe -u -c=0`) and pass /dev/nvidia-uvm and "
            "/dev/nvidia-uvm-tools into the container (docker: `--device /dev/nvidia-uvm`; LXC: `devN:` lines or "
            "mount entries plus the cgroup allow for nvidia-uvm's major)."
        ),
        examples=(
            "In the container, \"nvidia-smi,nvcc -V\" worked.\nBut when use the cuda, it failded!\n\nimport torch\n"
            "torch.cuda.is_available()\nFalse",
        ),
    ),
    Rule(
        name="container.no_device_in_container",
        category="container_device_missing",
        patterns=(
            r"no CUDA-capable device is detected",
            r"No CUDA GPUs are available",
            r"CUDA_ERROR_NO_DEVICE",
            r"cudaErrorNoDevice",
            r"^No devices were found",
        ),
        confidence=0.45,
        generic=True,
        context=CONTAINER_CONTEXT,
        root_cause="CUDA sees no GPU inside the container: the device nodes were not passed through.",
        fix=(
            "Pass /dev/nvidiaN, /dev/nvidiactl and /dev/nvidia-uvm* into the container and allow them in the device "
            "cgroup."
        ),
        fix_lxc="Pass /dev/nvidiaN, /dev/nvidiactl and /dev/nvidia-uvm* into the container: {lxc_words}.",
        examples=(
            "root@ct101:~# nvidia-smi\nNo devices were found\nroot@ct101:~# cat /etc/pve/lxc/101.conf  # lxc container",
        ),
    ),
    Rule(
        name="container.nvidia_container_cli_error",
        category="container_device_missing",
        patterns=(
            r"nvidia-container-cli(?:\.real)?: [\w ]{0,40}error",
            r"error running hook #\d+: error running hook: exit status \d+",
            r"error executing hook `?[^`\s]*nvidia-container-(?:toolkit|runtime-hook|cli)",
        ),
        confidence=0.6,
        root_cause="The NVIDIA container runtime hook failed, so the container got no GPU devices.",
        fix="Read the nvidia-container-cli message; check `nvidia-container-cli -k -d /dev/tty info` on the host.",
        examples=(
            "docker: Error response from daemon: failed to create task for container: failed to create shim task: "
            "OCI runtime create failed: runc create failed: unable to start container process: error during "
            "container init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
            "nvidia-container-cli: initialization error: open failed: /proc/sys/kernel/overflowuid: permission "
            "denied: unknown",
        ),
    ),
    Rule(
        # libnvidia-container mounts the driver's libraries per capability (src/nvc_info.c: video = libnvcuvid,
        # libnvidia-encode, libnvidia-opticalflow); NVIDIA_DRIVER_CAPABILITIES defaults to utility,compute
        name="container.video_capability_missing",
        category="container_device_missing",
        patterns=(r"\bFailed loading nvcuvid\b",),
        messages=("ffnvcodec.video_lib_missing",),
        context=RUNTIME_CONTEXT,
        unless=LXC_CONTEXT,
        demotes=("driver_too_old", "missing_shared_lib"),
        confidence=0.8,
        root_cause=("The container has no NVDEC/NVENC library ({library}): the NVIDIA runtime mounts the driver's video "
                    "libraries only when the container asks for the `video` capability (the default is compute,utility), "
                    "and only if the host has them."),
        fix=("Give the container NVIDIA_DRIVER_CAPABILITIES=compute,video,utility (or all) — `-e` for docker, the "
             "Deployment's env on Kubernetes — and make sure the host has the driver's video libraries "
             "(`ldconfig -p | grep -E 'nvcuvid|nvidia-encode'` on the host)."),
        examples=("I upgraded from 10.5.5 on Kubernetes\n[h264_cuvid @ 0xdeadbeef] Cannot load libnvcuvid.so.1\n"
                  "[h264_cuvid @ 0xdeadbeef] Failed loading nvcuvid.",),
    ),
    Rule(
        # runc (libcontainer/process_linux.go) "failed to fulfil mount request: %w" with a driver file the runtime
        # was told to mount (a CDI spec's or the legacy hook's list): the file is gone, the list is older than the
        # driver (a driver upgrade without regenerating /etc/cdi/nvidia.yaml) or names a daemon socket not running
        name="container.stale_driver_mounts",
        category="container_device_missing",
        patterns=(
            r"failed to fulfil mount request: open \S*(?:nvidia|libcuda|nvcuvid)\S*: no such file or directory",
            r"error mounting \"?\S*(?:libnvidia|libcuda|nvcuvid|nvidia-persistenced)\S*\"? to rootfs[^\n]{0,200}no such file",
        ),
        messages=("cdi.host_device_missing",),
        unless=LXC_CONTEXT,
        demotes=("proxmox_lxc", "driver_lib_mismatch", "missing_shared_lib"),
        confidence=0.85,
        root_cause=("The container runtime was told to mount an NVIDIA driver file the host no longer has: its list of "
                    "driver files (the CDI spec /etc/cdi/nvidia.yaml, or the toolkit's) was made for another driver "
                    "version, or names a daemon's socket (nvidia-persistenced) that is not running."),
        fix=("Regenerate the CDI spec after every driver change (`sudo nvidia-ctk cdi generate "
             "--output=/etc/cdi/nvidia.yaml`, or enable the toolkit's nvidia-cdi-refresh service), start "
             "nvidia-persistenced if its socket is named, then recreate the container (`docker compose up -d "
             "--force-recreate`)."),
        examples=("Error response from daemon: failed to create task for container: failed to create shim task: OCI "
                  "runtime create failed: runc create failed: unable to start container process: error during container "
                  "init: failed to fulfil mount request: open /usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.580.159.04: no "
                  "such file or directory",),
    ),    Rule(
        # An empty driver library in a container: libnvidia-container creates each file it bind-mounts from the host
        # as an empty file first; an image built or committed under the NVIDIA runtime keeps those zero-byte files
        # (NVIDIA/libnvidia-container#140, its maintainer; docker buildkit: NVIDIA/nvidia-docker#1504), and a container
        # run without the runtime sees them instead of the host's libraries (Thinklab-SJTU/R3Det_Tensorflow#78). On
        # Jetson (JetPack 4, the runtime's CSV mode) CUDA, cuDNN and TensorRT come from the device the same way
        # (dusty-nv/jetson-inference#1733, #1290). Not nvidia-container-cli's own "load library failed": that file is
        # the host's.
        name="container.placeholder_driver_library",
        category="container_device_missing",
        patterns=(),
        messages=("ld.not_an_elf_object", "binutils.file_truncated"),
        requires=(r"(?:\blib(?:cuda|nvidia-[\w-]+|nvcuvid)|(?:/usr/lib/aarch64-linux-gnu/(?:tegra/)?|/usr/local/cuda[\w.-]*"
                  r"/targets/aarch64-linux/lib/)lib(?:cublas\w*|cudart|cudnn\w*|nvinfer\w*|nvonnxparser|nvparsers|cufft\w*"
                  r"|curand|cusolver\w*|cusparse|nvrtc\w*|npp\w*|nvToolsExt|nvdla\w*))\.so[\w.]*:?\s+(?:file too short"
                  r"|file not recognized: file truncated)",),
        unless=r"load library failed: [^\n]{0,300}(?:file too short|file not recognized)",
        context=RUNTIME_CONTEXT + r"|\bl4t\b|\bjetpack\b|\bDockerfile\b",
        demotes=("missing_shared_lib",),
        confidence=0.92,
        root_cause=("A driver library in the container is an empty placeholder: the NVIDIA container runtime mounts "
                    "the host's libraries over such files (on Jetson with JetPack 4 also CUDA, cuDNN and TensorRT), "
                    "and here it did not — the container or the build step ran without the NVIDIA runtime, the image "
                    "was built or committed under it and kept the empty files, or (Jetson) the device itself lacks the "
                    "libraries the runtime mounts."),
        fix=("Run the container with the NVIDIA runtime (`docker run --gpus all` / `--runtime nvidia`); for `docker "
             "build` steps that need the libraries set `\"default-runtime\": \"nvidia\"` in /etc/docker/daemon.json "
             "(buildkit does not use it: `DOCKER_BUILDKIT=0`), or link against the toolkit's stubs "
             "(/usr/local/cuda/lib64/stubs); rebuild an image that has zero-byte libnvidia-*/libcuda files in it from "
             "a clean base. On Jetson with JetPack 4 install CUDA, cuDNN and TensorRT on the device itself (SDK "
             "Manager or the SD-card image): the runtime mounts them from there."),
        examples=("root@2705d68d0852:/# make\n/usr/lib/aarch64-linux-gnu/libcublas.so  file not recognized: File "
                  "truncated",),  # dusty-nv/jetson-inference#1290
    ),
)
