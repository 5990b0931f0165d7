"""Secrets are referenced, never written: `env:NAME` or `file:PATH`.

Resolved values are registered with the process-wide redactor (`provisioner.redaction.REDACTOR`) so that no sink (run log, console,
recorded playbook, exception text) can print them.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
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
    return value


SecretRef = Annotated[str, AfterValidator(secret_ref)]


MAX_SECRET_BYTES = 64 * 1024  # a password, token or key file is far smaller
MAX_PUBLIC_KEY_BYTES = 64 * 1024
PUBLIC_KEY_TYPES = frozenset({
    "ssh-ed25519", "ssh-rsa", "ssh-dss", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
})


def resolve(ref: str) -> str:
    """Return the secret a reference points to; registers it for redaction."""
    m = REF_RE.fullmatch(ref)
    if not m:
        raise SecretError("not a secret reference (use env:NAME or file:PATH)")
    kind, where = m.groups()
    if kind == "env":
        value = os.environ.get(where)
        if value is None:
            raise SecretError(f"environment variable {where} is not set")
    else:
        value = read_bounded_text(secret_path(where), MAX_SECRET_BYTES, "secret file").strip()
    REDACTOR.add(value)
    return value


def secret_path(where: str) -> Path:
    """The file a `file:` reference names. `..` is refused (relative or absolute): a reference says
    exactly which file it means, e.g. `file:/etc/pve/priv/token` or `file:~/.config/pve-token`."""
    if "\x00" in where:
        raise SecretError("secret file path contains a NUL character")
    if ".." in Path(where).parts:
        raise SecretError(f"secret file path {where!r} contains '..'; write the absolute path explicitly")
    return Path(where).expanduser()


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
