"""Secrets only by reference and redacted everywhere; parameters validated before they reach a shell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from provisioner import secrets, validate
from provisioner.events import Bus, Event, Message
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


def test_file_reference_secret_is_redacted(tmp_path: Path) -> None:
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
    monkeypatch.delenv("NOPE_PASSWORD", raising=False)
    with pytest.raises(secrets.SecretError, match="NOPE_PASSWORD is not set"):
        secrets.resolve("env:NOPE_PASSWORD")


HOSTILE = st.text(min_size=1, max_size=30).filter(lambda s: any(c in s for c in " ;$`'\"|&<>()\n\\*?!{}"))


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_validators_refuse_shell_metacharacters(value: str) -> None:
    for check in (validate.hostname, validate.host_address, validate.storage, validate.abs_path,
                  validate.package_spec, validate.driver_version):
        with pytest.raises(ValueError):
            check(value)


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
