"""What the lab's PEP 503 ("simple") indexes share: a wheel file's project name and the HTML page of links."""

from __future__ import annotations

import html


def project_of(filename: str) -> str:
    """The normalised project name a wheel's file name starts with (`typing_extensions-4.…` → typing-extensions)."""
    return filename.split("-", 1)[0].lower().replace("_", "-")


def links_page(title: str, links: list[tuple[str, str]]) -> bytes:
    """A PEP 503 page: one anchor a (href, text) pair, marked as the lab's."""
    body = "\n".join(f'    <a href="{html.escape(href)}">{html.escape(text)}</a><br/>' for href, text in links)
    return (f"<!DOCTYPE html>\n<html>\n  <body>\n    <h1>{html.escape(title)}</h1>\n{body}\n  </body>\n</html>\n"
            "<!-- LAB: gpu-provisioner lab package index (stand-in wheels) -->\n").encode()
