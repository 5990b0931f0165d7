"""The script the image export runs in the proving container (with the venv's Python, through `pct exec`):
it writes one tar stream to stdout, the controller reads it as a stranger's (`rootfs_layer.normalize`).

Modes (argv: MODE VENV EXCLUDES-JSON):
- ``venv``: the venv's folder, and the interpreter's installation when it lies outside /usr (a uv-managed or
  pyenv Python: what `pyvenv.cfg`'s ``home`` names), so the venv layer carries the interpreter it needs;
- ``full``: the container's root file system: every mount but the virtual ones (proc, sysfs, tmpfs, devpts,
  cgroup, mqueue, lxcfs… as /proc/self/mountinfo lists them), less /dev /proc /sys /run /tmp /var/tmp /mnt
  /media, the venv, the interpreter's installation (in the venv layer), the caches (uv's, apt's archives) and
  the node-made SSH host keys (pve-container writes new ones when it creates a container);
- ``runtime``: only what the venv's code runs on: the interpreter (and its standard library when it lies under
  /usr), every shared library `ldd` names for an ELF file of the venv or the interpreter, /bin/sh, and the
  loader's and the name service's files in /etc; each symbolic link on the way to a file is recorded as a link,
  so no member is ever stored through one.

Sockets are skipped (tarfile cannot store them); device nodes and FIFOs outside the excluded trees are
written as they are and refused by the controller. Errors reading one file go to stderr and skip the file.
"""

SCRIPT = r"""
import json, os, re, stat, subprocess, sys, tarfile
mode, venv, extra = sys.argv[1], os.path.normpath(sys.argv[2]), json.loads(sys.argv[3])
VIRTUAL = {"proc", "sysfs", "tmpfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue", "fusectl", "securityfs",
           "debugfs", "tracefs", "binfmt_misc", "autofs", "hugetlbfs", "pstore", "bpf", "configfs", "efivarfs",
           "nsfs", "fuse.lxcfs", "rpc_pipefs", "ramfs"}
def unoct(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)
def mounts():
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                f = left.split()
                if len(f) >= 5 and right:
                    out.append((unoct(f[4]), right.split()[0]))
    except OSError:
        pass
    return out
def venv_cfg():
    cfg = {}
    try:
        with open(os.path.join(venv, "pyvenv.cfg")) as fh:
            for line in fh:
                k, _, v = line.partition("=")
                cfg[k.strip()] = v.strip()
    except OSError:
        pass
    return cfg
cfg = venv_cfg()
home = os.path.realpath(cfg.get("home", "")) if cfg.get("home", "").startswith("/") else None
prefix = os.path.dirname(home) if home else None
if prefix in ("/", "/usr", "/usr/local") or (prefix or "").startswith("/usr/"):
    prefix = None
# the interpreter's own site-packages: not the venv's (unless the venv includes the system's)
own_site = set()
if prefix and cfg.get("include-system-site-packages", "false").lower() != "true":
    lib = os.path.join(prefix, "lib")
    own_site = {os.path.join(lib, d, "site-packages") for d in (os.listdir(lib) if os.path.isdir(lib) else [])
                if d.startswith("python")}
skip = {"/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", "/mnt", "/media", "/lost+found", venv,
        "/root/.cache", "/var/cache/apt/archives", *extra}
skip |= {mp for mp, fs in mounts() if fs in VIRTUAL and mp != "/"}
if prefix:
    skip.add(prefix)
seen, order = set(), []
def note(msg):
    sys.stderr.write(msg + "\n")
def want(path):
    if path not in seen:
        seen.add(path)
        order.append(path)
def walk(top, skipping):
    if top in skipping or not os.path.lexists(top):
        return
    want(top)
    if os.path.islink(top) or not os.path.isdir(top):
        return
    for root, dirs, files in os.walk(top, onerror=lambda e: note(f"skipped: {e}")):
        keep = []
        for d in sorted(dirs):
            p = os.path.join(root, d)
            if p in skipping:
                continue
            want(p)
            if not os.path.islink(p):
                keep.append(d)
        dirs[:] = keep
        for f in sorted(files):
            if root == "/etc/ssh" and f.startswith("ssh_host_"):
                continue
            want(os.path.join(root, f))
def chain(path):
    # every link on the way to `path` (recorded as links), then the file itself; None when it does not exist
    parts, cur, hops = [p for p in path.split("/") if p], "/", 0
    while parts:
        nxt = os.path.join(cur, parts.pop(0))
        if os.path.islink(nxt):
            hops += 1
            if hops > 40:
                return None
            want(nxt)
            target = os.readlink(nxt)
            rest = [p for p in target.split("/") if p]
            if target.startswith("/"):
                cur = "/"
            parts = rest + parts
            continue
        if nxt.endswith("/.."):
            nxt = os.path.dirname(os.path.dirname(nxt)) or "/"
        elif nxt.endswith("/."):
            nxt = os.path.dirname(nxt)
        cur = nxt
    if not os.path.lexists(cur):
        return None
    want(cur)
    return cur
def is_elf(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False
def needed(paths):
    libs = set()
    for p in paths:
        r = subprocess.run(["ldd", p], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            m = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
            if m:
                libs.add(m.group(1))
    return libs
def files_under(top):
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in own_site]
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p) and os.path.isfile(p):
                yield p
if mode == "venv":
    walk(venv, set())
    if prefix:
        walk(prefix, own_site)
elif mode == "full":
    walk("/", skip)
elif mode == "runtime":
    python = os.path.realpath(os.path.join(venv, "bin", "python"))
    elves = [p for p in files_under(venv) if is_elf(p)]
    if prefix:
        elves += [p for p in files_under(prefix) if is_elf(p)]
    else:
        link = os.path.join(venv, "bin", "python")
        while os.path.islink(link) and link.startswith(venv + "/"):  # the venv's links to the interpreter
            link = os.path.join(os.path.dirname(link), os.readlink(link))
        chain(os.path.normpath(link))
        walk(chain(python) or python, set())
        ver = re.search(r"python(\d+\.\d+)", python)
        if ver:
            for lib in (f"/usr/lib/python{ver.group(1)}", f"/usr/local/lib/python{ver.group(1)}"):
                if os.path.isdir(lib):
                    chain(lib)
                    walk(os.path.realpath(lib), skip)
                    elves += [p for p in files_under(os.path.realpath(lib)) if is_elf(p)]
        elves.append(python)
    sh = chain("/bin/sh")
    if sh:
        elves.append(sh)
    for lib in sorted(needed(elves)):
        if not any(lib == s or lib.startswith(s + "/") for s in skip):
            chain(lib)
    for f in ("/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/os-release", "/etc/ld.so.conf",
              "/etc/ld.so.cache", "/etc/hosts", "/etc/resolv.conf"):
        chain(f)
    if os.path.isdir("/etc/ld.so.conf.d"):
        walk("/etc/ld.so.conf.d", skip)
else:
    sys.exit(f"unknown mode {mode}")
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT)
for path in order:
    try:
        out.add(path, arcname=path.lstrip("/") or ".", recursive=False)
    except OSError as exc:
        note(f"skipped {path!r}: {exc}")
out.close()
sys.stdout.buffer.flush()
"""
