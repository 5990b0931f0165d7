"""Red-team cases for playbook loading (issue #19): every malformed or hostile input is a PlaybookError
naming file:line (exit 2 from the CLI), never a traceback, a hang or an exhausted machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner import playbook
from provisioner.playbook import PlaybookError

BASE = """schema_version: 1
target:
  host: 10.0.0.1
  container: 200
steps:
  - kind: node.connect
"""
LOC = re.compile(r"^(pb\.yaml|.*\.yaml):\d+: ", re.M)


def _laughs(levels: int) -> str:
    """The billion-laughs shape: each level is ten aliases of the one before (10**levels values)."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


# (name, playbook text or bytes, line expected in the message, text expected in the message)
RED_TEAM: list[tuple[str, str | bytes, int, str]] = [
    ("billion laughs under a step's params",
     BASE + "  - kind: node.inventory\n    params:\n" + "".join("      " + ln + "\n" for ln in
                                                          _laughs(9).splitlines()), 13, "expands to more than"),
    ("billion laughs at the top level", BASE + _laughs(9), 11, "expands to more than"),
    ("recursive alias", BASE + "name: &r [*r]\n", 7, "recursive"),
    ("undefined alias", BASE + "name: *nope\n", 7, "undefined alias"),
    ("50 MB file", BASE + "  - kind: node.connect\n" * (50_000_000 // 23), 1, "larger than 1024 KiB"),
    ("too many steps", BASE + "  - kind: node.connect\n" * 1500, 5, "more than 1000 steps"),
    ("invalid UTF-8", (BASE + "name: caf\xe9\n").encode("latin-1"), 7, "not valid UTF-8"),
    ("invalid UTF-8 on line 1", b"\xff\xfe\x00junk", 1, "not valid UTF-8"),
    ("NUL byte", BASE + "name: a\x00b\n", 7, "NUL character"),
    ("deep flow nesting", BASE + "name: " + "[" * 100_000 + "]" * 100_000 + "\n", 7, "nesting"),
    ("nesting past the depth bound", BASE + "name: " + "[" * 70 + "]" * 70 + "\n", 7, "deeper than 64"),
    ("deep block nesting", BASE + "".join("  " * i + f"k{i}:\n" for i in range(80)) + "  " * 80 + "v: 1\n",
     71, "deeper than 64"),
    ("duplicate top-level key", BASE + "target:\n  host: 10.9.9.9\n", 7, "duplicate key 'target'"),
    ("duplicate key in a step", BASE + "  - kind: lxc.create\n    kind: venv.build\n", 8, "duplicate key 'kind'"),
    ("duplicate param", BASE + "  - kind: lxc.create\n    params:\n      cores: 2\n      cores: 4\n", 10,
     "duplicate key 'cores'"),
    ("impossible timestamp", BASE + "name: 2024-13-45\n", 7, "cannot read a value"),
    ("empty file", "", 1, "file is empty"),
    ("a list, not a mapping", "- a\n- b\n", 1, "a playbook is a mapping"),
    ("python tag", BASE + "name: !!python/object/apply:os.system ['true']\n", 7, "YAML syntax error"),
    ("unhashable key", BASE + "? [a, b]\n: c\n", 7, "YAML syntax error"),
    ("tab indentation", "schema_version: 1\ntarget:\n\thost: x\n", 3, "YAML syntax error"),
    ("escape in a step kind", BASE + "  - kind: \"x\\e]0;pwned\\a\"\n", 7, "unknown step kind"),
    ("cores: true", BASE + "  - kind: lxc.create\n    params:\n      cores: true\n", 9, "steps[1].params.cores"),
    ("memory 1e30", BASE + "  - kind: lxc.create\n    params:\n      memory: 1e30\n", 9, "steps[1].params.memory"),
    ("vmid as a string", BASE.replace("container: 200", "container: '200'"), 4, "target.container"),
    ("venv /./opt with recreate", BASE + "  - kind: venv.build\n    params:\n      path: /./opt\n      recreate: true\n",
     9, "refusing a system directory"),
    ("venv //etc", BASE + "  - kind: venv.build\n    params:\n      path: //etc\n", 9, "refusing a system directory"),
    ("venv under /root/.ssh", BASE + "  - kind: venv.build\n    params:\n      path: /root/.ssh/v\n", 9,
     "refusing a system directory"),
    ("venv path with a trailing newline", BASE + "  - kind: venv.build\n    params:\n      path: \"/opt/torch-venv2\\n\"\n",
     9, "steps[1].params.path"),
    ("vmid below range", BASE + "  - kind: lxc.create\n    params:\n      vmid: 99\n", 9, "vmid must be between"),
    ("vmid above range", BASE.replace("container: 200", "container: 1000000000"), 4, "vmid must be between"),
    ("unicode digits in a bridge", BASE + "  - kind: lxc.create\n    params:\n      net: {bridge: \"vmbr\u0661\"}\n", 9,
     "steps[1].params.net.bridge"),
    ("negative GPU index", BASE + "  - kind: lxc.gpu_passthrough\n    params:\n      gpus: [-1]\n", 9,
     "steps[1].params.gpus"),
    ("secret ref with a trailing newline", BASE.replace("  container: 200\n",
     "  container: 200\n  api:\n    password: \"env:PVE\\n\"\n"), 6, "literal secret refused"),
]


@pytest.mark.parametrize(("name", "text", "line", "needle"), RED_TEAM, ids=[c[0] for c in RED_TEAM])
def test_red_team_playbooks_are_refused_with_file_and_line(name: str, text: str | bytes, line: int,
                                                          needle: str) -> None:
    with pytest.raises(PlaybookError) as info:
        playbook.loads(text, "pb.yaml")
    msg = str(info.value)
    assert f"pb.yaml:{line}:" in msg, msg
    assert needle in msg, msg
    assert "\x1b" not in msg and "\x07" not in msg, "control characters from the file reach the message"


def test_aliases_that_expand_a_little_still_load() -> None:
    text = BASE + "  - kind: lxc.create\n    params: &p {hostname: gpu-a, cores: 4}\n  - kind: lxc.start\n"
    pb = playbook.loads(text.replace("  - kind: lxc.start\n", ""))
    assert pb.steps[1].params == {"hostname": "gpu-a", "cores": 4}


def test_secret_check_walks_shared_values_once() -> None:
    """A literal secret under an alias is found (and the walk is memoized, so 10**9 paths do not hang)."""
    text = BASE.replace("  container: 200\n", "  container: 200\n  api: &api\n    password: hunter2\n") + \
        "x: *api\n"
    with pytest.raises(PlaybookError) as info:
        playbook.loads(text, "pb.yaml")
    assert "pb.yaml:6: target.api.password: literal secret refused" in str(info.value)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_load_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "pb.yaml"
        os.mkfifo(path)  # nobody writes: reading it would hang for ever
    elif kind == "dev-zero":
        path = Path("/dev/zero")  # reading it would never end
    else:
        path = tmp_path
    with pytest.raises(PlaybookError) as info:
        playbook.load(path)
    assert str(path) in str(info.value)
    assert "not a regular file" in str(info.value) or "cannot read" in str(info.value)


def test_load_reads_only_the_size_bound(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with open(path, "wb") as fh:
        fh.write(BASE.encode())
        fh.truncate(400 * 1024 * 1024)  # sparse 400 MB: reading it whole would cost 400 MB of memory
    with pytest.raises(PlaybookError) as info:
        playbook.load(path)
    assert f"{path}:1: playbook is larger than 1024 KiB" in str(info.value)


def test_dump_is_atomic_and_keeps_the_old_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pb = playbook.loads(BASE)
    out = tmp_path / "recorded.yaml"
    out.write_text("old content\n")

    def broken_dumps(_: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(playbook, "dumps", broken_dumps)
    with pytest.raises(OSError):
        playbook.dump(pb, out)
    assert out.read_text() == "old content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recorded.yaml"], "temporary file left behind"
    monkeypatch.undo()
    playbook.dump(pb, out)
    assert playbook.load(out) == pb
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recorded.yaml"]


@pytest.mark.parametrize("name", ["billion laughs at the top level", "invalid UTF-8", "deep flow nesting",
                                  "duplicate param", "cores: true"])
def test_cli_exits_2_with_file_and_line_never_a_traceback(tmp_path: Path, name: str) -> None:
    _, text, line, needle = next(c for c in RED_TEAM if c[0] == name)
    pb = tmp_path / "bad.yaml"
    pb.write_bytes(text if isinstance(text, bytes) else text.encode())
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PROVISIONER_STATE_DIR": str(tmp_path / "st")}
    for cmd in ("plan", "replay"):
        proc = subprocess.run([sys.executable, "-m", "provisioner", cmd, str(pb)], capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert f"{pb}:{line}:" in proc.stderr and needle in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


# --- fuzzing ------------------------------------------------------------------------------------------

def _check(text: str | bytes) -> None:
    try:
        pb = playbook.loads(text, "pb.yaml")
    except PlaybookError as exc:
        assert exc.problems, "a PlaybookError without problems"
        for problem in exc.problems:
            assert LOC.match(problem), problem
        return
    again = playbook.loads(playbook.dumps(pb), "pb.yaml")  # what loads must also dump and reload
    assert again == pb


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
                     st.sampled_from(["node.connect", "lxc.create", "venv.build", "env:X", "file:/x", "200",
                                      "10.0.0.1", "true", "~", "&a", "*a", "<<", "!!binary", "--- ", "\t"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.sampled_from(["kind", "params", "name", "host", "cores", "memory",
                                                          "vmid", "path", "password", "gpus", "net", "x"]),
                                         inner, max_size=4), max_leaves=20)
_fragments = st.sampled_from([BASE, "schema_version: 1\n", "target:\n", "  host: 10.0.0.1\n", "steps:\n",
                              "  - kind: lxc.create\n", "    params:\n", "      cores: 4\n", "a: &a [1, 2]\n",
                              "b: [*a, *a]\n", "<<: *a\n", "[", "]", "{", "}", ": ", "- ", "? ", "'", '"', "\\",
                              "#", "%YAML 1.1\n", "--- \n", "...\n", "!!str ", "!x ", "|\n", ">-\n", "\t", "\n",
                              "\x1b[31m", "\ufeff", "\x85", "\u2028"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_fragments, max_size=25).map("".join))
def test_fuzz_yaml_fragments(text: str) -> None:
    _check(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_fuzz_bytes(raw: bytes) -> None:
    _check(raw)
    _check(BASE.encode() + raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values, st.lists(_values, max_size=4))
def test_fuzz_structured_playbooks(target: object, steps: list[object]) -> None:
    doc = {"schema_version": 1, "target": target, "steps": steps}
    _check(yaml.safe_dump(doc))
    doc["target"] = {"host": "10.0.0.1", "container": 200}
    doc["steps"] = [{"kind": "lxc.create", "params": s} if isinstance(s, dict) else s for s in steps]
    _check(yaml.safe_dump(doc))


@pytest.mark.parametrize(("text", "needle"), [
    ("hosts:\n" + _laughs(9).replace("l0:", "  - l0:").replace("\nl", "\n    l"), "expands to more than"),
    ("hosts:\n  - host: a\n    host: b\n", "duplicate key 'host'"),
    ("hosts: " + "[" * 100 + "]" * 100 + "\n", "nesting"),
])
def test_fleet_inventory_is_loaded_with_the_same_bounds(tmp_path: Path, text: str, needle: str) -> None:
    from provisioner.fleet import load_inventory

    inv = tmp_path / "hosts.yaml"
    inv.write_text(text)
    with pytest.raises(PlaybookError) as info:
        load_inventory(inv)
    assert needle in str(info.value) and f"{inv}:" in str(info.value)


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("key_file", "/dev/zero", "target.ssh.key_file: /dev/zero is not a regular file"),
    ("known_hosts", "/dev/zero", "target.ssh.known_hosts: /dev/zero is not a regular file"),
    ("key_file", "/dev/null", "target.ssh.key_file: /dev/null is not a regular file"),
    ("ca_file", "/dev/zero", "target.api.ca_file: /dev/zero is not a regular file"),
])
def test_cli_refuses_target_files_that_would_hang_the_run(tmp_path: Path, field: str, value: str,
                                                          needle: str) -> None:
    where = "    " + field + ": " + value + "\n"
    text = BASE.replace("  container: 200\n", "  container: 200\n" + (
        "  api:\n    password: env:PVE_X\n" + where if field == "ca_file" else "  ssh:\n" + where))
    pb = tmp_path / "pb.yaml"
    pb.write_text(text)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PROVISIONER_STATE_DIR": str(tmp_path / "st")}
    proc = subprocess.run([sys.executable, "-m", "provisioner", "plan", str(pb)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
