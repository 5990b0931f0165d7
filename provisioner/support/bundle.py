"""Support bundles: a redacted tar.gz of the evidence, and reading one back for `diagnose --bundle`.

Layout (every member under `provisioner-bundle/`, all text, all redacted):

    manifest.json              what was collected, from where, each probe's exit status, and the
                               sha256 + size of every other member
    README.txt                 what this is
    facts.json                 the live facts derived from the probes (docs/diagnose-rules.md)
    diagnosis.json             the findings `provisioner diagnose` made from them at collection time
    summary/collect_env.txt    torch collect_env-like report
    summary/versions.txt       one line per component
    node/*.txt, container/*    one member per probe that produced output (see support/probes.py)
    runs/<run-id>.jsonl        the last run logs (from provisioner.paths.runs_dir())
    extra/*                    files the caller adds (e.g. the playbook)

Redaction (support/scrub.py) runs over every member and over the manifest itself, before
hashing: the hashes are those of the bytes in the archive.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TypedDict

from provisioner import __version__, atomic, bounds
from provisioner.diagnose import diagnose
from provisioner.paths import runs_dir as default_runs_dir
from provisioner.support import archive, summary
from provisioner.support.archive import ArchiveError
from provisioner.support.derive import facts_from_records
from provisioner.support.evidence import Evidence, ProbeRecord
from provisioner.support.scrub import Scrubber

FORMAT = "provisioner-support-bundle"
FORMAT_VERSION = 1
ROOT = "provisioner-bundle"
MANIFEST = "manifest.json"
RUN_LOGS_MAX = 5
RUN_LOG_MAX_BYTES = 4 * 1024 * 1024  # per run log; longer ones keep their tail
MAX_MEMBER_BYTES = bounds.BUNDLE_MEMBER_BYTES  # reading: refuse larger members
MAX_TOTAL_BYTES = bounds.BUNDLE_KEPT_BYTES  # reading: refuse more member data than this in all

README = """\
provisioner support bundle
==========================

Collected by `provisioner bundle` (gpu-provisioner {version}) from {where} at {finished}.
Every member was passed through redaction (known secret values, tokens, passwords, keys)
before it was written. manifest.json lists each probe (command, where it ran, exit status)
and each member with its sha256.

Read it:   tar -xzf <bundle>.tar.gz && less {root}/summary/collect_env.txt
Diagnose:  provisioner diagnose --bundle <bundle>.tar.gz
"""


class BundleError(ValueError):
    """Not a readable support bundle."""


class MemberEntry(TypedDict):
    """A member of the bundle as the manifest lists it (its bytes' sha256, after redaction)."""

    path: str
    size: int
    sha256: str
    source: str


class RunLogEntry(TypedDict, total=False):
    """A run log the bundle took (its tail), or why it could not."""

    log: str
    file: str
    truncated_to_tail: bool
    error: str


@dataclass
class BundleResult:
    path: Path
    manifest: dict[str, object]  # manifest.json as written (read back)
    members: list[MemberEntry] = field(default_factory=list)
    size: int = 0
    redacted_members: list[str] = field(default_factory=list)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def recent_run_logs(directory: Path | None = None, limit: int = RUN_LOGS_MAX) -> list[Path]:
    """The newest run logs (JSON Lines), newest first."""
    where = directory if directory is not None else default_runs_dir()
    try:
        logs = [p for p in where.glob("*.jsonl") if p.is_file()]
    except OSError:
        return []
    return sorted(logs, key=lambda p: (p.stat().st_mtime, p.name), reverse=True)[:limit]


def _read_tail(path: Path, limit: int) -> tuple[str, bool]:
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - limit))
        data = fh.read()
    if size > limit:
        data = data.split(b"\n", 1)[-1]  # drop the partial first line
    return data.decode("utf-8", errors="replace"), size > limit


class _Writer:
    def __init__(self, scrub: Scrubber) -> None:
        self.scrub = scrub
        self.members: list[tuple[str, bytes]] = []
        self.entries: list[MemberEntry] = []
        self.redacted: list[str] = []

    def add(self, path: str, text: str, source: str, pre: Callable[[str, Scrubber], str] | None = None) -> None:
        clean = self.scrub(pre(text, self.scrub) if pre else text)
        if clean != text:
            self.redacted.append(path)
        data = clean.encode("utf-8")
        self.members.append((path, data))
        self.entries.append({"path": path, "size": len(data), "sha256": _sha256(data), "source": self.scrub(source)})


def _scrub_jsonl(text: str, scrub: Scrubber) -> str:
    """Redact JSON Lines value by value, so that a rule masking "the rest of the line" (an
    Authorization header) cannot eat the closing quotes and braces and break the log's JSON.
    Lines without a secret are kept byte for byte."""
    out: list[str] = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            out.append(line)
            continue
        clean = scrub.scrub_obj(value)
        out.append(line if clean == value else json.dumps(clean, ensure_ascii=False))
    return "\n".join(out) + ("\n" if out else "")


def _probe_source(r: ProbeRecord) -> str:
    return f"probe {r.name} on {r.where}: {r.command}"


def write_bundle(
    evidence: Evidence,
    out: str | Path,
    *,
    known_secrets: Iterable[str] = (),
    runs_dir: Path | None = None,
    include_runs: bool = True,
    extra_files: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BundleResult:
    """Write `evidence` as a redacted tar.gz at `out` (atomically) and return what went in."""
    scrub = Scrubber(known_secrets, environ=environ)
    w = _Writer(scrub)
    where = f"CT {evidence.vmid} on {evidence.host}" if evidence.vmid is not None else evidence.host
    w.add("README.txt", README.format(version=__version__, where=where, finished=evidence.finished or "?",
                                      root=ROOT), "generated")
    facts = evidence.facts or facts_from_records(evidence.records, container=evidence.vmid is not None)
    w.add("facts.json", json.dumps(scrub.scrub_obj(facts), indent=2, sort_keys=True, default=str) + "\n",
          "derived from the probes (provisioner.support.derive)")
    findings = scrub.scrub_obj([f.to_dict() for f in diagnose(evidence.report_text(), facts, scrub.secrets)])
    w.add("diagnosis.json", json.dumps({"findings": findings}, indent=2) + "\n",
          "provisioner.diagnose over facts.json")
    w.add("summary/collect_env.txt", summary.collect_env(evidence), "derived from the probes")
    w.add("summary/versions.txt", summary.versions(evidence), "derived from the probes")
    probe_file: dict[str, str | None] = {}
    parsed_file: dict[str, str] = {}
    for r in evidence.records:
        if r.file and (r.status == "ok" or r.output):
            w.add(r.file, r.output, _probe_source(r))
            probe_file[r.name] = r.file
        else:
            probe_file[r.name] = None
        if r.parsed is not None:  # a fact: its parsed value beside the raw output
            parsed_file[r.name] = f"parsed/{r.name}.json"
            w.add(parsed_file[r.name], json.dumps(scrub.scrub_obj(r.parsed), indent=2, sort_keys=True) + "\n",
                  f"{r.name} parsed by its fact's parser")
    run_entries: list[RunLogEntry] = []
    if include_runs:
        for log in recent_run_logs(runs_dir):
            try:
                text, cut = _read_tail(log, RUN_LOG_MAX_BYTES)
            except OSError as exc:
                run_entries.append({"log": log.name, "error": str(exc)})
                continue
            member = f"runs/{log.name}"
            w.add(member, text, f"run log {log}", pre=_scrub_jsonl)
            run_entries.append({"log": log.name, "file": member, "truncated_to_tail": cut})
    for name, text in (extra_files or {}).items():
        w.add(f"extra/{PurePosixPath(name).name}", text, f"extra file {name}")

    body: dict[str, object] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tool": f"provisioner {__version__}",
        "created": evidence.finished or evidence.started,
        "collection": {"host": evidence.host, "container": evidence.vmid, "venv": evidence.venv,
                       "started": evidence.started, "finished": evidence.finished,
                       "unreachable": evidence.unreachable, "container_unreachable": evidence.container_unreachable,
                       "source": evidence.source, "counts": evidence.counts()},
        "probes": [r.meta() | {"file": probe_file[r.name]}
                   | ({"parsed_file": parsed_file[r.name]} if r.name in parsed_file else {})
                   for r in evidence.records],
        "run_logs": run_entries,
        "notes": list(evidence.notes),
    }
    manifest = scrub.scrub_obj(body)
    assert isinstance(manifest, dict)
    # Member entries hold fixed paths, hashes of redacted bytes and already redacted sources.
    manifest["redaction"] = {"applied": True, "known_secret_values": len(scrub.secrets),
                             "members_changed": sorted(set(w.redacted))}
    manifest["members"] = w.entries
    manifest_text = json.dumps(manifest, indent=2) + "\n"
    members = [*w.members, (MANIFEST, manifest_text.encode("utf-8"))]
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    mtime = time.time()
    # support data: readable by the collector only until shared on purpose
    with atomic.AtomicWriter(path, mode=0o600) as fh, tarfile.open(fileobj=fh, mode="w:gz",
                                                                    format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for name, data in sorted(members, key=lambda m: m[0]):
            full = f"{ROOT}/{name}"
            for parent in reversed(PurePosixPath(full).parents[:-1]):
                if str(parent) not in dirs:
                    dirs.add(str(parent))
                    info = tarfile.TarInfo(str(parent))
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
                    tar.addfile(info)
            info = tarfile.TarInfo(full)
            info.size, info.mode, info.mtime = len(data), 0o644, mtime
            tar.addfile(info, io.BytesIO(data))
    return BundleResult(path=path, manifest=json.loads(manifest_text), members=w.entries,
                        size=path.stat().st_size, redacted_members=sorted(set(w.redacted)))


def _read_members(path: Path) -> dict[str, bytes]:
    """The regular files under the bundle's root, read within `bounds` ("bundle archive": `support.archive`)."""
    out: dict[str, bytes] = {}
    try:
        with open(path, "rb") as fh:
            for member in archive.members(fh):
                name = PurePosixPath(member.name)
                if name.is_absolute() or ".." in name.parts or len(name.parts) < 2:
                    continue
                out[str(PurePosixPath(*name.parts[1:]))] = member.data
    except ArchiveError as exc:
        raise BundleError(f"{path}: not a readable support bundle: {exc}") from None
    except OSError as exc:
        raise BundleError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return out


MAX_MANIFEST_DEPTH = 16  # ours is 4 deep; a deeper one is hostile (json.loads would recurse)


def _nesting(raw: bytes) -> int:
    """The deepest [ / { nesting of a JSON text, counted without parsing it (strings skipped)."""
    depth = deepest = 0
    in_str = escaped = False
    for byte in raw:
        if in_str:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_str = False
        elif byte == 0x22:
            in_str = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_MANIFEST_DEPTH:
                return deepest
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _check_manifest(p: Path, manifest: dict[str, object]) -> None:
    """Every part read below has the type written by `write_bundle` (else exit 2, not a traceback)."""

    def bad(what: str) -> BundleError:
        return BundleError(f"{p}: {MANIFEST}: {what}")

    objects: dict[str, list[dict[str, object]]] = {}
    for key in ("members", "probes"):
        value = manifest.get(key, [])
        if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
            raise bad(f"'{key}' must be a list of objects")
        objects[key] = value
    for entry in objects["members"]:
        if not isinstance(entry.get("path"), str) or not isinstance(entry.get("sha256", ""), str):
            raise bad("a member needs a string 'path' and 'sha256'")
    for meta in objects["probes"]:
        if not isinstance(meta.get("file", ""), (str, type(None))):
            raise bad("a probe's 'file' must be a string")
    col = manifest.get("collection", {})
    if not isinstance(col, dict):
        raise bad("'collection' must be an object")
    for key in ("host", "started", "finished", "venv", "unreachable", "container_unreachable"):
        if not isinstance(col.get(key), (str, type(None))):
            raise bad(f"collection.{key} must be a string")


def read_bundle(path: str | Path) -> Evidence:
    """The evidence a bundle holds; facts are re-derived from the (redacted) probe outputs."""
    p = Path(path)
    members = _read_members(p)
    raw = members.get(MANIFEST)
    if raw is None:
        raise BundleError(f"{p}: no {MANIFEST} (not a provisioner support bundle)")
    if len(raw) > bounds.BUNDLE_MANIFEST_BYTES:
        raise BundleError(f"{p}: {MANIFEST} is {len(raw):,} bytes, more than {bounds.size(bounds.BUNDLE_MANIFEST_BYTES)} "
                          f"({bounds.cap('bundle archive')})")
    if _nesting(raw) > MAX_MANIFEST_DEPTH:
        raise BundleError(f"{p}: {MANIFEST} is nested deeper than {MAX_MANIFEST_DEPTH} levels")
    try:
        manifest = json.loads(raw.decode("utf-8", errors="replace"))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BundleError(f"{p}: {MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{p}: {MANIFEST} is not a {FORMAT} manifest")
    _check_manifest(p, manifest)
    notes: list[str] = []
    for entry in manifest.get("members", []):
        data = members.get(str(entry.get("path")))
        if data is None:
            notes.append(f"member {entry.get('path')} listed in the manifest is missing")
        elif _sha256(data) != entry.get("sha256"):
            notes.append(f"member {entry.get('path')} does not match its sha256 in the manifest")

    def text(name: str | None) -> str:
        return members.get(name, b"").decode("utf-8", errors="replace") if name else ""

    records: list[ProbeRecord] = []
    for meta in manifest.get("probes", []):
        try:
            records.append(ProbeRecord.from_meta(meta, text(meta.get("file"))))
        except (KeyError, TypeError, ValueError) as exc:
            notes.append(f"probe entry skipped: {exc}")
    col = manifest.get("collection", {})
    vmid = col.get("container")
    evidence = Evidence(
        host=str(col.get("host", "")), vmid=int(vmid) if isinstance(vmid, int) else None,
        venv=col.get("venv"), records=records, started=str(col.get("started", "")),
        finished=str(col.get("finished", "")), unreachable=col.get("unreachable"),
        container_unreachable=col.get("container_unreachable"), source="bundle",
        run_logs={name: text(name) for name in sorted(members) if name.startswith("runs/")}, notes=notes,
    )
    evidence.facts = facts_from_records(records, container=evidence.vmid is not None)
    return evidence
