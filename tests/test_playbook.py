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


# --- every target input validated at load (issue 23 item 7): exit 2 with file:line:field, not "internal error" --

def _target_case(tmp_path: Path, case: str) -> tuple[str, str, str]:
    """(the target's YAML, the `file:line: field` expected, a word of the message) for one hostile input."""
    pub = tmp_path / "id_ed25519.pub"
    pub.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEs0Fo6cZZq2D7+UcNtVJCfZ2ccXZ2L3sHgw0eXQKq7e me@host\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a key\n")
    pin = ":".join(["AB"] * 32)
    return {
        "user-without-realm": ("  api:\n    user: root\n    password: env:PVE_PW\n", "6: target.api.user", "user id"),
        "user-with-slash": ("  api:\n    user: a/b@pam\n    password: env:PVE_PW\n", "6: target.api.user", "user id"),
        "user-with-newline": ('  api:\n    user: "root@pam\\n"\n    password: env:PVE_PW\n', "6: target.api.user",
                              "user id"),
        "token-with-newline": ('  api:\n    token_name: "ci\\nX-Injected: 1"\n    token_value: env:PVE_TOK\n',
                               "6: target.api.token_name", "token id"),
        "token-with-bang": ("  api:\n    token_name: ci!x\n    token_value: env:PVE_TOK\n", "6: target.api.token_name",
                            "token id"),
        "token-name-alone": ("  api:\n    token_name: ci\n", "5: target.api", "go together"),
        "garbage-fingerprint": ("  api:\n    password: env:PVE_PW\n    fingerprint: 'zz:top'\n",
                                "7: target.api.fingerprint", "SHA-256"),
        "short-fingerprint": ("  api:\n    password: env:PVE_PW\n    fingerprint: 'AB:CD'\n",
                              "7: target.api.fingerprint", "SHA-256"),
        "verify-off-unpinned": ("  api:\n    password: env:PVE_PW\n    verify_tls: false\n", "5: target.api",
                                "pinned certificate"),
        "missing-ca": (f"  api:\n    password: env:PVE_PW\n    ca_file: {tmp_path}/no-such-ca.pem\n",
                       "7: target.api.ca_file", "does not exist"),
        "ca-not-a-certificate": (f"  api:\n    password: env:PVE_PW\n    ca_file: {notes}\n", "7: target.api.ca_file",
                                 "no PEM certificate"),
        "key-file-public": (f"  ssh:\n    key_file: {pub}\n", "6: target.ssh.key_file", "public key"),
        "key-file-text": (f"  ssh:\n    key_file: {notes}\n", "6: target.ssh.key_file", "not a private key"),
    }[case] if case != "pinned-unverified-ok" else (f"  api:\n    password: env:PVE_PW\n    verify_tls: false\n"
                                                    f"    fingerprint: 'sha256:{pin.lower()}'\n", "", "")


TARGET_CASES = ["user-without-realm", "user-with-slash", "user-with-newline", "token-with-newline", "token-with-bang",
                "token-name-alone", "garbage-fingerprint", "short-fingerprint", "verify-off-unpinned", "missing-ca",
                "ca-not-a-certificate", "key-file-public", "key-file-text"]


@pytest.mark.parametrize("case", TARGET_CASES)
def test_target_inputs_are_refused_at_load_with_place(tmp_path: Path, case: str) -> None:
    target, where, word = _target_case(tmp_path, case)
    text = f"schema_version: 1\ntarget:\n  host: 10.0.0.1\n  container: 200\n{target}steps:\n  - kind: node.connect\n"
    with pytest.raises(PlaybookError) as info:
        playbook.loads(text, "pb.yaml")
    assert f"pb.yaml:{where}:" in str(info.value) and word in str(info.value), str(info.value)


def test_target_refusal_is_exit_2_on_the_command_line(tmp_path: Path) -> None:
    """Before: these passed load and failed later as "internal error", exit 1."""
    for case in ("token-with-newline", "verify-off-unpinned", "key-file-text"):
        target, where, _ = _target_case(tmp_path, case)
        pb = tmp_path / "pb.yaml"
        pb.write_text(f"schema_version: 1\ntarget:\n  host: 10.0.0.1\n  container: 200\n{target}"
                      "steps:\n  - kind: node.connect\n")
        proc = subprocess.run([sys.executable, "-m", "provisioner", "plan", str(pb)], capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "PROVISIONER_STATE_DIR": str(tmp_path / "st")},
                              timeout=120, check=False)
        assert proc.returncode == 2, (case, proc.stderr)
        assert f"{pb}:{where}:" in proc.stderr and "internal error" not in proc.stderr, (case, proc.stderr)


def test_pinned_certificate_with_verify_off_and_good_inputs_load(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n")
    target, _, _ = _target_case(tmp_path, "pinned-unverified-ok")
    pb = playbook.loads(f"schema_version: 1\ntarget:\n  host: 10.0.0.1\n{target}  ssh:\n    key_file: {key}\nsteps: []\n")
    assert pb.target.api is not None and pb.target.api.verify_tls is False
    pb = playbook.loads("schema_version: 1\ntarget:\n  host: 10.0.0.1\n  api:\n    user: provisioner@pve\n"
               "    token_name: ci-2.runner_1\n    token_value: env:PVE_TOK\nsteps: []\n")
    assert pb.target.api is not None and pb.target.api.token_name == "ci-2.runner_1"


@pytest.mark.parametrize("case", ["token-with-newline", "verify-off-unpinned", "key-file-text", "user-without-realm"])
def test_inventory_entries_are_validated_like_a_target(tmp_path: Path, case: str) -> None:
    """A fleet inventory's ssh/api settings get the same load-time checks, with file, line and field."""
    from provisioner.fleet import load_inventory

    target, _, word = _target_case(tmp_path, case)
    entry = "\n".join("    " + line[2:] for line in target.splitlines())
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  - name: ok\n    host: 10.0.0.1\n  - name: bad\n    host: 10.0.0.2\n{entry}\n")
    with pytest.raises(PlaybookError) as info:
        load_inventory(inv)
    section = "ssh" if case == "key-file-text" else "api"
    assert f"{inv}:" in str(info.value) and f"hosts.1.{section}" in str(info.value) and word in str(info.value), \
        str(info.value)
    line = int(str(info.value).split(f"{inv}:", 1)[1].split(":", 1)[0])
    assert line >= 6, str(info.value)  # the bad entry's lines, not the file's first
