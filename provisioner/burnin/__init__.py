"""Multi-GPU burn-in, shipped into the container venv on its own.

Imports only the stdlib, torch and (lazily) pynvml: never other `provisioner.*` modules.
Run it with `torchrun --nproc-per-node=N -m provisioner.burnin --json --out DIR`, or
`python -m provisioner.burnin ...` to let the local launcher start the ranks. Importing this
package does not import torch.

Modules: config (settings), bandwidth (nccl-tests formulas), patterns (exact test data),
collectives / gemm / fabric (torch work; fabric: per-node and per-pair results across nodes), nvml_reader / nvml_eval / monitor (NVML), nvshmem_probe,
thresholds (+ thresholds.json), evaluation / fabric_eval / verdict (pass/fail), report (JSON, table, summary),
watchdog, faults (test-only fault injection), worker (one rank), launcher (local ranks), entry (CLI).
"""

SCHEMA_VERSION = 1
