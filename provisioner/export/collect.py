"""Gather an export from the proving container: uv's pylock of the locked wheels, the venv's runtime.json.

Everything that is read from the container goes through the engine's transport (`pct exec` on the node),
as the steps do: uv runs there with the venv's Python and reaches the same index the venv was built from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from provisioner.export import pylock
from provisioner.export.models import BurninProof, GpuProof, HostNeeds, Provenance, RuntimeProof
from provisioner.export.pylock import LockPart
from provisioner.export.source import ExportRefused, Proof
from provisioner.payloads import RuntimeGpu, VenvRuntime, object_at
from provisioner.resolver.compat import variant_min_driver
from provisioner.resolver.data import Variant, load_data
from provisioner.resolver.versions import parse_version_tuple
from provisioner.steps.venv_build import split_lock
from provisioner.steps.venv_common import RUNTIME_FILE, VERIFY_SCRIPT
from provisioner.transport.base import Transport

VERIFY = VERIFY_SCRIPT  # the smoke test venv.build runs; import proves with the same one
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(x86_64|aarch64)")


@dataclass
class Export:
    runtime: RuntimeProof
    host: HostNeeds
    pylock: pylock.PylockDoc


async def _uv(ct: Transport) -> str:
    probe = await ct.run(["sh", "-c", "command -v uv || { test -x /opt/uv/bin/uv && echo /opt/uv/bin/uv; } || true"],
                         timeout=60, quiet=True)
    found = [ln.strip() for ln in probe.lines if ln.strip().startswith("/")]
    if not found:
        raise ExportRefused("uv is not in the container (venv.build installs it): cannot make pylock.toml")
    return found[-1]


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


async def make_pylock(ct: Transport, venv: str, groups: Mapping[str, LockPart], *, variant: str,
                      torch_index: str, python: str, fetch: Callable[[str], str] = str) -> pylock.PylockDoc:
    parts = compile_groups(groups, fetch)
    uv = await _uv(ct)
    made = await ct.run(["mktemp", "-d"], timeout=60, quiet=True, check=True)
    work = made.lines[-1].strip()
    try:
        for name, group in parts.items():
            await ct.write_file(f"{work}/{name}.txt", str(group["text"]).encode())
        result = await ct.run(["sh", "-c", pylock.compile_script(uv, venv, parts, work)], timeout=900, quiet=True)
        if not result.ok:
            raise ExportRefused("uv could not compile the venv's lock to pylock.toml in the container: "
                                + " | ".join(result.tail(5)))
        doc = pylock.merge(pylock.split_output(result.output), parts, variant=variant, torch_index=torch_index,
                           python=python)
        need = pylock.missing_sizes(doc)
        if need:
            sized = await ct.run([f"{venv}/bin/python", "-c", pylock.SIZE_SCRIPT, *need], timeout=1800, quiet=True)
            try:
                pylock.set_sizes(doc, json.loads(sized.lines[-1]))
            except (json.JSONDecodeError, IndexError):
                raise ExportRefused("could not read the wheels' sizes from the index: "
                                    + " | ".join(sized.tail(5))) from None
        pylock.wheels(doc)  # every wheel has url, sha256 and size
        return doc
    finally:
        await ct.run(["rm", "-rf", "--one-file-system", work], timeout=60, quiet=True)


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


def machine_of(wheels: list[pylock.Wheel]) -> str:
    arches = {m.group(3) for w in wheels if (m := _MANYLINUX.search(w.filename))}
    if len(arches) > 1:
        raise ExportRefused(f"the lock mixes machine types {sorted(arches)}")
    return arches.pop() if arches else "x86_64"


def build(proof: Proof, venv: str, venv_rt: VenvRuntime, doc: pylock.PylockDoc, vmid: int | None) -> Export:
    res = proof.resolved
    torch_res = object_at(res, "torch")
    burnin = res["burnin"]
    variant_name = str(torch_res.get("variant") or "")
    if not variant_name:
        m = re.search(r"\+(cu\d+|cpu)$", venv_rt.torch or "")
        variant_name = m.group(1) if m else "unknown"
    wheels = pylock.wheels(doc)
    machine = machine_of(wheels)
    variant = find_variant(str(venv_rt.torch), variant_name, machine)
    floor, why = variant_min_driver(variant)
    proven_on = venv_rt.gpus or [RuntimeGpu.model_validate(g) for g in res.get("container_gpus") or res.get("gpus") or []]
    gpus = [GpuProof(index=g.index, name=g.name, compute_cap=str(g.compute_cap)) for g in proven_on]
    torchvision = venv_rt.request.get("torchvision")
    runtime = RuntimeProof(
        torch=str(venv_rt.torch), torchvision=torchvision if isinstance(torchvision, str) else None, cuda=venv_rt.cuda,
        variant=variant_name, python=str(venv_rt.python), index_url=str(venv_rt.index_url),
        arch_list=list(venv_rt.arch_list), gpus=gpus, venv=venv,
        burnin=BurninProof(verdict="pass", summary=burnin.get("summary")),
        proven=Provenance(at=proof.when, run_id=proof.run_id, host=proof.host, container=vmid,
                          playbook=proof.playbook))
    driver = str(venv_rt.driver or res.get("host_driver") or "")
    host = HostNeeds(driver_proven_on=driver, min_driver=floor, min_driver_why=why, machine=machine,
                     glibc_floor=glibc_floor(variant.min_glibc, wheels),
                     compute_capabilities=sorted({g.compute_cap for g in gpus}))
    return Export(runtime=runtime, host=host, pylock=doc)
