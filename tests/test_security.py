"""Secrets only by reference and redacted everywhere; parameters validated before they reach a shell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from provisioner import secrets, validate
from provisioner.events import Bus, Event, Message
from provisioner.exitcodes import ExitCode
from provisioner.playbook import dumps, loads
from provisioner.runlog import JsonlRunLog, Recorder
from provisioner.steps.lxc_create import CreateParams
from provisioner.steps.venv_build import VenvParams

CANARY = "canary-7f3a9c1e-secret"


def test_resolved_secret_is_redacted_from_every_event_and_the_run_log(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PVE_PASSWORD", CANARY)
    assert secrets.resolve("env:PVE_PASSWORD") == CANARY
    log = JsonlRunLog("sec", tmp_path)
    seen: list[Event] = []
    bus = Bus(log, seen.append)
    bus.emit(Message(level="error", text=f"login failed for root@pam with password {CANARY}"))
    log.close()
    assert CANARY not in log.path.read_text()
    assert all(CANARY not in e.model_dump_json() for e in seen)
    assert "<redacted>" in log.path.read_text()


def test_file_reference_secret_is_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_FILE_REF_DIRS", str(tmp_path))
    f = tmp_path / "tok"
    f.write_text(CANARY + "-file\n")
    value = secrets.resolve(f"file:{f}")
    assert value == CANARY + "-file"
    assert secrets.REDACTOR(f"token={value}") == "token=<redacted>"


def test_recorded_playbook_keeps_references_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PVE_PASSWORD", CANARY)
    pb = loads("""schema_version: 1
target:
  host: 10.1.2.3
  api: {password: env:PVE_PASSWORD}
steps: []
""")
    secrets.resolve("env:PVE_PASSWORD")
    text = dumps(Recorder(pb).playbook())
    assert "env:PVE_PASSWORD" in text and CANARY not in text


def test_missing_secret_error_does_not_echo_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PVE_NOPE_PASSWORD", raising=False)
    with pytest.raises(secrets.SecretError, match="PVE_NOPE_PASSWORD is not set"):
        secrets.resolve("env:PVE_NOPE_PASSWORD")


HOSTILE = st.text(min_size=1, max_size=30).filter(lambda s: any(c in s for c in " ;$`'\"|&<>()\n\\*?!{}"))


# what no package requirement holds: a requirement's version clauses need ' ', '<', '>', '!' and '*' ("numpy >= 2,
# != 2.1.*"; it travels as one argv element, no shell), so those are hostile to the other validators only
NOT_IN_A_REQUIREMENT = st.text(min_size=1, max_size=30).filter(lambda s: any(c in s for c in ";$`'\"|&()\n\\?{}"))


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_validators_refuse_shell_metacharacters(value: str) -> None:
    for check in (validate.hostname, validate.host_address, validate.storage, validate.abs_path,
                  validate.driver_version):
        with pytest.raises(ValueError):
            check(value)


@settings(max_examples=200, deadline=None)
@given(NOT_IN_A_REQUIREMENT)
def test_package_specs_refuse_what_no_requirement_holds(value: str) -> None:
    with pytest.raises(ValueError):
        validate.package_spec(value)


def test_a_requirement_keeps_its_version_clauses() -> None:
    # hypothesis once drew '0<0' as "hostile": it is package 0 below version 0, a requirement like numpy<2
    for spec in ("0<0", "numpy<2", "torch >= 2.5, != 2.5.1", "nvidia-nccl-cu12==2.*"):
        assert validate.package_spec(spec) == spec


@pytest.mark.parametrize("vmid", [-1, 0, 99, 1_000_000_000])
def test_vmid_range(vmid: int) -> None:
    with pytest.raises(ValueError):
        validate.vmid(vmid)


@pytest.mark.parametrize(("model", "field", "value"), [
    (CreateParams, "hostname", "host;reboot"),
    (CreateParams, "rootfs_storage", "local lvm"),
    (CreateParams, "template", "local:vztmpl/../../etc/shadow"),
    (VenvParams, "path", "/opt/venv; rm -rf /"),
    (VenvParams, "path", "/opt/../etc"),
    (VenvParams, "path", "/usr"),
    (VenvParams, "extra_packages", ["numpy && curl evil"]),
    (VenvParams, "index_url", "file:///etc/passwd"),
])
def test_step_parameters_are_validated(model: type, field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate({field: value})
    assert field in json.dumps(info.value.errors(), default=str)


# --- file: references read only from a secrets directory (issue 23 item 3) -------------------------

def _plan_cli(pb: Path, env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": env_extra.pop("HOME", str(pb.parent)),
           **env_extra}
    return subprocess.run([sys.executable, "-m", "provisioner", "plan", str(pb)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


@pytest.mark.parametrize("case", ["proc-environ", "ssh-key", "outside", "key-in-secrets-dir", "link-out",
                                  "lab-file"])
def test_file_ref_that_could_exfiltrate_is_refused_at_load_exit_2(tmp_path: Path, case: str) -> None:
    """`file:` reads only from a secrets directory, never /proc, a key or the lab's files: each hostile
    reference is refused when the playbook loads (exit 2, file:line:field), before anything connects."""
    home, secrets_dir, state = tmp_path / "home", tmp_path / "secrets", tmp_path / "state"
    (home / ".ssh").mkdir(parents=True)
    secrets_dir.mkdir()
    key_text = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA" + CANARY + "\n" \
               "-----END OPENSSH PRIVATE KEY-----\n"
    (home / ".ssh" / "id_ed25519").write_text(key_text)
    (tmp_path / "elsewhere").write_text(CANARY + "\n")
    (secrets_dir / "deploy-key").write_text(key_text)
    (secrets_dir / "link").symlink_to(tmp_path / "elsewhere")
    (state / "lab").mkdir(parents=True)
    (state / "lab" / "credentials.json").write_text(json.dumps({"password": CANARY}))
    ref = {"proc-environ": "file:/proc/self/environ", "ssh-key": "file:~/.ssh/id_ed25519",
           "outside": f"file:{tmp_path / 'elsewhere'}", "key-in-secrets-dir": f"file:{secrets_dir / 'deploy-key'}",
           "link-out": f"file:{secrets_dir / 'link'}",
           "lab-file": f"file:{state / 'lab' / 'credentials.json'}"}[case]
    pb = tmp_path / "pb.yaml"
    pb.write_text(f"schema_version: 1\ntarget:\n  host: 10.0.0.1\n  api:\n    user: root@pam\n"
                  f"    password: {ref}\nsteps:\n  - kind: node.connect\n")
    named = f"{secrets_dir}:{state / 'lab'}" if case == "lab-file" else str(secrets_dir)
    proc = _plan_cli(pb, {"HOME": str(home), "PROVISIONER_FILE_REF_DIRS": named,
                          "PROVISIONER_STATE_DIR": str(state)})
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert f"{pb}:6: target.api.password:" in proc.stderr, proc.stderr
    assert CANARY not in proc.stderr + proc.stdout and "b3BlbnNzaC1rZXkt" not in proc.stderr
    assert "Traceback" not in proc.stderr and "run log:" not in proc.stderr  # refused before a run opened


def test_file_ref_in_a_secrets_directory_is_read_and_the_plan_names_its_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's config directory is a secrets directory by default; `source` names the file (never the value)."""
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv("PROVISIONER_FILE_REF_DIRS", raising=False)
    (config / "gpu-provisioner").mkdir(parents=True)
    token = config / "gpu-provisioner" / "pve-token"
    token.write_text(CANARY + "-cfg\n")
    pb = loads(f"schema_version: 1\ntarget:\n  host: 10.0.0.1\n  api:\n    token_name: ci\n"
               f"    token_value: file:{token}\nsteps: []\n")
    assert pb.target.api is not None and pb.target.api.token_value == f"file:{token}"
    assert secrets.resolve(f"file:{token}") == CANARY + "-cfg"
    assert secrets.source(f"file:{token}") == f"file {token.resolve()}"
    assert secrets.source("env:PVE_PASSWORD") == "environment variable PVE_PASSWORD"
    # the same file outside every secrets directory is refused by resolve too (not only at load)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "other"))
    with pytest.raises(secrets.SecretError, match="outside the secrets directories"):
        secrets.resolve(f"file:{token}")


def test_plan_names_the_file_each_secret_comes_from_never_the_value(tmp_path: Path) -> None:
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    (secrets_dir / "pve-password").write_text(CANARY + "-plan\n")
    pb = tmp_path / "pb.yaml"
    pb.write_text(f"schema_version: 1\ntarget:\n  host: 127.0.0.1\n  local: true\n  api:\n"
                  f"    password: file:{secrets_dir}/pve-password\n    token_name: ci\n    token_value: env:PVE_TOK\n"
                  "steps: []\n")
    proc = _plan_cli(pb, {"PROVISIONER_FILE_REF_DIRS": str(secrets_dir), "PROVISIONER_STATE_DIR": str(tmp_path / "st"),
                          "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert f"secret target.api.password is read from file {secrets_dir / 'pve-password'}" in proc.stderr
    assert "secret target.api.token_value is read from environment variable PVE_TOK" in proc.stderr
    assert CANARY not in proc.stderr + proc.stdout
