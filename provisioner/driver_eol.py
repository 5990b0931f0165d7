"""One rule for driver branch end-of-life: the last NVIDIA driver branch that drives a GPU family.

The resolver (`provisioner.resolver.solver`: a host whose driver is past a family's last branch gets
no build) and `driver.userspace` (the step stops before installing) both ask `branch_eol_problems`;
neither keeps its own table.

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
    sources: tuple[str, ...]

    def applies(self, cc: tuple[int, int]) -> bool:
        return self.cc_min <= cc < self.cc_max_excl

    @property
    def message(self) -> str:
        return (f"R{self.last_branch} is the last driver branch for {self.family} GPUs; "
                f"R{self.last_branch + 1}+ drivers ignore them")

    @property
    def fix(self) -> str:
        return (f"install an R{self.last_branch} (legacy) driver on the host, e.g. "
                f"{LEGACY_EXAMPLE.get(self.last_branch, str(self.last_branch))}, or remove the GPU")


LEGACY_EXAMPLE = {580: "580.95.05", 470: "470.256.02"}

RULES: tuple[BranchEol, ...] = (
    BranchEol("kepler-last-r470", "Kepler (CC 3.x)", (3, 0), (5, 0), 470,
              (_DEPRECATION_SCHEDULE, "https://www.nvidia.com/en-us/drivers/unix/legacy-gpu/")),
    BranchEol("maxwell-pascal-volta-last-r580", "Maxwell/Pascal/Volta (CC 5.0-7.2)", (5, 0), (7, 5), 580,
              (_DEPRECATION_SCHEDULE, "https://github.com/NixOS/nixos-hardware/issues/1828")),
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
    """The branch of a driver version: 580 for 580.95.05."""
    head = str(version).strip().split(".")[0]
    if not head.isdigit():
        raise ValueError(f"not a driver version: {version!r}")
    return int(head)


def branch_eol_problems(ccs: Iterable[str | None], driver: str) -> list[EolProblem]:
    """Every family among `ccs` (compute capabilities as "6.1") that driver `driver` is past the end of."""
    branch = driver_branch(driver)
    parsed = sorted({c for c in (parse_cc(str(x)) for x in ccs if x) if c is not None})
    problems = []
    for rule in RULES:
        hit = tuple(f"{a}.{b}" for a, b in parsed if rule.applies((a, b)))
        if hit and branch > rule.last_branch:
            problems.append(EolProblem(rule, hit, branch))
    return problems
