"""Words for the face in use: a fix names the wizard's field in the wizard and the playbook key headless.

A step says what to change by its parameter (`ctx.words.field("lxc.create", "cores", "lower cores")`):
headless that is the playbook key (`lxc.create params: cores`, `target.container`), in the wizard the
page and field the user types into (`field 'cores' on the Container page`). "then replay" becomes
"then Retry" in the wizard. The wizard hands in its pages' titles, so the engine knows no screen.

Errors are said in words, never by number: `errno_in_words` turns `[Errno -2] Name or service not known`
into "host name not found (DNS)" wherever an error reaches a person.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Face = Literal["cli", "wizard"]

#: parameters kept outside a step's params: the playbook key, and the wizard's label of its field
TARGET_KEYS: dict[tuple[str, str], tuple[str, str]] = {
    ("lxc.create", "vmid"): ("target.container", "container id"),
}


@dataclass(frozen=True)
class Words:
    face: Face = "cli"
    pages: Mapping[str, str] = field(default_factory=dict)  # step kind -> wizard page title

    @property
    def wizard(self) -> bool:
        return self.face == "wizard"

    def where(self, kind: str, param: str) -> str:
        """Where the value is set: `playbook key target.container` / `field 'container id' on the Container page`."""
        key, label = TARGET_KEYS.get((kind, param), (f"{kind} params: {param}", param.replace("_", " ")))
        if self.wizard:
            page = self.pages.get(kind)
            return f"field '{label}'" + (f" on the {page} page" if page else "")
        return f"playbook key {key}"

    def field(self, kind: str, param: str, advice: str) -> str:
        return f"{advice} ({self.where(kind, param)})"

    @property
    def retry(self) -> str:
        """The closing words of a fix: how to try again in this face."""
        return "then Retry (ctrl+r)" if self.wizard else "then replay"


#: getaddrinfo's failures (glibc's EAI_* numbers, as `[Errno -2] Name or service not known` shows them)
RESOLVER_WORDS: dict[int, str] = {
    -2: "host name not found (DNS)",
    -3: "the DNS server did not answer (temporary failure in name resolution)",
    -4: "the DNS server refused the lookup",
    -5: "the host name has no address (DNS)",
    -8: "unknown service name",
    -9: "the host name has no address of this family (DNS)",
}
#: the socket errnos (Linux numbers) a connection fails with, in words
SOCKET_WORDS: dict[int, str] = {
    errno.ECONNREFUSED: "connection refused (nothing listens on that port)",
    errno.ETIMEDOUT: "timed out (the host is down, or a firewall drops the packets)",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ENETUNREACH: "network unreachable",
    errno.ECONNRESET: "connection reset by the peer",
    errno.ECONNABORTED: "connection aborted",
    errno.EPIPE: "the connection was closed by the other end",
}
_ERRNO_TEXT = re.compile(r"(?:<urlopen error )?\[Errno (-?\d+)\] ?([^>\n\]]*)>?")


def errno_in_words(text: str) -> str:
    """`[Errno -2] Name or service not known` -> "host name not found (DNS)": a resolver or socket errno in
    words, any other one without its number (its own text stays: `[Errno 28] No space left on device` ->
    "No space left on device"). urllib's `<urlopen error …>` wrapper goes too."""

    def said(m: re.Match[str]) -> str:
        code, own = int(m.group(1)), m.group(2).strip()
        return RESOLVER_WORDS.get(code) or SOCKET_WORDS.get(code) or own or os.strerror(code)

    return _ERRNO_TEXT.sub(said, text) if "[Errno " in text else text


def error_words(exc: BaseException) -> str:
    """An exception's text for a person: its errno in words (`errno_in_words`); urllib's URLError by its reason."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException):
        return error_words(reason)
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and (code in RESOLVER_WORDS or code in SOCKET_WORDS):
        return RESOLVER_WORDS.get(code) or SOCKET_WORDS[code]
    return errno_in_words(str(exc) or type(exc).__name__)
