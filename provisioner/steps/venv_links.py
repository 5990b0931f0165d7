"""What a package index's project pages say about the files a venv.build lock pins: which file a container
installs, the host it is fetched from, and the sha256 the index publishes for it (or that it publishes none).

The PyTorch index links some files without a `#sha256=` (pytorch/pytorch#153469 aarch64, #164347 cu126,
pytorch/vision#9267 win_amd64). uv 0.13.9's `uv pip compile --generate-hashes` then hashes the bytes it
downloaded, so the lock pins whatever arrived: a hash nobody published. venv.build refuses such a file unless
the playbook names its sha256 (`trusted_hashes`), as the SSH transport records only the host key the user
confirmed (`unhashed_files`, `judge_unhashed`).

The listing is fetched in the container (the machine that downloads the files) by `LIST_LINKS`; everything
else here is a pure parser of its output.

A link is judged by the URL the downloader will fetch, never by what the page says about it (`link_target`):
the file is the last segment of the href's path (percent-decoded, as uv and pip name it), not the anchor
text; the host is the URL's host without userinfo. A link that carries userinfo the index page itself does
not (`https://download.pytorch.org@evil.example/...` is fetched from evil.example), that is not http(s), or
whose href holds a backslash, whitespace, a control character or a percent-encoded host (URL parsers
disagree on such hosts) is refused with its real host named, and no trust is offered for it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict
from urllib.parse import unquote, urljoin, urlsplit

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from provisioner.events import ParamOffer

#: prints, for each project page URL in argv, `@@page URL` then `href<TAB>text` per link (`@@error URL: why`
#: when a page cannot be read), after one `@@machine <platform.machine()>` line; run with the venv's Python
LIST_LINKS = (
    "import html, platform, re, sys, urllib.request\n"
    "print('@@machine ' + platform.machine())\n"
    "for url in sys.argv[1:]:\n"
    "    try:\n"
    "        page = urllib.request.urlopen(url, timeout=60).read().decode('utf-8', 'replace')\n"
    "    except Exception as exc:\n"
    "        print('@@error ' + url + ': ' + ' '.join(str(exc).split()))\n"
    "        continue\n"
    "    print('@@page ' + url)\n"
    "    for href, text in re.findall(r'<a[^>]*href=\"([^\"]*)\"[^>]*>([^<]*)</a>', page):\n"
    "        print(html.unescape(href) + '\\t' + html.unescape(text).strip())\n")


@dataclass
class Listing:
    """`LIST_LINKS` output, parsed: the container's machine, each page's (href, text) links, unread pages."""

    machine: str = ""
    pages: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def parse_listing(text: str) -> Listing:
    out = Listing()
    page: str | None = None
    for line in text.splitlines():
        if line.startswith("@@machine "):
            out.machine = line[len("@@machine "):].strip()
        elif line.startswith("@@page "):
            page = line[len("@@page "):].strip()
            out.pages[page] = []
        elif line.startswith("@@error "):
            url, _, why = line[len("@@error "):].partition(": ")
            out.errors[url] = why
            page = None
        elif page is not None and "\t" in line:
            href, _, label = line.partition("\t")
            out.pages[page].append((href, label))
    return out


def project_page(index: str, name: str) -> str:
    """The PEP 503 page of project `name` on `index`."""
    return f"{index.rstrip('/')}/{name}/"


class LinkedFile(TypedDict):
    file: str  # the last segment of the URL's path, percent-decoded: the file the downloader names
    url: str
    host: str  # the URL's host[:port], never its userinfo
    sha256: str  # the link's, or "" when it carries none
    problem: NotRequired[str]  # why the link is refused (userinfo, a host parsers disagree on, ...)


_UNSAFE_HREF = re.compile(r"[\\\s\x00-\x1f\x7f-\x9f]")


def link_target(page_url: str, href: str) -> LinkedFile:
    """What fetching `href` (found on `page_url`) actually fetches: file, URL, host, published sha256, and a
    `problem` when the link is not what it seems."""
    url, _, frag = urljoin(page_url, href.strip()).partition("#")
    parts = urlsplit(url)
    page = urlsplit(page_url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
        host = host or parts.netloc
    if port is not None:
        host = f"{host}:{port}"
    found: LinkedFile = {"file": unquote(parts.path.rsplit("/", 1)[-1]), "url": url, "host": host,
                         "sha256": frag.split("=", 1)[1] if frag.startswith("sha256=") else ""}
    problem = ""
    if _UNSAFE_HREF.search(href.strip()):
        problem = "its href holds a backslash, whitespace or a control character (URL parsers disagree on its host)"
    elif parts.scheme not in ("http", "https"):
        problem = f"it is not an http(s) link (scheme {parts.scheme or 'none'!r})"
    elif "@" in parts.netloc and (parts.netloc != page.netloc):
        problem = (f"its URL carries userinfo (a name before an @): it is fetched from {host}, not from the "
                   "host that name spells")
    elif "%" in parts.netloc.rpartition("@")[2] or not parts.hostname:
        problem = "its host is percent-encoded or missing"
    elif "/" in found["file"] or not found["file"]:
        problem = "its path does not end in a file name"
    if problem:
        found["problem"] = problem
    return found


def _installs(filename: str, name: str, version: str, python: str, machine: str) -> bool:
    """Whether a CPython `python` (e.g. 3.12) on a Linux `machine` installs this wheel of `name==version`."""
    try:
        project, ver, _, tags = parse_wheel_filename(filename)
        wanted = Version(version)
    except (InvalidWheelFilename, InvalidVersion):
        return False
    if project != canonicalize_name(name) or ver != wanted:
        return False
    minor = int(python.split(".")[1])
    return any(_tag_fits(tag, minor, machine) for tag in tags)


def _tag_fits(tag: Tag, minor: int, machine: str) -> bool:
    if tag.abi.endswith("t"):  # cp313t: the free-threaded build
        return False
    cp = re.fullmatch(r"cp3(\d+)", tag.interpreter)
    stable = tag.abi == "abi3" and cp is not None and int(cp.group(1)) <= minor
    if tag.interpreter not in (f"cp3{minor}", "py3") and not stable:
        return False
    if tag.platform == "any" or not machine:
        return True
    return tag.platform.startswith(("manylinux", "linux", "musllinux")) and tag.platform.endswith(machine)


def pick_file(links: list[tuple[str, str]], page_url: str, name: str, version: str, python: str,
              machine: str = "") -> LinkedFile | None:
    """The file of `name==version` that CPython `python` on a Linux `machine` installs, from a project page's
    links (`machine` "" when unknown: any platform). A link is matched by the file its URL names (the anchor
    text is the page's word only); a link with a `problem` is returned too, so the caller refuses it."""
    for href, _text in links:
        found = link_target(page_url, href)
        if _installs(found["file"], name, version, python, machine):
            return found
    return None


_PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._\-]*)(\[[^\]]*\])?==([^\s\\;]+)")
_HASH_RE = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def lock_entries(text: str) -> dict[str, tuple[str, list[str]]]:
    """A `uv pip compile --generate-hashes` lock → {normalized name: (version, [sha256, …])}."""
    out: dict[str, tuple[str, list[str]]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.strip() and not line[0].isspace() and not line.startswith("#"):
            m = _PIN_RE.match(line.strip())
            current = canonicalize_name(m.group(1)) if m else None
            if current is not None and m is not None:
                out[current] = (m.group(3), [])
        if current is not None:
            out[current][1].extend(_HASH_RE.findall(line))
    return out


class Unhashed(TypedDict):
    """A locked file its index links without a sha256."""

    name: str
    version: str
    file: str
    host: str
    page: str
    computed: list[str]  # the lock's hashes for it that no link of its page publishes: what uv hashed
    problem: NotRequired[str]  # the link is refused whatever its hash (`link_target`)


def unhashed_files(lock_text: str, listing: Listing, index: str, python: str) -> list[Unhashed]:
    """The files of a lock (all from `index`) whose links carry no `#sha256=`, and those whose link is refused
    (`problem`); a package whose page was not listed, or lists no file this Python installs, is not judged here."""
    out: list[Unhashed] = []
    for name, (version, hashes) in lock_entries(lock_text).items():
        page = project_page(index, name)
        links = listing.pages.get(page)
        found = pick_file(links, page, name, version, python, listing.machine) if links else None
        if found is None or (found["sha256"] and "problem" not in found):
            continue
        published = {href.partition("#sha256=")[2] for href, _ in links or [] if "#sha256=" in href}
        entry: Unhashed = {"name": name, "version": version, "file": found["file"], "host": found["host"],
                           "page": page, "computed": [h for h in hashes if h not in published]}
        if "problem" in found:
            entry["problem"] = found["problem"]
        out.append(entry)
    return out


class Verdict(TypedDict):
    trusted: list[str]  # "file (sha256 …)" the playbook's trusted_hashes vouch for
    refused: list[str]  # one sentence per file refused
    fix: str
    offer: ParamOffer | None  # the sha256 uv made of each refused file, for the wizard to show and, confirmed,
    # merge into trusted_hashes; None when some refused file has no single sha256 to trust


def judge_unhashed(found: list[Unhashed], trusted: Mapping[str, str], *,
                   where: str = "playbook key venv.build params: trusted_hashes", retry: str = "then replay"
                   ) -> Verdict:
    """Each unhashed file is accepted only when `trusted` (file name → sha256) names the sha256 its bytes
    have; otherwise it is refused, with the sha256 to check and the entry to add (`where`: the words of the
    face in use, `provisioner.words`)."""
    ok: list[str] = []
    refused: list[str] = []
    to_add: list[str] = []
    offer: dict[str, str] = {}
    confirm: list[str] = []
    for f in found:
        got = f["computed"][0] if len(f["computed"]) == 1 else ""
        if "problem" in f:  # never offered: what it would fetch is not what the page shows
            refused.append(f"the index {f['page']} links {f['file']} from {f['host']}, but {f['problem']}; "
                           "refusing it")
            continue
        want = trusted.get(f["file"])
        if want and want in f["computed"]:
            ok.append(f"{f['file']} (sha256 {want})")
            continue
        origin = f"{f['file']} from {f['host']}"
        hashed = f"uv hashed the bytes it downloaded: sha256 {got}" if got else "uv hashed the bytes it downloaded"
        if want:
            refused.append(f"{origin} is not the file the playbook trusts: its bytes have sha256 {got or '?'}, "
                           f"trusted_hashes names {want} (the index {f['page']} links it without a sha256)")
        else:
            refused.append(f"the index {f['page']} links {origin} without a sha256, so nothing vouches for its "
                           f"bytes ({hashed})")
        to_add.append(f"{f['file']}: \"{got or '<sha256>'}\"")
        if got:
            offer[f["file"]] = got
            confirm += [f["file"], f"  from {f['host']}, linked by {f['page']} without a sha256",
                        f"  sha256 of the bytes downloaded: {got}",
                        *([f"  (trusted_hashes names {want}: replaced)"] if want else [])]
    fix = ""
    if any("problem" in f for f in found):
        fix = ("the index page links a file from somewhere other than it shows: use an index you trust (or your "
               "own mirror of it), then " + retry)
    if to_add:
        fix += ("; " if fix else "") + (
            "check the sha256 against a source you trust (the file fetched from another network, the publisher's "
            "release notes), then set trusted_hashes: {" + ", ".join(to_add) + f"}} ({where}), {retry}; or pin "
            "another torch version or Python whose file the index hashes")
    trust = None
    if refused and len(offer) == len(refused):  # every refused file has one sha256 its bytes have
        trust = ParamOffer(param="trusted_hashes", add=offer, action="Trust…", confirm=[
            *confirm, "", "Trust only a sha256 you have checked against a source you trust (the file fetched from "
            "another network, the publisher's release notes): it is added to trusted_hashes and the step is "
            "planned again; nothing is applied before you confirm that plan."])
    return {"trusted": ok, "refused": refused, "fix": fix, "offer": trust}
