"""Read every evidence probe's fact over our transports; a failing probe is recorded, never fatal.

    evidence = await collect(node, vmid=200, venv="/opt/torch-venv")
    evidence.records   # one ProbeRecord per probe: status, exit status, output, duration
    evidence.facts     # the live-facts dict `provisioner.diagnose.diagnose(facts=...)` reads

The node is probed first with one command (`uname -a`): if the transport cannot reach it (refused
host key, connection error), every other probe is recorded as skipped and `evidence.unreachable`
says why. Likewise one command in the container decides whether the container probes run.
The remaining probes run concurrently (a few at a time) over the same connection.

No command here is our own: each probe's command is its fact's (`support.probes`), run through
the one `FactCache` (pass the run's cache to share what the steps already read).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic_core import to_jsonable_python

from provisioner import bounds, quoting
from provisioner.facts.base import Fact, FactCache
from provisioner.support.derive import facts_from_records
from provisioner.support.evidence import Evidence, ProbeRecord
from provisioner.support.probes import PROBES, Probe, fact_for, selected
from provisioner.transport.base import CAPPED_LINE, CommandResult, CommandTimeout, Transport, TransportError
from provisioner.transport.container import ContainerTransport

CONCURRENCY = 6
MAX_OUTPUT_CHARS = bounds.PROBE_OUTPUT_BYTES  # per probe; more is kept as head and tail (and marked truncated)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _one_line(text: str, limit: int = 400) -> str:
    line = " | ".join(s.strip() for s in str(text).splitlines() if s.strip())
    return line[:limit]


async def run_probe(transport: Transport, probe: Probe, fact: Fact[Any] | None = None,
                    cache: FactCache | None = None) -> ProbeRecord:
    """Read one probe's fact (`fact`: the probe's, bound to a container/venv) through `cache` and
    classify the outcome; never raises (except on cancellation)."""
    fact = fact if fact is not None else probe.fact
    cache = cache if cache is not None else FactCache()
    argv = list(fact.argv)
    result: CommandResult | None = None
    record = ProbeRecord(name=probe.name, target=probe.target, where=transport.name, command=quoting.join(argv),
                         status="failed", file=probe.file, feeds=probe.feeds)
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        # No retry: the first probe is the reachability check, and a bundle records what it saw.
        result = await cache.result(transport, fact, retries=0)
    except CommandTimeout as exc:
        result = exc.result  # what it printed before it was killed
        record.status = "timeout"
        record.error = f"timed out after {fact.timeout:.0f}s and was killed"
    except TransportError as exc:
        record.status = "unreachable"
        record.error = _one_line(str(exc))
    except FileNotFoundError as exc:  # a local argv[0] that does not exist
        record.status = "absent"
        record.error = f"command not found: {exc.filename or argv[0]}"
    except Exception as exc:  # a probe must never abort the collection
        record.error = _one_line(f"{type(exc).__name__}: {exc}")
    else:
        record.exit_status = result.exit_status
        if result.output_capped:
            record.error = _one_line(CAPPED_LINE)
        elif result.exit_status == 0:
            record.status = "ok"
        elif result.exit_status in probe.timeout_statuses:
            record.status = "timeout"
            said = [ln for ln in result.output.splitlines() if "timed out" in ln]  # the probe's own words
            record.error = _one_line(said[-1] if said else f"timed out (exit status {result.exit_status})")
        elif result.exit_status in probe.absent_statuses:
            record.status = "absent"
            record.error = _one_line(result.output) or f"exit status {result.exit_status}"
        else:
            record.error = f"exit status {result.exit_status}: " + _one_line("\n".join(result.tail(3)))
    record.duration_s = loop.time() - start
    if result is not None:  # the whole output is on disk past the memory cap: read back within the probe's cap
        record.output, record.truncated = result.read_output(MAX_OUTPUT_CHARS)
    if probe.parsed and record.status == "ok":
        record.parsed, record.parse_error = parse_fact(fact, record.output)
    return record


def parse_fact(fact: Fact[Any], output: str) -> tuple[Any, str | None]:
    """(the fact's parsed value as JSON data, None) or (None, why it does not parse)."""
    try:
        return to_jsonable_python(fact.parse(output)), None
    except ValueError as exc:
        return None, _one_line(str(exc))


def _skipped(transport: Transport, probe: Probe, fact: Fact[Any], why: str) -> ProbeRecord:
    return ProbeRecord(name=probe.name, target=probe.target, where=transport.name, command=quoting.join(fact.argv),
                       status="skipped", error=why, file=probe.file, feeds=probe.feeds)


async def collect(
    node: Transport,
    vmid: int | None = None,
    venv: str | None = None,
    *,
    probes: Sequence[Probe] = PROBES,
    concurrency: int = CONCURRENCY,
    cache: FactCache | None = None,
) -> Evidence:
    """Read every probe's fact on the node and, with `vmid`, in the container (`pct exec`)."""
    cache = cache if cache is not None else FactCache()
    started = now_iso()
    chosen = selected(vmid, probes)
    container: Transport = ContainerTransport(node, vmid) if vmid is not None else node
    plans = [(p, node if p.target == "node" else container, fact_for(p, vmid, venv)) for p in chosen]
    results: dict[str, ProbeRecord] = {}
    evidence = Evidence(host=node.host_label or node.name, vmid=vmid, venv=venv, records=[], started=started)

    node_plans = [x for x in plans if x[0].target == "node"]
    if node_plans:
        first, transport, fact = node_plans[0]
        rec = results[first.name] = await run_probe(transport, first, fact, cache)
        if rec.status in ("unreachable", "timeout"):
            evidence.unreachable = rec.error or rec.status
    ct_plans = [x for x in plans if x[0].target == "container"]
    if vmid is not None and ct_plans and evidence.unreachable is None:
        first, transport, fact = ct_plans[0]
        rec = results[first.name] = await run_probe(transport, first, fact, cache)
        if rec.status != "ok":
            evidence.container_unreachable = rec.error or rec.status

    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(probe: Probe, transport: Transport, fact: Fact[Any]) -> None:
        if evidence.unreachable is not None:
            results[probe.name] = _skipped(transport, probe, fact, f"node unreachable: {evidence.unreachable}")
            return
        if probe.target == "container" and evidence.container_unreachable is not None:
            results[probe.name] = _skipped(transport, probe, fact,
                                           f"cannot run commands in CT {vmid}: {evidence.container_unreachable}")
            return
        async with gate:
            results[probe.name] = await run_probe(transport, probe, fact, cache)

    await asyncio.gather(*(one(p, t, a) for p, t, a in plans if p.name not in results))
    evidence.records = [results[p.name] for p in chosen]
    evidence.facts = facts_from_records(evidence.records, container=vmid is not None)
    evidence.finished = now_iso()
    return evidence
