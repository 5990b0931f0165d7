"""Playbooks: validated as a whole before anything runs; errors name file:line and field; round-trip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provisioner import playbook
from provisioner.playbook import PlaybookError

SHIPPED = Path(__file__).resolve().parents[1] / "playbooks" / "blackwell-8gpu-lxc.yaml"


def test_shipped_playbook_loads_and_round_trips() -> None:
    pb = playbook.load(SHIPPED)
    assert [s.kind for s in pb.steps][:3] == ["node.connect", "node.inventory", "lxc.create"]
    assert pb.target.container == 200
    again = playbook.loads(playbook.dumps(pb))
    assert again == pb
    assert playbook.dumps(again) == playbook.dumps(pb)


BASE = """schema_version: 1
target:
  host: 10.0.0.1
  container: 200
steps:
  - kind: node.connect
"""


@pytest.mark.parametrize(("text", "line", "needle"), [
    (BASE + "  - kind: lxc.create\n    params:\n      cores: many\n", 9, "steps[1].params.cores"),
    (BASE + "  - kind: warp.drive\n", 7, "unknown step kind 'warp.drive'"),
    (BASE.replace("host: 10.0.0.1", "host: 'bad host;rm'"), 3, "target.host"),
    (BASE + "  - kind: lxc.create\n    params:\n      hostname: ok\n      cpus: 4\n", 10,
     "unknown field 'cpus' in lxc.create; known: vmid, template"),
    (BASE + "  - kind: lxc.create\n    params:\n      coers: 4\n", 9,
     "steps[1].params.coers: unknown field 'coers' in lxc.create (did you mean 'cores'?)"),
    (BASE + "  - kind: lxc.create\n    params:\n      net:\n        bridg: vmbr0\n", 10,
     "unknown field 'bridg' in lxc.create net (did you mean 'bridge'?)"),
    (BASE + "  - kind: lxc.creat\n", 7, "unknown step kind 'lxc.creat' (did you mean 'lxc.create'?)"),
    (BASE.replace("  container: 200", "  contaner: 200"), 4,
     "target.contaner: unknown field 'contaner' in target (did you mean 'container'?)"),
    (BASE.replace("  container: 200\n", "  container: 200\n  api:\n    password: hunter2\n"), 6,
     "literal secret refused"),
    (BASE.replace("  container: 200\n", "  container: 200\n  api:\n    token_value: 1234-abcd\n"), 6,
     "target.api.token_value"),
    ("schema_version: 1\ntarget: {host: 10.0.0.1\nsteps: []\n", 3, "YAML syntax error"),
    (BASE.replace("schema_version: 1", "schema_version: 7"), 1, "schema_version"),
    (BASE + "  - kind: venv.build\n    params:\n      extra_packages: ['numpy; rm -rf /']\n", 9, "package"),
])
def test_malformed_playbooks_name_file_line_and_field(text: str, line: int, needle: str) -> None:
    with pytest.raises(PlaybookError) as info:
        playbook.loads(text, "pb.yaml")
    msg = str(info.value)
    assert f"pb.yaml:{line}:" in msg, msg
    assert needle in msg, msg
    assert "hunter2" not in msg and "1234-abcd" not in msg


def test_cli_rejects_malformed_playbook_before_any_command(tmp_path: Path) -> None:
    pb = tmp_path / "bad.yaml"
    # A target nobody can reach: if anything ran, we would see a connection error (exit 4) instead of exit 2.
    pb.write_text(BASE.replace("10.0.0.1", "127.0.0.1") + "  - kind: lxc.create\n    params:\n      memory: lots\n")
    proc = subprocess.run([sys.executable, "-m", "provisioner", "replay", str(pb), "--json"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "PROVISIONER_STATE_DIR": str(tmp_path / "st")})
    assert proc.returncode == 2, proc.stderr
    assert f"{pb}:9: steps[1].params.memory" in proc.stderr
    assert not (tmp_path / "st" / "runs").exists() or not any((tmp_path / "st" / "runs").iterdir())


def test_secret_refs_accepted(tmp_path: Path) -> None:
    text = BASE.replace("  container: 200\n", "  container: 200\n  api:\n    password: env:PVE_PASSWORD\n")
    pb = playbook.loads(text)
    assert pb.target.api is not None and pb.target.api.password == "env:PVE_PASSWORD"
    assert "env:PVE_PASSWORD" in playbook.dumps(pb)
