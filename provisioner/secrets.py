"""Secrets are referenced, never written: `env:NAME` or `file:PATH`.

An `env:` reference reads only a variable the user allowed (`env_allow_patterns`): by default a name
matching `PVE_*`, `PROXMOX_*` or `PROVISIONER_*`; the user's own list replaces that default, from
`PROVISIONER_ENV_REF_ALLOW` (shell-style patterns separated by `:` or `,`) or, when that is unset, from
the file `env-ref-allow` in the user's configuration directory (`~/.config/gpu-provisioner/env-ref-allow`,
one pattern a line, `#` comments). A playbook cannot name `env:AWS_SECRET_ACCESS_KEY` and have it sent.

A `file:` reference reads only from a secrets directory (`allowed_dirs`): the user's configuration
directory for gpu-provisioner (`~/.config/gpu-provisioner`), the site's (`/etc/gpu-provisioner`), the
directories named in `PROVISIONER_FILE_REF_DIRS` (separated by `:`) and, for a `--lab` run, the lab's own
directory (the lab names it, `allow_dir`). Never a kernel file (`/proc`, `/sys`, `/dev`), never a key or
certificate (`-----BEGIN`), never the lab's files from anywhere else: a playbook cannot send an
arbitrary controller file to the endpoint it names.

Resolved values are registered with the process-wide redactor (`provisioner.redaction.REDACTOR`) so that no sink (run log, console,
recorded playbook, exception text) can print them.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

from provisioner.redaction import REDACTOR

REF_RE = re.compile(r"(env|file):(.+)\Z")  # used with fullmatch: no trailing newline
SECRET_FIELD_NAMES = frozenset(
    {"password", "token", "token_value", "secret", "api_token", "passphrase", "key_passphrase"}
)


class SecretError(ValueError):
    """A secret reference that cannot be resolved, or a literal secret where a reference belongs."""


def is_ref(value: str) -> bool:
    return REF_RE.fullmatch(value) is not None


def secret_ref(value: str) -> str:
    """Accept a reference, refuse a literal secret (the message never repeats the value)."""
    if not is_ref(value):
        raise ValueError("literal secret refused: reference it as env:NAME or file:PATH")
    problem = env_ref_problem(value) or file_ref_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


SecretRef = Annotated[str, AfterValidator(secret_ref)]


MAX_SECRET_BYTES = 64 * 1024  # a password, token or key file is far smaller
MAX_PUBLIC_KEY_BYTES = 64 * 1024
PUBLIC_KEY_TYPES = frozenset({
    "ssh-ed25519", "ssh-rsa", "ssh-dss", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
})


SECRETS_DIR_ENV = "PROVISIONER_FILE_REF_DIRS"
ENV_ALLOW_ENV = "PROVISIONER_ENV_REF_ALLOW"
ENV_ALLOW_FILE = "env-ref-allow"  # in the user's configuration directory
DEFAULT_ENV_ALLOW = ("PVE_*", "PROXMOX_*", "PROVISIONER_*")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_ALLOW_FILE_BYTES = 16 * 1024
SITE_CONFIG_DIR = "/etc/gpu-provisioner"
KERNEL_TREES = ("/proc", "/sys", "/dev")
_LAB_DIRS: set[str] = set()  # lab directories a `--lab` run allowed (`allow_dir`): its own password file


def allow_dir(path: str | Path) -> None:
    """Let this process read `file:` secrets from `path` (the lab names its own directory this way
    for a `--lab` run; a playbook or inventory cannot)."""
    _LAB_DIRS.add(os.path.realpath(Path(path).expanduser()))


def allowed_dirs() -> list[Path]:
    """Where `file:` secrets may live, in order: the user's and the site's config directory for
    gpu-provisioner, then `PROVISIONER_FILE_REF_DIRS` (`:`-separated), then what `allow_dir` added."""
    import platformdirs

    named = [d for d in os.environ.get(SECRETS_DIR_ENV, "").split(os.pathsep) if d.strip()]
    dirs = [platformdirs.user_config_dir("gpu-provisioner"), SITE_CONFIG_DIR, *named, *sorted(_LAB_DIRS)]
    return [Path(d).expanduser() for d in dict.fromkeys(dirs)]


def user_config_dir() -> Path:
    """The user's configuration directory for gpu-provisioner (`~/.config/gpu-provisioner`, XDG_CONFIG_HOME)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("gpu-provisioner")).expanduser()


def env_allow_patterns() -> tuple[tuple[str, ...], str]:
    """(the patterns an `env:` name must match, where they come from): `PROVISIONER_ENV_REF_ALLOW` when set,
    else the user's `env-ref-allow` file when it exists, else `DEFAULT_ENV_ALLOW`. A file that cannot be
    read allows nothing (never the default silently)."""
    named = os.environ.get(ENV_ALLOW_ENV)
    if named is not None:
        return tuple(p.strip() for p in re.split(r"[:,\s]+", named) if p.strip()), ENV_ALLOW_ENV
    path = user_config_dir() / ENV_ALLOW_FILE
    if not os.path.lexists(path):
        return DEFAULT_ENV_ALLOW, "the default"
    try:
        text = read_bounded_text(path, MAX_ALLOW_FILE_BYTES, "env allow-list")
    except SecretError:
        return (), str(path)
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return tuple(p for line in lines for p in line.split() if p), str(path)


def env_name_allowed(name: str) -> bool:
    """Whether `env:NAME` may be read: a plain variable name matching one of the user's patterns
    (case-sensitive, as the environment is)."""
    patterns, _ = env_allow_patterns()
    return _ENV_NAME_RE.match(name) is not None and any(fnmatch.fnmatchcase(name, p) for p in patterns)


def env_ref_problem(ref: str) -> str | None:
    """At load and before reading: what is wrong with an `env:` reference (None for `file:` and for a good one)."""
    m = REF_RE.fullmatch(ref)
    if not m or m.group(1) != "env":
        return None
    name = m.group(2)
    if env_name_allowed(name):
        return None
    patterns, origin = env_allow_patterns()
    shown = name if _ENV_NAME_RE.match(name) else repr(name)
    allowed = ", ".join(patterns) or "nothing"
    return (f"env:{shown} is not an allowed secret variable (allowed: {allowed}, from {origin}); rename the "
            f"variable to match, or allow its name in {ENV_ALLOW_ENV} or {user_config_dir() / ENV_ALLOW_FILE}")


def _within(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _lab_root() -> str | None:
    """The default lab's directory (never a secrets directory unless that lab allowed it itself)."""
    base = os.environ.get("PROVISIONER_LAB_ROOT")
    if base:
        return os.path.realpath(base)
    state = os.environ.get("PROVISIONER_STATE_DIR")
    if state:
        return os.path.realpath(Path(state) / "lab")
    import platformdirs

    return os.path.realpath(Path(platformdirs.user_state_dir("gpu-provisioner")) / "lab")


def resolve(ref: str) -> str:
    """Return the secret a reference points to; registers it for redaction."""
    m = REF_RE.fullmatch(ref)
    if not m:
        raise SecretError("not a secret reference (use env:NAME or file:PATH)")
    kind, where = m.groups()
    if kind == "env":
        problem = env_ref_problem(ref)
        if problem is not None:
            raise SecretError(problem)
        value = os.environ.get(where)
        if value is None:
            raise SecretError(f"environment variable {where} is not set")
    else:
        path = secret_path(where)
        value = read_bounded_text(path, MAX_SECRET_BYTES, "secret file")
        refuse_key_material(value, path)
        value = value.strip()
    REDACTOR.add(value)
    return value


def refuse_key_material(text: str, path: Path) -> None:
    """A password or token file never holds a PEM/OpenSSH key or certificate: such a file is refused
    (its content never appears in the message)."""
    if text.lstrip().startswith("-----BEGIN") or "PRIVATE KEY" in text:
        raise SecretError(f"secret file {path} holds a key or certificate, not a password or token; "
                          "refusing to send it anywhere")


def secret_path(where: str) -> Path:
    """The file a `file:` reference names, checked without reading it (`SecretError` otherwise):
    no `..` (a reference says exactly which file it means), not in /proc, /sys or /dev, and inside a
    secrets directory (`allowed_dirs`), symbolic links resolved first. E.g.
    `file:~/.config/gpu-provisioner/pve-password` or `file:/etc/gpu-provisioner/r2-token`."""
    if "\x00" in where:
        raise SecretError("secret file path contains a NUL character")
    if ".." in Path(where).parts:
        raise SecretError(f"secret file path {where!r} contains '..'; write the absolute path explicitly")
    path = Path(where).expanduser().absolute()
    real = os.path.realpath(path)
    if _within(str(path), KERNEL_TREES) or _within(real, KERNEL_TREES):
        raise SecretError(f"secret file {where!r} is a kernel file ({real}); a secret is a file in a secrets "
                          "directory")
    dirs = allowed_dirs()
    allowed = [os.path.realpath(d) for d in dirs]
    lab = _lab_root()
    if lab is not None and _within(real, [lab]) and not _within(real, _LAB_DIRS):
        raise SecretError(f"secret file {where!r} is one of the lab's files; only the lab itself names those")
    if not _within(real, allowed):
        raise SecretError(
            f"secret file {where!r} is outside the secrets directories ({', '.join(map(str, dirs))}); "
            f"put it there or name its directory in {SECRETS_DIR_ENV}")
    return Path(real)


def file_ref_problem(ref: str) -> str | None:
    """At load: what is wrong with a `file:` reference (None for `env:` and for a good one). The
    path rules always; the content (never a key) when the file is already there and readable."""
    m = REF_RE.fullmatch(ref)
    if not m or m.group(1) != "file":
        return None
    try:
        path = secret_path(m.group(2))
        if path.exists():
            refuse_key_material(read_bounded_text(path, MAX_SECRET_BYTES, "secret file"), path)
    except SecretError as exc:
        return str(exc)
    return None


def source(ref: str) -> str:
    """Where a reference's value comes from, for the plan (never the value): the environment
    variable's name or the file's resolved path."""
    m = REF_RE.fullmatch(ref)
    if not m:
        return "?"
    kind, where = m.groups()
    if kind == "env":
        return f"environment variable {where}" + ("" if env_name_allowed(where) else " (refused: not allowed)")
    try:
        return f"file {secret_path(where)}"
    except SecretError:
        return f"file {where} (refused)"


def read_bounded_text(path: Path, limit: int, what: str) -> str:
    """Read a regular file of at most `limit` bytes as UTF-8. A FIFO (would block), a device such as
    /dev/zero (would never end), a directory or a larger file is refused without reading it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise SecretError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SecretError(f"{what} {path} is not a regular file; refusing to read it")
        if info.st_size > limit:
            raise SecretError(f"{what} {path} is larger than {limit // 1024} KiB; refusing to read it")
        raw = os.read(fd, limit + 1)
    except OSError as exc:
        raise SecretError(f"cannot read {what} {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise SecretError(f"{what} {path} is larger than {limit // 1024} KiB; refusing to read it")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(f"{what} {path} is not UTF-8 text") from None


def read_public_key(path: str | Path) -> str:
    """The OpenSSH public key line(s) of `path`; anything else — a private key above all — is refused
    without its content appearing in the message."""
    p = Path(path).expanduser()
    text = read_bounded_text(p, MAX_PUBLIC_KEY_BYTES, "public key file")
    if "PRIVATE KEY" in text:
        raise SecretError(f"{p} holds a private key; give the public key (usually {p.name}.pub)")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise SecretError(f"{p} holds no public key")
    for number, line in enumerate(lines, 1):
        if not _is_public_key_line(line):
            raise SecretError(f"{p}: line {number} is not an OpenSSH public key (type base64 [comment])")
    return "\n".join(lines)


def is_public_key_text(text: str) -> bool:
    """Every non-comment line of `text` is an OpenSSH public key line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return bool(lines) and all(_is_public_key_line(line) for line in lines)


def _is_public_key_line(line: str) -> bool:
    """`type base64 [comment]` where the base64 blob decodes and starts with the same type (RFC 4253 §6.6)."""
    parts = line.split(None, 2)
    if len(parts) < 2 or parts[0] not in PUBLIC_KEY_TYPES:
        return False
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(blob) < 4:
        return False
    size = int.from_bytes(blob[:4], "big")
    return blob[4:4 + size] == parts[0].encode()
