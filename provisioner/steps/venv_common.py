"""What `venv.build` and `export.install` share: the venv's markers and record, the read-only probe of what is at
the venv path, uv found or installed in the container, the failure advice for a uv install, and the torch smoke test
run in the built venv."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TypedDict, cast

from provisioner import quoting
from provisioner.exitcodes import ExitCode
from provisioner.payloads import JsonObject, Resolved, object_at
from provisioner.resolver.compat import arch_list_covers
from provisioner.resolver.versions import cc_from_text
from provisioner.steps.base import DependsOnEarlier, StepFailed
from provisioner.steps.context import StepContext
from provisioner.transport.base import CommandResult, Transport
from provisioner.words import Words

PYPI_INDEX = "https://pypi.org/simple"


UV_PIN = "0.13.9"


BUILDING_MARKER = ".provisioner-building"


RUNTIME_FILE = "runtime.json"


META_DIR = ".provisioner"


#: uv_dir's "made by us" marker (written before the venv that holds uv)
UV_MARKER = ".provisioner-uv"


BUILT_BY = "gpu-provisioner"


VERIFY_SCRIPT = r"""
import json, platform, sys
out = {"python": platform.python_version()}
try:
    import torch
except Exception as exc:
    print(json.dumps({"error": f"import torch failed: {exc}"})); sys.exit(0)
out["torch"] = torch.__version__
out["cuda"] = torch.version.cuda
out["available"] = bool(torch.cuda.is_available())
out["count"] = torch.cuda.device_count() if out["available"] else 0
out["arch_list"] = list(torch.cuda.get_arch_list()) if out["available"] else []
out["capabilities"] = [".".join(map(str, torch.cuda.get_device_capability(i))) for i in range(out["count"])]
out["matmul_ok"] = []
for i in range(out["count"]):
    try:
        a = torch.ones((64, 64), device=f"cuda:{i}")
        out["matmul_ok"].append(bool(float((a @ a).sum().item()) == 64.0 * 64 * 64))
    except Exception as exc:  # report, do not crash
        out["matmul_ok"].append(False); out.setdefault("errors", []).append(f"cuda:{i}: {exc}")
print(json.dumps(out))
"""


class TorchCheck(TypedDict, total=False):
    """What VERIFY_SCRIPT prints (one JSON object): `error` alone when torch does not import."""

    python: str
    torch: str
    cuda: str | None
    available: bool
    count: int
    arch_list: list[str]
    capabilities: list[str]
    matmul_ok: list[bool]
    errors: list[str]
    error: str


def arch_covers(arch_list: list[str], cc: str) -> bool:
    """Whether torch's arch list runs on compute capability `cc` (`resolver.compat.arch_list_covers`)."""
    return arch_list_covers(arch_list, cc_from_text(cc))


class VenvProbe(TypedDict, total=False):
    """What the probe script found at the venv path (`parse_state`)."""

    state: str  # absent | empty | notdir | incomplete | foreign | built
    real: str  # the venv path resolved in the container
    uv_real: str  # uv_dir resolved
    uv_path_version: str | None
    uv_dir_version: str | None
    venv_python: str | None
    runtime: JsonObject  # runtime.json as read (a built venv of ours)
    lock: JsonObject | None  # .provisioner/lock.json as read


def parse_state(text: str) -> VenvProbe:
    """Output of the venv probe script → {"state": absent|empty|notdir|incomplete|foreign|built, ...,
    "real": the venv path resolved in the container, "uv_real": uv_dir resolved}."""
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            sections.setdefault(current, [])
        elif current:
            sections[current].append(line)
    state = (sections.get("state") or ["foreign"])[0].strip()
    real = (sections.get("real") or [""])[0].strip()
    uv_real = (sections.get("uvreal") or [""])[0].strip()
    out: VenvProbe = {"state": state, "real": real, "uv_real": uv_real,
                      "uv_path_version": uv_version("\n".join(sections.get("uvpath", []))),
                      "uv_dir_version": uv_version("\n".join(sections.get("uvdir", []))),
                      "venv_python": (sections.get("pyver") or [""])[0].strip() or None}
    if state == "built":
        try:
            runtime = json.loads("\n".join(sections.get("runtime", [])))
        except json.JSONDecodeError:
            runtime = None
        if not isinstance(runtime, dict) or runtime.get("built_by") != BUILT_BY:
            return {"state": "foreign", "real": real, "uv_real": uv_real}
        out["runtime"] = runtime
        try:
                lock = json.loads("\n".join(sections.get("lock", []))) or None
        except json.JSONDecodeError:
            lock = None
        out["lock"] = lock if isinstance(lock, dict) else None
    return out


#: prints the running Python's full version (3.12.3)
PY_VERSION = "import platform; print(platform.python_version())"
_UV_VERSION_RE = re.compile(r"^uv ([0-9]+\.[0-9]+\.[0-9]+)\b", re.MULTILINE)


def uv_version(text: str) -> str | None:
    """`uv --version` output ("uv 0.13.9 (abc123 2025-10-01)") → "0.13.9"; None when uv did not answer."""
    m = _UV_VERSION_RE.search(text)
    return m.group(1) if m else None


def recorded_toolchain(resolved: Resolved) -> JsonObject:
    """The playbook's `resolved.toolchain` ({"uv": {"version", "source"}, "python": {"version", "provided_by"}})."""
    return dict(resolved.toolchain or {})


def _resolve_lines(var: str, section: str) -> list[str]:
    """Print `@@section` and the variable's path resolved in the container (every symlink followed; the
    last components need not exist): GNU `realpath -m`, else `readlink -f` (busybox)."""
    return [f"echo @@{section}", f'realpath -m -- "${var}" 2>/dev/null || readlink -f -- "${var}" 2>/dev/null || echo']


def probe_script(path: str, uv_dir: str) -> str:
    """A read-only shell script that prints what is at the venv `path` (see `parse_state`), the venv path and
    uv_dir resolved in the container, and the versions of the uv on PATH and in uv_dir."""
    p = quoting.join([path])
    return quoting.script(
        f"p={p}",
        f"u={quoting.join([uv_dir])}",
        *_resolve_lines("p", "real"),
        *_resolve_lines("u", "uvreal"),
        "echo @@uvpath; uv --version 2>/dev/null || true",
        'echo @@uvdir; "$u/bin/uv" --version 2>/dev/null || true',
        'if [ ! -e "$p" ]; then echo @@state; echo absent; exit 0; fi',
        'if [ ! -d "$p" ]; then echo @@state; echo notdir; exit 0; fi',
        'if [ -z "$(ls -A "$p")" ]; then echo @@state; echo empty; exit 0; fi',
        f'if [ -e "$p/{BUILDING_MARKER}" ]; then echo @@state; echo incomplete; exit 0; fi',
        f'if [ -f "$p/{RUNTIME_FILE}" ]; then',
        '  if [ ! -x "$p/bin/python" ]; then echo @@state; echo incomplete; exit 0; fi',
        f'  echo @@pyver; "$p/bin/python" -c {quoting.join([PY_VERSION])} 2>/dev/null || true',
        f'  echo @@state; echo built; echo @@runtime; cat "$p/{RUNTIME_FILE}"; echo',
        f'  echo @@lock; cat "$p/{META_DIR}/lock.json" 2>/dev/null; echo; exit 0',
        "fi",
        "echo @@state; echo foreign",
    )


def _lines_match(result: CommandResult, *needles: str) -> bool:
    return any(n.lower() in line.lower() for line in result.lines for n in needles)


_NO_BUILD = ("no solution found", "no version of", "not found in the package registry",
             "was not found in the provided package locations", "unsatisfiable", "no matching distribution")


#: uv's words for bytes that are not the hash they should have (crates/uv-distribution/src/error.rs
#: `MismatchedHashes`: "Hash mismatch for `{distribution}`"; uv-client `MetadataHashMismatch`: "Hash mismatch for
#: package metadata at `{url}`"); "hashes do not match": pip's wording
_HASH_MISMATCH = ("hash mismatch", "hashes do not match")


_UNREACHABLE = ("failed to fetch", "error sending request", "dns error", "connection refused", "client error (connect)",
                "network unreachable")


def install_failure(what: str, reqs: list[str], index_desc: str, result: CommandResult,
                     words: Words | None = None) -> StepFailed:
    """A uv failure as advice: hash mismatch, missing build (resolver_failure), unreachable index, other.

    A hash mismatch is named first: uv reports it as the cause of a download's failure (uv 0.13.9:
    "Failed to download `torch==…`" / "cause: Hash mismatch for `torch==…`"; its client's "Failed to fetch: `url`"
    may head the chain too), and those words must not read as an unreachable index."""
    words = words or Words()
    if _lines_match(result, *_HASH_MISMATCH):
        return StepFailed(f"a file from {index_desc} does not match the sha256 its index links or the lock holds "
                          f"({what})",
                          fix="the index served other bytes than the hash it links or the lock recorded; check the "
                              "mirror, or remove resolved.venv_lock from the playbook to resolve afresh", result=result)
    if _lines_match(result, *_NO_BUILD):
        fix = ("check torch.resolve's choice against the index (a mirror may lack this CUDA variant), "
               "set index_url: to an index that carries it, or pin another torch version") if what == "torch" else \
              ("check the names and versions in extra_packages; an extra that needs another torch than the one "
               "installed cannot be added to this venv")
        return StepFailed(f"resolver_failure: the index {index_desc} has no build satisfying {' '.join(reqs)} "
                          f"for this Python/platform ({what} packages)", fix=fix, result=result, exit_code=ExitCode.NO_SOLUTION)
    if _lines_match(result, *_UNREACHABLE):
        return StepFailed(f"cannot reach the package index {index_desc} from the container ({what})",
                          fix="check the container's network/DNS and proxy settings, or point index_url: at a "
                              "reachable mirror", result=result, exit_code=ExitCode.UNREACHABLE)
    if _lines_match(result, "No space left on device", "os error 28"):
        return StepFailed(f"the container ran out of disk space while installing the {what} packages "
                          "(No space left on device)",
                          fix=words.field("lxc.create", "rootfs_size_gb", "grow the container's disk (the Container "
                                          "step grows it in place)") + f" or free space, {words.retry}: the "
                              "interrupted build is finished", result=result)
    return StepFailed(f"uv failed while installing the {what} packages", result=result)


async def probe_venv(ctx: StepContext, path: str, uv_dir: str) -> tuple[VenvProbe, CommandResult]:
    """What is at the venv `path` in the container (`parse_state`) and the probe's result: one read-only
    command. In a plan, a container that does not run yet is an earlier step's to make (DependsOnEarlier)."""
    result = await ctx.container().run(["sh", "-c", probe_script(path, uv_dir)], timeout=60, quiet=True)
    if not result.ok:
        if ctx.mode == "plan":
            raise DependsOnEarlier("the container is not running yet")
        raise StepFailed(f"cannot inspect {path} in CT {ctx.vmid}", result=result)
    return parse_state(result.output), result


@dataclass(frozen=True)
class UvTool:
    """The uv a venv is built with: its path in the container, its version and where it came from."""

    path: str
    version: str
    source: str


#: where a uv installed by `ensure_uv` comes from, as recorded in runtime.json's toolchain
UV_DIR_SOURCE = "uv_dir (installed by gpu-provisioner)"


async def ensure_uv(ctx: StepContext, *, uv_dir: str, pypi: str) -> UvTool:
    """uv from PATH, else the one we installed before, else pip-install the pinned uv (from `pypi`: PyPI or the
    site's PyPI mirror, never from the PyTorch index) into a venv at uv_dir. uv_dir is made by us
    (its marker `.provisioner-uv` first) or left alone: a directory of someone else's is never cleared.
    With a uv version in the playbook's `resolved.toolchain`, only that version is used: a uv of another
    version on PATH is passed over and the recorded one installed into uv_dir."""
    ct = ctx.container()
    recorded = object_at(recorded_toolchain(ctx.resolved), "uv").get("version")
    pin = str(recorded) if recorded else UV_PIN
    uv_bin = f"{uv_dir}/bin/uv"
    for cmd, source in ((["sh", "-c", "command -v uv"], "container PATH"),
                        (["sh", "-c", f"test -x {quoting.join([uv_bin])} && echo {quoting.join([uv_bin])}"],
                         UV_DIR_SOURCE)):
        where = await ct.run(cmd, timeout=60, quiet=True)
        path = next((ln.strip() for ln in where.lines if ln.strip().startswith("/")), None)
        if not where.ok or path is None:
            continue
        version = uv_version((await ct.run([path, "--version"], timeout=60, quiet=True)).output)
        if version and (not recorded or version == pin):
            return UvTool(path, version, source)
    return await _install_uv(ctx, uv_dir, pypi, pin)


async def _install_uv(ctx: StepContext, uv_dir: str, pypi: str, pin: str) -> UvTool:
    ct = ctx.container()
    uv_bin = f"{uv_dir}/bin/uv"
    d = quoting.join([uv_dir])
    mark = quoting.join([f"{uv_dir}/{UV_MARKER}"])
    made = await ct.run(["sh", "-c", quoting.script(
        f'if [ -e {d} ] && [ ! -e {mark} ] && [ -n "$(ls -A {d} 2>/dev/null)" ]; then',
        f"  echo 'uv_dir {uv_dir} exists and was not made by gpu-provisioner' >&2; exit 3",
        "fi",
        f"mkdir -p {d} && : > {mark} || exit 1",
        # no --clear: a venv that python3-venv could not finish is completed in place
        f"python3 -m venv {d} || {{ export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && "
        f"apt-get install -y -qq python3-venv && python3 -m venv {d}; }}")], timeout=900)
    if made.exit_status == 3:
        raise StepFailed(f"uv {pin} is not installed in the container and uv_dir {uv_dir} holds files "
                         "gpu-provisioner did not make; it is left untouched", result=made, exit_code=ExitCode.USAGE,
                         fix="install uv in the container (on PATH), or set uv_dir: to an empty or new directory")
    if not made.ok:
        raise StepFailed(f"uv {pin} is not installed in the container and no Python venv could be made to install it",
                         result=made, fix="install python3 and python3-venv in the container, or install uv")
    pip = await ct.run([f"{uv_dir}/bin/pip", "install", "--disable-pip-version-check",
                        "--index-url", pypi, f"uv=={pin}"], timeout=900)
    if not pip.ok:
        raise install_failure("uv", [f"uv=={pin}"], pypi, pip, ctx.words)
    version = await ct.run([uv_bin, "--version"], timeout=60, quiet=True)
    if not version.ok or uv_version(version.output) != pin:
        raise StepFailed(f"the uv installed into {uv_dir} does not run as uv {pin}", result=version)
    return UvTool(uv_bin, pin, UV_DIR_SOURCE)


async def smoke_test(ct: Transport, venv: str) -> TorchCheck:
    """VERIFY_SCRIPT run with the venv's Python: what torch reports (a JSON object). A crash, or an `error`
    (torch does not import), fails the step."""
    result = await ct.run([f"{venv}/bin/python", "-c", VERIFY_SCRIPT], timeout=600, quiet=True)
    try:
        info = json.loads(result.lines[-1])
    except (json.JSONDecodeError, IndexError):
        raise StepFailed("the torch check in the venv crashed", result=result) from None
    if not isinstance(info, dict):
        raise StepFailed("the torch check in the venv printed no JSON object", result=result)
    if "error" in info:
        raise StepFailed(str(info["error"]), result=result)
    return cast(TorchCheck, info)  # VERIFY_SCRIPT's own output
