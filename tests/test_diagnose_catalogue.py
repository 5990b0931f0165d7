"""The message catalogue (issue 35 item 1): every rule cites entries, and every cited entry's wordings (each
version's, as harvested from the programs' sources by scripts/harvest_catalogue.py) come back through
`diagnose` as that rule, also when a log reshapes them (case, spacing around `/` and `:`, curly quotes,
prefixes, a kernel's repeated `NVRM:`, hard wraps)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from provisioner.diagnose import diagnose
from provisioner.diagnose.catalogue import Entry, catalogue, entry
from provisioner.diagnose.normalize import format_regex
from provisioner.diagnose.rules import RULES
from provisioner.diagnose.rx import compile_rx, required_literals

CATALOGUE = Path(__file__).resolve().parents[1] / "provisioner" / "diagnose" / "catalogue.json"
_CONV = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L|q)?([diouxXsScpfgeEv])")
_VALUES = {"d": "1", "i": "1", "u": "4", "o": "7", "x": "3f", "X": "3F", "p": "0x1f", "f": "1.5", "g": "1.5",
           "e": "1.5", "E": "1.5", "c": "x"}
# what a log says beside a message that a rule reads only in some setting (its `context`): in a container, on
# aarch64, while building the kernel module, in a Flatpak sandbox
CONTEXTS = ("root@pve:~# pct exec 101 -- bash   (inside the LXC container)", "$ uname -m\naarch64",
            "DKMS: building the nvidia kernel module for 6.8.12-4-pve",
            "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |",
            # a Visual Studio project's import of CUDA's build customization (the .vcxproj line MSBuild reads)
            '<Import Project="$(VCTargetsPath)\\BuildCustomizations\\CUDA 12.4.props" />',
            # an app run in a Flatpak sandbox
            "$ flatpak run org.blender.Blender",
            # dnf's config-manager adding NVIDIA's CUDA repository
            "Adding repo from: https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/cuda-rhel9.repo",
            # the kernel call a CUDA error check names (RosettaCommons/foundry#5)
            "Failed call: cudaFuncSetAttribute(*kernel_ptr, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_size)",
            # FFmpeg's output stream on its NVENC encoder
            "Stream #0:0: Video: h264 (h264_nvenc), yuv420p, 1920x1080, q=2-31, 2000 kb/s")
# what a program prints on the message's own line before it: apt names the repository it refuses
PREFIXES = ("W: GPG error: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64  InRelease: ",)


def render(fmt: str) -> str:
    """A format string as a program prints it (values filled in)."""
    text = _CONV.sub(lambda m: _VALUES.get(m.group(1), "nvidia0"), fmt)
    return text.replace("%%", "%")


def citing(message_id: str) -> list[str]:
    return [r.name for r in RULES if message_id in r.messages]


def rules_of(text: str, want: set[str] | None = None) -> set[str]:
    """Every rule some finding of `text` names, alone or beside each setting's context line (the settings are tried
    in turn only until one of the rules in `want` is named)."""
    names: set[str] = set()
    for log in (text, *(text + "\n" + c for c in CONTEXTS), *(p + text for p in PREFIXES)):
        for f in diagnose(log):
            names |= {f.rule, *f.rules}
            names |= {r.rule for r in f.also_possible}
        if want is not None and names & want:
            break
    return names


def cases() -> list[tuple[str, str]]:
    cited = {m for r in RULES for m in r.messages}
    return [(e.id, w.format) for e in catalogue().values() if e.id in cited for w in e.wordings]


def test_every_rule_cites_catalogue_entries_that_exist() -> None:
    for rule in RULES:
        assert rule.messages, f"{rule.name} cites no catalogue entry"
        for mid in rule.messages:
            assert isinstance(entry(mid), Entry)


def test_catalogue_entries_are_complete() -> None:
    raw = json.loads(CATALOGUE.read_text(encoding="utf-8"))
    assert raw["generated_by"] == "scripts/harvest_catalogue.py"
    ids = [e["id"] for e in raw["entries"]]
    assert len(ids) == len(set(ids))
    for e in raw["entries"]:
        assert e["format"] and e["meaning"] and e["programs"] and e["source"]["url"], e["id"]
        assert e["wordings"] and all(w["versions"] for w in e["wordings"]), e["id"]
        for w in e["wordings"]:  # a matcher with a distinctive literal (the byte-level prefilter keeps its lines)
            lits = required_literals(format_regex(w["format"]))
            assert lits and max(len(x.encode()) for x in lits) >= 8, (e["id"], w["format"])


def test_harvested_entries_carry_their_versions() -> None:
    """Messages read from the sources name the releases that print them; one changed its wording across them."""
    api = entry("nvrm.api_mismatch")
    assert api.source_kind == "source"
    assert len(api.wordings) >= 2  # `the client '%s' (pid %u) has the version` vs the older `the client has the version`
    assert any("(pid" in w.format for w in api.wordings) and any("(pid" not in w.format for w in api.wordings)


@pytest.mark.parametrize(("message_id", "fmt"), cases())
def test_each_wording_gives_its_rule(message_id: str, fmt: str) -> None:
    text = render(fmt)
    want = set(citing(message_id))
    names = rules_of(text, want)
    assert names & want, (message_id, text, sorted(names))


def _reshaped(text: str) -> list[str]:
    """The same message as other logs show it."""
    return [
        text.upper(),
        "Error: " + text.replace("/", " / ").replace(": ", " : "),
        text.replace("'", "\u2018", 1).replace("'", "\u2019", 1).replace('"', "\u201c", 1),
        "RuntimeError: " + "  ".join(text.split(" ")),
        "\n".join(textwrap.wrap(" ".join(text.split()), 60, break_long_words=False, break_on_hyphens=False)),
    ]


@pytest.mark.parametrize(("message_id", "fmt"), cases())
def test_reshaped_wordings_give_the_rule(message_id: str, fmt: str) -> None:
    want = set(citing(message_id))
    for variant in _reshaped(render(fmt)):
        names = rules_of(variant, want)
        assert names & want, (message_id, variant, sorted(names))


def test_kernel_message_wrapped_with_its_prefix_matches() -> None:
    """dmesg's NVRM lines: the prefix repeated on every line of one message, with timestamps."""
    log = ("[  7.1] NVRM: API mismatch: the client 'nvidia-smi' (pid 812)\n"
           "[  7.1] NVRM: has the version 550.54.14, but this kernel module has\n"
           "[  7.1] NVRM: the version 535.129.03.  Please make sure that this\n")
    found = diagnose(log)
    assert found and found[0].category == "driver_lib_mismatch"
    assert compile_rx(format_regex(entry("nvrm.api_mismatch").format)).search(log.replace("[  7.1] ", ""))


def test_a_labels_colon_is_part_of_the_message() -> None:
    """nvidia-container-cli's "device error: %s" (libnvidia-container src/cli/configure.c) is a label and its
    value: NCCL's ncclSystemError text ends in "or device error." (nccl src/misc/utils.cc ncclGetErrorString) and
    is not it."""
    assert format_regex("device error: %s").endswith(r"\s*:")
    nccl = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5\n"
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n")
    findings = diagnose(nccl)
    assert findings[0].category == "nccl_failure", findings[0]
    assert "container.nvidia_container_cli_cgroup" not in {r for f in findings for r in (f.rule, *f.rules)}
    nvc = "nvidia-container-cli: device error: 3: unknown device\n"
    assert diagnose(nvc)[0].category == "container_device_missing"
