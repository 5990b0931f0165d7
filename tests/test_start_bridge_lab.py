"""Values the node lacks, replayed whole against the lab. A container whose netN names a bridge the node lacks
(created elsewhere, or the bridge was removed since): the lab's `pct start` fails as pve-container's network hook
and lxc make it fail (a real task log: tteck/Proxmox#181), and `lxc.start` names the netN, the bridge and the
node's bridges, with the fix. A rootfs storage the node lacks: lxc.create's check refuses it naming the field and
the storages that hold container disks, before any request that changes the node."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from tests.support.labcache import with_shared_wheels
from tests.support.labrun import REPO, LabRun
from tests.support.require import require


def test_a_bridge_the_node_lacks_is_named_when_the_container_does_not_start(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    from provisioner.proxmox.lxc_conf import LxcConfig

    run = LabRun(tmp_path / "base", with_shared_wheels(tmp_path / "cache") / "lab")
    with run.running():
        state = run.state()
        opts: dict[str, str | int] = {"arch": "amd64", "hostname": "gpu-ct", "ostype": "ubuntu", "memory": 8192,
                                      "rootfs": "local-lvm:vm-200-disk-0,size=8G",
                                      "net0": "name=eth0,bridge=vmbr9,hwaddr=BC:24:11:00:00:09,ip=dhcp,type=veth"}
        state.write_conf(200, LxcConfig.from_options(opts))
        state.set_status(200, "stopped")
        doc = yaml.safe_load((REPO / "playbooks" / "blackwell-8gpu-lxc.yaml").read_text())
        doc["steps"] = [s for s in doc["steps"] if s["kind"] in ("node.connect", "lxc.start")]
        book = tmp_path / "start.yaml"
        book.write_text(yaml.safe_dump(doc, sort_keys=False))
        r = run.replay(book)
        out = r.stdout + r.stderr
        assert r.rc == 1, out[-3000:]
        assert "CT 200 cannot start: its net0 names bridge 'vmbr9', which pve does not have (bridges: vmbr0)" in out, \
            out[-3000:]
        assert "set the bridge of net0 to one the node has" in out and "bridge=vmbr0" in out
        # the run log's diagnosis: the step's own finding first, with the task log's words as its evidence (the
        # generic "a hook or mount fails" guess of the same category is not shown)
        (failed,) = [e for e in r.events if e.get("kind") == "step.finished" and e.get("status") == "failed"]
        first = failed["diagnosis"][0]
        assert "names bridge 'vmbr9'" in first["root_cause"] and "bridge=vmbr0" in first["fix"], first
        assert any("Failed to create the network" in line for line in first["evidence"]), first
        assert not any("hook or mount" in f["root_cause"] for f in failed["diagnosis"]), failed["diagnosis"]
        assert state.get_status(200).status == "stopped"


def test_a_storage_the_node_lacks_is_refused_naming_the_field_before_any_change(tmp_path: Path) -> None:
    """The wizard's walk-through found `local-lvmm` passing the plan and failing at apply with `500 storage
    'local-lvmm' does not exist`, no field, no fix. Replayed whole against the lab: the run stops at lxc.create
    naming rootfs_storage, the storages that hold container disks, and creates nothing."""
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    run = LabRun(tmp_path / "base", with_shared_wheels(tmp_path / "cache") / "lab")
    with run.running():
        doc = yaml.safe_load((REPO / "playbooks" / "blackwell-8gpu-lxc.yaml").read_text())
        steps = []
        for s in doc["steps"]:
            if s["kind"] == "lxc.create":
                s["params"] = {**s.get("params", {}), "rootfs_storage": "local-lvmm"}
            steps.append(s)
            if s["kind"] == "lxc.create":
                break
        doc["steps"] = steps
        book = tmp_path / "create.yaml"
        book.write_text(yaml.safe_dump(doc, sort_keys=False))
        r = run.replay(book)
        out = r.stdout + r.stderr
        assert r.rc != 0, out[-3000:]
        (failed,) = [e for e in r.events if e.get("kind") == "step.finished" and e.get("status") == "failed"]
        assert failed["step"] == "lxc.create", failed
        # refused by its check (the node's storages for container disks), before the create was sent
        assert failed["message"].startswith("storage 'local-lvmm' does not hold container disks on pve (storages "
                                             "that do: local-lvm)"), failed["message"]
        assert "choose one the node has (local-lvm) (playbook key lxc.create params: rootfs_storage), then replay" in \
            failed["message"], failed["message"]
        assert not [line for line in run.state().root.joinpath("api-requests.jsonl").read_text().splitlines()
                    if '"POST"' in line and "/lxc" in line], "a create request was sent"
        assert not run.state().conf_path(200).exists()
