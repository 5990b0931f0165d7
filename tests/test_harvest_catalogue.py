"""scripts/harvest_catalogue.py on a real git repository: a message a macro prints with more than its literal
(`printed_as`), regenerating some entries while keeping the others (`--only`), and `--check` comparing wordings."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _harvester() -> ModuleType:
    spec = importlib.util.spec_from_file_location("harvest_catalogue", ROOT / "scripts" / "harvest_catalogue.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["harvest_catalogue"] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


def _repo(tmp_path: Path, text: str) -> Path:
    """A git repository whose one commit (tagged 1.0) holds nvstatuscodes.h with `text`; its git directory."""
    work = tmp_path / "work"
    (work / "inc").mkdir(parents=True)
    (work / "inc" / "nvstatuscodes.h").write_text(text, encoding="utf-8")
    env = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "."], [*env, "commit", "-q", "-m", "codes"], ["tag", "1.0"]):
        subprocess.run(["git", *args], cwd=work, check=True, capture_output=True)
    return work / ".git"


def test_a_status_code_is_recorded_as_the_driver_prints_it(tmp_path: Path) -> None:
    h = _harvester()
    gitdir = _repo(tmp_path, 'NV_STATUS_CODE(NV_ERR_RESET_REQUIRED,                  0x00000062, "Reset required")\n')
    spec = h.Spec("nvrm.status_reset_required", "nvidia.ko", "needs a reset", repo="x/y", locate="Reset required",
                  paths=("inc/nvstatuscodes.h",), printed_as="{} [NV_ERR_RESET_REQUIRED]")
    found = h.harvest_repo(gitdir, [spec], 4)["nvrm.status_reset_required"]
    assert "Reset required [NV_ERR_RESET_REQUIRED]" in found
    assert "1.0" in found["Reset required [NV_ERR_RESET_REQUIRED]"]


def _entry(eid: str, fmt: str, kind: str = "source") -> dict[str, object]:
    return {"id": eid, "format": fmt, "wordings": [{"format": fmt, "versions": ["1.0"]}],
            "source": {"kind": kind, "repo": "x/y", "path": None, "url": "u"}}


def test_only_regenerates_the_entries_asked_for_and_keeps_the_rest() -> None:
    h = _harvester()
    committed = {"schema": 1, "sources": {"a/b": "1", "x/y": "1"}, "entries": [_entry("a.one", "kept as harvested"),
                                                                    _entry("c.three", "three")]}
    fresh = {"schema": 1, "sources": {"x/y": "2"}, "entries": [_entry("a.one", "reworded", "recorded"),
                                                             _entry("b.two", "new"), _entry("c.three", "three v2")]}
    merged = h.merge(committed, fresh, ["b.", "c."])
    assert [e["id"] for e in merged["entries"]] == ["a.one", "b.two", "c.three"]  # the new one in SPECS order
    assert merged["entries"][0]["format"] == "kept as harvested"  # not asked for: its mirror may be absent here
    assert merged["entries"][2]["format"] == "three v2"
    assert merged["sources"] == {"a/b": "1", "x/y": "2"}  # the commit the regenerated entries were read at
    json.dumps(merged)  # still the catalogue's JSON


def test_check_compares_wordings_not_the_releases_sampled() -> None:
    h = _harvester()
    committed = {"entries": [_entry("a.one", "same"), _entry("b.two", "old words"), _entry("c.three", "x")]}
    more_tags = _entry("a.one", "same")
    more_tags["wordings"] = [{"format": "same", "versions": ["1.0", "2.0"]}]
    fresh = {"entries": [more_tags, _entry("b.two", "new words"), _entry("c.three", "y", "recorded")]}
    assert h.changed(committed, fresh) == ["b.two"]
