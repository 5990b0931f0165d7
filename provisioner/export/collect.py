"""Gather an export from the proving container: uv's pylock of the locked wheels, the venv's runtime.json.

Everything that is read from the container goes through the engine's transport (`pct exec` on the node),
as the steps do: uv runs there with the venv's Python and reaches the same index the venv was built from.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.pylock import Pylock
from pydantic import ValidationError

from provisioner.export import pylock, trust
from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.export.pylock import LockPart
from provisioner.export.source import ExportRefused, Proof
from provisioner.payloads import RuntimeGpu, VenvRuntime, object_at
from provisioner.resolver.compat import variant_min_driver
from provisioner.resolver.data import Variant, load_data
from provisioner.resolver.versions import parse_version_tuple
from provisioner.steps.venv_build import split_lock
from provisioner.steps.venv_common import RUNTIME_FILE, UV_PIN, VERIFY_SCRIPT, uv_version
from provisioner.transport.base import Transport

VERIFY = VERIFY_SCRIPT  # the smoke test venv.build runs; import proves with the same one
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(x86_64|aarch64)")
DEFAULT_UV_DIR = "/opt/uv"


@dataclass
class Export:
    runtime: RuntimeProof
    host: HostNeeds
    pylock: Pylock


def local_uv(pin: str) -> Path | None:
    """This machine's uv binary of version `pin` (the engine's own: `$UV` under `uv run`, the interpreter's
    prefix, PATH), an ELF file, not a shim; None when there is none."""
    candidates = [os.environ.get("UV", ""), str(Path(sys.prefix) / "bin" / "uv"),
                  str(Path(sys.base_prefix) / "bin" / "uv"), shutil.which("uv") or ""]
    for c in candidates:
        if not c or not Path(c).is_file():
            continue
        real = Path(c).resolve()
        try:
            with open(real, "rb") as fh:
                if fh.read(4) != b"\x7fELF":
                    continue
            got = subprocess.run([str(real), "--version"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if uv_version(got.stdout) == pin:
            return real
    return None


@dataclass
class EngineUv:
    """The uv the export runs in the container, by absolute path (never the container's PATH)."""

    path: str
    how: str
    cleanup: str | None = None  # a private folder of the container to remove afterwards


async def engine_uv(ct: Transport, uv_dir: str, pin: str = UV_PIN) -> EngineUv:
    """uv `pin` at the engine's own `uv_dir/bin/uv` in the container, else this machine's uv `pin` lent into
    a private folder of the container: always by path, never whatever the container's PATH names."""
    own = f"{uv_dir}/bin/uv"
    probe = await ct.run(["sh", "-c", '[ -x "$1" ] && exec "$1" --version', "sh", own], timeout=60, quiet=True)
    if probe.ok and uv_version(probe.output) == pin:
        return EngineUv(own, f"uv {pin} at {own}")
    local = local_uv(pin)
    machine = await ct.run(["uname", "-m"], timeout=60, quiet=True)
    if local is None or machine.output.strip() != platform.machine():
        raise ExportRefused(f"uv {pin} is not at {own} in the container and this machine has no uv {pin} for "
                            f"{trust.shown(machine.output.strip())} to lend: install uv {pin} there (venv.build's "
                            "uv_dir); the container's PATH is not trusted to name uv")
    made = await ct.run(["mktemp", "-d"], timeout=60, quiet=True, check=True)
    folder = made.lines[-1].strip() if made.lines else ""
    if not re.fullmatch(r"/[A-Za-z0-9._/-]+", folder):
        raise ExportRefused(f"mktemp -d in the container answered {trust.shown(folder)}")
    await ct.run(["chmod", "0700", folder], timeout=60, quiet=True, check=True)
    await ct.put(local, f"{folder}/uv", mode=0o755)
    lent = f"{folder}/uv"
    check = await ct.run([lent, "--version"], timeout=60, quiet=True)
    if not check.ok or uv_version(check.output) != pin:
        await ct.run(["rm", "-rf", "--one-file-system", folder], timeout=60, quiet=True)
        raise ExportRefused(f"the uv {pin} lent to the container does not run there")
    return EngineUv(lent, f"uv {pin} lent by this machine", cleanup=folder)


async def read_venv_runtime(ct: Transport, venv: str) -> VenvRuntime:
    result = await ct.run(["cat", f"{venv}/{RUNTIME_FILE}"], timeout=60, quiet=True)
    try:
        data = VenvRuntime.model_validate_json(result.output) if result.ok else None
    except ValidationError:
        data = None
    if data is None or not data.verified:
        raise ExportRefused(f"{venv}/{RUNTIME_FILE} in the container is missing or was never verified: "
                            "replay the playbook so venv.build proves the venv")
    return data


def compile_groups(groups: Mapping[str, LockPart], fetch: Callable[[str], str]) -> dict[str, LockPart]:
    """The venv's lock groups as uv compiles them to pylock: a group resolved with the PyTorch index explicit
    (`torch_index_url`) is split like venv.build installs it — its torch/torchvision lines from the PyTorch
    index, the rest from its `index_url` (PyPI) — each part with the URL this site fetches it from. The torch
    parts come first (merge keeps the first entry of a package)."""
    torch_parts: dict[str, LockPart] = {}
    rest: dict[str, LockPart] = {}
    for name, group in groups.items():
        explicit = group.get("torch_index_url") or group.get("extra_index_url")
        if not explicit:
            rest[name] = {**group, "index_url": fetch(str(group["index_url"])), "torch_index_url": None}
            continue
        parts = split_lock(str(group["text"]))
        if parts["torch"].strip():
            torch_parts[f"{name}torch"] = {"text": parts["torch"], "index_url": fetch(str(explicit))}
        if parts["pypi"].strip():
            rest[f"{name}pypi"] = {"text": parts["pypi"], "index_url": fetch(str(group["index_url"]))}
    return {**torch_parts, **rest}


def index_origins(groups: Mapping[str, LockPart], fetch: Callable[[str], str],
                  file_hosts: Sequence[str] = ()) -> frozenset[str]:
    """Where the export takes wheels from: the indexes the venv was built from as this site fetches them
    (a site mirror may be http), the hosts the public indexes keep their files on, and `file_hosts` (a
    site's own files host, e.g. the lab's)."""
    indexes: list[str] = []
    mirrors: list[str] = [*file_hosts]
    for group in groups.values():
        for key in ("index_url", "torch_index_url", "extra_index_url"):
            url = group.get(key)
            if not url:
                continue
            fetched = fetch(str(url))
            indexes += [str(url), fetched]
            if fetched != url:
                mirrors.append(fetched)  # the site's mirror (its own scheme)
    return trust.allowed_origins(indexes, mirrors)


async def make_pylock(ct: Transport, venv: str, groups: Mapping[str, LockPart], *, variant: str,
                      torch_index: str, python: str, fetch: Callable[[str], str] = str,
                      uv_dir: str = DEFAULT_UV_DIR, file_hosts: Sequence[str] = ()) -> Pylock:
    """uv's pylock of the venv's locks, compiled in the container by the engine's uv (`engine_uv`) and
    checked: the packages, versions and hashes the engine locked, wheel names, hosts and sizes."""
    parts = compile_groups(groups, fetch)
    allowed = index_origins(groups, fetch, file_hosts)
    uv = await engine_uv(ct, uv_dir)
    made = await ct.run(["mktemp", "-d"], timeout=60, quiet=True, check=True)
    work = made.lines[-1].strip() if made.lines else ""
    if not re.fullmatch(r"/[A-Za-z0-9._/-]+", work):
        raise ExportRefused(f"mktemp -d in the container answered {trust.shown(work)}")
    try:
        for name, group in parts.items():
            await ct.write_file(f"{work}/{name}.txt", str(group["text"]).encode())
        result = await ct.run(["sh", "-c", pylock.compile_script(uv.path, venv, parts, work)], timeout=900,
                              quiet=True)
        if not result.ok:
            raise ExportRefused(f"{uv.how} could not compile the venv's lock to pylock.toml in the container: "
                                + " | ".join(trust.shown(line, 300) for line in result.tail(5)))
        try:
            lock = pylock.merge(pylock.split_output(result.output), parts, variant=variant, torch_index=torch_index,
                                python=python, hosts=allowed)
            pylock.check_against_locks(lock, groups)
            need = pylock.missing_sizes(lock)
            for url in need:  # checked before the container is asked to reach them
                pkg = next(p for p in lock.packages for w in p.wheels or [] if w.url == url)
                trust.wheel_from_url(url, package=pkg.name, version=str(pkg.version), allowed=allowed,
                                     field=f"{pylock.PYLOCK}: {trust.shown(pkg.name)} url")
            if need:
                sized = await ct.run([f"{venv}/bin/python", "-c", pylock.SIZE_SCRIPT, *need], timeout=1800,
                                     quiet=True)
                try:
                    answer = json.loads(sized.lines[-1])
                except (json.JSONDecodeError, IndexError):
                    raise ExportRefused("could not read the wheels' sizes from the index: "
                                        + " | ".join(trust.shown(line, 300) for line in sized.tail(5))) from None
                if not isinstance(answer, dict):
                    raise ExportRefused("the wheels' sizes read in the container are not a JSON object")
                lock = pylock.set_sizes(lock, answer)
            pylock.wheels(lock, allowed)  # every wheel: an allowed URL, its own file name, sha256 and size
        except (pylock.PylockError, trust.Untrusted) as exc:
            raise ExportRefused(str(exc)) from None
        return lock
    finally:
        await ct.run(["rm", "-rf", "--one-file-system", work], timeout=60, quiet=True)
        if uv.cleanup:
            await ct.run(["rm", "-rf", "--one-file-system", uv.cleanup], timeout=60, quiet=True)


def find_variant(torch: str, variant: str, machine: str) -> Variant:
    data = load_data()
    release = ".".join(torch.split("+")[0].split(".")[:2])
    for rel in data.releases:
        if rel.version == release:
            for v in rel.variants:
                if v.variant == variant and v.platform == machine:
                    return v
    raise ExportRefused(f"torch {torch} {variant} on {machine} is not in the resolver's data: no driver floor known")


def glibc_floor(variant_floor: str, wheels: list[pylock.Wheel]) -> str:
    best = parse_version_tuple(variant_floor)
    for w in wheels:
        m = _MANYLINUX.search(w.filename)
        if m:
            best = max(best, (int(m.group(1)), int(m.group(2))))
    return ".".join(map(str, best))


def build(proof: Proof, venv: str, venv_rt: VenvRuntime, doc: Pylock, vmid: int | None) -> Export:
    """runtime.json, host.json and the lock of the export; a value from the container that its field cannot
    hold (a `$(…)`, a quote, a newline in a version) is refused, naming the field (never echoing it)."""
    res = proof.resolved
    torch_res = object_at(res, "torch")
    burnin = res["burnin"]
    variant_name = str(torch_res.get("variant") or "")
    if not variant_name:
        m = re.search(r"\+(cu\d+|cpu)$", venv_rt.torch or "")
        variant_name = m.group(1) if m else "unknown"
    proven_on = venv_rt.gpus or [RuntimeGpu.model_validate(g) for g in res.get("container_gpus") or res.get("gpus") or []]
    torchvision = venv_rt.request.get("torchvision")
    try:
        runtime = RuntimeProof.model_validate({
            "torch": str(venv_rt.torch), "torchvision": torchvision if isinstance(torchvision, str) else None,
            "cuda": venv_rt.cuda, "variant": variant_name, "python": str(venv_rt.python),
            "index_url": str(venv_rt.index_url), "arch_list": list(venv_rt.arch_list),
            "gpus": [{"index": g.index, "name": g.name, "compute_cap": str(g.compute_cap)} for g in proven_on],
            "venv": venv, "burnin": {"verdict": "pass", "summary": burnin.get("summary")},
            "proven": {"at": proof.when, "run_id": proof.run_id, "host": proof.host, "container": vmid,
                       "playbook": proof.playbook}})
    except ValidationError as exc:
        raise ExportRefused(trust.fields_of(exc, f"{venv}/{RUNTIME_FILE} in the container")) from None
    try:
        wheels = pylock.wheels(doc)
        machine = pylock.machine_of(doc)
        doc = pylock.for_runtime(doc, python=runtime.python, machine=machine)
    except pylock.PylockError as exc:
        raise ExportRefused(str(exc)) from None
    variant = find_variant(runtime.torch, variant_name, machine)
    floor, why = variant_min_driver(variant)
    driver = str(venv_rt.driver or res.get("host_driver") or "")
    try:
        host = HostNeeds.model_validate({
            "driver_proven_on": driver, "min_driver": floor, "min_driver_why": why, "machine": machine,
            "glibc_floor": glibc_floor(variant.min_glibc, wheels),
            "compute_capabilities": sorted({g.compute_cap for g in runtime.gpus})})
    except ValidationError as exc:
        raise ExportRefused(trust.fields_of(exc, "host.json (the container's driver version)")) from None
    return Export(runtime=runtime, host=host, pylock=doc)
