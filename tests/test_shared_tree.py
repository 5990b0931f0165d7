"""tests/support/shared_tree.py: a golden-node copy shares the venv's packages and the uv cache (hardlinks) and
owns everything else; an in-place rewrite of a shared file is caught."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.support import shared_tree


def _tree(root: Path) -> dict[str, Path]:
    rootfs = root / "lab" / "ct" / "200" / "rootfs"
    venv = rootfs / "opt" / "torch-venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    cache = rootfs / "root" / ".cache" / "uv"
    paths = {
        "pyvenv": venv / "pyvenv.cfg", "runtime": venv / "runtime.json", "record": venv / ".provisioner" / "lock.json",
        "module": site / "torch" / "__init__.py", "cached": cache / "archive-v0" / "abc" / "torch" / "__init__.py",
        "cache_lock": cache / ".lock", "log": root / "lab" / "lab.log", "conf": root / "lab" / "ct" / "200" / "conf",
    }
    for name, path in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{name}\n")
    os.link(paths["cached"], site / "torch" / "linked.py")  # uv's hardlink from its cache into the venv
    (site / "torch" / "alias").symlink_to("__init__.py")
    os.mkfifo(root / "lab" / "pipe")
    os.chmod(paths["log"], 0o640)
    return paths


def test_a_copy_shares_the_venv_packages_and_the_uv_cache_and_owns_the_rest(tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    paths = _tree(golden)
    copy = tmp_path / "copy"
    shared_tree.copy_sharing(golden, copy)

    def twin(p: Path) -> Path:
        return copy / p.relative_to(golden)

    for name in ("module", "cached"):  # the same inode: no bytes written
        assert os.stat(paths[name]).st_ino == os.stat(twin(paths[name])).st_ino, name
    for name in ("pyvenv", "runtime", "record", "cache_lock", "log", "conf"):  # an inode of its own, same bytes
        a, b = os.stat(paths[name]), os.stat(twin(paths[name]))
        assert a.st_ino != b.st_ino and twin(paths[name]).read_text() == f"{name}\n", name
        assert (stat.S_IMODE(a.st_mode), a.st_uid, a.st_mtime_ns) == (stat.S_IMODE(b.st_mode), b.st_uid, b.st_mtime_ns)
    assert stat.S_ISFIFO(os.lstat(copy / "lab" / "pipe").st_mode)
    assert os.lstat(copy / "lab" / "pipe").st_ino != os.lstat(golden / "lab" / "pipe").st_ino
    linked = twin(paths["module"]).parent / "linked.py"
    assert os.stat(linked).st_ino == os.stat(twin(paths["cached"])).st_ino  # the venv-cache link is kept
    assert os.readlink(twin(paths["module"]).parent / "alias") == "__init__.py"
    assert not list(copy.rglob("*.unshare~"))

    # what the copy's lab writes in place stays in the copy
    with open(twin(paths["log"]), "a") as fh:
        fh.write("copy's lab\n")
    twin(paths["runtime"]).write_text("rewritten\n")
    assert paths["log"].read_text() == "log\n" and paths["runtime"].read_text() == "runtime\n"


def test_an_in_place_rewrite_of_a_shared_file_is_named(tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    paths = _tree(golden)
    before = shared_tree.fingerprint(golden)
    assert str(paths["module"].relative_to(golden)) in before and str(paths["cached"].relative_to(golden)) in before
    assert str(paths["runtime"].relative_to(golden)) not in before  # the venv's own records are not shared
    copy = tmp_path / "copy"
    shared_tree.copy_sharing(golden, copy)
    assert shared_tree.changed(golden, before) == []
    # a new file, an unlinked one and a reinstall (new inode) in the copy leave the golden node as it was
    (copy / paths["module"].relative_to(golden)).unlink()
    (copy / paths["module"].relative_to(golden)).write_text("reinstalled\n")
    assert shared_tree.changed(golden, before) == [] and paths["module"].read_text() == "module\n"
    # rewritten in place through a copy: the golden node's file changed, and it is named
    target = copy / paths["cached"].relative_to(golden)
    stamp = os.stat(target).st_mtime_ns
    with open(target, "r+") as fh:
        fh.write("CHANGED")
    os.utime(target, ns=(stamp, stamp + 1_000_000_000))
    linked = paths["module"].parent / "linked.py"  # the venv's hardlink to that cache entry: the same file
    assert shared_tree.changed(golden, before) == sorted([str(paths["cached"].relative_to(golden)),
                                                          str(linked.relative_to(golden))])
