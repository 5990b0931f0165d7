"""Pure: human summaries of collected evidence (a torch collect_env-like report, a versions table)."""

from __future__ import annotations

import re

from provisioner import __version__
from provisioner.diagnose import probes as fact_parsers
from provisioner.facts.smi_csv import parse_gpu_query_csv
from provisioner.support.derive import torch_report
from provisioner.support.evidence import Evidence

NA = "N/A"
RELEVANT_PACKAGES = re.compile(
    r"^(torch|torchvision|torchaudio|triton|numpy|nvidia-[\w-]+|pytorch-triton|nccl|cupy[\w-]*|jax[\w-]*|"
    r"nvidia-ml-py|pynvml|mkl[\w-]*|onnx[\w-]*)==", re.IGNORECASE)


def _ok(ev: Evidence, name: str) -> str | None:
    r = ev.record(name)
    return r.output if r is not None and r.status == "ok" else None


def _pretty_os(text: str | None) -> str:
    if not text:
        return NA
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.MULTILINE)
    return m.group(1) if m else NA


def _first_line(text: str | None) -> str:
    if not text or not text.strip():
        return NA
    return text.strip().splitlines()[0].strip()


def _status_of(ev: Evidence, name: str) -> str:
    r = ev.record(name)
    if r is None:
        return "not collected"
    if r.status == "ok":
        return "ok"
    return f"{r.status}: {r.error or ''}".strip()


def _gpu_lines(ev: Evidence) -> list[str]:
    text = _ok(ev, "node.gpu_query")
    if text:
        try:
            return [f"GPU {g.index}: {g.name} (CC {g.compute_cap or '?'}, {g.memory_mib or '?'} MiB, {g.pci_bus_id})"
                    for g in parse_gpu_query_csv(text)]
        except ValueError:
            pass
    listing = _ok(ev, "node.gpu_list")
    if listing:
        return [ln.strip() for ln in listing.splitlines() if ln.strip()]
    return [f"(no GPU listing: {_status_of(ev, 'node.gpu_list')})"]


def collect_env(ev: Evidence) -> str:
    """A report shaped like `python -m torch.utils.collect_env`, from the probes' outputs."""
    torch_rec = ev.record("ct.torch")
    report, other = torch_report(torch_rec.output) if torch_rec is not None and torch_rec.ran else (None, [])
    rep = report or {}
    host_driver = fact_parsers.driver_version(ev.facts.get("host_driver_version")) or NA
    userspace = fact_parsers.driver_version(ev.facts.get("container_driver_version")) or NA
    libc = _first_line(_ok(ev, "ct.libc"))
    packages = [ln for ln in (_ok(ev, "ct.packages") or "").splitlines() if RELEVANT_PACKAGES.match(ln)]
    where = f"CT {ev.vmid} on {ev.host}" if ev.vmid is not None else ev.host
    lines = [
        f"Collected by provisioner {__version__} from {where}; venv {ev.venv or '(default)'}",
        "",
        f"PyTorch version: {rep.get('torch', NA)}",
        f"Is debug build: {rep.get('debug', NA)}",
        f"CUDA used to build PyTorch: {rep.get('cuda') or ('None' if rep.get('torch') else NA)}",
        f"ROCM used to build PyTorch: {rep.get('hip') or NA}",
        "",
        f"OS{' (container)' if ev.vmid is not None else ''}: {_pretty_os(_ok(ev, 'ct.os_release'))}",
        f"OS (node): {_pretty_os(_ok(ev, 'node.os_release'))}",
        f"Kernel: {_first_line(_ok(ev, 'node.uname'))}",
        f"Libc version: {libc}",
        "",
        f"Python version: {rep.get('python_version', NA)} ({rep.get('python', NA)})",
        f"Python platform: {rep.get('platform', NA)}",
        f"Is CUDA available: {rep.get('available', NA)}",
        f"CUDA arch list: {' '.join(map(str, rep.get('arch_list') or rep.get('arch_flags') or [])) or NA}",
        f"NCCL version: {rep.get('nccl') or NA}",
        f"cuDNN version: {rep.get('cudnn') or NA}",
        "GPU models and configuration:",
        *(f"  {g}" for g in _gpu_lines(ev)),
        f"Nvidia driver version (host kernel module): {host_driver}",
        f"Nvidia userspace version (container): {userspace}",
        f"torch check: {_status_of(ev, 'ct.torch')}",
    ]
    problems = [str(rep[k]) for k in ("error", "cuda_error") if rep.get(k)] + other
    if problems:
        lines += ["", "Errors and warnings from the torch check:", *(f"  {p}" for p in problems)]
    lines += ["", "Versions of relevant libraries:", *(f"  [venv] {p}" for p in packages or ["(none found)"])]
    return "\n".join(lines) + "\n"


def versions(ev: Evidence) -> str:
    """One line per component: what runs where."""
    torch_rec = ev.record("ct.torch")
    report, _ = torch_report(torch_rec.output) if torch_rec is not None and torch_rec.ran else (None, [])
    rep = report or {}
    pve = _ok(ev, "node.pveversion")
    rows = [
        ("provisioner", __version__),
        ("node kernel", _first_line(_ok(ev, "node.uname"))),
        ("proxmox-ve", _first_line(pve) if pve else _status_of(ev, "node.pveversion")),
        ("node OS", _pretty_os(_ok(ev, "node.os_release"))),
        ("nvidia kernel module", fact_parsers.driver_version(ev.facts.get("host_driver_version")) or NA),
        ("container OS", _pretty_os(_ok(ev, "ct.os_release"))),
        ("container libc", _first_line(_ok(ev, "ct.libc"))),
        ("nvidia userspace", fact_parsers.driver_version(ev.facts.get("container_driver_version")) or NA),
        ("python", str(rep.get("python_version", NA))),
        ("torch", str(rep.get("torch", NA))),
        ("torch CUDA", str(rep.get("cuda") or ("None (CPU-only build)" if rep.get("torch") else NA))),
        ("NCCL", str(rep.get("nccl") or NA)),
    ]
    width = max(len(k) for k, _ in rows)
    return "".join(f"{k.ljust(width)}  {v}\n" for k, v in rows)
