"""The Ansible collection (`ansible/`): ansible-core drives `gpu_provisioner.fleet.replay` against labs.

The collection is built with `ansible-galaxy collection build ansible` and installed into a
private collections path, as a user would; `ansible-playbook` (ansible-core from the dev
dependencies) runs the shipped sample play `ansible/playbooks/provision.yml` against three
private labs plus one host whose lab is not running, with a light playbook (the shipped one
without torch.resolve / venv.build / burnin.run: those take minutes per host on two CPUs).

- `--check`: every lab host "changed" (pending changes listed in its report), the down host
  failed alone, nothing created on any node;
- apply: every lab host "changed", the containers exist and run with the NVIDIA userspace;
- apply again: every host "ok", changed=0 (idempotent); check mode again: no change pending;
- the labs' API passwords (the real secrets of these runs, read by the tool from `file:`
  references) never appear in Ansible's output (-v) or the kept reports; a literal secret given
  where a reference belongs is refused and never printed, even at -vvv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.lab import start_labs, stop_labs
from tests.support.require import require

REPO = Path(__file__).resolve().parents[1]
COLLECTION = REPO / "ansible"
SAMPLE_PLAY = COLLECTION / "playbooks" / "provision.yml"
SHIPPED_PLAYBOOK = REPO / "playbooks" / "blackwell-8gpu-lxc.yaml"
LIGHT_KINDS = ("node.connect", "node.inventory", "lxc.create", "lxc.gpu_passthrough", "lxc.start",
               "driver.userspace", "gpu.detect")
LABS = ("a", "b", "c")
VMID = 200
ANSIBLE_TIMEOUT_S = 900


def ansible_bin(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    require(path.exists(), f"{name} is not installed next to this Python (dev dependency ansible-core)")
    return str(path)


@dataclass
class AnsibleRun:
    rc: int
    out: str

    def recap(self, host: str) -> dict[str, int]:
        m = re.search(rf"^{re.escape(host)}\s*:\s*((?:\w+=\d+\s*)+)$", self.out, re.M)
        assert m, f"no PLAY RECAP line for {host}:\n{self.out[-4000:]}"
        return {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


@dataclass
class Collection:
    base: Path
    env: dict[str, str]

    def play(self, inventory: Path, play: Path, *args: str, extra: dict[str, Any] | None = None) -> AnsibleRun:
        argv = [ansible_bin("ansible-playbook"), "-i", str(inventory), str(play), *args]
        if extra:
            argv += ["-e", json.dumps(extra)]
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.base,
                              timeout=ANSIBLE_TIMEOUT_S, check=False)
        return AnsibleRun(proc.returncode, proc.stdout + proc.stderr)


def install_collection(base: Path) -> Collection:
    """`ansible-galaxy collection build ansible` + install into base/collections (offline, from the tarball)."""
    dist = base / "dist"
    build = subprocess.run([ansible_bin("ansible-galaxy"), "collection", "build", str(COLLECTION),
                            "--output-path", str(dist)], capture_output=True, text=True, timeout=300, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    tarballs = list(dist.glob("gpu_provisioner-fleet-*.tar.gz"))
    assert len(tarballs) == 1, tarballs
    colls = base / "collections"
    inst = subprocess.run([ansible_bin("ansible-galaxy"), "collection", "install", str(tarballs[0]), "-p", str(colls)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert inst.returncode == 0, inst.stdout + inst.stderr
    assert (colls / "ansible_collections" / "gpu_provisioner" / "fleet" / "plugins" / "modules" / "replay.py").exists()
    env = dict(os.environ)
    env.update(ANSIBLE_COLLECTIONS_PATH=str(colls), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_LOCAL_TEMP=str(base / "ansible-tmp"), ANSIBLE_HOME=str(base / "ansible-home"),
               PROVISIONER_STATE_DIR=str(base / "state"), PROVISIONER_CACHE_DIR=str(base / "cache"),
               NO_COLOR="1", COLUMNS="200")
    env.pop("PVE_PASSWORD", None)
    env.pop("PROVISIONER_LAB_ROOT", None)
    return Collection(base, env)


def write_light_playbook(dest: Path) -> Path:
    doc = yaml.safe_load(SHIPPED_PLAYBOOK.read_text())
    doc["steps"] = [s for s in doc["steps"] if s["kind"] in LIGHT_KINDS]
    assert [s["kind"] for s in doc["steps"]] == list(LIGHT_KINDS)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def lab_ct(root: Path) -> dict[str, Any]:
    from provisioner.lab.state import LabState

    state = LabState.load(root)
    if not state.has_ct(VMID):
        return {"exists": False}
    rootfs = state.ct_dir(VMID) / "rootfs"
    return {"exists": True, "status": state.get_status(VMID).status,
            "smi": (rootfs / "usr/bin/nvidia-smi").exists(),
            "nvml": sorted(p.name for p in (rootfs / "usr/lib/x86_64-linux-gnu").glob("libnvidia-ml.so.*"))}


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Collection:
    ansible_bin("ansible-playbook")
    return install_collection(tmp_path_factory.mktemp("ansible"))


@pytest.fixture(scope="module")
def labs(collection: Collection) -> Iterator[dict[str, Path]]:
    try:
        from provisioner.lab.lab import Lab  # noqa: F401  (the lab is in this build)
    except ImportError as exc:
        require(False, f"the lab is not importable: {exc}")
        raise
    require(shutil.which("unshare") is not None, "the lab's sandboxes need `unshare` (util-linux)")
    require(os.geteuid() == 0, "the lab's node sandboxes need root here")
    roots = {n: collection.base / f"lab-{n}" for n in LABS}
    try:
        start_labs({n: (root, ()) for n, root in roots.items()}, collection.base / "lab-cache")
        yield roots
    finally:
        stop_labs(list(roots.values()))


def secrets_of(roots: dict[str, Path]) -> list[str]:
    """The labs' API passwords: what the tool resolves from the `file:` references."""
    found = []
    for root in roots.values():
        conn = json.loads((root / "private" / "connection.json").read_text())
        ref = conn["api"]["password"]
        assert ref.startswith("file:"), ref
        found.append(Path(ref[len("file:"):]).read_text().strip())
    assert all(len(s) >= 8 for s in found), "lab passwords too short to be a meaningful canary"
    return found


@pytest.mark.slow
def test_sample_play_check_apply_and_idempotent_rerun(collection: Collection, labs: dict[str, Path]) -> None:
    base = collection.base
    playbook = write_light_playbook(base / "light.yaml")
    inventory = base / "inventory.yml"
    hosts: dict[str, Any] = {f"pve-{n}": {"provisioner_lab_root": str(root)} for n, root in labs.items()}
    hosts["pve-down"] = {"provisioner_lab_root": str(base / "lab-never-started")}
    inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts}}))
    results = base / "results"
    results.mkdir()
    extra = {"provisioner_playbook": str(playbook), "provisioner_cmd": [sys.executable, "-m", "provisioner"],
             "provisioner_chdir": str(REPO), "provisioner_results_dir": str(results)}
    lab_hosts = [f"pve-{n}" for n in LABS]
    secrets = secrets_of(labs)
    outputs: list[str] = []

    def reports() -> dict[str, dict[str, Any]]:
        return {h: json.loads((results / f"{h}.json").read_text()) for h in lab_hosts}

    # 1. check mode: plan --check per host; pending changes reported as "changed", nothing created
    check = collection.play(inventory, SAMPLE_PLAY, "--check", "-v", "--forks", "4", extra=extra)
    outputs.append(check.out)
    assert check.rc == 2, check.out[-6000:]  # pve-down failed; Ansible went on with the others
    down = check.recap("pve-down")
    assert down["failed"] == 1 and down["ok"] == 0, down
    assert "not running" in check.out, check.out[-6000:]
    for host in lab_hosts:
        assert check.recap(host) == {**check.recap(host), "changed": 1, "failed": 0, "unreachable": 0}, check.out
    for host, doc in reports().items():
        assert doc["mode"] == "plan" and doc["exit_status"] == 10, (host, doc)
        counts = doc["report"]["hosts"][host]
        assert counts["changed"] >= 4 and counts["failed"] == 0, (host, counts)
        assert any("create" in c.lower() for c in doc["pending"]), (host, doc["pending"])
    for root in labs.values():
        assert not lab_ct(root)["exists"], "check mode created a container"

    # 2. apply: every lab host changed and provisioned
    apply = collection.play(inventory, SAMPLE_PLAY, "-v", "--forks", "3", "--limit", ",".join(lab_hosts), extra=extra)
    outputs.append(apply.out)
    assert apply.rc == 0, apply.out[-6000:]
    for host in lab_hosts:
        assert apply.recap(host)["changed"] == 1 and apply.recap(host)["failed"] == 0, apply.out[-3000:]
    for host, doc in reports().items():
        assert doc["mode"] == "apply" and doc["exit_status"] == 0 and doc["report"]["status"] == "ok", (host, doc)
        counts = doc["report"]["hosts"][host]
        assert counts["ok"] + counts["changed"] == len(LIGHT_KINDS) and counts["changed"] >= 4, (host, counts)
        assert [s["step"] for s in doc["steps"]] == list(LIGHT_KINDS), doc["steps"]
    for n, root in labs.items():
        ct = lab_ct(root)
        assert ct["exists"] and ct["status"] == "running" and ct["smi"] and ct["nvml"], (n, ct)

    # 3. apply again: ok, no change on any host
    again = collection.play(inventory, SAMPLE_PLAY, "-v", "--forks", "3", "--limit", ",".join(lab_hosts), extra=extra)
    outputs.append(again.out)
    assert again.rc == 0, again.out[-6000:]
    for host in lab_hosts:
        assert again.recap(host)["changed"] == 0 and again.recap(host)["failed"] == 0, again.out[-3000:]
    for host, doc in reports().items():
        assert doc["report"]["hosts"][host] == {"ok": len(LIGHT_KINDS), "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}

    # 4. check mode on the converged hosts: nothing pending
    recheck = collection.play(inventory, SAMPLE_PLAY, "--check", "--forks", "3", "--limit", ",".join(lab_hosts),
                              extra=extra)
    outputs.append(recheck.out)
    assert recheck.rc == 0, recheck.out[-6000:]
    for host, doc in reports().items():
        assert recheck.recap(host)["changed"] == 0, recheck.out[-3000:]
        assert doc["mode"] == "plan" and doc["exit_status"] == 0 and doc["pending"] == [], (host, doc)

    # the secrets the tool used never reached Ansible's output or the kept reports
    kept = "".join(p.read_text() for p in results.glob("*.json"))
    for secret in secrets:
        for out in outputs:
            assert secret not in out
        assert secret not in kept


def test_literal_secret_is_refused_and_never_printed(collection: Collection) -> None:
    """A password pasted where a reference belongs: the task fails without running the tool, and
    the value is nowhere in Ansible's output, even at -vvv (the option is no_log)."""
    canary = "CANARY-hunter2-9f3c1d7e"
    play = collection.base / "canary.yml"
    play.write_text(yaml.safe_dump([{
        "name": "canary", "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [{"name": "literal password", "register": "r", "ignore_errors": True,
                   "gpu_provisioner.fleet.replay": {
                       "playbook": str(SHIPPED_PLAYBOOK), "name": "pve-x", "host": "127.0.0.1",
                       "api": {"password_ref": canary}, "command": [sys.executable, "-m", "provisioner"]}},
                  {"name": "show it", "ansible.builtin.debug": {"var": "r"}}],
    }]))
    inv = collection.base / "localhost.ini"
    inv.write_text("localhost ansible_connection=local\n")
    run = collection.play(inv, play, "-vvv")
    assert run.rc == 0, run.out[-4000:]  # ignore_errors: the play goes on to print the registered result
    assert "must be a secret reference" in run.out, run.out[-4000:]
    assert "the value given is not shown" in run.out
    assert canary not in run.out
    assert run.out.count("\"exit_status\": null") >= 1  # the tool never ran


def test_module_documentation_matches_its_argument_spec(collection: Collection) -> None:
    """`ansible-doc` parses the installed module's DOCUMENTATION, and it documents every option the
    module accepts (and no other)."""
    proc = subprocess.run([ansible_bin("ansible-doc"), "--json", "gpu_provisioner.fleet.replay"], capture_output=True,
                          text=True, env=collection.env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)["gpu_provisioner.fleet.replay"]["doc"]
    assert doc["attributes"]["check_mode"]["support"] == "full"
    source = (COLLECTION / "plugins" / "modules" / "replay.py").read_text()
    spec = re.search(r"argument_spec=\{(.*?)\n        \},\n", source, re.S)
    assert spec
    top = set(re.findall(r'^            "(\w+)": \{', spec.group(1), re.M))
    assert top == set(doc["options"]), (top ^ set(doc["options"]))
    assert set(doc["options"]["api"]["suboptions"]) == {"port", "user", "password_ref", "token_name",
                                                         "token_value_ref", "ca_file", "verify_tls", "fingerprint"}
