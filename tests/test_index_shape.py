"""venv.build against the lab's indexes shaped like the real ones (`provisioner.lab.index_shape`), with real uv.

- The PyTorch index carries numpy, pillow, filelock, jinja2, … in old versions and links every file on a
  second host; PyPI has the current ones. `extra_packages: [numpy>=2.3, pillow>=11.3, torchmetrics]`
  (torchmetrics itself requires torch) builds: numpy and pillow from PyPI, the same torch as the torch group
  from the PyTorch index. The same request with the PyTorch index as an extra index (the way uv's first-index
  rule breaks it, astral-sh/uv#7554) fails "No solution found" with real uv: the shape makes the difference.
- Scenario `changed-bytes` (pytorch/vision#9243, pytorch/pytorch#195141) fails with a message that names the file, the host it came
  from and the fix; so does `hashless-links` (real uv hashes what it downloads: nothing vouches for those
  bytes) until the playbook's `trusted_hashes` names the sha256.

Commands reach the "container" through the test-only `pct` stand-in (tests/support/fake_pct.py); the lab's
torch answers CUDA queries from /dev/nvidia* nodes this machine lacks, so the smoke test is off here (the lab
end-to-end tests run it).
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from provisioner.events import Message
from provisioner.exitcodes import ExitCode
from provisioner.lab import index_shape, wheels
from provisioner.steps.venv_build import parse_hash_mismatch
from provisioner.steps.venv_common import install_failure
from provisioner.transport.base import CommandResult
from tests.support.fake_pct import Node, known_gpus, real_uv, reference_gpus, run_playbook
from tests.support.require import require
from tests.support.standin_index import freeze, make_playbook


class Lab:
    def __init__(self, base: Path) -> None:
        self.scenarios: list[str] = []
        from provisioner.lab.sandbox import discover_pythons
        from provisioner.lab.torch_supply import TorchSupplyError, supply
        from tests.support.labcache import with_shared_wheels

        try:
            self.supplied = supply(discover_pythons(), progress=False)
        except TorchSupplyError as exc:
            require(False, str(exc))
            raise
        cache = with_shared_wheels(base / "cache") / "lab"
        self.wheel_root = wheels.build_index(cache, self.supplied)
        self.server = index_shape.ShapedIndexServer(self.wheel_root,
                                                    index_shape.build_side(cache),
                                                    lambda: self.scenarios).start()

    def settings(self) -> dict[str, Any]:
        """The lab's site profile for venv.build: its PyTorch index and PyPI mirrors."""
        return {"venv.build": {"index_mirror": self.server.base_url.rstrip("/"),
                               "pypi_mirror": self.server.pypi_url, "smoke_test": False}}


def supplied_numpy_version(lab: Lab) -> str:
    """The version of the real numpy wheel the lab was supplied with (what its PyPI mirror serves)."""
    assert lab.supplied.numpy is not None
    version = lab.supplied.numpy.name.split("-")[1]
    assert Version(version) >= Version("2.3"), version  # `numpy>=2.3` below needs a numpy that new
    return version


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    shaped = Lab(tmp_path / "lab")
    yield shaped
    shaped.server.stop()


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    require(real_uv() is not None, "uv is not on PATH")
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    return Node(tmp_path / "node")


def _run(node: Node, lab: Lab, venv: Path, extras: list[str]) -> Any:
    return run_playbook(node, make_playbook(venv, build={"extra_packages": extras}),
                        state=known_gpus(reference_gpus(2)), settings=lab.settings())


def test_the_index_links_files_on_another_host_and_carries_old_side_packages(lab: Lab) -> None:
    page = urllib.request.urlopen(f"{lab.server.base_url}cu128/numpy/").read().decode()
    assert "numpy-1.26.4-py3-none-any.whl" in page and "numpy-2.1.2-py3-none-any.whl" in page
    assert "numpy-2.3" not in page
    assert f'href="{lab.server.files.base_url}/whl/cu128/numpy-1.26.4' in page
    assert lab.server.files.base_url.split(":")[1] != lab.server.base_url.split(":")[1] or \
        lab.server.files.port != lab.server.port
    # PyPI's numpy is the real wheel the lab was supplied with (torch_supply: what the real torch imports)
    pypi = urllib.request.urlopen(f"{lab.server.pypi_url}/numpy/").read().decode()
    assert lab.supplied.numpy is not None
    assert lab.supplied.numpy.name in pypi and "#sha256=" in pypi, pypi


async def test_numpy_2_3_and_a_package_needing_torch_build_from_pypi_with_the_same_torch(
        tmp_path: Path, lab: Lab, node: Node) -> None:
    venv = tmp_path / "ct" / "opt" / "venv"
    out = await _run(node, lab, venv, ["numpy>=2.3", "pillow>=11.3", "torchmetrics"])
    assert out.result.statuses == ["ok", "changed"], out.finished("venv.build").message
    frozen = set(freeze(venv))
    numpy = f"numpy=={supplied_numpy_version(lab)}"
    assert {"torch==2.11.0+cu128", "torchvision==0.26.0+cu128", numpy, "pillow==11.3.0", "torchmetrics==1.8.2",
            "packaging==25.0"} <= frozen, frozen
    lock = out.recorder.playbook().resolved["venv_lock"]["groups"]
    assert "torch==2.11.0+cu128" in lock["extra"]["text"] and numpy in lock["extra"]["text"]

    # The way that breaks (the PyTorch index as an extra index): real uv's first-index rule. pillow: the index
    # carries it in old versions only (10.2.0, 11.0.0), PyPI has 11.3.0 (numpy is no witness here: the index
    # also serves the real numpy the lab was supplied with, whatever its version)
    uv = real_uv()
    assert uv is not None
    req = tmp_path / "req.in"
    req.write_text("pillow>=11.3\n")
    first_index = subprocess.run(
        [uv, "pip", "compile", str(req), "--python", str(venv / "bin/python"), "--no-header", "--index-url",
         lab.server.pypi_url, "--extra-index-url", f"{lab.server.base_url}cu128"],
        capture_output=True, text=True, env=node.env(), check=False)
    assert first_index.returncode != 0 and "No solution found" in first_index.stderr, first_index.stderr


OUTPUTS = Path(__file__).parent / "fixtures" / "outputs"


def _uv_failed(command: str, fixture: str) -> CommandResult:
    return CommandResult(command, 1, (OUTPUTS / fixture).read_text().splitlines())


def test_a_hash_mismatch_is_named_as_one_not_as_an_unreachable_index() -> None:
    """uv's real words (uv 0.13.9, captured: tests/fixtures/outputs/README.md) are classified by what they say;
    a mismatch reported under a "Failed to fetch" heading is still a mismatch (the heading is uv's: older uv's
    installer wrapped it as "Failed to fetch wheel: {0}", crates/uv-installer/src/preparer.rs, around the
    distribution error "Hash mismatch for `{distribution}`\n\nExpected:\n{expected}\n\nComputed:\n{actual}",
    crates/uv-distribution/src/error.rs `MismatchedHashes`)."""
    index = "http://127.0.0.1:8080/whl/cu128"
    real = _uv_failed("uv pip install --require-hashes", "uv_pip_install_hash_mismatch_0.13.9.txt")
    mismatch = parse_hash_mismatch(real.output)
    assert mismatch == {"name": "torch", "version": "2.11.0+cu128",
                        "expected": ["78cd881197441a35a2bc88f3427c9dbe616f3d4a28547ce9fdda2a3a3b388254"],
                        "computed": "c4ec62a9f82173d1499e8fe030d5fa4d1245e0de3def15885bef852c012f67c6"}, mismatch
    named = install_failure("torch", ["torch==2.11.0+cu128"], index, real)
    assert "does not match the sha256" in named.message and named.exit_code != ExitCode.UNREACHABLE, named.message

    headed = CommandResult("uv pip install --require-hashes", 2, [
        "error: Failed to prepare distributions", "  Caused by: Failed to fetch wheel: torch==2.11.0+cu128",
        *real.lines[4:]])  # the same mismatch under the older installer's heading
    assert parse_hash_mismatch(headed.output) == mismatch
    named = install_failure("torch", ["torch==2.11.0+cu128"], index, headed)
    assert "does not match the sha256" in named.message and "cannot reach" not in named.message, named.message

    # an index that does not answer in time is still "cannot reach" (the failure this test's lab once caused)
    timeout = _uv_failed("uv pip compile", "uv_pip_compile_timeout_0.13.9.txt")
    assert parse_hash_mismatch(timeout.output) is None
    unreachable = install_failure("torch", ["torch==2.11.0+cu128"], index, timeout)
    assert unreachable.message.startswith(f"cannot reach the package index {index}"), unreachable.message
    assert unreachable.exit_code == ExitCode.UNREACHABLE


def test_changed_bytes_are_served_from_the_files_hosts_own_copy(tmp_path: Path) -> None:
    """Scenario changed-bytes never writes beside the wheel it alters (the wheel index is shared by every lab
    of a test run): its copy lives in the files host's own directory, removed when the host stops."""
    shelf = tmp_path / "wheels" / "cu128"
    wheel = wheels.make_wheel(shelf, "torch", "2.11.0+cu128", "cp311-cp311-manylinux_2_28_x86_64",
                              {"torch/__init__.py": b"__version__ = '2.11.0+cu128'\n"})
    before = sorted(p.name for p in shelf.iterdir())
    server = index_shape.ShapedIndexServer(tmp_path / "wheels", index_shape.build_side(tmp_path / "side"),
                                           lambda: ["changed-bytes"]).start()
    try:
        assert server.files.changed_dir is None  # nothing made until a changed file is asked for
        changed = urllib.request.urlopen(f"{server.files.base_url}/whl/cu128/{wheel.name}").read()
        own = server.files.changed_dir
        assert own is not None and (own / wheel.name).is_file() and not own.is_relative_to(tmp_path / "wheels")
    finally:
        server.stop()
    assert hashlib.sha256(changed).hexdigest() != hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(io.BytesIO(changed)) as z, zipfile.ZipFile(wheel) as original:  # still a wheel: one file more
        assert set(z.namelist()) > set(original.namelist()) and z.testzip() is None, z.namelist()
    assert sorted(p.name for p in shelf.iterdir()) == before
    assert not own.exists()


async def test_changed_bytes_names_the_file_the_host_and_the_fix(tmp_path: Path, lab: Lab, node: Node) -> None:
    lab.scenarios = ["changed-bytes"]
    out = await _run(node, lab, tmp_path / "ct" / "opt" / "venv", ["nvidia-ml-py"])
    assert out.result.statuses == ["ok", "failed"]
    message = out.finished("venv.build").message
    assert "torch-2.11.0+cu128-" in message, message
    files_host = lab.server.files.base_url.split("//")[1]
    assert f"torch-2.11.0+cu128-cp{sys.version_info[0]}{sys.version_info[1]}-" in message
    assert f"from {files_host}" in message, message
    assert "publishes a wrong hash" in message and "not your mirror" in message, message
    assert "fix: pin another torch version or Python" in message and "check the mirror" not in message, message

    # Replayed from a lock recorded before the file changed (resolved.venv_lock): the index still links the old
    # hash, so the cause is the same and named the same way (not "the lock is stale").
    lab.scenarios = []
    good = await _run(node, lab, tmp_path / "ct" / "opt" / "venv-good", ["nvidia-ml-py"])
    assert good.result.statuses == ["ok", "changed"]
    lab.scenarios = ["changed-bytes"]
    node.extra_env["UV_CACHE_DIR"] = str(tmp_path / "another-uv-cache")  # another container: nothing cached
    recorded = good.recorder.playbook()
    again = await run_playbook(node, make_playbook(tmp_path / "ct" / "opt" / "venv-2",
                                                   build={"extra_packages": ["nvidia-ml-py"]},
                                                   resolved=recorded.resolved),
                               state=known_gpus(reference_gpus(2)), settings=lab.settings())
    message = again.finished("venv.build").message
    assert f"from {files_host}" in message and "torch-2.11.0+cu128-" in message, message
    assert "publishes a wrong hash" in message, message


async def test_hashless_links_are_refused_until_the_playbook_trusts_the_sha256(tmp_path: Path, lab: Lab,
                                                                                 node: Node) -> None:
    """Links without `#sha256=` for some of torch's files (pytorch/pytorch#153469, #164347): real uv 0.13.9
    hashes the bytes it downloads, so a lock would pin a hash nobody published. venv.build refuses the file,
    naming it, the host it came from and the fix (the sha256 to check and the trusted_hashes line); with that
    line the build succeeds and the lock pins exactly that sha256; a trusted sha256 the bytes do not have is
    refused again."""
    lab.scenarios = ["hashless-links"]
    page = urllib.request.urlopen(f"{lab.server.base_url}cu128/torch/").read().decode()
    links = re.findall(r'href="([^"]+)"', page)
    assert links and all(("#sha256=" in link) == ("-cp310-" in link) for link in links), page  # only cp310 keeps its hash
    py = "cp" + "".join(map(str, sys.version_info[:2]))
    require(py != "cp310", "scenario hashless-links keeps cp310's hashes: this test needs another Python")
    served = next((lab.wheel_root / "cu128").glob(f"torch-*-{py}-*.whl"))
    sha = hashlib.sha256(served.read_bytes()).hexdigest()
    files_host = lab.server.files.base_url.split("//")[1]

    refused = await _run(node, lab, tmp_path / "ct" / "opt" / "venv", ["nvidia-ml-py"])
    assert refused.result.statuses == ["ok", "failed"], refused.finished("venv.build").message
    failed = refused.finished("venv.build")
    assert f"links {served.name} from {files_host} without a sha256" in failed.message, failed.message
    assert f"uv hashed the bytes it downloaded: sha256 {sha}" in failed.message, failed.message
    assert "fix: check the sha256 against a source you trust" in failed.message, failed.message
    assert f'trusted_hashes: {{{served.name}: "{sha}"}}' in failed.message, failed.message
    # the wizard's offer (shown, confirmed, then merged into the step's trusted_hashes): that file, that sha256
    assert failed.offer is not None and failed.offer.param == "trusted_hashes", failed
    assert failed.offer.add == {served.name: sha}
    assert any(files_host in line for line in failed.offer.confirm), failed.offer.confirm

    async def build(venv: Path, trusted: dict[str, str]) -> Any:
        return await run_playbook(node, make_playbook(venv, build={"extra_packages": ["nvidia-ml-py"],
                                                                   "trusted_hashes": trusted}),
                                  state=known_gpus(reference_gpus(2)), settings=lab.settings())

    venv = tmp_path / "ct" / "opt" / "venv-trusted"
    out = await build(venv, {served.name: f"sha256:{sha}"})
    assert out.result.statuses == ["ok", "changed"], out.finished("venv.build").message
    said = [e.text for e in out.events if isinstance(e, Message)]
    assert f"linked without a sha256, trusted by the playbook: {served.name} (sha256 {sha})" in said, said
    lock = out.recorder.playbook().resolved["venv_lock"]["groups"]["torch"]["text"]
    assert f"--hash=sha256:{sha}" in lock
    assert "torch==2.11.0+cu128" in freeze(venv)

    wrong = await build(tmp_path / "ct" / "opt" / "venv-wrong", {served.name: "0" * 64})
    assert wrong.result.statuses == ["ok", "failed"]
    message = wrong.finished("venv.build").message
    assert f"{served.name} from {files_host} is not the file the playbook trusts" in message, message
    assert f"its bytes have sha256 {sha}, trusted_hashes names {'0' * 64}" in message, message


def test_in_the_lab_numpy_from_pypi_with_the_same_torch_and_a_changed_file_named(tmp_path: Path) -> None:
    """The same in a lab container (its sandbox, its own Python): the extras build; in a lab with scenario
    changed-bytes a fresh container's venv fails with the file, the files host and the fix (a container whose
    uv cache already holds the good file would not even notice: uv installs from its cache); with scenario
    hashless-links it fails with the file, the files host and the trusted_hashes line to add."""
    import json
    import os

    from tests.support.labrun import LabRun, lab_importable, write_test_playbook

    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    require(lab_importable(), "the embedded lab is not in this build")
    extras = {"extra_packages": ["nvidia-ml-py", "numpy>=2.3", "torchmetrics"]}
    book = write_test_playbook(tmp_path / "pb.yaml", upto="venv.build", params={"venv.build": extras})
    lab = LabRun(tmp_path / "a", Path(os.environ.get("PROVISIONER_CACHE_DIR", str(tmp_path / "lab-cache"))))
    with lab.running():
        run = lab.replay(book)
        assert run.rc == 0, run.describe()
        runtime = json.loads((lab.root / "ct" / "200" / "rootfs" / "opt" / "torch-venv" / "runtime.json").read_text())
        numpy = [p for p in runtime["packages"] if p.startswith("numpy==")]
        assert len(numpy) == 1 and Version(numpy[0].split("==")[1]) >= Version("2.3"), runtime
        assert {"torchmetrics==1.8.2", "torch==2.11.0+cu128"} <= set(runtime["packages"]), runtime


    # A fresh container (no uv cache holding the good file) on a lab whose index serves the changed file.
    changed = LabRun(tmp_path / "b", lab.lab_cache, scenarios=["changed-bytes"])
    with changed.running():
        failed = changed.replay(book)
        assert failed.rc != 0 and failed.status_of("venv.build") == "failed", failed.describe()
        message = failed.message_of("venv.build")
        conn = json.loads((changed.root / "private" / "connection.json").read_text())
        files_host = conn["files_url"].split("//")[1]
        assert "torch-2.11.0+cu128-cp" in message and f"from {files_host}" in message, message
        assert "publishes a wrong hash" in message and "fix:" in message, message

        # The same container on a lab whose index links torch's files without a sha256 (cp310's keep theirs)
        changed.set_scenarios("hashless-links")
        unhashed = changed.replay(book)
        assert unhashed.rc != 0 and unhashed.status_of("venv.build") == "failed", unhashed.describe()
        message = unhashed.message_of("venv.build")
        assert re.search(rf"links torch-2\.11\.0\+cu128-cp3(?!10)\d+-\S+\.whl from {re.escape(files_host)} "
                         r"without a sha256", message), message
        assert "fix: check the sha256 against a source you trust" in message and "trusted_hashes:" in message, message
        # the run log keeps the offer the wizard would show: the file uv downloaded and the sha256 it made
        offer = unhashed.steps()["venv.build"].get("offer") or {}
        assert offer.get("param") == "trusted_hashes" and len(offer.get("add", {})) == 1, offer
        assert next(iter(offer["add"])) in message and next(iter(offer["add"].values())) in message, offer
