"""Red team, third pass (issue #34): fresh attacks on secret references, redaction, the terminal, the trust
dialog's URL, known_hosts writes and relative output paths. Each case is one attempt; each asserts the attack
is refused or neutralised. Real parts: the CLI as a subprocess, real files, links and FIFOs, a real shell
script standing in for NVIDIA's `nvidia-bug-report.sh` (it writes a gzip exactly where the fact asks).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from provisioner import atomic, secrets
from provisioner.playbook import PlaybookError, loads
from provisioner.redaction import redact
from provisioner.render.safe_text import PlainStream, guard
from provisioner.steps.venv_links import judge_unhashed, link_target, pick_file
from provisioner.support.bundle import write_bundle
from provisioner.support.collect import run_probe
from provisioner.support.evidence import Evidence
from provisioner.support.probes import BUG_REPORT, bundle_probes
from provisioner.transport import known_hosts_file
from provisioner.transport.local import LocalTransport

CANARY = "Canary7f3aQ9"
REPO = Path(__file__).resolve().parent.parent


def _cli(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROVISIONER_", "PVE_", "XDG_CONFIG"))}
    env.update(PROVISIONER_STATE_DIR=str(tmp / "state"), XDG_CONFIG_HOME=str(tmp / "config"), COLUMNS="200",
               PYTHONPATH=str(REPO), **extra)
    return env


# --- family 1: env: names any variable -------------------------------------------------------------------------

def _api_playbook(field: str, ref: str) -> str:
    extra = "    token_name: ci\n" if field == "token_value" else ""
    return f"schema_version: 1\ntarget:\n  host: 10.0.0.1\n  api:\n{extra}    {field}: {ref}\nsteps: []\n"


@pytest.mark.parametrize(("field", "name"), [
    ("password", "AWS_SECRET_ACCESS_KEY"), ("password", "GITHUB_TOKEN"), ("token_value", "SSH_AUTH_SOCK"),
    ("password", "HOME"), ("password", "pve_password"), ("token_value", "PVE"), ("password", "PVEX_PASSWORD"),
    ("password", "PROXMOXX_PW"),
])
def test_env_name_outside_the_allow_list_is_refused_at_load(field: str, name: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(secrets.ENV_ALLOW_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent-config")
    monkeypatch.setenv(name, CANARY)
    with pytest.raises(PlaybookError) as info:
        loads(_api_playbook(field, f"env:{name}"), "pb.yaml")
    line = 6 if field == "token_value" else 5
    assert f"pb.yaml:{line}: target.api.{field}" in str(info.value) and "not an allowed secret variable" in str(info.value)
    assert CANARY not in str(info.value)
    with pytest.raises(secrets.SecretError):  # and resolve refuses it too, whoever built the model
        secrets.resolve(f"env:{name}")


def test_user_allow_list_replaces_the_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(secrets.ENV_ALLOW_ENV, "SITE_*")
    monkeypatch.setenv("SITE_PW", CANARY)
    monkeypatch.setenv("PVE_PASSWORD", CANARY)
    assert secrets.resolve("env:SITE_PW") == CANARY
    with pytest.raises(secrets.SecretError, match="SITE_"):
        secrets.resolve("env:PVE_PASSWORD")
    # the file in the configuration directory, when the variable is not set
    monkeypatch.delenv(secrets.ENV_ALLOW_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "gpu-provisioner").mkdir()
    (tmp_path / "gpu-provisioner" / secrets.ENV_ALLOW_FILE).write_text("# mine\nOPS_*\n")
    monkeypatch.setenv("OPS_TOKEN", CANARY)
    assert secrets.resolve("env:OPS_TOKEN") == CANARY
    with pytest.raises(secrets.SecretError, match="not an allowed"):
        secrets.resolve("env:SITE_PW")


def test_plan_names_each_source_and_refuses_a_foreign_variable_before_anything_is_sent(tmp_path: Path) -> None:
    pb = tmp_path / "pb.yaml"
    pb.write_text("schema_version: 1\ntarget:\n  host: 127.0.0.1\n  local: true\n  api:\n"
                  "    password: env:AWS_SECRET_ACCESS_KEY\nsteps: []\n")
    res = _cli(["plan", str(pb)], tmp_path, _env(tmp_path, AWS_SECRET_ACCESS_KEY=CANARY))
    assert res.returncode == 2 and "pb.yaml:6: target.api.password" in res.stderr, res.stderr
    assert CANARY not in res.stdout + res.stderr
    pb.write_text("schema_version: 1\ntarget:\n  host: 127.0.0.1\n  local: true\n  api:\n"
                  "    password: env:PVE_PASSWORD\nsteps: []\n")
    res = _cli(["plan", str(pb)], tmp_path, _env(tmp_path, PVE_PASSWORD=CANARY))
    assert "secret target.api.password is read from environment variable PVE_PASSWORD" in res.stderr, res.stderr
    assert CANARY not in res.stdout + res.stderr


# --- family 2: redaction of attached forms ----------------------------------------------------------------------

REDACTION_CASES = [
    f"mysql -u root -p{CANARY} -e 'show databases'",
    f"mysqldump --user=root -p'{CANARY} x' shop",
    f"mariadb-admin -uroot -p{CANARY} status",
    f"mysql --password={CANARY} shop",
    f"PASSWORD={CANARY}",
    f"MYSQL_ROOT_PASSWORD={CANARY}\x00HOME=/root",
    f"export SMTP_PASS='{CANARY}'",
    f"declare -x DEPLOY_TOKEN=\"{CANARY}\"",
    f"AWS_SECRET_ACCESS_KEY={CANARY}",
    f"https://admin:{CANARY}@mirror.example/simple",
    f"https://admin:p@{CANARY}@mirror.example/simple",
    f"git clone https://{CANARY}@github.example/org/repo.git",
    f"curl -H 'Authorization: Bearer {CANARY}' https://api.example/",
    f"token_type=bearer access: Bearer {CANARY}x",
    f"PVEAPIToken=root@pam!ci={CANARY}-1111-2222",
    "│ value        │ 0d8c1c5e-aaaa-4bbb-8ccc-1234567890ab │",
    f"openssl enc -aes256 -pass pass:{CANARY} -in a",
    f"redis-cli -h 10.0.0.5 -a {CANARY} ping",
    f"smbclient -U admin%{CANARY} //nas/share",
]


@pytest.mark.parametrize("line", REDACTION_CASES)
def test_attached_secret_forms_are_masked(line: str) -> None:
    out = redact(line)
    assert CANARY not in out and "0d8c1c5e-aaaa" not in out, out
    assert "<redacted>" in out


def test_flags_that_are_not_passwords_stay() -> None:
    line = "gcc -pthread -pipe -O2 && ssh -p2222 root@pve && mysql -p shop && ssh://git@github.com/x"
    assert redact(line) == line


HOSTILE_REPORT = f"""____________________________________________
Start of NVIDIA bug report log file.
*** /proc/driver/nvidia/version
NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.71.05
____________________________________________
*** ps auxww
root  4242  mysql -u root -p{CANARY} -e 'select 1'
root  4243  /usr/bin/python3 app.py --password={CANARY}
*** env
DB_PASSWORD={CANARY}
HF_TOKEN={CANARY}
http_proxy=http://proxy:{CANARY}@10.0.0.1:3128
AUTH_HEADER=Authorization: Bearer {CANARY}
PVE_API=PVEAPIToken=root@pam!ci={CANARY}
End of NVIDIA bug report log file.
"""


async def test_a_hostile_bug_report_leaves_nothing_in_the_bundle(tmp_path: Path) -> None:
    """A real script, found on the PATH as nvidia-bug-report.sh, writes the report gzip where asked."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "report.txt").write_text(HOSTILE_REPORT)
    script = bindir / "nvidia-bug-report.sh"
    script.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --output-file ] && out=$2; shift; done\n"
                      f"gzip -c '{tmp_path / 'report.txt'}' > \"$out.gz\"\n")
    script.chmod(0o755)
    node = LocalTransport(env={"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
    probe = bundle_probes(60)[-1]
    assert probe.name == BUG_REPORT.name
    rec = await run_probe(node, probe, probe.fact)
    assert rec.status == "ok" and CANARY in rec.output, (rec.error, rec.output[:200])  # the raw report held it
    ev = Evidence(host="local", vmid=None, venv=None, records=[rec], started="s", finished="f")
    out = write_bundle(ev, tmp_path / "b.tar.gz", include_runs=False)
    with tarfile.open(out.path) as tar:
        text = "".join(tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile())  # type: ignore[union-attr]
    assert CANARY not in text
    assert "mysql -u root -p<redacted>" in text and "NVRM version" in text  # masked, and the evidence kept


# --- family 3: the terminal ---------------------------------------------------------------------------------------

ESCAPES = [
    "\x1b[2J\x1b[H",                       # clear screen, home
    "\x1b[8mconcealed\x1b[0m",             # concealed text
    "\x1b[32m✓ all checks passed\x1b[0m",  # a fake green verdict
    "\x1b]0;pwned\x07",                    # window title
    "\x1b]52;c;cm0gLXJmIH4=\x07",          # clipboard write
    "\x1b[1A\x1b[2K",                      # rewrite the previous line
    "\x9b31m",                             # C1 CSI
    "x\rfake\x08\x08",                     # carriage return, backspace
    "\x1bP+q544e\x1b\\",                   # DCS
]
_SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("evil", ESCAPES)
def test_escapes_through_a_guarded_console_and_the_plain_stream(evil: str) -> None:
    buf = io.StringIO()
    console = guard(Console(file=buf, force_terminal=True, color_system="truecolor", width=200, highlight=True))
    console.print(Text("detail: ", style="bold") + Text(f"host says {evil} end"))
    console.print(f"as a string: {evil} [b]x[/b]", markup=False)
    stream = io.StringIO()
    PlainStream(stream).write(f"error: {evil}\n")
    for out in (_SGR.sub("", buf.getvalue()), stream.getvalue()):
        assert "\x1b" not in out and not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out), repr(out)
    assert "host says" in buf.getvalue()
    # rich drops the BEL that ends an OSC string before any hook sees it: the unterminated string then hides
    # the rest of its line (as the terminal would have), every other sequence leaves the text after it
    assert "end" in buf.getvalue() or evil.endswith("\x07")


def _evil_bin(tmp: Path) -> Path:
    bindir = tmp / "evilbin"
    bindir.mkdir()
    tool = bindir / "nvidia-smi"
    tool.write_text("#!/bin/sh\nprintf 'NVIDIA-SMI has failed \\033[2J\\033[H\\033[8mhidden\\033[0m\\033]0;pwned\\007"
                    "\\033[32mEVIL all checks passed\\033[0m\\n'\nexit 1\n")
    tool.chmod(0o755)
    return bindir


def _assert_plain_terminal(out: str) -> None:
    for seq in ("\x1b[2J", "\x1b[H", "\x1b[8m", "\x1b]0;", "\x1b[32mEVIL"):
        assert seq not in out, (seq, out[:500])


@pytest.mark.parametrize("command", [["diagnose", "--local"], ["bundle", "--local", "-o", "b.tar.gz", "--no-runs",
                                                              "--bug-report-timeout", "5"]])
def test_a_hostile_node_cannot_drive_the_terminal(command: list[str], tmp_path: Path) -> None:
    env = _env(tmp_path, PATH=f"{_evil_bin(tmp_path)}:{os.environ.get('PATH', '/usr/bin:/bin')}", FORCE_COLOR="1")
    res = _cli(command, tmp_path, env)
    assert "Traceback" not in res.stderr, res.stderr
    assert "EVIL all check" in res.stdout + res.stderr  # the text is shown, as text
    _assert_plain_terminal(res.stdout + res.stderr)


def test_a_hostile_log_cannot_drive_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "install.log"
    log.write_text("NVRM: Xid (PCI:0000:16:00): 79, pid=1, name=x\x1b[2J\x1b]0;pwned\x07\x1b[32mEVIL all checks "
                   "passed, GPU has fallen off the bus.\n")
    res = _cli(["diagnose", "--log", str(log)], tmp_path, _env(tmp_path, FORCE_COLOR="1"))
    assert "Traceback" not in res.stderr
    _assert_plain_terminal(res.stdout + res.stderr)


# --- family 4: the trust dialog's URL ---------------------------------------------------------------------------------

PAGE = "https://download.pytorch.org/whl/cu128/torch/"
WHEEL = "torch-2.9.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl"
QUOTED = WHEEL.replace("+", "%2B")


@pytest.mark.parametrize(("href", "host"), [
    (f"https://download.pytorch.org@evil.example/whl/{QUOTED}", "evil.example"),
    (f"https://download.pytorch.org:443@evil.example/whl/{QUOTED}", "evil.example"),
    (f"https://evil.example\\@download.pytorch.org/whl/{QUOTED}", None),
    (f"https://download.pytorch.org%40evil.example/whl/{QUOTED}", None),
    (f"file:///etc/{QUOTED}", None),
    (f"https://download.pytorch.org/whl/\t{QUOTED}", None),
])
def test_a_link_not_fetched_from_where_it_says_is_refused_and_never_offered(href: str, host: str | None) -> None:
    found = pick_file([(href, WHEEL)], PAGE, "torch", "2.9.0+cu128", "3.12", "x86_64")
    assert found is not None and "problem" in found
    if host is not None:
        assert found["host"] == host  # the host the downloader connects to, never the userinfo
    verdict = judge_unhashed([{"name": "torch", "version": "2.9.0+cu128", "file": found["file"],
                               "host": found["host"], "page": PAGE, "computed": ["a" * 64],
                               "problem": found["problem"]}], {})
    assert verdict["offer"] is None and verdict["refused"]
    assert PAGE in verdict["refused"][0]  # the index page that linked it is named


def test_the_file_is_the_one_the_href_names_not_the_anchor_text() -> None:
    evil = "evil-0.1-py3-none-any.whl"
    assert pick_file([(f"/whl/{evil}", WHEEL)], PAGE, "torch", "2.9.0+cu128", "3.12", "x86_64") is None
    found = link_target(PAGE, f"/whl/cu128/{QUOTED}#sha256=" + "b" * 64)
    assert (found["file"], found["host"], found["sha256"]) == (WHEEL, "download.pytorch.org", "b" * 64)
    assert "problem" not in found
    other = link_target(PAGE, f"//mirror.evil.example/{QUOTED}")  # protocol-relative: its real host is shown
    assert other["host"] == "mirror.evil.example"


# --- family 5: known_hosts ----------------------------------------------------------------------------------------

LINE = "[10.0.0.9]:22 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEs0Fo6cZZq2D7+UcNtVJCfZ2ccXZ2L3sHgw0eXQKq7e"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    path = tmp_path / "config" / "gpu-provisioner"
    path.mkdir(parents=True)
    return path


@pytest.mark.parametrize("where", ["/etc/ssh/ssh_known_hosts", "home/.bashrc", "elsewhere/kh",
                                   "config/gpu-provisioner/../../home/.bashrc", "config/gpu-provisioner"])
def test_known_hosts_outside_the_allowed_places_is_refused(where: str, config: Path, tmp_path: Path) -> None:
    path = where if where.startswith("/") else str(tmp_path / where)
    with pytest.raises(known_hosts_file.KnownHostsPathError, match=r"known_hosts"):
        known_hosts_file.append_line(path, LINE)
    assert not (tmp_path / "home" / ".bashrc").exists() and not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("trap", ["file-link", "dir-link", "fifo", "hardlink", "ssh-dir-link"])
def test_known_hosts_is_never_written_through_a_link(trap: str, config: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    if trap == "file-link":
        path = config / "known_hosts"
        path.symlink_to(victim)
    elif trap == "dir-link":
        (config / "keys").symlink_to(tmp_path)
        path = config / "keys" / "victim"
    elif trap == "fifo":
        path = config / "known_hosts"
        os.mkfifo(path)
    elif trap == "hardlink":
        path = config / "known_hosts"
        os.link(victim, path)
    else:
        (tmp_path / "home" / ".ssh").symlink_to(tmp_path)
        (tmp_path / "known_hosts").symlink_to(victim)
        path = tmp_path / "home" / ".ssh" / "known_hosts"
    with pytest.raises(known_hosts_file.KnownHostsPathError):
        known_hosts_file.append_line(path, LINE)
    assert victim.read_text() == "precious\n"


def test_the_allowed_places_are_written(config: Path, tmp_path: Path) -> None:
    assert known_hosts_file.append_line(tmp_path / "home" / ".ssh" / "known_hosts", LINE).read_text() == LINE + "\n"
    written = known_hosts_file.append_line(config / "sites" / "lab" / "known_hosts", LINE)
    assert written.read_text() == LINE + "\n" and oct(written.stat().st_mode & 0o777) == "0o600"


# --- family 6: relative -o ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("out", ["rel/dir/b.tar.gz", "b.tar.gz", "./x/../y.tar.gz"])
def test_atomic_writer_takes_a_relative_path(out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(out, b"data")
    assert (tmp_path / out).resolve().read_bytes() == b"data"
    assert not list(tmp_path.rglob("*.tmp"))


def test_bundle_to_a_relative_path(tmp_path: Path) -> None:
    res = _cli(["bundle", "--local", "-o", "out/sub/b.tar.gz", "--no-runs", "--bug-report-timeout", "5", "--json"],
               tmp_path, _env(tmp_path))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    with tarfile.open(tmp_path / "out" / "sub" / "b.tar.gz") as tar:
        assert "provisioner-bundle/manifest.json" in tar.getnames()
    assert gzip.open(tmp_path / "out" / "sub" / "b.tar.gz").read(1)  # a whole gzip
