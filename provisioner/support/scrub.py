"""One redaction pass for everything that leaves the machine in a bundle.

Three layers, applied to every text member (and to the manifest):
1. the values known to be secret: every value resolved through `provisioner.secrets` in this
   process (the process-wide REDACTOR), values passed explicitly, and the values of environment
   variables whose *names* say they hold a secret (PVE_PASSWORD, HF_TOKEN, ...), also in their
   URL-encoded forms;
2. the pattern rules of `provisioner.diagnose.redact` (PVEAPIToken=…, password=…, Authorization
   headers, private keys, URL userinfo, vendor token formats);
3. the REDACTOR itself, last, as a belt over the braces.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping

from provisioner.diagnose.redact import MIN_KNOWN_SECRET_LEN, redact
from provisioner.secrets import REDACTOR

SECRET_ENV_NAME_RE = re.compile(
    r"(PASSWORD|PASSWD|PASSPHRASE|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)", re.IGNORECASE
)
MIN_ENV_SECRET_LEN = 6  # shorter values ("1", "true") are flags, not secrets


def env_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Values of environment variables whose names mark them as secrets (references excluded)."""
    env = os.environ if environ is None else environ
    out: set[str] = set()
    for name, value in env.items():
        if SECRET_ENV_NAME_RE.search(name) and len(value) >= MIN_ENV_SECRET_LEN \
                and not value.startswith(("env:", "file:")):
            out.add(value)
    return out


def registered_secrets() -> set[str]:
    """The values resolved through `provisioner.secrets.resolve` in this process.

    The Redactor keeps them private; reading them here lets layer 1 also catch encoded forms.
    """
    lock = getattr(REDACTOR, "_lock", None)
    if lock is None:
        return {str(v) for v in getattr(REDACTOR, "_values", ())}
    with lock:
        return {str(v) for v in getattr(REDACTOR, "_values", ())}


class Scrubber:
    """Redacts text with every known secret plus the pattern rules."""

    def __init__(self, known_secrets: Iterable[str] = (), *, environ: Mapping[str, str] | None = None) -> None:
        self.secrets = {s for s in known_secrets if len(s) >= MIN_KNOWN_SECRET_LEN}
        self.secrets |= env_secrets(environ) | registered_secrets()
        # ... and as they appear inside JSON strings (quotes and backslashes escaped)
        self.secrets |= {json.dumps(s, ensure_ascii=False)[1:-1] for s in self.secrets}

    def __call__(self, text: str) -> str:
        return REDACTOR(redact(text, self.secrets))

    def scrub_obj(self, value: object) -> object:
        """Redact every string inside a JSON-like value (dict keys too)."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self(str(k)): self.scrub_obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub_obj(v) for v in value]
        return value
