"""One burn-in rank (run by torchrun or by the local launcher).

Order: NVML preflight and monitor start (local rank 0) -> init_process_group -> GEMM -> collectives
-> soak -> NVSHMEM -> monitor verdict -> result. Every blocking step runs under the watchdog; when
it fires, rank 0 writes the result it has so far (with the timeout as the reason, plus what the
other ranks reported through the c10d store) and the process exits.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import tempfile
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from provisioner.burnin.collectives import Runtime, SoakOutcome, SweepOutcome, soak, sweep, usable_sizes
from provisioner.burnin.config import BurninConfig
from provisioner.burnin.evaluation import evaluate_collectives, evaluate_gemm, evaluate_soak
from provisioner.burnin.fabric import local_address, run_fabric
from provisioner.burnin.fabric_eval import evaluate_fabric
from provisioner.burnin.faults import ENV as FAULT_ENV
from provisioner.burnin.faults import parse_faults
from provisioner.burnin.gemm import run_gemm
from provisioner.burnin.monitor import Monitor
from provisioner.burnin.nvml_eval import evaluate_preflight
from provisioner.burnin.nvml_reader import NvmlReader
from provisioner.burnin.nvshmem_probe import precheck, run_probe
from provisioner.burnin.report import build_result, format_summary, format_table, json_line, write_outputs
from provisioner.burnin.shapes import Environment, GemmResult, PeerTimeout, RankDevice, ResultDoc
from provisioner.burnin.thresholds import load as load_thresholds
from provisioner.burnin.verdict import FAIL, PhaseResult
from provisioner.burnin.watchdog import Watchdog

STORE_PREFIX = "burnin/timeout/"
RESULT_KEY = "burnin/result"  # rank 0's result, relayed to the other nodes (each node keeps the verdict)
RANK0_SLACK = 2.0  # rank 0 gives up last, so it can report which rank timed out


class Worker:
    def __init__(self, cfg: BurninConfig, result_file: str | None) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", str(self.rank)))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.cfg = replace(cfg, world_size=self.world)
        self.result_file = result_file
        self.started = time.monotonic()
        self.fault_spec = os.environ.get(FAULT_ENV) or None
        self.faults = parse_faults(self.fault_spec)
        self.phases: dict[str, PhaseResult] = {}
        self.current: str | None = None
        self.sweep: SweepOutcome | None = None
        self.soak: SoakOutcome | None = None
        self.monitor: Monitor | None = None
        self.gpu_names: list[str] = []
        self.devices: list[RankDevice] = []
        self.env_info: Environment | None = None
        self.store: Any = None
        self.broken = False
        self._done = threading.Lock()
        self._finished = False
        self.exit_code = 1
        self.table = load_thresholds(self.cfg.thresholds_file, self.cfg.thresholds_override)
        self.dog = Watchdog(self.on_timeout)

    # -- messages ---------------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        if self.rank == 0:
            try:
                print(f"[burnin] {msg}", file=sys.stderr, flush=True)
            except (OSError, ValueError):  # a closed stderr must not kill the rank
                pass

    def emit(self, line: str) -> None:
        """Rank 0's live nccl-tests table on stderr (stdout stays for the result)."""
        if self.rank == 0:
            try:
                print(line, file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass

    def _peer_reports(self, wait: float) -> dict[int, PeerTimeout]:
        """Timeouts other ranks left in the c10d store: {rank: {"region": ..., "limit": ...}}."""
        if self.store is None:
            return {}
        end = time.monotonic() + wait
        found: dict[int, PeerTimeout] = {}
        while True:
            for r in range(self.world):
                if r == self.rank or r in found:
                    continue
                key = f"{STORE_PREFIX}{r}"
                try:
                    if self.store.check([key]):
                        found[r] = json.loads(self.store.get(key).decode(errors="replace"))
                except Exception:  # noqa: S112 - the store may be gone with its host
                    continue
            if len(found) == self.world - 1 or time.monotonic() > end:
                return found
            time.sleep(0.1)

    @staticmethod
    def _describe_peers(peers: dict[int, PeerTimeout]) -> str:
        by_region: dict[str, list[int]] = {}
        for r, info in sorted(peers.items()):
            by_region.setdefault(f"{info.get('region')} (limit {info.get('limit', 0):g}s)", []).append(r)
        return "; ".join(f"rank(s) {', '.join(map(str, ranks))} timed out in {region}"
                         for region, ranks in by_region.items())

    def on_timeout(self, region: str, limit: float) -> None:
        msg = f"timeout: {region} did not finish within {limit:g}s on rank {self.rank}"
        try:
            print(f"[burnin rank {self.rank}] {msg}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        if self.store is not None:
            try:
                self.store.set(f"{STORE_PREFIX}{self.rank}", json.dumps({"region": region, "limit": limit}))
            except Exception:  # noqa: S110 - best effort: the store host may be the hung rank
                pass
        if self.rank == 0:
            peers = self._describe_peers(self._peer_reports(wait=1.0))
            full = msg + (f" ({peers})" if peers else "")
            self.finish([full], failed_step=full)
        os._exit(self.exit_code if self._finished and self.rank == 0 else 1)

    def on_error(self, region: str, exc: BaseException) -> str:
        """An exception in a collective (usually a peer that died or timed out); the group is unusable."""
        self.broken = True
        first = str(exc).splitlines()[0] if str(exc) else ""
        first = first.split(" This is typically")[0][:200]
        peers = self._describe_peers(self._peer_reports(wait=2.0)) if self.rank == 0 else ""
        if peers:
            return f"hang: {peers}; rank {self.rank} then failed in {region}: {type(exc).__name__}: {first}"
        return f"{region}: {type(exc).__name__}: {first}"

    # -- phases -----------------------------------------------------------------------------------
    def _set_phase(self, name: str) -> None:
        self.current = name
        if self.monitor is not None:
            self.monitor.set_phase(name)
        self.log(f"phase {name}")

    def preflight(self) -> None:
        if self.local_rank != 0:
            return
        reader = NvmlReader()
        reader.open()
        record = reader.record()
        self.gpu_names = [str(g.get("name")) for g in record.get("gpus", [])][: self.local_world]
        if "preflight" in self.cfg.phases:
            d = self.table["defaults"]
            self.phases["preflight"] = evaluate_preflight(
                record, expected_gpus=self.cfg.expected_gpus,
                shm_warn_bytes=int(d["shm_warn_bytes"]), shm_fail_bytes=int(d["shm_fail_bytes"]),
            )
        self.monitor = Monitor(reader, record, self.cfg.monitor_interval)
        self.monitor.start()

    def init(self, device: torch.device) -> None:
        self._set_phase("init")
        with self.dog.guard("init_process_group", self.cfg.timeout + self._slack()):
            dist.init_process_group(self.cfg.backend, timeout=timedelta(seconds=self.cfg.timeout + 60))
            try:
                self.store = dist.distributed_c10d._get_default_store()
            except Exception:
                self.store = None
            me: RankDevice = {
                "rank": self.rank, "pid": os.getpid(), "host": socket.gethostname(),
                "node_rank": int(os.environ.get("GROUP_RANK", "0")),
                "addr": local_address(os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")),
                "device_index": device.index if device.type == "cuda" else -1,
                "bus": _bus_id(device), "name": torch.cuda.get_device_name(device) if device.type == "cuda"
                else f"cpu ({platform.machine()})",
            }
            gathered: list[RankDevice | None] = [None] * self.world  # each rank's `me`, unpickled
            dist.all_gather_object(gathered, me)
            self.devices = [g for g in gathered if isinstance(g, dict)]

    def _slack(self) -> float:
        return RANK0_SLACK if self.rank == 0 else 0.0

    def gemm(self, rt: Runtime) -> None:
        self._set_phase("gemm")
        cfg = self.cfg
        with self.dog.guard("gemm", cfg.gemm_seconds + cfg.timeout + self._slack()):
            mine = run_gemm(self.rank, rt.device, cfg.gemm_size, cfg.gemm_seconds, self.faults)
            ranks: list[GemmResult | None] = [None] * self.world  # each rank's run_gemm result
            dist.all_gather_object(ranks, mine)
        self.phases["gemm"] = evaluate_gemm(
            [g for g in ranks if isinstance(g, dict)], world_size=self.world,
            thresholds_on=cfg.backend == "nccl", slow_fraction=float(self.table["defaults"]["gemm_slow_fraction"]),
        )

    def collectives(self, rt: Runtime) -> None:
        self._set_phase("collectives")
        self.sweep = SweepOutcome()
        sweep(rt, self.sweep, self.on_error)
        self.phases["collectives"] = self._judge_sweep()
        self.sweep = None

    def fabric(self, rt: Runtime) -> None:
        self._set_phase("fabric")
        frac = self.table["defaults"].get("fabric_slow_fraction")
        slow_fraction = float(frac) if frac is not None else None
        raw = run_fabric(rt, slow_fraction=slow_fraction)
        if raw.get("faults") and not self.fault_spec:  # faults planted on other nodes' ranks only
            self.fault_spec = "; ".join(f"rank {r}: {spec}" for r, spec in sorted(raw["faults"].items()))
        self.phases["fabric"] = evaluate_fabric(raw, backend=self.cfg.backend, slow_fraction=slow_fraction)
        for reason in self.phases["fabric"].reasons:
            self.log(f"fabric: {reason}")

    def _judge_sweep(self, extra: list[str] | None = None) -> PhaseResult:
        assert self.sweep is not None
        res = evaluate_collectives(
            self.sweep.rows, world_size=self.world, backend=self.cfg.backend, gpu_names=self.gpu_names,
            table=self.table, expected_collectives=self.cfg.collectives, errors=self.sweep.errors + (extra or []),
        )
        if self.sweep.skipped_sizes:
            res.note(f"sizes skipped, not enough free GPU memory: {self.sweep.skipped_sizes}")
        return res

    def run_soak(self, rt: Runtime, sizes: list[int]) -> None:
        self._set_phase("soak")
        if self.cfg.duration <= 0:
            self.phases["soak"] = PhaseResult("soak", "skip", ["--duration 0"])
            return
        if not sizes:
            self.phases["soak"] = PhaseResult("soak", "skip", ["no message size fits in GPU memory"])
            return
        self.soak = SoakOutcome()
        soak(rt, max(sizes), self.soak, self.on_error)
        self.phases["soak"] = self._judge_soak()
        self.soak = None

    def _judge_soak(self, extra: str | None = None) -> PhaseResult:
        assert self.soak is not None
        s = self.soak
        return evaluate_soak(
            s.samples, wrong=s.wrong, seconds=s.seconds, size=s.size, thresholds_on=self.cfg.backend == "nccl",
            min_fraction=float(self.table["defaults"]["soak_min_fraction"]), error=extra or s.error,
        )

    def nvshmem(self, rt: Runtime) -> None:
        self._set_phase("nvshmem")
        if rt.device.type == "cuda":
            torch.cuda.empty_cache()
        if self.rank == 0:
            why = self._nvshmem_precheck()
            if why:
                self.phases["nvshmem"] = PhaseResult("nvshmem", "skip", [why])
            else:
                log_dir = Path(self.cfg.out) / "nvshmem" if self.cfg.out else Path(tempfile.mkdtemp(prefix="burnin-"))
                self.phases["nvshmem"] = run_probe(self.local_world, self.cfg.nvshmem_timeout, log_dir)
        if self.cfg.backend == "nccl":
            with self.dog.guard("wait for the NVSHMEM probe", self.cfg.nvshmem_timeout + 60 + self._slack()):
                rt.barrier()

    def _nvshmem_precheck(self) -> str | None:
        available: bool | None = None
        if self.cfg.backend == "nccl" and torch.cuda.is_available():
            try:
                import torch.distributed._symmetric_memory as symm_mem

                available = bool(symm_mem.is_nvshmem_available())
            except Exception as exc:
                return f"symmetric memory unavailable: {type(exc).__name__}: {exc}"
        return precheck(torch.__version__, torch.cuda.is_available(), available, self.cfg.backend)

    # -- the run ----------------------------------------------------------------------------------
    def environment(self) -> Environment:
        """Read once after init (the watchdog path must not call into CUDA)."""
        if self.env_info is not None:
            return self.env_info
        env: Environment = {
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "host": socket.gethostname(),
            # the interpreter the ranks run (the venv's bin/python when the step launched it) and its venv
            "executable": sys.executable, "prefix": sys.prefix,
        }
        if torch.cuda.is_available():
            try:
                nccl: Any = torch.cuda.nccl  # its version() is untyped in torch's stubs
                version: Any = nccl.version()
                env["nccl"] = ".".join(str(x) for x in version) if isinstance(version, tuple) else str(version)
            except Exception:
                env["nccl"] = None
        if "preflight" in self.phases:
            env["driver"] = self.phases["preflight"].data.get("driver_version")
        self.env_info = env
        return env

    def finish(self, extra_reasons: list[str] | None = None, failed_step: str | None = None) -> int:
        with self._done:
            if self._finished:
                return self.exit_code
            self._finished = True
            phases = dict(self.phases)
            if self.sweep is not None and "collectives" not in phases:
                phases["collectives"] = self._judge_sweep([failed_step] if failed_step else None)
            if self.soak is not None and "soak" not in phases:
                phases["soak"] = self._judge_soak(failed_step)
            if failed_step and self.current and self.current not in phases and self.current in self.cfg.phases:
                phases[self.current] = PhaseResult(self.current, FAIL, [failed_step])
            for name in self.cfg.phases:
                if name not in phases:
                    phases[name] = PhaseResult(name, "skip", ["not run: the run stopped early"])
            if self.monitor is not None:
                buses = [str(d.get("bus")) for d in self.devices if d.get("device_index", -1) >= 0]
                phases["monitor"] = self.monitor.stop(buses)
            if self.rank != 0:
                self.exit_code = 0
                return 0
            doc = build_result(
                self.cfg, phases, environment=self.environment(), devices=self.devices, started=self.started,
                fault_spec=self.fault_spec, extra_reasons=extra_reasons,
            )
            self.exit_code = int(doc["exit_code"])
            self._emit(doc)
            return self.exit_code

    def _multi_node(self) -> bool:
        return self.world > self.local_world and self.store is not None

    def _emit(self, doc: ResultDoc) -> None:
        if self._multi_node() and self.rank == 0:
            try:
                self.store.set(RESULT_KEY, json_line(doc))
            except Exception:  # noqa: S110 - best effort: the other nodes then report no result
                pass
        if self.result_file:
            tmp = Path(self.result_file + ".tmp")
            tmp.write_text(json_line(doc), encoding="utf-8")
            tmp.replace(self.result_file)
            return
        if self.cfg.out:
            write_outputs(doc, Path(self.cfg.out))
        if self.cfg.json:
            sys.stdout.write(json_line(doc) + "\n")
        else:
            sys.stdout.write(format_table(doc) + "\n" + format_summary(doc))
        sys.stdout.flush()

    def run(self) -> int:
        cfg = self.cfg
        if cfg.backend == "nccl":
            if not torch.cuda.is_available():
                return self.finish(["backend nccl but torch sees no CUDA device"])
            torch.cuda.set_device(self.local_rank)
            device = torch.device("cuda", self.local_rank)
        else:
            device = torch.device("cpu")
        self._set_phase("preflight")
        self.preflight()
        try:
            self.init(device)
        except Exception as exc:
            return self._abort(self.on_error("init_process_group", exc))
        self.environment()
        rt = Runtime(cfg=cfg, rank=self.rank, world=self.world, device=device, dog=self.dog,
                     faults=self.faults, guard_slack=self._slack(), log=self.log, emit=self.emit,
                     devices=self.devices)
        try:
            if "gemm" in cfg.phases:
                self.gemm(rt)
            if "collectives" in cfg.phases:
                self.collectives(rt)
            if self.broken:
                return self._abort(None)
            if "fabric" in cfg.phases:
                self.fabric(rt)
            if "soak" in cfg.phases:
                with self.dog.guard("memory check", cfg.timeout + self._slack()):
                    sizes, _ = usable_sizes(cfg.sizes, rt)
                self.run_soak(rt, sizes)
            if self.broken:
                return self._abort(None)
            if "nvshmem" in cfg.phases:
                self.nvshmem(rt)
        except Exception as exc:
            return self._abort(self.on_error(self.current or "run", exc))
        self.current = None
        code = self.finish()
        if self.rank != 0 and self.local_rank == 0 and self._multi_node():
            self._relay_result()
        with self.dog.guard("teardown", cfg.timeout + self._slack()):
            rt.barrier()
            dist.destroy_process_group()
        self.dog.stop()
        return code

    def _relay_result(self) -> None:
        """Another node's local rank 0: print rank 0's result here too, so every node's caller has the
        verdict (stdout only: --out is often shared storage, where rank 0 has written it already)."""
        try:
            self.store.wait([RESULT_KEY], timedelta(seconds=self.cfg.timeout))
            doc = json.loads(self.store.get(RESULT_KEY).decode())
        except Exception as exc:
            self.log(f"no result from rank 0 to relay: {type(exc).__name__}: {exc}")
            return
        doc["relayed_to"] = {"rank": self.rank, "host": socket.gethostname()}
        if self.cfg.json:
            sys.stdout.write(json_line(doc) + "\n")
        else:
            sys.stdout.write(format_table(doc) + "\n" + format_summary(doc))
        sys.stdout.flush()

    def _abort(self, reason: str | None) -> int:
        """The process group is unusable: report and leave without tearing it down (that can hang)."""
        code = self.finish([reason] if reason else None, failed_step=reason)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if self.rank == 0 else 1)


def _bus_id(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu"
    try:
        props: Any = torch.cuda.get_device_properties(device)
        return f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}"
    except Exception:
        return "?"


def run_worker(cfg: BurninConfig, result_file: str | None) -> int:
    return Worker(cfg, result_file).run()
