"""One rule for driver branch end-of-life: the last NVIDIA driver branch that drives a GPU family.

The resolver (`provisioner.resolver.solver`: a host whose driver is past a family's last branch gets
no build) and `driver.userspace` (the step stops before installing) both ask `branch_eol_problems`;
neither keeps its own table.

This module is the one source of truth for these ceilings: the resolver's data file
(`resolver/data/torch-releases.json`, `gpu_driver_constraints`) is generated from `RULES`
(`resolver.build_data`), and `resolver.compat.gpu_driver_constraints` applies them.

Driver numbers are read by branch (`driver_branch`), Linux and Windows alike: under WSL2 `nvidia-smi`
shows the Windows driver ("NVIDIA-SMI 545.46  Driver Version: 546.80", microsoft/WSL#11589), and a
Windows release of branch R is numbered from R up to, never reaching, the next branch's number (R580:
580.xx-582.xx). Linux releases of branch R are all R.xx. So the branch of any number is the highest
known branch at or below its first component: a Linux number reads as itself, a Windows number as its
branch, with no flag needed (`WINDOWS_NUMBERING` holds the observed ranges and their sources).

Sources:
- NVIDIA, "Unix Graphics Feature Deprecation Schedule"
  (https://forums.developer.nvidia.com/t/unix-graphics-feature-deprecation-schedule/60588):
  "The release 580 series will be the last to support GPUs based on the Maxwell, Pascal, and Volta
  architectures." — and, earlier, R470 the last for Kepler.
- Observed: 595.58.03 "will ignore this GPU … supported through the NVIDIA 580.xx Legacy drivers" for a
  GTX 1050 (https://github.com/NixOS/nixos-hardware/issues/1828; ../shared/reference/torch-matrix.md §4).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

_DEPRECATION_SCHEDULE = "https://forums.developer.nvidia.com/t/unix-graphics-feature-deprecation-schedule/60588"


@dataclass(frozen=True)
class BranchEol:
    """GPUs of compute capability in [cc_min, cc_max_excl) are driven up to branch `last_branch` only."""

    id: str
    family: str
    cc_min: tuple[int, int]
    cc_max_excl: tuple[int, int]
    last_branch: int
    first_dropped: int  # the first branch that ignores these GPUs (the next branch after `last_branch`)
    sources: tuple[str, ...]

    def applies(self, cc: tuple[int, int]) -> bool:
        return self.cc_min <= cc < self.cc_max_excl

    @property
    def message(self) -> str:
        return (f"R{self.last_branch} is the last driver branch for {self.family} GPUs; "
                f"R{self.first_dropped}+ drivers ignore them")

    @property
    def fix(self) -> str:
        return (f"install an R{self.last_branch} (legacy) driver on the host, e.g. "
                f"{LEGACY_EXAMPLE.get(self.last_branch, str(self.last_branch))}, or remove the GPU")


LEGACY_EXAMPLE = {580: "580.95.05", 470: "470.256.02"}

RULES: tuple[BranchEol, ...] = (
    BranchEol("kepler-last-r470", "Kepler (CC 3.x)", (3, 0), (5, 0), 470, 495,
              (_DEPRECATION_SCHEDULE, "https://www.nvidia.com/en-us/drivers/unix/legacy-gpu/")),
    BranchEol("maxwell-pascal-volta-last-r580", "Maxwell/Pascal/Volta (CC 5.0-7.2)", (5, 0), (7, 5), 580, 590,
              (_DEPRECATION_SCHEDULE, "https://github.com/NixOS/nixos-hardware/issues/1828")),
)

#: Linux driver branches (the first component of every Linux release of the branch), R450 on
LINUX_BRANCHES: tuple[int, ...] = (450, 455, 460, 465, 470, 495, 510, 515, 520, 525, 530, 535, 545, 550, 555,
                                   560, 565, 570, 575, 580, 590, 595)

_DC = "https://docs.nvidia.com/datacenter/tesla/"  # "Version <linux>(Linux)/<windows>(Windows)" per release
_CUDA_RN = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"  # Table 3, Linux and Windows
# NVIDIA's security bulletins (also at nvidia.custhelp.com/app/answers/detail/a_id/<id>): per CVE, the affected
# "Windows(R<branch>)" driver versions and the updated version
_PSIRT = "https://github.com/NVIDIA/product-security/blob/main/"


@dataclass(frozen=True)
class WindowsNumbering:
    """Windows releases of `branch`, as NVIDIA published them with their Linux twin (or as WSL2 shows them)."""

    branch: int
    examples: tuple[str, ...]  # Windows driver numbers of this branch
    sources: tuple[str, ...]


WINDOWS_NUMBERING: tuple[WindowsNumbering, ...] = (
    WindowsNumbering(470, ("471.11", "471.41", "472.50", "473.47"),
                     (_CUDA_RN, "https://github.com/Azure/azhpc-extensions/blob/master/NvidiaGPU/resources.json")),
    WindowsNumbering(495, ("496.04", "496.13"), (_CUDA_RN,)),
    WindowsNumbering(510, ("510.06", "511.23"), (_CUDA_RN, "https://github.com/NVlabs/NVBit/issues/75")),
    WindowsNumbering(515, ("516.01", "517.48"), ("https://github.com/microsoft/WSL/issues/9134",)),
    # a Cloud Gaming guest driver row: "Windows(R520 Gaming) | All versions prior to 522.25"
    WindowsNumbering(520, ("522.25",), (_PSIRT + "2022/5415/5415.md",)),
    WindowsNumbering(525, ("527.41", "528.33", "529.19"),
                     ("https://github.com/Azure/azhpc-extensions/blob/master/NvidiaGPU/resources.json",
                      "https://github.com/arrayfire/arrayfire/pull/3636")),
    WindowsNumbering(530, ("531.41",),
                     (_PSIRT + "2023/5452/5452.md",)),  # "Windows(R530) | All driver versions prior to 531.41"
    WindowsNumbering(535, ("536.25", "537.13"),
                     (_DC + "tesla-release-notes-535-54-03", "https://github.com/microsoft/WSL/issues/11277")),
    WindowsNumbering(545, ("546.80",), ("https://github.com/microsoft/WSL/issues/11589",)),
    WindowsNumbering(550, ("551.61", "552.55", "552.74"),
                     (_PSIRT + "2024/5520/5520.md",  # "Windows(R550) | All driver versions prior to 551.61"
                      _PSIRT + "2024/5551/5551.md",  # "Windows(R550) | All driver versions prior to 552.55"
                      _PSIRT + "2024/5557/5557.md")),  # "Windows(R550) | All driver versions prior to 552.74"
    WindowsNumbering(555, ("555.99", "556.12"),
                     (_PSIRT + "2024/5551/5551.md",  # "Windows(R555) | All driver versions prior to 555.99"
                      _PSIRT + "2024/5557/5557.md",  # "Windows(R555) | All driver versions prior to 556.12"
                      "https://github.com/microsoft/WSL/issues/11277")),  # WSL2: "555.52.01 Driver Version: 555.99"
    WindowsNumbering(560, ("560.94",), ("https://github.com/Azure/azhpc-extensions/blob/master/NvidiaGPU/resources.json",)),
    WindowsNumbering(565, ("566.03",),
                     (_PSIRT + "2024/5586/5586.md",)),  # "Windows(R565) | All driver versions prior to 566.03"
    WindowsNumbering(570, ("572.16", "573.48"), (_DC,)),
    WindowsNumbering(575, ("576.02", "576.57"), (_DC,)),
    WindowsNumbering(580, ("581.42", "582.16"),
                     (_PSIRT + "2025/5703/5703.md",  # "Windows(R580) | All driver versions prior to 581.42"
                      _PSIRT + "2026/5747/5747.md")),  # "Windows(R580) | All driver versions prior to 582.16"
    WindowsNumbering(590, ("591.59",),
                     (_PSIRT + "2026/5747/5747.md",)),  # "Windows(R590) | All driver versions prior to 591.59"
)


@dataclass(frozen=True)
class EolProblem:
    rule: BranchEol
    ccs: tuple[str, ...]
    branch: int

    @property
    def message(self) -> str:
        return (f"driver branch R{self.branch} does not drive the {self.rule.family} GPUs of this host "
                f"(compute capability {', '.join(self.ccs)}): {self.rule.message}")


def parse_cc(text: str) -> tuple[int, int] | None:
    parts = str(text).strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def driver_branch(version: str) -> int:
    """The branch of a driver version, Linux or Windows numbering: 580 for 580.95.05 (Linux) and for
    581.42 (Windows, what WSL2's nvidia-smi shows); 535 for 537.13. A first component past the newest known
    branch is read as a branch of its own."""
    head = str(version).strip().split(".")[0]
    if not head.isdigit():
        raise ValueError(f"not a driver version: {version!r}")
    major = int(head)
    if major > LINUX_BRANCHES[-1] or major < LINUX_BRANCHES[0]:
        return major
    return max(b for b in LINUX_BRANCHES if b <= major)


def branch_eol_problems(ccs: Iterable[str | None], driver: str) -> list[EolProblem]:
    """Every family among `ccs` (compute capabilities as "6.1") that driver `driver` is past the end of."""
    branch = driver_branch(driver)
    parsed = sorted({c for c in (parse_cc(str(x)) for x in ccs if x) if c is not None})
    problems = []
    for rule in RULES:
        hit = tuple(f"{a}.{b}" for a, b in parsed if rule.applies((a, b)))
        if hit and branch >= rule.first_dropped:
            problems.append(EolProblem(rule, hit, branch))
    return problems


def eol_constraints() -> list[dict[str, object]]:
    """`RULES` in the resolver data file's `gpu_driver_constraints` shape (`resolver.build_data`):
    `max_driver_excl` is the first branch that drops the GPUs, compared by branch (`driver_branch`)."""
    return [
        {"id": r.id, "family": r.family, "cc_min": f"{r.cc_min[0]}.{r.cc_min[1]}",
         "cc_max_excl": f"{r.cc_max_excl[0]}.{r.cc_max_excl[1]}", "max_driver_excl": str(r.first_dropped),
         "severity": "error", "message": r.message, "fix": r.fix, "sources": list(r.sources)}
        for r in RULES
    ]
