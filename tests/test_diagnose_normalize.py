"""What users paste: ANSI codes, CRLF, progress bars, timestamps, wrapped lines."""

from __future__ import annotations

import pytest

from provisioner.diagnose import diagnose
from provisioner.diagnose.normalize import clean_log, fold_typography, split_lines, strip_ansi, strip_prefix

ESC = "\x1b"
# Real message (reference/torch-matrix.md §6, pytorch/pytorch#167244).
ARCH_MSG = (
    "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation. "
    "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90."
)
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124"


def _top(text: str) -> str | None:
    findings = diagnose(text)
    return findings[0].category if findings else None


@pytest.mark.parametrize(
    "prefix",
    [
        "2025-11-29T10:12:03.123456Z ",
        "2025-11-29 10:12:03,123 ",
        "[2025-11-29 10:12:03] ",
        "[  612.331201] ",
        "Nov 29 10:12:03 pve kernel: ",
        "10:12:03.551 ",
        "trainer-1  | ",
        "> ",
        # what a wrapper prints before each line of the program it runs (see WRAPPER_PREFIXES)
        "2024-05-01T12:00:03.123456789Z stderr F ",
        "ollama        | ",
        "[rank1]: ",
        "[default0]:",
        "[1,0]<stderr>:",
        "(Worker pid=509) ",
        "(RayWorkerWrapper pid=12345, ip=10.0.0.2) ",
        "2024-05-01 12:00:03,123 - trainer - ERROR - ",
    ],
)
def test_prefixes_on_every_line(prefix: str) -> None:
    text = "\n".join(prefix + line for line in MISMATCH.splitlines())
    findings = diagnose(text)
    assert findings[0].category == "driver_lib_mismatch"
    assert "570.124" in findings[0].root_cause
    assert findings[0].evidence[0].startswith(prefix.strip())  # evidence keeps what the user sees


# Wrappers' per-line prefixes, as the wrappers print them: containerd's CRI log file line is
# "<RFC3339Nano time> <stream> <P|F> <text>" (what `kubectl logs` reads on the node, and what is pasted from
# /var/log/pods); docker compose puts the container's name and " | " (its `container_name:` when set: "ollama");
# torchrun's `--tee`/`--log-line-prefix-template` "[{role}{local_rank}]:" and PyTorch's "[rank1]:" (real:
# tests/fixtures and the regression corpus, nccl-peer-access-unsupported); OpenMPI's --tag-output
# "[jobid,rank]<stderr>:"; Ray's "(pid=45601)" / "(ActorName pid=…, ip=…)" (docs.ray.io, ray-logging) and vLLM's
# "(Worker pid=509)"; Python logging's cookbook format "%(asctime)s - %(name)s - %(levelname)s - %(message)s".
WRAPPER_PREFIXES = [
    "2024-05-01T12:00:03.123456789Z stderr F ",
    "ollama        | ",
    "[rank3]: ",
    "[1,0]<stdout>:",
    "(RayWorkerWrapper pid=12345, ip=10.0.0.2) ",
    "2024-05-01 12:00:03,123 - trainer - ERROR - ",
]
# The kernel module's message over five lines, each with NVRM: (open-gpu-kernel-modules, the catalogue's entry).
API_MISMATCH = (
    "[    9.424670] NVRM: API mismatch: the client 'kwin_wayland' (pid 1005)\n"
    "NVRM: has the version 595.84, but this kernel module has\n"
    "NVRM: the version 595.80.  Please make sure that this\n"
    "NVRM: kernel module and all NVIDIA driver components\n"
    "NVRM: have the same version."
)


@pytest.mark.parametrize("prefix", WRAPPER_PREFIXES)
def test_a_wrapper_prefix_does_not_split_a_message_printed_over_lines(prefix: str) -> None:
    text = "\n".join(prefix + line for line in API_MISMATCH.splitlines())
    findings = diagnose(text)
    assert findings and findings[0].category == "driver_lib_mismatch"
    assert findings[0].evidence[0].startswith(prefix.strip())


@pytest.mark.parametrize("prefix", WRAPPER_PREFIXES)
def test_a_wrapper_prefix_does_not_hide_a_negated_mention(prefix: str) -> None:
    # the reporter lists what they did not see; the bullet must still read as a bullet after the prefix
    text = "\n".join(prefix + line for line in (
        "all_reduce_perf hangs on the first collective with NCCL_P2P_DISABLE unset",
        "* No `GPU has fallen off the bus` in dmesg",
        "NCCL WARN Cuda failure 'an illegal memory access was encountered'",
    ))
    findings = diagnose(text)
    assert findings and findings[0].category == "nccl_failure"
    assert not any("fallen off" in line for f in findings for line in f.evidence)


def test_strip_prefix_leaves_what_only_looks_like_a_wrapper() -> None:
    assert strip_prefix("[Bug]: RuntimeError: CUDA error") == "[Bug]: RuntimeError: CUDA error"
    assert strip_prefix("[C]: in function 'require'") == "[C]: in function 'require'"
    assert strip_prefix("| 0  NVIDIA RTX PRO 6000 |") == "| 0  NVIDIA RTX PRO 6000 |"
    assert strip_prefix("ollama | Error: no compatible GPUs") == "Error: no compatible GPUs"
    assert strip_prefix("(pid=909608) NCCL WARN x") == "NCCL WARN x"


def test_ansi_colour_codes_everywhere() -> None:
    coloured = f"{ESC}[1;31mtorch.OutOfMemoryError{ESC}[0m: CUDA out of {ESC}[33mmemory{ESC}[0m. Tried to allocate 2 GiB"
    findings = diagnose(coloured)
    assert findings[0].category == "oom_or_hw"
    assert ESC not in findings[0].evidence[0]


@pytest.mark.parametrize(
    "raw",
    [
        f"{ESC}[31mred{ESC}[0m",
        "^[[31mred^[[0m",
        "[1;31mred[0m",
        f"{ESC}]0;title{ESC}\\red",
        f"{ESC}[2K{ESC}[1Gred",
    ],
)
def test_strip_ansi_forms(raw: str) -> None:
    assert strip_ansi(raw) == "red"


def test_strip_ansi_keeps_brackets_that_are_text() -> None:
    line = "gpu2-ru7:2143:2561 [1] NCCL INFO Ring 00 : 1[1b000] -> 2[3d000]"
    assert strip_ansi(line) == line


def test_crlf_and_progress_bars() -> None:
    text = "Installing: [#    ]  3%\rInstalling: [#####] 100%\r\n" + MISMATCH.replace("\n", "\r\n") + "\r\n"
    assert split_lines(text)[:2] == ["Installing: [#    ]  3%", "Installing: [#####] 100%"]
    findings = diagnose(text)
    assert findings[0].category == "driver_lib_mismatch"
    assert all("\r" not in e for e in findings[0].evidence)


def test_message_wrapped_at_spaces_over_lines() -> None:
    text = (
        "UserWarning:\nNVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not\n"
        "    compatible with the current PyTorch\n    installation."
    )
    assert _top(text) == "arch_unsupported"


@pytest.mark.parametrize("width", [80, 100, 120])
def test_message_hard_wrapped_mid_word(width: int) -> None:
    text = "\n".join(ARCH_MSG[i : i + width] for i in range(0, len(ARCH_MSG), width))
    findings = diagnose(text)
    assert findings[0].category == "arch_unsupported"
    assert "sm_120" in findings[0].root_cause
    assert "sm_90" in findings[0].root_cause  # the arch list survived the cut


def test_timestamped_continuation_lines_join() -> None:
    text = (
        "2025-01-01T00:00:00Z Failed to initialize NVML: Driver/library\n"
        "2025-01-01T00:00:00Z version mismatch"
    )
    assert _top(text) == "driver_lib_mismatch"


def test_case_and_spacing_variants() -> None:
    assert _top("FAILED TO INITIALIZE NVML:   driver/LIBRARY   version mismatch") == "driver_lib_mismatch"
    assert _top("error:  cuda  out  of  memory") == "oom_or_hw"


def test_localized_surrounding_text() -> None:
    text = "运行训练时报错：\nRuntimeError: CUDA error: no kernel image is available for execution on the device\n请帮忙看看"
    assert _top(text) == "arch_unsupported"


def test_table_lines_are_not_treated_as_wrapped() -> None:
    border = "+" + "-" * 89 + "+"
    row = "| NVIDIA-SMI 595.71.05              Driver Version: 595.71.05      CUDA Version: 13.2     |"
    log = clean_log("\n".join([border, row, border]))
    assert len(log.views) == 1


def test_strip_prefix_only_strips_prefixes() -> None:
    assert strip_prefix("[  12.5] NVRM: Xid (PCI:0000:41:00): 79") == "NVRM: Xid (PCI:0000:41:00): 79"
    assert strip_prefix("ERROR: Installation has failed.") == "ERROR: Installation has failed."
    assert strip_prefix("NCCL INFO 1[1b000] -> 2[3d000]") == "NCCL INFO 1[1b000] -> 2[3d000]"


def test_evidence_line_is_truncated_not_the_match() -> None:
    text = "x" * 2000 + " CUDA out of memory " + "y" * 2000
    f = diagnose(text)[0]
    assert f.category == "oom_or_hw"
    assert len(f.evidence[0]) <= 400


def test_empty_and_binary_input() -> None:
    assert diagnose("") == []
    assert diagnose("\x00\x01\x02 \ufffd\ufffd") == []


def test_typographic_quotes_and_spaces_match_as_the_tool_printed_them() -> None:
    """qixuema/envs#4 pasted nvidia-smi's message with a typographic apostrophe (couldn‘t); web pages carry
    no-break spaces. Rules match the ASCII the tool printed; evidence cites the line as pasted."""
    pasted = "NVIDIA-SMI has failed because it couldn‘t communicate with the NVIDIA driver."
    nbsp = "Failed to initialize NVML:\u00a0Driver/library version mismatch"
    log = clean_log(pasted + "\n" + nbsp)
    assert log.full_text.rstrip("\n") == ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
                             "Failed to initialize NVML: Driver/library version mismatch")
    assert log.lines == (pasted, nbsp)  # visible lines untouched
    assert fold_typography("“nvidia-smi” ’x’") == '"nvidia-smi" \'x\'' and len(fold_typography(nbsp)) == len(nbsp)
    top = diagnose(pasted)[0]
    assert top.category == "no_driver_loaded" and top.evidence == (pasted,)
    assert diagnose(nbsp)[0].category == "driver_lib_mismatch"


def test_typography_survives_the_long_log_prefilter() -> None:
    """A log past the fast-path size is cut to the prefilter's windows first (bytes, before any folding): a
    line whose only trace of the message is the typographic form must still be kept and matched."""
    import json
    from pathlib import Path

    from provisioner.diagnose.engine import FAST_PATH_CHARS

    rows = (Path(__file__).parent / "fixtures/diagnose/healthy.jsonl").read_text(encoding="utf-8").splitlines()
    healthy = "\n".join(json.loads(r)["log"] for r in rows if r.strip())
    filler = healthy * (FAST_PATH_CHARS // len(healthy) + 1)
    pasted = "NVIDIA-SMI has failed because it couldn‘t communicate with the NVIDIA driver."
    findings = diagnose(filler + "\n" + pasted)
    assert [f for f in findings if "nodriver.nvidia_smi_cannot_communicate" in f.rules and pasted in f.evidence]
