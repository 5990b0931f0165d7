"""Support bundles: planted canary secrets never reach the archive; standard tar opens it; the
manifest lists every member with its sha256; `read_bundle` gives back the evidence for diagnose."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from provisioner import secrets
from provisioner.cli.bundle import command as bundle_command
from provisioner.playbook import load
from provisioner.support import collect, read_bundle, write_bundle
from provisioner.support.bundle import MANIFEST, ROOT, BundleError
from provisioner.support.diagnose_sources import bundle_findings, evidence_findings
from provisioner.support.scrub import Scrubber, env_secrets
from tests.support.require import require, require_torch
from tests.support.sshd import Sshd
from tests.support.standin_tools import OUTPUTS, VENV, standin_bin, standin_transport

PROJECT = Path(__file__).resolve().parents[1]


def canaries() -> dict[str, str]:
    tag = uuid.uuid4().hex[:12]
    return {k: f"canary-{k}-{tag}" for k in ("env", "file", "pw", "tok", "url", "conf")}


def playbook_with_refs(tmp: Path, ref_file: Path) -> Path:
    path = tmp / "playbook.yaml"
    path.write_text(f"""schema_version: 1
name: blackwell-8gpu-lxc
target:
  host: pve.example.internal
  container: 200
  api:
    user: root@pam
    password: env:PVE_PASSWORD
    token_name: ci
    token_value: file:{ref_file}
steps:
  - kind: node.inventory
""")
    return path


def run_log(runs: Path, c: dict[str, str]) -> Path:
    """A JSON Lines run log (provisioner.events shapes) whose output leaked secrets."""
    runs.mkdir(parents=True, exist_ok=True)
    events = [
        {"ts": 1764400000.0, "host": "pve.example.internal", "kind": "run.started", "run_id": "20261129-101500-ab12",
         "playbook": "playbooks/blackwell-8gpu-lxc.yaml", "mode": "apply", "hosts": ["pve.example.internal"]},
        {"ts": 1764400001.0, "host": "pve.example.internal", "kind": "command.started", "target": "ssh:root@pve",
         "cmd_id": 7, "command": f"curl -fsS -H 'Authorization: PVEAPIToken=root@pam!ci={c['tok']}' "
                                 "https://pve.example.internal:8006/api2/json/version"},
        {"ts": 1764400002.0, "host": "pve.example.internal", "kind": "output", "cmd_id": 7,
         "line": f"mysql-setup: password={c['pw']} accepted"},
        {"ts": 1764400003.0, "host": "pve.example.internal", "kind": "output", "cmd_id": 7,
         "line": f"echo {c['file']} | pveum user token add root@pam ci"},
        {"ts": 1764400004.0, "host": "pve.example.internal", "kind": "message", "level": "error",
         "text": f"login failed for root@pam with {c['env']}"},
        {"ts": 1764400005.0, "host": "pve.example.internal", "kind": "step.finished", "index": 3,
         "step": "driver.userspace", "status": "failed", "message": "the NVIDIA installer failed"},
    ]
    path = runs / "20261129-101500-ab12.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def assert_no_canary(archive: Path, c: dict[str, str], extracted: Path | None = None) -> None:
    raw_tar = gzip.decompress(archive.read_bytes())  # every header and every member byte
    blobs = {"<archive>": archive.read_bytes(), "<tar stream>": raw_tar}
    if extracted is not None:
        blobs |= {str(p): p.read_bytes() for p in extracted.rglob("*") if p.is_file()}
    for name, data in blobs.items():
        for kind, value in c.items():
            assert value.encode() not in data, f"canary {kind} leaked into {name}"


def check_archive(archive: Path, tmp: Path) -> tuple[dict[str, Any], Path]:
    """Open with the standard tar command, then check the manifest against the extracted members."""
    listing = subprocess.run(["tar", "-tzf", str(archive)], capture_output=True, text=True, check=True).stdout
    with tarfile.open(archive, "r:gz") as tar:
        assert sorted(listing.split()) == sorted(m.name + ("/" if m.isdir() else "") for m in tar.getmembers())
    dest = tmp / "extracted"
    dest.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(dest)], check=True)
    root = dest / ROOT
    manifest = json.loads((root / MANIFEST).read_text())
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    listed = {m["path"]: m for m in manifest["members"]}
    assert set(listed) == files - {MANIFEST}
    for path, entry in listed.items():
        data = (root / path).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest(), path
        assert entry["size"] == len(data), path
    for probe in manifest["probes"]:
        assert probe["file"] is None or probe["file"] in files
    return manifest, root


# --- in-process: collect over LocalTransport with stand-ins, secrets resolved from a playbook ----------


async def test_bundle_redacts_env_playbook_refs_logs_and_probe_output(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    c = canaries()
    monkeypatch.setenv("PVE_PASSWORD", c["env"])
    monkeypatch.setenv("PROVISIONER_FILE_REF_DIRS", str(tmp_path))  # `file:` reads only from a secrets directory
    ref = tmp_path / "pve-token"
    ref.write_text(c["file"] + "\n")
    playbook = load(playbook_with_refs(tmp_path, ref))
    assert playbook.target.api is not None
    assert secrets.resolve(playbook.target.api.password or "") == c["env"]
    assert secrets.resolve(playbook.target.api.token_value or "") == c["file"]
    runs = tmp_path / "runs"
    run_log(runs, c)
    bindir = standin_bin(tmp_path, dmesg_extra=(
        f"[ 9001.000001] NVRM: GPU at PCI:0000:16:00: GPU-4b1e9c27 password={c['pw']}",
        f"[ 9001.000002] nvidia-persistenced: curl https://admin:{c['url']}@mirror.example/driver",
        f"[ 9001.000003] NVRM: token {c['env']} / {c['file']}",
    ))
    ev = await collect(standin_transport(bindir), 200, VENV)
    dmesg = ev.record("node.dmesg")
    assert dmesg is not None and c["pw"] in dmesg.output  # the raw evidence held the canaries ...
    out = tmp_path / "support.tar.gz"
    result = write_bundle(ev, out, runs_dir=runs, extra_files={"playbook.yaml": (tmp_path / "playbook.yaml")
                                                                .read_text()})
    manifest, root = check_archive(out, tmp_path)
    assert_no_canary(out, c, root)  # ... the archive holds none of them
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    red = (root / "node/dmesg-nvidia.txt").read_text()
    assert "password=<redacted>" in red and "https://admin:<redacted>@mirror.example" in red
    assert "NVRM: Xid (PCI:0000:16:00): 79" in red  # the evidence itself survives redaction
    log = (root / "runs/20261129-101500-ab12.jsonl").read_text()
    events = [json.loads(line) for line in log.splitlines()]  # still JSON Lines after redaction
    assert [e["kind"] for e in events][:3] == ["run.started", "command.started", "output"]
    assert events[1]["command"] == "curl -fsS -H 'Authorization: <redacted>"
    assert events[2]["line"] == "mysql-setup: password=<redacted> accepted"
    assert "env:PVE_PASSWORD" in (root / "extra/playbook.yaml").read_text()  # references are not secrets
    assert {"node/dmesg-nvidia.txt", "runs/20261129-101500-ab12.jsonl"} <= set(result.redacted_members)
    assert manifest["redaction"]["applied"] is True
    collect_env = (root / "summary/collect_env.txt").read_text()
    require_torch()
    import torch

    assert f"PyTorch version: {torch.__version__}" in collect_env
    assert "GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (CC 12.0" in collect_env
    # Reading it back gives the same facts and the same diagnosis as the live evidence.
    back = read_bundle(out)
    assert back.notes == [] and back.vmid == 200 and back.source == "bundle"
    assert set(back.facts) == set(ev.facts)
    assert back.facts["gpu_compute_caps"] == ev.facts["gpu_compute_caps"]
    live = [f.category for f in evidence_findings(ev)]
    assert [f.category for f in bundle_findings(out)] == live
    assert "driver_lib_mismatch" in live
    assert json.loads((root / "diagnosis.json").read_text())["findings"][0]["category"] == live[0]


# --- end to end: the CLI on a "node" whose /etc/pve and /var/log hold planted secrets -----------------

CT_CONF = """\
#GPU worker%3A 8x RTX PRO 6000
#admin login password={pw} (rotate me)
#pve root {env}
arch: amd64
cores: 32
dev0: /dev/nvidia0,gid=44
dev1: /dev/nvidiactl,gid=44
dev2: /dev/nvidia-uvm,gid=44
dev3: /dev/nvidia-uvm-tools,gid=44
hostname: gpu-worker
memory: 262144
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:2F:03:9C,ip=dhcp,type=veth
ostype: ubuntu
rootfs: local-lvm:vm-200-disk-0,size=64G
swap: 0
unprivileged: 1
"""


def _overlay_works(tmp: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    up, work = tmp / "probe-up", tmp / "probe-work"
    up.mkdir()
    work.mkdir()
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
                            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={up},workdir={work} /etc"],
                           capture_output=True)
    return probe.returncode == 0


def test_cli_bundle_on_a_node_with_planted_secrets(tmp_path: Path) -> None:
    require(_overlay_works(tmp_path), "needs root, unshare and overlayfs for a private /etc/pve and /var/log")
    c = canaries()
    upper, work, varlog = tmp_path / "etc-upper", tmp_path / "etc-work", tmp_path / "varlog"
    (upper / "pve/lxc").mkdir(parents=True)
    work.mkdir()
    varlog.mkdir()
    (upper / "pve/lxc/200.conf").write_text(CT_CONF.format(pw=c["pw"], env=c["env"]))
    (varlog / "nvidia-installer.log").write_text(
        (OUTPUTS / "nvidia_installer_success_userspace.log").read_text()
        + f"-> Downloading https://ci:{c['url']}@mirror.example.internal/NVIDIA-Linux-x86_64-595.71.05.run\n"
        + f"-> Authorization: PVEAPIToken=root@pam!ci={c['tok']}\n"
        + f"-> token file content: {c['file']}\n")
    ref = tmp_path / "pve-token"
    ref.write_text(c["file"])
    playbook = playbook_with_refs(tmp_path, ref)
    state = tmp_path / "state"
    run_log(state / "runs", c)
    bindir = standin_bin(tmp_path)
    out = tmp_path / "out" / "bundle.tar.gz"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PVE_PASSWORD": c["env"],
           "PROVISIONER_STATE_DIR": str(state), "PYTHONPATH": str(PROJECT), "PROVISIONER_FILE_REF_DIRS": str(tmp_path)}
    script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc && "
              f"mount --bind {varlog} /var/log && exec \"$@\"")
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", script, "sh",
         sys.executable, "-m", "provisioner", "bundle", "--local", "--container", "200", "--venv", "/nonexistent/venv",
         "--playbook", str(playbook), "-o", str(out), "--json"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for kind, value in c.items():
        assert value not in proc.stdout + proc.stderr, f"canary {kind} printed"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["bundle"] == str(out) and summary["unreachable"] is None
    assert summary["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    manifest, root = check_archive(out, tmp_path)
    assert summary["members"] == len(manifest["members"]) + 1
    assert_no_canary(out, c, root)
    conf = (root / "node/lxc-config.conf").read_text()
    assert "dev0: /dev/nvidia0,gid=44" in conf and "password=<redacted>" in conf  # the real file, redacted
    log = (root / "container/nvidia-installer.log").read_text()
    assert "-> Installing NVIDIA driver version 595.71.05." in log and "https://ci:<redacted>@mirror" in log
    assert (root / "runs/20261129-101500-ab12.jsonl").exists()
    probes = {p["name"]: p for p in manifest["probes"]}
    assert probes["node.lxc_config"]["status"] == "ok" and probes["ct.installer_log"]["status"] == "ok"
    assert probes["ct.torch"]["status"] == "absent" and probes["ct.installer_log"]["where"] == "ct200@local"
    facts = read_bundle(out).facts
    assert "lxc_config" in facts and "install_log" in facts


# --- the CLI over a real sshd, and its usage errors ------------------------------------------------------


def test_cli_bundle_over_ssh_and_unreachable_host(sshd: Sshd, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    runner = CliRunner()
    out = tmp_path / "b.tar.gz"
    base = ["--host", f"root@{sshd.host}", "--port", str(sshd.port), "--key", str(sshd.client_key)]
    res = runner.invoke(bundle_command, [*base, "--known-hosts", str(sshd.known_hosts), "--venv", "/nonexistent",
                                         "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["probes"]["ok"] >= 5 and summary["probes"]["skipped"] == 0
    manifest, _ = check_archive(out, tmp_path)
    uname = next(p for p in manifest["probes"] if p["name"] == "node.uname")
    assert uname["where"] == f"ssh:root@127.0.0.1:{sshd.port}" and uname["status"] == "ok"
    # A host not in known_hosts: refused (no --trust-new-host), exit 4, the bundle records why.
    out2 = tmp_path / "unreachable.tar.gz"
    res = runner.invoke(bundle_command, [*base, "--known-hosts", str(tmp_path / "kh-empty"), "-o", str(out2),
                                         "--json"])
    assert res.exit_code == 4
    assert "unknown host" in json.loads(res.stdout.strip().splitlines()[-1])["unreachable"]
    back = read_bundle(out2)
    assert back.unreachable is not None and all(r.status in ("unreachable", "skipped") for r in back.records)
    with pytest.raises(BundleError, match="no evidence"):
        bundle_findings(out2)


@pytest.mark.parametrize("args", [
    ["-o", "x.tar.gz"],
    ["--host", "pve", "--local", "-o", "x.tar.gz"],
    ["--local", "--lab", "-o", "x.tar.gz"],
    ["--host", "bad host;rm", "-o", "x.tar.gz"],
    ["--local", "--venv", "relative/venv", "-o", "x.tar.gz"],
    ["--local", "--container", "42", "-o", "x.tar.gz"],
])
def test_cli_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    res = CliRunner().invoke(bundle_command, args)
    assert res.exit_code == 2, res.output
    assert not (tmp_path / "x.tar.gz").exists()


def test_cli_lab_not_running_exits_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_LAB_ROOT", str(tmp_path / "no-lab"))
    res = CliRunner().invoke(bundle_command, ["--lab", "-o", str(tmp_path / "x.tar.gz")])
    assert res.exit_code == 4 and "lab is not running" in res.output


# --- reading bundles: refuse what is not one, notice tampering ---------------------------------------------


def _rewrite(src: Path, dst: Path, change: dict[str, bytes]) -> None:
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dst, "w:gz") as tout:
        for m in tin.getmembers():
            fh = tin.extractfile(m) if m.isfile() else None
            data = fh.read() if fh is not None else None
            name = m.name.split("/", 1)[-1]
            if data is not None and name in change:
                data = change[name]
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data) if data is not None else None)


async def test_read_bundle_rejects_non_bundles_and_notes_tampering(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not a tarball")
    with pytest.raises(BundleError, match="not a readable"):
        read_bundle(garbage)
    plain = tmp_path / "plain.tar.gz"
    with tarfile.open(plain, "w:gz") as tar:
        info = tarfile.TarInfo("x/readme.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(BundleError, match="manifest"):
        read_bundle(plain)
    ev = await collect(standin_transport(standin_bin(tmp_path)), None, "/nonexistent/venv")
    good = tmp_path / "good.tar.gz"
    write_bundle(ev, good, include_runs=False)
    assert read_bundle(good).notes == []
    bad = tmp_path / "tampered.tar.gz"
    _rewrite(good, bad, {"node/nvidia-smi-query-gpu.csv": (OUTPUTS / "smi_query_csv_mixed_na.txt").read_bytes()})
    notes = read_bundle(bad).notes
    assert notes == ["member node/nvidia-smi-query-gpu.csv does not match its sha256 in the manifest"]


# --- the redaction layer itself -------------------------------------------------------------------------


def test_scrubber_takes_secret_named_env_values_and_registered_secrets() -> None:
    tag = uuid.uuid4().hex[:10]
    environ = {"PVE_PASSWORD": f"pw-{tag}", "HF_TOKEN": f"hf-{tag}", "MY_API_KEY": f"k-{tag}", "PATH": "/usr/bin",
               "DEBUG_TOKEN": "1", "TOKEN_REF": "env:OTHER", "HOME": f"/home/{tag}"}
    assert env_secrets(environ) == {f"pw-{tag}", f"hf-{tag}", f"k-{tag}"}
    registered = f"reg/{tag}@x"  # resolved elsewhere in this process through provisioner.secrets
    secrets.REDACTOR.add(registered)
    scrub = Scrubber([f"expl-{tag}"], environ=environ)
    text = (f"pw-{tag} | {registered} | reg%2F{tag}%40x | expl-{tag} | hf-{tag} | k-{tag} | /home/{tag}")
    out = scrub(text)
    assert out.count(tag) == 1 and out.endswith(f"/home/{tag}")  # HOME is not secret-named: left alone
