"""The one retry helper (provisioner/retry.py): its schedule, what it retries, and the download that uses it
against a real HTTP server that drops the connection half way."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from provisioner import download as dl
from provisioner import retry


def test_schedule_doubles_from_first_and_stops_at_the_cap() -> None:
    assert retry.Backoff(attempts=6, first=1, cap=20).delays() == [1, 2, 4, 8, 16]
    assert retry.Backoff(attempts=6, first=1, cap=2).delays() == [1, 2, 2, 2, 2]
    assert retry.Backoff(attempts=3, first=0.5).delays() == [0.5, 1.0]
    assert retry.Backoff(attempts=1, first=0.5).delays() == []
    with pytest.raises(ValueError, match="at least one attempt"):
        retry.Backoff(attempts=0, first=1)


def test_call_retries_only_the_named_errors_and_waits_the_schedule() -> None:
    waits: list[float] = []
    seen: list[int] = []
    tries = iter([ConnectionError("drop"), ConnectionError("drop"), "done"])

    def flaky() -> str:
        item = next(tries)
        if isinstance(item, Exception):
            raise item
        return item

    got = retry.call(flaky, retry.Backoff(attempts=4, first=1, cap=10), retry_on=(OSError,),
                     on_retry=lambda n, _e, _w: seen.append(n), sleep=waits.append)
    assert (got, waits, seen) == ("done", [1, 2], [1, 2])

    def wrong() -> str:
        raise ValueError("not transient")

    waits.clear()
    with pytest.raises(ValueError, match="not transient"):
        retry.call(wrong, retry.Backoff(attempts=4, first=1), retry_on=(OSError,), sleep=waits.append)
    assert waits == []  # not retried at all


def test_acall_reraises_the_last_error_without_a_wait_after_the_last_try() -> None:
    waits: list[float] = []
    calls = 0

    async def sleep(s: float) -> None:
        waits.append(s)

    async def always() -> None:
        nonlocal calls
        calls += 1
        raise TimeoutError(f"try {calls}")

    with pytest.raises(TimeoutError, match="try 3"):
        asyncio.run(retry.acall(always, retry.Backoff(attempts=3, first=0.5), retry_on=(TimeoutError,), sleep=sleep))
    assert (calls, waits) == (3, [0.5, 1.0])


BLOB = bytes(range(256)) * 1024  # 256 KiB


class _DropOnce(http.server.BaseHTTPRequestHandler):
    """Serves BLOB; the first GET announces the full length, sends a quarter and closes; later GETs honour Range."""

    requests: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        rng = self.headers.get("Range")
        type(self).requests.append(rng)
        if len(type(self).requests) == 1:
            self.send_response(200)
            self.send_header("Content-Length", str(len(BLOB)))
            self.end_headers()
            self.wfile.write(BLOB[: len(BLOB) // 4])
            self.close_connection = True
            return
        start = int(rng.removeprefix("bytes=").rstrip("-")) if rng else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(BLOB) - start))
        self.end_headers()
        self.wfile.write(BLOB[start:])

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _DropOnce.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DropOnce)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/blob"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_download_cut_short_is_resumed_with_a_range_request(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "blob"
    dl.download(server, dest, retries=3)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == hashlib.sha256(BLOB).hexdigest()
    assert _DropOnce.requests == [None, f"bytes={len(BLOB) // 4}-"]
    assert not (tmp_path / "blob.part").exists()


def test_download_without_retries_names_the_attempts(server: str, tmp_path: Path) -> None:
    with pytest.raises(dl.DownloadError, match="failed after 1 attempts: connection closed after"):
        dl.download(server, tmp_path / "blob", retries=0)
    assert (tmp_path / "blob.part").stat().st_size == len(BLOB) // 4  # kept for the next run to resume
