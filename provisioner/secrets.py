"""Secrets are referenced, never written: `env:NAME` or `file:PATH`.

Resolved values are registered with the process-wide redactor (`provisioner.redaction.REDACTOR`) so that no sink (run log, console,
recorded playbook, exception text) can print them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

from provisioner.redaction import REDACTOR

REF_RE = re.compile(r"^(env|file):(.+)$")
SECRET_FIELD_NAMES = frozenset(
    {"password", "token", "token_value", "secret", "api_token", "passphrase", "key_passphrase"}
)


class SecretError(ValueError):
    """A secret reference that cannot be resolved, or a literal secret where a reference belongs."""


def is_ref(value: str) -> bool:
    return bool(REF_RE.match(value))


def secret_ref(value: str) -> str:
    """Accept a reference, refuse a literal secret (the message never repeats the value)."""
    if not is_ref(value):
        raise ValueError("literal secret refused: reference it as env:NAME or file:PATH")
    return value


SecretRef = Annotated[str, AfterValidator(secret_ref)]


def resolve(ref: str) -> str:
    """Return the secret a reference points to; registers it for redaction."""
    m = REF_RE.match(ref)
    if not m:
        raise SecretError("not a secret reference (use env:NAME or file:PATH)")
    kind, where = m.groups()
    if kind == "env":
        value = os.environ.get(where)
        if value is None:
            raise SecretError(f"environment variable {where} is not set")
    else:
        path = Path(where).expanduser()
        try:
            value = path.read_text().strip()
        except OSError as exc:
            raise SecretError(f"cannot read secret file {path}: {exc.strerror}") from None
    REDACTOR.add(value)
    return value
