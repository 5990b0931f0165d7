"""`provisioner.steps.venv_links`: the links of a real PyTorch index page (tests/fixtures/index, anchors copied
from pytorch/pytorch#153469 and #181056) served on loopback and read by `LIST_LINKS` with this Python, as the
container reads them; which file a Python on a machine installs; which locked files carry no published
sha256, and how `trusted_hashes` settles them. The whole path against real uv is tests/test_index_shape.py."""

from __future__ import annotations

import pytest

from provisioner.playbook import PlaybookError, loads
from provisioner.steps.venv_build import VenvParams
from provisioner.steps.venv_links import (
    Listing,
    judge_unhashed,
    lock_entries,
    pick_file,
    unhashed_files,
)
from tests.support.index_page import AARCH64_270, DOWNLOADED, WIN_270_SHA, X86_270_SHA, _list, _lock, index  # noqa: F401  (fixtures among them)


def test_list_links_reads_the_page_and_names_a_page_it_cannot_read(index: str) -> None:
    import platform

    listing = _list(f"{index}/torch/", f"{index}/torchvision/")
    assert listing.machine == platform.machine()
    links = listing.pages[f"{index}/torch/"]
    assert [text for _, text in links][:3] == [AARCH64_270, "torch-2.7.0+cu128-cp310-cp310-manylinux_2_28_x86_64.whl",
                                              "torch-2.7.0+cu128-cp310-cp310-win_amd64.whl"]
    assert links[0][0] == "/whl/cu128/torch-2.7.0%2Bcu128-cp310-cp310-manylinux_2_28_aarch64.whl"
    assert list(listing.errors) == [f"{index}/torchvision/"] and "404" in listing.errors[f"{index}/torchvision/"]


def test_the_file_a_python_installs_on_its_machine_with_its_host_and_published_sha256(index: str) -> None:
    page = f"{index}/torch/"
    links = _list(page).pages[page]
    arm = pick_file(links, page, "torch", "2.7.0+cu128", "3.10", "aarch64")
    x86 = pick_file(links, page, "torch", "2.7.0+cu128", "3.10", "x86_64")
    assert arm is not None and x86 is not None
    assert (arm["file"], arm["sha256"], arm["host"]) == (AARCH64_270, "", index.split("/")[2])
    assert arm["url"] == f"http://{index.split('/')[2]}/whl/cu128/torch-2.7.0%2Bcu128-cp310-cp310-manylinux_2_28_aarch64.whl"
    assert (x86["sha256"], x86["file"].endswith("_x86_64.whl")) == (X86_270_SHA, True)
    r2 = pick_file(links, page, "torch", "2.11.0+cu128", "3.10", "x86_64")
    assert r2 is not None and (r2["host"], r2["sha256"]) == ("download-r2.pytorch.org", "")
    assert pick_file(links, page, "torch", "2.7.0+cu128", "3.12", "x86_64") is None  # cp310 files only
    assert pick_file(links, page, "torchvision", "2.7.0+cu128", "3.10", "x86_64") is None


def test_wheel_tags_stable_abi_free_threaded_and_compound_platforms() -> None:
    page = "https://download.pytorch.org/whl/cu128/torchao/"
    abi3 = [("torchao-0.15.0%2Bcu128-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
             "torchao-0.15.0+cu128-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl")]
    assert pick_file(abi3, page, "torchao", "0.15.0+cu128", "3.12", "x86_64") is not None  # abi3 from 3.10 on
    assert pick_file(abi3, page, "torchao", "0.15.0+cu128", "3.12", "aarch64") is None
    assert pick_file([(a.replace("cp310", "cp313"), b.replace("cp310", "cp313")) for a, b in abi3], page, "torchao",
                     "0.15.0+cu128", "3.12", "x86_64") is None  # needs 3.13
    ft = [("t/torch-2.9.0-cp313-cp313t-manylinux_2_28_x86_64.whl", "torch-2.9.0-cp313-cp313t-manylinux_2_28_x86_64.whl"),
          ("u/torch-2.9.0-cp313-cp313-manylinux_2_28_x86_64.whl", "torch-2.9.0-cp313-cp313-manylinux_2_28_x86_64.whl")]
    picked = pick_file(ft, "https://h/whl/torch/", "torch", "2.9.0", "3.13", "x86_64")
    assert picked is not None
    assert picked["url"] == "https://h/whl/torch/u/torch-2.9.0-cp313-cp313-manylinux_2_28_x86_64.whl"
    mac = [("torch-2.9.0-cp313-none-macosx_11_0_x86_64.whl", "torch-2.9.0-cp313-none-macosx_11_0_x86_64.whl")]
    assert pick_file(mac, "https://h/whl/torch/", "torch", "2.9.0", "3.13", "x86_64") is None  # not Linux
    pure = [("typing_extensions-4.15.0-py3-none-any.whl", "typing_extensions-4.15.0-py3-none-any.whl")]
    assert pick_file(pure, "https://h/", "typing-extensions", "4.15.0", "3.12", "aarch64") is not None


def test_lock_entries_read_uv_compile_output() -> None:
    text = ("# a comment\nnumpy==2.3.4 \\\n    --hash=sha256:" + "1" * 64 + " \\\n    --hash=sha256:" + "2" * 64
            + "\nTyping_Extensions==4.15.0 ; python_version >= '3.9' \\\n    --hash=sha256:" + "3" * 64 + "\n")
    assert lock_entries(text) == {"numpy": ("2.3.4", ["1" * 64, "2" * 64]),
                                  "typing-extensions": ("4.15.0", ["3" * 64])}


def test_an_unhashed_file_is_refused_until_trusted_with_the_sha256_uv_made(index: str) -> None:
    page = f"{index}/torch/"
    listing = _list(page)
    listing.machine = "aarch64"  # the container of pytorch/pytorch#153469
    lock = _lock(DOWNLOADED, X86_270_SHA, WIN_270_SHA)  # uv lists the published hashes and the one it made
    found = unhashed_files(lock, listing, index, "3.10")
    assert found == [{"name": "torch", "version": "2.7.0+cu128", "file": AARCH64_270, "host": index.split("/")[2],
                      "page": page, "computed": [DOWNLOADED]}]

    refused = judge_unhashed(found, {})
    assert refused["trusted"] == [] and len(refused["refused"]) == 1
    assert f"links {AARCH64_270} from {index.split('/')[2]} without a sha256" in refused["refused"][0]
    assert f"uv hashed the bytes it downloaded: sha256 {DOWNLOADED}" in refused["refused"][0]
    assert f'trusted_hashes: {{{AARCH64_270}: "{DOWNLOADED}"}}' in refused["fix"]
    # what the wizard offers to trust (after showing it): the file, its host and page, the sha256 uv made
    assert refused["offer"] is not None and refused["offer"].add == {AARCH64_270: DOWNLOADED}
    assert refused["offer"].param == "trusted_hashes"
    assert refused["offer"].confirm[:3] == [AARCH64_270, f"  from {index.split('/')[2]}, linked by {page} without a sha256",
                                      f"  sha256 of the bytes downloaded: {DOWNLOADED}"]

    assert judge_unhashed(found, {AARCH64_270: DOWNLOADED}) == {
        "trusted": [f"{AARCH64_270} (sha256 {DOWNLOADED})"], "refused": [], "fix": "", "offer": None}
    other = judge_unhashed(found, {AARCH64_270: "0" * 64})
    assert other["trusted"] == [] and "is not the file the playbook trusts" in other["refused"][0]
    assert f"its bytes have sha256 {DOWNLOADED}, trusted_hashes names {'0' * 64}" in other["refused"][0]
    assert other["offer"] is not None and other["offer"].add == {AARCH64_270: DOWNLOADED}  # replaces the wrong entry...
    assert f"  (trusted_hashes names {'0' * 64}: replaced)" in other["offer"].confirm
    # ...and the offer, merged into trusted_hashes, settles the verdict
    assert judge_unhashed(found, {AARCH64_270: "0" * 64, **other["offer"].add})["refused"] == []
    # a file whose lock holds several unpublished hashes has no one sha256 to trust: nothing is offered
    two = judge_unhashed([{**found[0], "computed": [DOWNLOADED, "6" * 64]}], {})
    assert two["refused"] and two["offer"] is None
    # a published hash is never taken for the downloaded one
    assert judge_unhashed(found, {AARCH64_270: X86_270_SHA})["refused"]

    listing.machine = "x86_64"  # the same lock on x86_64: the index publishes that file's sha256
    assert unhashed_files(lock, listing, index, "3.10") == []
    assert unhashed_files(lock, Listing(machine="aarch64"), index, "3.10") == []  # page not read: not judged here


def test_trusted_hashes_are_validated_where_the_playbook_says_them() -> None:
    ok = VenvParams.model_validate({"trusted_hashes": {AARCH64_270: f"SHA256:{DOWNLOADED.upper()}"}})
    assert ok.trusted_hashes == {AARCH64_270: DOWNLOADED}
    for bad, needle in (({"../torch.whl": DOWNLOADED}, "not a wheel or sdist file name"),
                        ({AARCH64_270: "abc"}, "is not a sha256")):
        with pytest.raises(ValueError, match=needle):
            VenvParams.model_validate({"trusted_hashes": bad})
    text = ("schema_version: 1\ntarget: {host: pve1, container: 101}\nsteps:\n  - kind: venv.build\n"
            f"    params:\n      trusted_hashes:\n        {AARCH64_270}: nope\n")
    with pytest.raises(PlaybookError) as info:
        loads(text, "site.yaml")
    assert any(p.startswith("site.yaml:6: steps[0].params.trusted_hashes:") and "trusted_hashes" in p and "is not a sha256" in p
               for p in info.value.problems), info.value.problems


def test_the_fix_names_the_field_in_the_wizard_and_the_key_headless() -> None:
    from provisioner.words import Words

    found = [{"name": "torch", "version": "2.7.0+cu128", "file": AARCH64_270, "host": "download-r2.pytorch.org",
              "page": "https://download.pytorch.org/whl/cu128/torch/", "computed": [DOWNLOADED]}]
    wizard = Words(face="wizard", pages={"venv.build": "Venv"})
    for words, where in ((Words(), "(playbook key venv.build params: trusted_hashes), then replay"),
                         (wizard, "(field 'trusted hashes' on the Venv page), then Retry (ctrl+r)")):
        fix = judge_unhashed(found, {}, where=words.where("venv.build", "trusted_hashes"), retry=words.retry)["fix"]  # type: ignore[arg-type]
        assert f'trusted_hashes: {{{AARCH64_270}: "{DOWNLOADED}"}} {where}' in fix, fix


def test_the_entry_the_fix_shows_pastes_into_the_wizard_field() -> None:
    from screens.form_fields import field_specs, from_text

    found = [{"name": "torch", "version": "2.7.0+cu128", "file": AARCH64_270, "host": "download-r2.pytorch.org",
              "page": "https://download.pytorch.org/whl/cu128/torch/", "computed": [DOWNLOADED]}]
    fix = judge_unhashed(found, {})["fix"]  # type: ignore[arg-type]
    entry = fix.split("trusted_hashes: ", 1)[1].split("}", 1)[0] + "}"
    spec = next(s for s in field_specs(VenvParams) if s.name == "trusted_hashes")
    assert (spec.kind, spec.label) == ("yaml", "trusted hashes")
    value = from_text(spec, entry)
    assert VenvParams.model_validate({"trusted_hashes": value}).trusted_hashes == {AARCH64_270: DOWNLOADED}
    assert judge_unhashed(found, VenvParams.model_validate({"trusted_hashes": value}).trusted_hashes)["refused"] == []  # type: ignore[arg-type]
