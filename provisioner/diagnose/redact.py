"""Remove secrets from text before it is shown, logged or bundled.

Covers: PVE API tokens (`PVEAPIToken=user@realm!id=<secret>`), PVEAuthCookie tickets,
CSRFPreventionToken, Authorization / Cookie headers, private key blocks, URL userinfo,
`password=` / `token:` / `secret=`-style key-values in URLs, command-line flags, environment
assignments, YAML and JSON, common vendor token formats, and any explicitly known secret
values (also in their URL-encoded forms). Values that are secret *references*
(`env:NAME`, `file:PATH`) are kept: they are not secrets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MASK = "<redacted>"
MIN_KNOWN_SECRET_LEN = 4  # shorter "secrets" would shred ordinary text

_KEYWORD = (
    r"(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|client[_-]?secret|ticket|credentials?)"
)
# A key that *ends* in a keyword (HF_TOKEN, PVE_PASSWORD, token_value, CSRFPreventionToken).
_KEY = rf"[\w.-]*?{_KEYWORD}(?:[_-]?(?:value|secret|string|key|id|file|hash))?"
_REF = r"(?!(?:env|file):)"

_PRIVATE_KEY_RE = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----.*?(?:-----END \1-----|\Z)", re.DOTALL
)
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # Authorization / Proxy-Authorization / Cookie / Set-Cookie headers: mask the whole value.
    (
        re.compile(r"(?im)\b((?:proxy-)?authorization|set-cookie|cookie)([\"']?\s*[:=]\s*)(?![\s\"']*<redacted>)([^\r\n]+)"),
        rf"\1\2{MASK}",
    ),
    # PVEAPIToken=user@realm!tokenid=SECRET (also PVEAPIToken user@pam!id:SECRET in configs).
    (re.compile(r"(PVEAPIToken\s*[=:]?\s*[^\s=!:]+![^\s=:]+\s*[=:]\s*)[^\s'\",;&]+", re.IGNORECASE), rf"\1{MASK}"),
    # PVEAuthCookie=PVE:root@pam:65A1B2C3::base64sig
    (re.compile(r"(PVEAuthCookie\s*[=:]\s*)[^\s;'\",]+", re.IGNORECASE), rf"\1{MASK}"),
    # A bare PVE ticket anywhere (e.g. in JSON "ticket":"PVE:root@pam:...").
    (re.compile(r"PVE(?:VNC)?:[^\s:'\"]+:[0-9A-F]{8}::[A-Za-z0-9+/=]+"), MASK),
    # URL userinfo: scheme://user:password@host
    (re.compile(r"([a-z][a-z0-9+.-]*://[^\s/:@'\"]+:)[^\s/@'\"]+@", re.IGNORECASE), rf"\1{MASK}@"),
    # JSON: "password": "value"
    (re.compile(rf"(?i)(\"{_KEY}\"\s*:\s*\"){_REF}(?:[^\"\\]|\\.)*\""), rf'\1{MASK}"'),
    # Command-line flags: --password secret, --token=secret, --api-key 'secret'
    (
        re.compile(rf"(?i)(--{_KEY}(?:=|\s+))(?!-){_REF}(?:'[^']*'|\"[^\"]*\"|[^\s'\"]+)"),
        rf"\1{MASK}",
    ),
    # sshpass -p secret / mysql -pSecret style is too ambiguous except for sshpass.
    (re.compile(r"(\bsshpass\s+-p\s*)(?:'[^']*'|\"[^\"]*\"|\S+)"), rf"\1{MASK}"),
    # key=value / key: value in URLs, env, args, YAML, ini (quoted or bare value).
    (
        re.compile(rf"(?i)(?<![\w-])({_KEY}\s*(?:=|:(?!//))\s*)(?![^\s&;,'\"]*<redacted>){_REF}('[^'\n]*'|\"[^\"\n]*\"|[^\s&;,'\"]+)"),
        rf"\1{MASK}",
    ),
    # Well-known token formats that leak without a key name.
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}\b"), MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), MASK),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"), MASK),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"), MASK),
    (re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}\b"), MASK),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b"), MASK),  # JWT
)


def _known_variants(secrets: Iterable[str]) -> list[str]:
    out: set[str] = set()
    for s in secrets:
        if not s or len(s) < MIN_KNOWN_SECRET_LEN:
            continue
        out.update({s, quote(s, safe=""), quote_plus(s)})
    return sorted(out, key=len, reverse=True)


def redact(text: str, known_secrets: Iterable[str] = ()) -> str:
    """Return `text` with secrets replaced by `<redacted>`."""
    for secret in _known_variants(known_secrets):
        text = text.replace(secret, MASK)
    text = _PRIVATE_KEY_RE.sub(lambda m: f"-----BEGIN {m.group(1)}-----\n{MASK}\n-----END {m.group(1)}-----", text)
    for rx, repl in _RULES:
        text = rx.sub(repl, text)
    return text
