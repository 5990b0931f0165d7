"""The compatibility rules, one function each (pure; no I/O).

- SASS runs on the same major CC with device minor >= build minor, minus the exceptions in the
  data's `sass_compat` table (PyTorch's DEVICE_REQUIREMENT: Tegra/iGPU CCs, the 10.1 -> 11.0
  renumbering); arch-specific targets (sm_90a) run only on that exact CC.
- PTX (compute_XY) JIT-compiles for any device CC >= XY, and only with a driver at least as new as
  the PTX toolchain.
- The driver must meet every requirement of the build (CUDA minor-version floor, compressed
  fatbins, ...), and the GPUs' own floors/ceilings (Blackwell >= R570, Maxwell/Pascal < R590).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from provisioner.resolver.data import GpuDriverConstraint, SassRange, Variant
from provisioner.resolver.versions import (
    CC,
    ArchEntry,
    cc_from_text,
    driver_at_least,
    parse_arch_entry,
    parse_version_tuple,
)


def sass_runs_on(entry: ArchEntry, device: CC, table: dict[str, SassRange]) -> bool:
    """Whether SASS `entry` (kind 'sass') executes on a GPU of compute capability `device`."""
    if entry.arch_specific:
        return device == entry.cc
    rule = table.get(entry.code)
    if rule is None:  # general rule: same major, device minor >= build minor
        return device.major == entry.cc.major and device.minor >= entry.cc.minor
    if rule.only is not None:
        return device in {cc_from_text(c) for c in rule.only}
    if rule.min is not None and device < cc_from_text(rule.min):
        return False
    if rule.max_excl is not None and device >= cc_from_text(rule.max_excl):
        return False
    return device not in {cc_from_text(c) for c in rule.except_}


@dataclass(frozen=True)
class Coverage:
    """How (or why not) one GPU can run one build."""

    ok: bool
    via: str | None  # "sm_120" or "compute_120 (PTX JIT)"
    jit: bool = False
    jit_needs_driver: str | None = None  # set when PTX exists for it but the driver is too old


def arch_entries(variant: Variant, patch: str) -> list[str]:
    return [*variant.arch_list, *variant.extra_arch_by_patch.get(patch, [])]


def gpu_coverage(
    variant: Variant, patch: str, device: CC, driver: tuple[int, ...], table: dict[str, SassRange]
) -> Coverage:
    """Best way `device` runs build `variant` at `patch`: SASS first, else PTX JIT."""
    entries = [parse_arch_entry(e) for e in arch_entries(variant, patch)]
    sass = [e for e in entries if e.kind == "sass" and sass_runs_on(e, device, table)]
    if sass:
        best = max(sass, key=lambda e: e.cc)
        return Coverage(True, f"sm_{best.code}")
    ptx = [e for e in entries if e.kind == "ptx" and e.cc <= device]
    if ptx:
        best = max(ptx, key=lambda e: e.cc)
        floor = variant.ptx_jit_min_driver
        if floor is None or driver_at_least(driver, floor):
            return Coverage(True, f"compute_{best.code} (PTX JIT)", jit=True)
        return Coverage(False, None, jit_needs_driver=floor)
    return Coverage(False, None)


def variant_min_driver(variant: Variant) -> tuple[str, list[str]]:
    """The highest driver requirement of a build and the reasons that set it."""
    best = max(variant.driver_requirements, key=lambda r: parse_version_tuple(r.min_driver))
    why = [r.why for r in variant.driver_requirements if r.min_driver == best.min_driver]
    return best.min_driver, why


@dataclass(frozen=True)
class GpuDriverFinding:
    """A GPU family's driver floor/ceiling that this host's driver violates."""

    constraint: GpuDriverConstraint
    ccs: tuple[CC, ...]

    @property
    def too_old(self) -> bool:
        return self.constraint.min_driver is not None


def constraint_applies(constraint: GpuDriverConstraint, device: CC) -> bool:
    if device < cc_from_text(constraint.cc_min):
        return False
    return constraint.cc_max_excl is None or device < cc_from_text(constraint.cc_max_excl)


def _branch(driver: tuple[int, ...]) -> int:
    from provisioner.driver_eol import driver_branch

    return driver_branch(".".join(map(str, driver)))


def _branch_of(text: str) -> int:
    from provisioner.driver_eol import driver_branch

    return driver_branch(text)


def gpu_driver_findings(
    ccs: list[CC], driver: tuple[int, ...], constraints: list[GpuDriverConstraint]
) -> list[GpuDriverFinding]:
    """Every GPU-imposed driver floor/ceiling this driver breaks, with the GPUs concerned."""
    findings: list[GpuDriverFinding] = []
    for constraint in constraints:
        hit = tuple(sorted({cc for cc in ccs if constraint_applies(constraint, cc)}))
        if not hit:
            continue
        if constraint.min_driver is not None and not driver_at_least(driver, constraint.min_driver):
            findings.append(GpuDriverFinding(constraint, hit))
        elif constraint.max_driver_excl is not None and _branch(driver) >= _branch_of(constraint.max_driver_excl):
            findings.append(GpuDriverFinding(constraint, hit))  # a ceiling is a branch: Windows 581.42 is R580
    return findings


def arch_list_covers(arch_list: Iterable[str], device: CC, table: dict[str, SassRange] | None = None) -> bool:
    """Whether a build with `arch_list` (torch.cuda.get_arch_list()) runs on a GPU of capability
    `device`: SASS by `sass_runs_on`, or PTX of a lower or equal capability (JIT). The one
    implementation of this rule (the resolver, venv.build's verification and diagnose use it)."""
    for raw in arch_list:
        try:
            entry = parse_arch_entry(str(raw))
        except ValueError:
            continue
        if entry.kind == "sass" and sass_runs_on(entry, device, table or {}):
            return True
        if entry.kind == "ptx" and (entry.cc == device if entry.arch_specific else entry.cc <= device):
            return True
    return False


def gpu_driver_constraints(constraints: list[GpuDriverConstraint]) -> list[GpuDriverConstraint]:
    """The data's driver floors plus the branch end-of-life ceilings of `provisioner.driver_eol`
    (the one rule `driver.userspace` applies too); the data's own ceilings are replaced by it."""
    from provisioner import driver_eol

    floors = [c for c in constraints if c.max_driver_excl is None]
    ceilings = [
        GpuDriverConstraint(
            id=rule.id, family=rule.family, cc_min=f"{rule.cc_min[0]}.{rule.cc_min[1]}",
            cc_max_excl=f"{rule.cc_max_excl[0]}.{rule.cc_max_excl[1]}", max_driver_excl=str(rule.first_dropped),
            severity="error", message=rule.message, fix=rule.fix, sources=list(rule.sources))
        for rule in driver_eol.RULES
    ]
    return floors + ceilings
