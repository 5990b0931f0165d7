"""support/ and diagnose/ run no command of their own: every argv they send is a catalogued fact's.

A real `LocalTransport` (the commands really run on this machine) records every argv that reaches
it; `collect` (the bundle) and `live_findings` (`diagnose --host`) must send only argvs produced by
a `Fact` of `facts.evidence.CATALOGUE` (the steps' `facts.catalog` plus the evidence facts), bound
to the container id and venv asked for.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence

from provisioner.facts.base import Fact
from provisioner.facts.evidence import CATALOGUE, bind, raw_text
from provisioner.support.collect import collect, run_probe
from provisioner.support.diagnose_sources import live_findings
from provisioner.support.probes import PROBES, Probe, selected
from provisioner.transport.base import LineCallback
from provisioner.transport.container import ContainerTransport
from provisioner.transport.local import LocalTransport

VENV = sys.prefix  # the venv running the tests


class FactsOnly(LocalTransport):
    """Runs commands for real; records each argv and whether a catalogued fact produced it.

    With `vmid`, a fact's argv may also arrive wrapped by `ContainerTransport` (`pct exec <vmid> -- …`,
    with or without a login shell). A command this machine lacks (`pct`) answers 127, as a shell would."""

    def __init__(self, vmid: int | None, venv: str | None) -> None:
        super().__init__()
        bare = {tuple(bind(f, vmid, venv).argv) for f in CATALOGUE
                if vmid is not None or not any("{vmid}" in a for a in f.argv)}
        self.allowed = set(bare)
        if vmid is not None:
            ct = ContainerTransport(self, vmid)
            self.allowed |= {tuple(t.wrap(a)) for a in bare for t in (ct, ct.for_facts())}
        self.sent: list[tuple[str, ...]] = []
        self.foreign: list[tuple[str, ...]] = []

    async def _run(self, argv: Sequence[str], command: str, *, timeout: float | None, on_line: LineCallback,
                   stdin: bytes | None) -> int | None:
        self.sent.append(tuple(argv))
        if tuple(argv) not in self.allowed:
            self.foreign.append(tuple(argv))
        if shutil.which(argv[0]) is None:
            on_line(f"sh: {argv[0]}: command not found")
            return 127
        return await super()._run(argv, command, timeout=timeout, on_line=on_line, stdin=stdin)


def test_every_probe_reads_a_catalogued_fact() -> None:
    names = {f.name for f in CATALOGUE}
    for probe in PROBES:
        assert probe.fact.name in names, probe.name
        assert any(probe.fact is f for f in CATALOGUE), probe.name


async def test_the_bundle_collection_runs_only_facts() -> None:
    node = FactsOnly(None, VENV)
    ev = await collect(node, None, VENV)
    assert node.foreign == []
    # Every selected probe's command was sent (the check saw real traffic, not an empty run).
    assert {tuple(bind(p.fact, None, VENV).argv) for p in selected(None)} <= set(node.sent)
    assert len(ev.records) == len(selected(None))


async def test_diagnose_host_runs_only_facts() -> None:
    node = FactsOnly(None, VENV)
    await live_findings(node, None, VENV)
    assert node.sent and node.foreign == []


async def test_diagnose_host_with_a_container_runs_only_facts() -> None:
    """With a container: the container probes (through `pct exec`) and drift's checks are facts too."""
    node = FactsOnly(200, VENV)
    await live_findings(node, 200, VENV)
    assert node.foreign == []
    sent = set(node.sent)
    assert tuple(bind(CATALOGUE_BY_NAME["pct_state"], 200, None).argv) in sent  # drift ran
    assert any(a[:2] == ("pct", "exec") for a in sent)  # the container was tried


CATALOGUE_BY_NAME = {f.name: f for f in CATALOGUE}


async def test_a_command_that_is_no_catalogued_fact_is_caught() -> None:
    """The recorder can fail: a probe whose fact is not in the catalogue is reported as foreign."""
    node = FactsOnly(None, VENV)
    stray = Probe("t.stray", "node", Fact("t.stray", ("sh", "-c", "echo stray"), raw_text), "t/stray.txt")
    rec = await run_probe(node, stray)
    assert rec.status == "ok" and node.foreign == [("sh", "-c", "echo stray")]


async def test_the_cache_keeps_a_good_raw_result_and_probes_a_failed_one_again() -> None:
    """One cache: a bundle and the steps reading the same fact run its command once."""
    from provisioner.facts import catalog
    from provisioner.facts.base import FactCache

    node = FactsOnly(None, VENV)
    cache = FactCache()
    first = await cache.result(node, catalog.OS_RELEASE)
    parsed = await cache.get(node, catalog.OS_RELEASE)
    assert first.ok and parsed.id and node.sent.count(tuple(catalog.OS_RELEASE.argv)) == 1
    failing = Fact("t.fails", ("sh", "-c", "exit 4"), raw_text)
    assert (await cache.result(node, failing)).exit_status == 4
    assert (await cache.result(node, failing)).exit_status == 4
    assert node.sent.count(("sh", "-c", "exit 4")) == 2
    cache.invalidate(None, catalog.OS_RELEASE.name)
    await cache.get(node, catalog.OS_RELEASE)
    assert node.sent.count(tuple(catalog.OS_RELEASE.argv)) == 2
