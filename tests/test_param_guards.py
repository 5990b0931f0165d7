"""Red-team cases for parameter validation, path guards and `file:` secret references (issue #19)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from provisioner import secrets, validate
from provisioner.steps.base import StepFailed
from provisioner.steps.gpu_common import PassthroughParams
from provisioner.steps.lxc_create import CreateParams, public_key
from provisioner.steps.venv_build import VenvParams
from tests.support.require import require


@pytest.mark.parametrize("path", [
    "/./opt", "//etc", "/opt/", "/opt/.", "///usr//", "/dev", "/dev/shm/venv", "/proc", "/proc/self", "/sys/x",
    "/boot", "/boot/efi/venv", "/root/.ssh", "/root/.ssh/venv", "/home/alice/.ssh/x", "/etc/venv", "/run/x",
    "/", "/usr/lib/venv", "/opt/torch-venv2\n", "/opt/../etc", "/opt/x/..", "opt/venv", "/opt/venv\x00",
])
def test_venv_path_guard_refuses_system_directories_however_written(path: str) -> None:
    with pytest.raises(ValidationError) as info:
        VenvParams.model_validate({"path": path})
    assert "path" in str(info.value)


@pytest.mark.parametrize(("given", "normalised"), [
    ("/opt/torch-venv", "/opt/torch-venv"), ("/./opt/torch-venv", "/opt/torch-venv"),
    ("//opt//torch-venv/", "/opt/torch-venv"), ("/root/venv", "/root/venv"), ("/srv/ml/venv", "/srv/ml/venv"),
])
def test_venv_path_is_normalised_before_use(given: str, normalised: str) -> None:
    assert VenvParams.model_validate({"path": given}).path == normalised


@pytest.mark.parametrize("check,value", [
    (validate.abs_path, "/opt/torch-venv2\n"), (validate.hostname, "gpu-ct\n"), (validate.host_address, "10.0.0.1\n"),
    (validate.storage, "local-lvm\n"), (validate.package_spec, "numpy\n"), (validate.driver_version, "595.71.05\n"),
    (validate.user_name, "root\n"), (validate.user_name, "r\u00f6ot"), (validate.user_name, "\u0661"),
    (validate.driver_version, "\u0665\u0669\u0665.71.05"), (validate.ipv4, "10.0.0.\u0661"),
    (validate.ipv4_cidr, "10.0.0.5/\u0662\u0664"), (validate.bridge, "vmbr\u0661"), (validate.bridge, "vmbr0\n"),
    (validate.bridge, "a" * 16), (validate.bridge, "vmbr0;x"),
])
def test_validators_match_the_whole_ascii_value(check: object, value: str) -> None:
    with pytest.raises(ValueError):
        check(value)  # type: ignore[operator]


@pytest.mark.parametrize(("model", "params", "field"), [
    (CreateParams, {"vmid": 99}, "vmid"), (CreateParams, {"vmid": 1_000_000_000}, "vmid"),
    (CreateParams, {"vmid": -1}, "vmid"), (CreateParams, {"memory": 10**30}, "memory"),
    (CreateParams, {"swap": 10**30}, "swap"), (CreateParams, {"net": {"bridge": "vmbr\u0661"}}, "bridge"),
    (CreateParams, {"net": {"bridge": "vmbr0\n"}}, "bridge"), (CreateParams, {"net": {"ip": "10.0.0.5/\u0662\u0664"}}, "ip"),
    (CreateParams, {"template": "local:vztmpl/a b.tar.zst"}, "template"),
    (CreateParams, {"template": "local:vztmpl/x.tar\n"}, "template"),
    (PassthroughParams, {"gpus": [-1]}, "gpus"), (PassthroughParams, {"gpus": [0, 5000]}, "gpus"),
    (VenvParams, {"python": "3.\u0661\u0662"}, "python"),
])
def test_step_parameters_are_bounded(model: type, params: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(params)  # type: ignore[attr-defined]
    assert field in str(info.value)


@pytest.mark.parametrize(("model", "params"), [
    (CreateParams, {"cores": True}), (CreateParams, {"memory": 1e30}), (CreateParams, {"vmid": "101"}),
    (PassthroughParams, {"gpus": [True]}),
])
def test_strict_types_refuse_coercion(model: type, params: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(params, strict=True)  # type: ignore[attr-defined]


def test_good_parameters_still_pass() -> None:
    p = CreateParams.model_validate({"vmid": 200, "memory": 65536, "net": {"bridge": "vmbr0", "ip": "10.0.0.5/24",
                                                                           "gw": "10.0.0.1"}})
    assert p.net.property_string() == "name=eth0,bridge=vmbr0,ip=10.0.0.5/24,gw=10.0.0.1,type=veth"
    assert PassthroughParams.model_validate({"gpus": [0, 1]}).gpus == [0, 1]


# --- file: secret references -------------------------------------------------------------------------

def test_file_ref_reads_a_small_regular_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_FILE_REF_DIRS", str(tmp_path))
    f = tmp_path / "token"
    f.write_text("s3cret-token-value\n")
    assert secrets.resolve(f"file:{f}") == "s3cret-token-value"


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "directory", "too-big", "traversal-relative",
                                  "traversal-absolute", "binary", "newline-suffix"])
def test_file_ref_refuses(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROVISIONER_FILE_REF_DIRS", str(tmp_path))  # refused for what they are, not where
    (tmp_path / "sub").mkdir()
    (tmp_path / "real").write_text("value-of-secret")
    ref = {
        "dev-zero": "file:/dev/zero",
        "directory": f"file:{tmp_path}",
        "traversal-relative": "file:sub/../real",
        "traversal-absolute": f"file:{tmp_path}/sub/../real",
        "newline-suffix": f"file:{tmp_path}/real\n",
    }.get(kind)
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")  # nobody writes: a plain read would hang
        ref = f"file:{tmp_path / 'fifo'}"
    elif kind == "too-big":
        with open(tmp_path / "big", "wb") as fh:
            fh.truncate(10 * 1024 * 1024)
        ref = f"file:{tmp_path / 'big'}"
    elif kind == "binary":
        (tmp_path / "bin").write_bytes(b"\xff\xfe\x00\x01")
        ref = f"file:{tmp_path / 'bin'}"
    assert ref is not None
    with pytest.raises(secrets.SecretError) as info:
        secrets.resolve(ref)
    assert "value-of-secret" not in str(info.value)


# --- ssh_public_key_file -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(shutil.which("ssh-keygen") is not None, "ssh-keygen (openssh-client) is not installed")
    d = tmp_path_factory.mktemp("keys")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ops@example", "-f", str(d / "id")],
                   check=True)
    return d / "id"


def test_public_key_file_accepts_a_public_key(keypair: Path) -> None:
    text = public_key(str(keypair) + ".pub")
    assert text.startswith("ssh-ed25519 ") and text.endswith("ops@example")


@pytest.mark.parametrize("what", ["private", "passwd", "dev-zero", "garbage-base64", "type-mismatch"])
def test_public_key_file_refuses_anything_else(keypair: Path, tmp_path: Path, what: str) -> None:
    pub = (keypair.parent / "id.pub").read_text().split()
    path = {"private": str(keypair), "passwd": "/etc/passwd", "dev-zero": "/dev/zero"}.get(what)
    if what == "garbage-base64":
        (tmp_path / "k.pub").write_text("ssh-ed25519 not*base64 x\n")
        path = str(tmp_path / "k.pub")
    elif what == "type-mismatch":
        (tmp_path / "k.pub").write_text(f"ssh-rsa {pub[1]} x\n")
        path = str(tmp_path / "k.pub")
    assert path is not None
    with pytest.raises(StepFailed) as info:
        public_key(path)
    assert info.value.exit_code == 2
    if what == "private":
        assert "private key" in info.value.message
        assert keypair.read_text().splitlines()[1] not in str(info.value)
