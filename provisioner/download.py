"""Resumable downloads with progress, verified against a SHA-256 before anything may use them."""

from __future__ import annotations

import hashlib
import http.client
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from provisioner import bounds, retry
from provisioner.words import error_words

ProgressFn = Callable[[int, int | None], None]


class DownloadError(Exception):
    pass


class ChecksumMismatch(DownloadError):
    def __init__(self, path: Path, expected: str, actual: str, kept: Path) -> None:
        self.path, self.expected, self.actual, self.kept = path, expected, actual, kept
        super().__init__(f"checksum mismatch for {path.name}: expected sha256 {expected}, got {actual}; "
                         f"the file was moved aside to {kept} and will not be executed")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parse_sha256sum(text: str, filename: str) -> str:
    """`<hex>  <file>` (sha256sum format); the line for `filename`, or the only line."""
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    for parts in lines:
        if len(parts) >= 2 and parts[1].lstrip("*").rsplit("/", 1)[-1] == filename:
            return parts[0].lower()
    if len(lines) == 1 and len(lines[0][0]) == 64:
        return lines[0][0].lower()
    raise DownloadError(f"no sha256 for {filename} in checksum file")


def fetch_text(url: str, timeout: float = 30) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http(s) only, checked by caller
            data: bytes = resp.read(bounds.HTTP_TEXT_BYTES + 1)
            if len(data) > bounds.HTTP_TEXT_BYTES:
                raise DownloadError(f"{url} is longer than a checksum file can be ({bounds.cap('HTTP text')})")
            return data.decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise DownloadError(f"cannot fetch {url}: {error_words(exc)}") from None


def url_exists(url: str, timeout: float = 30) -> bool:
    """Whether `url` answers a HEAD request with 2xx (404/410: False; other failures raise DownloadError)."""
    if not url.startswith(("https://", "http://")):
        raise DownloadError(f"refusing non-HTTP URL {url!r}")
    req = urllib.request.Request(url, method="HEAD")  # noqa: S310 - http(s) only, checked above
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            return 200 <= int(resp.status) < 300
    except urllib.error.HTTPError as exc:
        if exc.code in (403, 404, 410):
            return False
        raise DownloadError(f"cannot probe {url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DownloadError(f"cannot probe {url}: {error_words(exc)}") from None


_TRANSIENT = (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException)


def download(url: str, dest: Path, *, progress: ProgressFn | None = None, timeout: float = 60,
             retries: int = 3) -> Path:
    """Download `url` to `dest`, resuming a partial `dest.part` with an HTTP Range request."""
    if not url.startswith(("https://", "http://")):
        raise DownloadError(f"refusing non-HTTP URL {url!r}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")

    def once() -> Path:
        have = part.stat().st_size if part.exists() else 0
        req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})  # noqa: S310
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
                if have and resp.status != 206:  # server ignored the range: start over
                    have = 0
                    part.unlink(missing_ok=True)
                length = resp.headers.get("Content-Length")
                total = have + int(length) if length is not None else None
                with open(part, "ab") as fh:
                    done = have
                    while chunk := resp.read(1 << 16):
                        fh.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, total)
                if total is not None and done < total:  # the server closed early: resume with a Range request
                    raise ConnectionError(f"connection closed after {done} of {total} bytes")
            shutil.move(part, dest)
            return dest
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and part.exists():  # already complete
                shutil.move(part, dest)
                return dest
            raise DownloadError(f"download of {url} failed: HTTP {exc.code}") from None

    try:  # a dropped connection or a timeout is retried (1, 2, 4 … at most 10 s apart), an HTTP error is not
        return retry.call(once, retry.Backoff(attempts=retries + 1, first=1, cap=10), retry_on=_TRANSIENT)
    except _TRANSIENT as exc:
        raise DownloadError(f"download of {url} failed after {retries + 1} attempts: {error_words(exc)}") from None


def verify(path: Path, expected: str) -> None:
    actual = sha256_file(path)
    if actual != expected.lower():
        kept = path.with_name(path.name + f".corrupt-{int(time.time())}")
        path.rename(kept)
        raise ChecksumMismatch(path, expected, actual, kept)
