"""The one redaction of gpu-provisioner: every sink (console, run log, recorder, TUI, bundle,
diagnosis, exception text) sees text and data only after `REDACTOR` has been over them.

What is masked, always with `MASK`:
1. known secret values: those resolved through `provisioner.secrets` in this process, those
   passed explicitly, and the values of environment variables whose *names* say they hold a
   secret (PVE_PASSWORD, HF_TOKEN, ...), also URL-encoded and JSON-escaped; values shorter than
   `SHORT_SECRET_LEN` only as whole tokens (so a 3-character password does not shred words);
2. pattern rules: PVE API tokens and tickets (and the secret `pveum user token add` prints),
   Authorization/Cookie headers and bare `Bearer`/`Basic` credentials, private key blocks, URL userinfo
   (`user:pass@`, also a bare `TOKEN@` on a web URL), `curl -u user:pass`, `password=`/`token:`-style
   key-values (shell, env dumps incl. `*_PASS=`/`*_PW=`/`*_KEY=`, URLs, YAML, YAML block scalars, JSON and
   Python reprs), `--password x`/`--password=x` flags, attached passwords (`mysql -pSECRET`, `openssl -pass
   pass:SECRET`, `redis-cli -a SECRET`, `smbclient -U user%SECRET`), vendor token formats.
Secret *references* (`env:NAME`, `file:PATH`) are kept: they are not secrets.

`Redactor.obj` walks every field of a JSON-like value (dict keys too); the event bus uses it on
every event. `safe_cut` tells a line splitter where a forced flush may cut without splitting a
known secret across two lines.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

from provisioner.environ import copy_environ

MASK = "<redacted>"
SHORT_SECRET_LEN = 4  # below this a known value is masked only as a whole token
SECRET_ENV_NAME_RE = re.compile(
    r"(PASSWORD|PASSWD|PASSPHRASE|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)", re.IGNORECASE
)
MIN_ENV_SECRET_LEN = 6  # shorter values of such variables ("1", "true") are flags, not secrets

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
# password: |      (YAML block scalar: every more-indented line after it is the value)
_YAML_BLOCK_RE = re.compile(rf"(?im)^([ \t]*)(-[ \t]+)?{_KEY}[ \t]*:[ \t]*[|>][-+0-9]*[ \t]*$")
# key=value / key: value (the `_RULES` entry that is applied through `_mask_key_values`)
_KEY_VALUE_RE = re.compile(
    rf"(?i)(?<![\w-])({_KEY}\s*(?:=|:(?!//))[ \t]*)(?![^\s&;,'\"]*<redacted>)(?![|>][-+0-9]*\s*$)"
    rf"{_REF}('[^'\n]*'|\"[^\"\n]*\"|[^\s&;,'\"]+)", re.MULTILINE)
_KEYWORD_RE = re.compile(rf"(?i){_KEYWORD}")
_KEYWORD_LOWER_RE = re.compile(_KEYWORD)  # on an ASCII text's lower(): the same positions, ~10x faster than (?i)
_NOT_IN_RUN_RE = re.compile(r"[^\w.-]")  # one definition of the run (the rule's own `[\w.-]`)


def _mask_key_values(text: str) -> str:
    """`_KEY_VALUE_RE.sub(rf"\\1{MASK}", text)`, tried once per run of `[\\w.-]` characters that holds a keyword, at the run's
    start: a match's key (`[\\w.-]*?KEYWORD…`) is followed by a space, "=" or ":", none of them in the run, so it
    ends where its run ends, and what follows the key does not depend on where the key starts — if a match starts
    anywhere in the run (at a "." boundary), one starts at the run's start, which `sub` tries first. The same
    matches as `sub`, in linear time: `sub` tried every position after a "." of a long run and read the run to
    its end from each (`"a.token" * 2000`, 14 kB, took 4.6 s)."""
    starts: list[int] = []
    seen = 0  # positions before this were read; the run of the keyword at `seen` (if any) already has its start
    keywords = _KEYWORD_LOWER_RE.finditer(text.lower()) if text.isascii() else _KEYWORD_RE.finditer(text)
    for kw in keywords:
        k = kw.start()
        if k < seen:
            continue
        back = _NOT_IN_RUN_RE.search(text[seen:k][::-1])  # the last character before k that ends a run
        j = seen if back is None else k - back.start()
        if j > seen or j == 0 or _NOT_IN_RUN_RE.match(text, j - 1):
            starts.append(j)  # a new run starts at j (else it is the run of the keyword at `seen`)
        seen = k
    if not starts:
        return text
    out: list[str] = []
    done = 0
    for s in starts:
        if s < done:
            continue
        m = _KEY_VALUE_RE.match(text, s)
        if m is None:
            continue
        out.append(text[done:m.start()])
        out.append(m.group(1) + MASK)
        done = m.end()
    out.append(text[done:])
    return "".join(out)


#: a lower-case (casefolded) text a rule's match always contains: a rule whose triggers are all absent from a
#: text is not run on it (the rules cost ~0.5 s per MB each on an 8 MiB bug report; most are absent from it)
_KEY_TRIGGERS = ("pass", "pwd", "secret", "token", "key", "ticket", "credential")
_RULES: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    # Authorization / Proxy-Authorization / Cookie / Set-Cookie headers: mask the whole value.
    (
        re.compile(r"(?im)\b((?:proxy-)?authorization|set-cookie|cookie)([\"']?\s*[:=]\s*)(?![\s\"']*<redacted>)"
                   r"([^\r\n]+)"),
        rf"\1\2{MASK}", ("authorization", "cookie")),
    # PVEAPIToken=user@realm!tokenid=SECRET (also PVEAPIToken user@pam!id:SECRET in configs).
    (re.compile(r"(PVEAPIToken\s*[=:]?\s*[^\s=!:]+![^\s=:]+\s*[=:]\s*)[^\s'\",;&]+", re.IGNORECASE), rf"\1{MASK}", ("pveapitoken",)),
    # PVEAuthCookie=PVE:root@pam:65A1B2C3::base64sig
    (re.compile(r"(PVEAuthCookie\s*[=:]\s*)[^\s;'\",]+", re.IGNORECASE), rf"\1{MASK}", ("pveauthcookie",)),
    # A bare PVE ticket anywhere (e.g. in JSON "ticket":"PVE:root@pam:...").
    (re.compile(r"PVE(?:VNC)?:[^\s:'\"]+:[0-9A-F]{8}::[A-Za-z0-9+/=]+"), MASK, ("pve",)),
    # URL userinfo: scheme://user:password@host (the password up to the last "@" before the path, so one
    # holding an unencoded "@" is masked whole)
    (re.compile(r"([a-z][a-z0-9+.-]*://[^\s/:@'\"]+:)[^\s/'\"]*@", re.IGNORECASE), rf"\1{MASK}@", ("://",)),
    # ... and a bare userinfo on a web URL (https://TOKEN@host: a token as the user name)
    (re.compile(r"(\b(?:https?|ftps?|wss?|git\+https?)://)(?!<redacted>)[^\s/:@'\"<>]+@", re.IGNORECASE),
     rf"\1{MASK}@", ("://",)),
    # mysql/mariadb -pPASSWORD (attached: `-p secret` is a prompt and a database name), -p'pass word'
    (re.compile(r"(\b(?:mysql|mariadb)[\w-]*\b[^\n]*?(?<!\S)-p)(?!<redacted>)(?:'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)"),
     rf"\1{MASK}", ("mysql", "mariadb")),
    # openssl -pass pass:secret (-passin, -passout, -passphrase ...)
    (re.compile(r"((?<!\S)-pass\w*\s+pass:)(?:'[^'\n]*'|\"[^\"\n]*\"|\S+)"), rf"\1{MASK}", ("-pass",)),
    # redis-cli -a secret, smbclient -U user%secret
    (re.compile(r"(\bredis-cli\b[^\n]*?(?<!\S)-a\s*)(?!<redacted>)(?:'[^'\n]*'|\"[^\"\n]*\"|\S+)"), rf"\1{MASK}", ("redis-cli",)),
    (re.compile(r"((?<!\S)(?:-U|--user(?:name)?)(?:\s+|=)['\"]?[^\s%'\"]+%)[^\s'\"]+"), rf"\1{MASK}", ("%",)),
    # A bearer (or Basic) credential without its header name: "Bearer eyJ...", token_type + value dumps
    (re.compile(r"(?i)(\bbearer\s+)(?!<redacted>)[A-Za-z0-9._~+/-]{8,}=*"), rf"\1{MASK}", ("bearer",)),
    (re.compile(r"(\bBasic\s+)(?=[A-Za-z0-9+/]*(?:[0-9+/=]|[a-z][A-Z]))[A-Za-z0-9+/]{8,}={0,2}(?![\w/+])"), rf"\1{MASK}", ("basic",)),
    # `pveum user token add` prints the new token's secret as a table row: │ value │ <uuid> │
    (re.compile(r"(?i)(\bvalue\b[\s│|:=\"']*)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
     rf"\1{MASK}", ("value",)),
    # curl -u user:password, --user user:password, --proxy-user user:password
    (re.compile(r"((?<!\S)(?:-u|--user|--proxy-user|-U)(?:\s+|=)['\"]?[^\s:'\"]+:)[^\s'\"]+"), rf"\1{MASK}", ("-u",)),
    # JSON / Python repr: "password": "value", 'token': 'value'
    (re.compile(rf"(?i)(\"{_KEY}\"\s*:\s*\"){_REF}(?:[^\"\\]|\\.)*\""), rf'\1{MASK}"', _KEY_TRIGGERS),
    (re.compile(rf"(?i)('{_KEY}'\s*:\s*'){_REF}(?:[^'\\]|\\.)*'"), rf"\1{MASK}'", _KEY_TRIGGERS),
    (re.compile(rf"(?i)('{_KEY}'\s*:\s*\"){_REF}(?:[^\"\\]|\\.)*\""), rf'\1{MASK}"', _KEY_TRIGGERS),
    # Command-line flags: --password secret, --token=secret, --api-key 'secret', --pass secret
    (
        re.compile(rf"(?i)(--(?:{_KEY}|pass)(?:=|\s+))(?!-)(?!<redacted>){_REF}(?:'[^']*'|\"[^\"]*\"|[^\s'\"]+)"),
        rf"\1{MASK}", _KEY_TRIGGERS),
    # Environment dumps (`env`, /proc/<pid>/environ, `export`): NAME_PASS=, NAME_PW=, NAME_PWD=, NAME_AUTH=,
    # NAME_CREDS=, NAME_KEY= (the names a keyword rule below does not already cover)
    (
        re.compile(r"(?<![\w-])((?:[A-Za-z0-9]+_)+(?:(?i:pass|pw|pwd|auth|creds?)|KEY)\s*=\s*)(?!<redacted>)"
                   r"(?!(?:env|file):)('[^'\n]*'|\"[^\"\n]*\"|[^\s&;,'\"]+)"),
        rf"\1{MASK}", ("_pass", "_pw", "_auth", "_cred", "_key")),
    # sshpass -p secret
    (re.compile(r"(\bsshpass\s+-p\s*)(?:'[^']*'|\"[^\"]*\"|\S+)"), rf"\1{MASK}", ("sshpass",)),
    # key=value / key: value in URLs, env, args, YAML, ini (quoted or bare value); tried once per run holding a
    # keyword (`_mask_key_values`: the same matches as `sub`, in linear time)
    (_KEY_VALUE_RE, rf"\1{MASK}", _KEY_TRIGGERS),
    # Well-known token formats that leak without a key name.
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}\b"), MASK, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b"), MASK, ("github_pat_",)),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), MASK, ("hf_",)),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"), MASK, ("glpat-",)),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"), MASK, ("xox",)),
    (re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}\b"), MASK, ("sk-",)),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), MASK, ("akia",)),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b"), MASK, ("eyj",)),  # JWT
)


def env_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Values of environment variables whose names mark them as secrets (references excluded). This
    process's environment is copied first: a redactor runs in worker threads while others may change it."""
    env = copy_environ() if environ is None else environ
    return {value for name, value in env.items()
            if SECRET_ENV_NAME_RE.search(name) and len(value) >= MIN_ENV_SECRET_LEN
            and not value.startswith(("env:", "file:"))}


def _variants(value: str) -> set[str]:
    return {value, quote(value, safe=""), quote_plus(value), json.dumps(value, ensure_ascii=False)[1:-1]}


def _mask_yaml_blocks(text: str) -> str:
    """Every line of a secret-named YAML block scalar (more indented than its key) becomes MASK."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        m = _YAML_BLOCK_RE.match(lines[i])
        i += 1
        if not m:
            continue
        key_indent = len(m.group(1)) + len(m.group(2) or "")
        block_indent: str | None = None
        while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > key_indent:
            if lines[i].strip() and block_indent is None:
                block_indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
                out.append(block_indent + MASK)
            i += 1
    return "\n".join(out)


class Redactor:
    """Known secret values plus the pattern rules, one mask. Thread-safe; values only ever added."""

    def __init__(self, values: Iterable[str] = (), *, environ: Mapping[str, str] | None = None,
                 parent: Redactor | None = None) -> None:
        self._values: set[str] = {v for v in values if v}
        self._environ = environ
        self._parent = parent
        self._lock = threading.Lock()

    def add(self, value: str) -> None:
        if value:
            with self._lock:
                self._values.add(value)

    def with_values(self, values: Iterable[str] = (), *, environ: Mapping[str, str] | None = None) -> Redactor:
        """A redactor that knows these values too (and reads `environ` instead of os.environ)."""
        return Redactor(values, environ=environ, parent=self)

    @property
    def secrets(self) -> set[str]:
        """Every known value: registered, explicit and from secret-named environment variables."""
        with self._lock:
            own = set(self._values)
        inherited = self._parent.secrets - env_secrets(self._parent._environ) if self._parent else set()
        return own | inherited | env_secrets(self._environ)

    def _known(self) -> tuple[list[str], list[str]]:
        long: set[str] = set()
        short: set[str] = set()
        for value in self.secrets:
            (long if len(value) >= SHORT_SECRET_LEN else short).update(_variants(value))
        return sorted(long, key=len, reverse=True), sorted(short, key=len, reverse=True)

    def text(self, text: str) -> str:
        if not text:
            return text
        long, short = self._known()
        for value in long:
            if value in text:
                text = text.replace(value, MASK)
        for value in short:
            if value in text:
                text = re.sub(rf"(?<![\w<]){re.escape(value)}(?![\w>])", MASK, text)
        text = _PRIVATE_KEY_RE.sub(lambda m: f"-----BEGIN {m.group(1)}-----\n{MASK}\n-----END {m.group(1)}-----",
                                   text)
        text = _mask_yaml_blocks(text)
        folded = text.casefold()  # (re's IGNORECASE folds as casefold does: ſ is s, K is k)
        for rx, repl, triggers in _RULES:
            if any(t in folded for t in triggers):
                text = _mask_key_values(text) if rx is _KEY_VALUE_RE else rx.sub(repl, text)
        return text

    __call__ = text

    def obj(self, value: Any) -> Any:
        """Every string inside a JSON-like value redacted (dict keys too); other values unchanged."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {(self.text(k) if isinstance(k, str) else k): self.obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.obj(v) for v in value)
        return value

    def safe_cut(self, text: str, at: int) -> int:
        """The largest cut position <= `at` that splits no known secret (nor the start of one at the end)."""
        cut = at
        for value in self.secrets:
            if len(value) < 2:
                continue
            start = text.rfind(value, max(0, cut - len(value) + 1), cut + len(value) - 1)
            while start != -1 and start < cut < start + len(value):
                cut = start
                start = text.rfind(value, max(0, cut - len(value) + 1), cut + len(value) - 1)
            head = text[:cut]
            for k in range(min(len(value) - 1, len(head)), 0, -1):
                if head.endswith(value[:k]):
                    cut -= k
                    break
        return max(cut, 1) if at > 0 else at


REDACTOR = Redactor()


def redact(text: str, known_secrets: Iterable[str] = ()) -> str:
    """`text` with every secret masked: the process's known values, `known_secrets` and the rules."""
    return REDACTOR.with_values(known_secrets).text(text) if known_secrets else REDACTOR.text(text)
