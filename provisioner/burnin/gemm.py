"""Per-GPU GEMM stress, gpu-burn style: the same A·B again and again, every result compared.

- Each repeat is compared with the first result (gpu-burn's `compare` kernel, fp32 tolerance 1e-3):
  a healthy GPU gives the same answer for the same inputs.
- A few rows of the first result are also checked against a float64 CPU reference, with the
  fp32 accumulation error bound, so a GPU that is consistently wrong is caught too.
- Gflop/s = 2·n³·repeats / seconds; 0 Gflop/s or no repeat means the GPU never computed (gpu-burn#123).
TF32 is switched off for the phase so the fp32 bound holds (gpu-burn uses plain SGEMM too).
"""

from __future__ import annotations

import time

import torch

from provisioner.burnin.faults import Fault, find
from provisioner.burnin.shapes import GemmResult

TOLERANCE = 1e-3  # gpu-burn EPSILON for float
REFERENCE_ROWS = 4


def _reference_mismatches(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> int:
    n = a.shape[0]
    rows = sorted({0, n // 3, (2 * n) // 3, n - 1})[:REFERENCE_ROWS]
    a_rows = a[rows].double()
    ref = a_rows @ b.double()
    bound = (a_rows.abs() @ b.abs().double()) * (2 * n * torch.finfo(torch.float32).eps) + 1e-6
    got = c[rows].to("cpu", torch.float64)
    return int(((got - ref).abs() > bound).sum().item())


def run_gemm(rank: int, device: torch.device, n: int, seconds: float, faults: tuple[Fault, ...] = ()) -> GemmResult:
    """Stress one device for `seconds`; returns the per-rank result dict that `evaluate_gemm` judges."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    result: GemmResult = {"rank": rank, "device": str(device), "name": name, "size": n,
                              "iterations": 0, "gflops": 0.0, "mismatches": 0, "reference_mismatches": 0,
                              "seconds": 0.0, "error": None}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        gen = torch.Generator().manual_seed(10 + rank)  # gpu-burn seeds with srand(10)
        a_cpu = torch.rand(n, n, generator=gen) * 2 - 1
        b_cpu = torch.rand(n, n, generator=gen) * 2 - 1
        a, b = a_cpu.to(device), b_cpu.to(device)
        first = a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # wait with the GIL released (the watchdog must stay alive)
        result["reference_mismatches"] = _reference_mismatches(a_cpu, b_cpu, first)
        c = torch.empty_like(first)
        bad = torch.zeros((), dtype=torch.int64, device=device)
        corrupt = find(faults, "corrupt", rank, "gemm") is not None
        batch, done = 1, 0
        t0 = time.perf_counter()
        elapsed = 0.0
        while True:
            for _ in range(batch):
                torch.matmul(a, b, out=c)
                if corrupt and done == 0:
                    c[0, 0] += 1.0
                bad += ((c - first).abs() > TOLERANCE).sum()
                done += 1
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
            per_call = elapsed / done
            batch = max(1, min(64, int(0.25 / per_call) if per_call > 0 else 64))
        result.update({
            "iterations": done,
            "seconds": elapsed,
            "gflops": 2.0 * n**3 * done / elapsed / 1e9 if elapsed > 0 else 0.0,
            "mismatches": int(bad.item()),
        })
    except Exception as exc:  # an OOM or a CUDA error is a verdict, not a crash
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return result
