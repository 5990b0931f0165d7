"""Connection errors in plain words: `[Errno 111] Connect call failed ('127.0.0.1', 2)` becomes
"connection refused: nothing listens on 127.0.0.1 port 2".

The words follow what the errno means on Linux (errno(3)): ECONNREFUSED — the host answered, no
process listens on that port; ETIMEDOUT or no answer in time — nothing answered (the host is down,
or a firewall drops the packets); EHOSTUNREACH/ENETUNREACH — no route; a resolver failure — "host name
'x' not found (DNS)", never `[Errno -2] Name or service not known`. Anything else keeps its own text,
without the `[Errno N]` prefix.
"""

from __future__ import annotations

import errno
import re
import socket

from provisioner.words import RESOLVER_WORDS, errno_in_words

_ERRNO_PREFIX = re.compile(r"^\[Errno -?\d+\]\s*")


def connect_error(exc: BaseException, host: str, port: int, timeout: float | None = None) -> str:
    """What went wrong connecting to `host`:`port`, in words a sysadmin reads at a glance."""
    where = f"{host} port {port}"
    if isinstance(exc, socket.gaierror):
        if exc.errno == socket.EAI_NONAME:
            return f"host name {host!r} not found (DNS): check the name, or this machine's resolver"
        said = RESOLVER_WORDS.get(exc.errno) if isinstance(exc.errno, int) else None
        return f"cannot resolve the host name {host!r}: {said or errno_in_words(exc.strerror or str(exc))}"
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
        return f"connection refused: nothing listens on {where}"
    if isinstance(exc, TimeoutError) or getattr(exc, "errno", None) == errno.ETIMEDOUT:
        within = f" within {timeout:g} s" if timeout else ""
        return f"no answer from {where}{within}: the host is down, or a firewall drops the packets"
    code = getattr(exc, "errno", None)
    if code == errno.EHOSTUNREACH:
        return f"no route to host {host} (port {port}): the host is down or not on a reachable network"
    if code == errno.ENETUNREACH:
        return f"network unreachable for {where}: check the address and this machine's routes"
    if code == errno.ECONNRESET:
        return f"the connection to {where} was reset by the peer"
    text = str(exc)
    if "Multiple exceptions" in text and "Connect call failed" in text and "111" in text:
        return f"connection refused: nothing listens on {where}"
    reason = getattr(exc, "reason", None)  # asyncssh.Error
    if isinstance(reason, str) and reason:
        return reason
    return errno_in_words(_ERRNO_PREFIX.sub("", text)) or type(exc).__name__
