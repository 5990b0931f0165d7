"""The controller's start-up (what a replay imports, and when) and concurrent fact reads (`FactCache.gather`).

Real parts: fresh interpreters for the import checks (a test process has imported everything
already), and `LocalTransport` running real shell commands for the facts.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.facts.base import Fact, FactCache, FactUnavailable
from provisioner.transport.local import LocalTransport

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_https_api_client_does_not_import_paramiko() -> None:
    proc = _python("import sys, provisioner.cli.replay, provisioner.proxmox.client\n"
                   "print(sorted(m for m in ('paramiko', 'invoke', 'nacl', 'textual', 'screens') if m in sys.modules))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_api_client_maps_a_socket_error_without_paramiko_loaded() -> None:
    proc = _python("import sys\nfrom provisioner.proxmox.client import _map_error\n"
                   "e = _map_error(ConnectionRefusedError(111, 'refused'), 'https://x:8006/api2/json')\n"
                   "print(type(e).__name__, 'paramiko' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["Unreachable", "False"]


def test_pve_factory_warm_imports_the_client_in_a_background_thread() -> None:
    code = """
import sys, threading
from provisioner.playbook import ApiSettings, Target
from provisioner import session
factory = session.pve_factory(Target(host="127.0.0.1", node="pve", api=ApiSettings(password="env:PVE_PASSWORD")))
before = "provisioner.proxmox.client" in sys.modules
factory.warm()
factory.warm()  # once per process
names = [t.name for t in threading.enumerate()]
session._wait_for_warm_import()
print(before, "provisioner.proxmox.client" in sys.modules, names.count("warm-api-client") <= 1,
      session._warm_thread is not None and not session._warm_thread.is_alive())
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True", "True", "True"]


def test_no_api_no_factory() -> None:
    from provisioner import session
    from provisioner.playbook import Target

    assert session.pve_factory(Target(host="127.0.0.1", node="pve", api=None)) is None


# --- FactCache.gather --------------------------------------------------------------------------------

def _fact(name: str, script: str, *, timeout: float = 30.0) -> Fact[str]:
    return Fact(name=name, argv=["sh", "-c", script], parse=lambda out: out.strip(), timeout=timeout)


def test_gather_runs_independent_facts_at_the_same_time(tmp_path: Path) -> None:
    """`waits` finishes only once `signals` has run: read one after the other it would time out."""
    flag = tmp_path / "flag"
    waits = _fact("waits", f'i=0; while [ ! -e "{flag}" ]; do i=$((i+1)); [ $i -gt 2000 ] && exit 3; sleep 0.01; '
                           f'done; echo seen')
    signals = _fact("signals", f'touch "{flag}"; echo set')
    cache = FactCache()

    async def main() -> tuple[str, str]:
        got = await cache.gather(LocalTransport(None), waits, signals)
        return got.value(waits), got.value(signals)

    assert asyncio.run(main()) == ("seen", "set")


def test_gather_reads_a_fact_once_and_keeps_each_error_for_its_own_fact(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    counted = _fact("counted", f'echo x >> "{counter}"; echo ok')
    failing = _fact("failing", "echo broken; exit 7")
    cache = FactCache()
    node = LocalTransport(None)

    async def main() -> tuple[str, str]:
        got = await cache.gather(node, counted, failing, counted)
        with pytest.raises(FactUnavailable, match="exited 7"):
            got.value(failing)
        again = await cache.get(node, counted)  # cached: no third run
        return got.value(counted), again

    assert asyncio.run(main()) == ("ok", "ok")
    assert counter.read_text().splitlines() == ["x"]


def test_gather_does_not_swallow_cancellation(tmp_path: Path) -> None:
    slow = _fact("slow", "sleep 30; echo late", timeout=60)
    started = tmp_path / "started"
    marks = _fact("marks", f'touch "{started}"; sleep 30; echo late', timeout=60)
    cache = FactCache()

    async def main() -> None:
        task = asyncio.create_task(cache.gather(LocalTransport(None), slow, marks))
        for _ in range(3000):  # wait for the state (the probe is running), not for a time
            if started.exists():
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
