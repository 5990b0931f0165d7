"""The lab's resident stand-in server acts for a container with the container's credentials (issue 34, item 1).

Real lab (its SSH endpoint, the node view's resident server, held container views), real namespaces, real
symlinks. The attack of the third hardening pass: the resident kept the node's credentials and only entered
the container's mount namespace, and the apt-get stand-in followed a link when it wrote its package list, so a
container that linked it to ``/proc/<resident pid>/root/...`` made it write (and read) node files the
container itself gets "Permission denied" on. Every attempt below is made from inside a lab container; each
must leave the node's files as they were. The module prints the table (family, attempts, held).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shlex
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from provisioner import quoting
from provisioner.lab.commands import CLIENT, resident_socket
from provisioner.lab.host_tools import lab_python
from provisioner.lab.lab import Lab
from provisioner.lab.state import LabState
from provisioner.proxmox.lxc_conf import LxcConfig
from tests.support.lab import start_services
from tests.support.require import require

pytestmark = pytest.mark.timeout(600)  # a deadline, not a speed check: a lab under a loaded 2-core CI


def _userns() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-Urm", "true"], capture_output=True, check=False).returncode == 0


def _container(state: LabState, vmid: int) -> None:
    opts: dict[str, str | int] = {"arch": "amd64", "hostname": f"ct{vmid}", "ostype": "ubuntu", "memory": 4096,
                                  "cores": 2, "rootfs": f"local-lvm:vm-{vmid}-disk-0,size=8G",
                                  "dev0": "/dev/nvidia0,mode=0666"}
    state.write_conf(vmid, LxcConfig.from_options(opts))
    state.set_status(vmid, "running")


@dataclass
class Served:
    state: LabState
    conn: dict[str, Any]
    resident: int  # the resident server's pid (the container can find it in /proc as well)


def _resident_pid(root: Path) -> int:
    sock = str(resident_socket(root)).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"provisioner.lab.resident" in argv and sock in argv:
            return int(proc.name)
    raise AssertionError("the lab's resident server is not running")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    require(_userns(), "unprivileged user namespaces are not available")
    state = Lab(tmp_path_factory.mktemp("creds") / "lab").create_state()
    for vmid in (200, 201):
        _container(state, vmid)
    services = start_services(state)
    try:
        yield Served(state, services.connection(), _resident_pid(state.root))
    finally:
        services.stop()


def _ssh(conn: dict[str, Any], command: str, timeout: float = 120) -> tuple[int | None, str]:
    c = conn["ssh"]

    async def go() -> tuple[int | None, str]:
        async with asyncssh.connect(c["host"], c["port"], username="root", client_keys=[c["key_file"]],
                                    known_hosts=c["known_hosts"]) as ssh:
            r = await ssh.run(command, check=False, timeout=timeout)
            return r.exit_status, str(r.stdout) + str(r.stderr)

    return asyncio.run(go())


def _in_ct(served: Served, vmid: int, script: str, timeout: float = 120) -> tuple[int | None, str]:
    return _ssh(served.conn, quoting.join(quoting.pct_exec(vmid, quoting.bash_lc(script))), timeout)


def _client(module: str, *args: str, env: str = "") -> str:
    """A container's own call of the resident server (the protocol the wrappers speak; nothing stops a
    container from speaking it with any argv and environment)."""
    return (f"env {env} {shlex.quote(lab_python())} -S {shlex.quote(str(CLIENT))} "
            f"{{sock}} {shlex.quote(lab_python())} {module} {' '.join(shlex.quote(a) for a in args)}")


#: (family, name, vmid, script): {R} is the resident's pid, {root} the lab root, {sock} its socket. Each
#: starts from a container with no package list and no kmod installed.
ATTEMPTS: list[tuple[str, str, int, str]] = [
    ("package list written through a link", "installed -> /proc/R/root/root/canary", 200,
     "ln -s /proc/{R}/root/root/canary /var/lib/lab-apt/installed; apt-get install -y curl"),
    ("package list written through a link", "installed -> the node's /etc/pve/lxc/200.conf", 200,
     "ln -s /proc/{R}/root/etc/pve/lxc/200.conf /var/lib/lab-apt/installed; apt-get install -y curl"),
    ("package list written through a link", "installed -> the lab root's own copy of 200.conf", 200,
     "ln -s /proc/{R}/root{root}/etc/pve/lxc/200.conf /var/lib/lab-apt/installed; apt-get install -y curl"),
    ("package list written through a link", "installed -> /proc/R/cwd/canary (the resident's cwd)", 200,
     "ln -s /proc/{R}/cwd/canary /var/lib/lab-apt/installed; apt-get install -y curl"),
    ("package list written through a link", "relative link ../../../proc/R/root/root/canary", 200,
     "ln -s ../../../proc/{R}/root/root/canary /var/lib/lab-apt/installed; apt-get install -y curl"),
    ("package list written through a link", "/var/lib/lab-apt itself -> /proc/R/root/root", 200,
     "rmdir /var/lib/lab-apt; ln -s /proc/{R}/root/root /var/lib/lab-apt; apt-get install -y curl; "
     "rm /var/lib/lab-apt; mkdir /var/lib/lab-apt"),
    ("package list written through a link", "through a nested user namespace of the container's", 200,
     "ln -s /proc/{R}/root/root/canary /var/lib/lab-apt/installed; "
     "unshare -Ur sh -c 'apt-get install -y curl' || apt-get install -y curl"),
    ("package list written through a link", "/var/lib itself -> /proc/R/root/root", 201,
     "rm -rf /var/lib; ln -s /proc/{R}/root/root /var/lib; apt-get install -y curl; rm /var/lib"),
    ("kmod tools written through a link", "/usr/bin/kmod -> /proc/R/root/root/canary", 200,
     "ln -sf /proc/{R}/root/root/canary /usr/bin/kmod; apt-get install -y kmod"),
    ("kmod tools written through a link", "/usr/sbin/modprobe -> /proc/R/root/root/canary", 200,
     "ln -sf /proc/{R}/root/root/canary /usr/sbin/modprobe; apt-get install -y kmod"),
    ("kmod tools written through a link", "/usr/sbin itself -> /proc/R/root/root", 201,
     "rm -rf /usr/sbin; ln -s /proc/{R}/root/root /usr/sbin; apt-get install -y kmod"),
    ("node file read through a link", "installed -> a node file naming curl", 200,
     "ln -s /proc/{R}/root/root/canary /var/lib/lab-apt/installed; apt-get install -y curl | grep -i newest; "
     "true"),
    ("node file read through a link", "installed -> a FIFO (the stand-in must not block)", 200,
     "mkfifo /var/lib/lab-apt/installed; apt-get install -y curl"),
    ("lab root named by the container", "PROVISIONER_LAB_ROOT=/proc/R/root<root> (apt-lock counter)", 200,
     _client("provisioner.lab.commands.apt_get", "install", "-y", "curl", env="PROVISIONER_LAB_ROOT=/proc/{R}/root{root}")),
    ("lab root named by the container", "a lab root of its own whose counter links to a node file", 200,
     "mkdir -p /tmp/fake/run; sed 's/\"scenarios\": *\\[[^]]*\\]/\"scenarios\": [\"apt-lock\"]/' {root}/lab.json "
     "> /tmp/fake/lab.json; ln -sf /proc/{R}/root/root/canary /tmp/fake/run/apt-lock-attempts; "
     + _client("provisioner.lab.commands.apt_get", "install", "-y", "curl", env="PROVISIONER_LAB_ROOT=/tmp/fake")),
    ("protocol", "a node stand-in (pct list) asked for from a container", 200,
     _client("provisioner.lab.commands.pct", "list", env="PROVISIONER_LAB_ROOT={root}")),
]

RESET = ("rm -rf /var/lib/lab-apt/installed /usr/bin/kmod /tmp/fake; "
         "for t in modprobe rmmod depmod insmod modinfo; do rm -f /usr/sbin/$t /usr/bin/$t; done; rm -f /usr/bin/lsmod; "
         "mkdir -p /var/lib/lab-apt")


def _node_files(state: LabState) -> dict[str, bytes]:
    """The node's files the attempts aim at (and every file in the node's /root)."""
    files = {"200.conf": state.conf_path(200).read_bytes()}
    for p in sorted((state.root / "node" / "fs" / "root").rglob("*")):
        files[f"/root/{p.name}"] = p.read_bytes() if p.is_file() and not p.is_symlink() else b"<not a file>"
    return files


def test_containers_cannot_make_the_resident_write_node_files(served: Served) -> None:
    state = served.state
    canary = state.root / "node" / "fs" / "root" / "canary"
    canary.write_text(f"curl\nnode canary {secrets.token_hex(8)}\n")
    # the baseline the attack needs: the container itself is refused the node's files
    status, out = _in_ct(served, 200, f"cat /proc/{served.resident}/root/root/canary; "
                                      f"echo x >> /proc/{served.resident}/root/root/canary; true")
    assert "node canary" not in out and out.count("Permission denied") == 2, out
    table: Counter[str] = Counter()
    held: Counter[str] = Counter()
    failures = []
    for family, name, vmid, script in ATTEMPTS:
        script = script.format(R=served.resident, root=state.root, sock=resident_socket(state.root))
        canary.write_text(f"curl\nnode canary {secrets.token_hex(8)}\n")  # each attempt against fresh files
        before = _node_files(state)
        try:
            status, out = _in_ct(served, vmid, f"{RESET}; {script}", timeout=90)
        except asyncssh.TimeoutError as exc:  # a stand-in that blocked (on a FIFO) did not hold either
            status, out = None, f"timed out: {exc}"
        after = _node_files(state)
        ok = status is not None and after == before and "node canary" not in out and "newest version" not in out
        if "pct list" in name:  # the node's answer would list its containers
            ok = ok and "ct200" not in out
        table[family] += 1
        held[family] += ok
        if not ok:
            failures.append(f"{name}: exit {status}\n{out}\nchanged: "
                            f"{sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))}")
    print("\nfamily | attempts | held")
    for family in table:
        print(f"{family} | {table[family]} | {held[family]}")
    assert not failures, "\n\n".join(failures)
    assert sum(table.values()) == len(ATTEMPTS) >= 15


#: run by the container's Python: a call of the resident's whose stdout is a full pipe (the stand-in blocks at
#: its first line), then what the container can see of the process the resident forked for it
PROBE = r"""
import json, os, re, signal, subprocess, sys, time
sock, py, client, resident, root = sys.argv[1:6]
r, w = os.pipe()
os.set_blocking(w, False)
for size in (4096, 1):
    try:
        while True:
            os.write(w, b"x" * size)
    except BlockingIOError:
        pass
os.set_blocking(w, True)
proc = subprocess.Popen([py, "-S", client, sock, py, "provisioner.lab.commands.apt_get", "install", "-y", "curl"],
                        stdout=w, stderr=w, env=dict(os.environ, PROVISIONER_LAB_ROOT=root))
mine = os.readlink("/proc/self/ns/user")
found, seen = None, {}
deadline = time.monotonic() + 60
while found is None and time.monotonic() < deadline and proc.poll() is None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if pid in (resident, str(os.getpid())):
            continue
        try:
            if b"provisioner.lab.resident" not in open(f"/proc/{pid}/cmdline", "rb").read():
                continue
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        try:
            seen[pid] = os.readlink(f"/proc/{pid}/ns/user")
        except OSError as exc:
            seen[pid] = exc.strerror
        if seen[pid] == mine and state == "S" and os.readlink(f"/proc/{pid}/cwd") == "/root":
            found = pid
            break
    time.sleep(0.05)
out = {"self_userns": mine, "child": found, "seen": seen}
if found:
    status = open(f"/proc/{found}/status").read()
    out["ids"] = re.findall(r"^(Uid|Gid):\s+(.*)$", status, re.M)
    out["child_root"] = sorted(os.listdir(f"/proc/{found}/root"))[:3]
try:
    out["resident_root"] = os.listdir(f"/proc/{resident}/root")[:1]
except OSError as exc:
    out["resident_root"] = exc.strerror
proc.kill()
proc.wait()
print("PROBE " + json.dumps(out))
"""


def test_resident_call_runs_as_the_container(served: Served) -> None:
    """The stand-in the resident forks for a container's call is in the container's user namespace with the
    ids that namespace maps (root: 0 0 0 0), and the container can reach it as one of its own processes
    (it could not, were it the node's), while the resident server itself stays out of its reach."""
    state = served.state
    args = [str(resident_socket(state.root)), lab_python(), str(CLIENT), str(served.resident), str(state.root)]
    script = f"{shlex.quote(lab_python())} -c {shlex.quote(PROBE)} {' '.join(shlex.quote(a) for a in args)}"
    status, out = _in_ct(served, 200, script)
    line = next((ln for ln in out.splitlines() if ln.startswith("PROBE ")), None)
    assert status == 0 and line, out
    probe = json.loads(line[len("PROBE "):])
    assert probe["child"], f"no stand-in of the resident's in the container's user namespace: {probe}"
    assert probe["ids"] == [["Uid", "0\t0\t0\t0"], ["Gid", "0\t0\t0\t0"]], probe
    assert probe["resident_root"] == "Permission denied", probe
    # seen from the machine: the container's user namespace is not the resident's (the node's)
    assert probe["self_userns"] != os.readlink(f"/proc/{served.resident}/ns/user"), probe
