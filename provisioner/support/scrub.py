"""Redaction of a support bundle: `provisioner.redaction` with the bundle's own known values.

A `Scrubber` is the process redactor plus the values passed in (and the secret-named variables of
`environ`, default os.environ): text through `__call__`, JSON-like values through `scrub_obj`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from provisioner.redaction import REDACTOR, Redactor, env_secrets

__all__ = ["Scrubber", "env_secrets"]


class Scrubber:
    def __init__(self, known_secrets: Iterable[str] = (), *, environ: Mapping[str, str] | None = None) -> None:
        self._redactor: Redactor = REDACTOR.with_values(known_secrets, environ=environ)

    @property
    def secrets(self) -> set[str]:
        return self._redactor.secrets

    def __call__(self, text: str) -> str:
        return self._redactor.text(text)

    def scrub_obj(self, value: Any) -> Any:
        return self._redactor.obj(value)
