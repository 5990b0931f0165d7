"""The resolver: every (torch version, CUDA variant) candidate checked against the host.

Policy: the newest torch that satisfies everything (pin, Python, glibc, platform, driver, every
GPU), carried by the lowest CUDA variant that works here (`prefer="newest-cuda"` flips that);
within one torch version a verified build beats an unverified one. A build whose CUDA (and so its
nvrtc) predates a GPU is partly broken and taken only when no whole build fits, with a warning.
When nothing works, the cheapest change that would make something work becomes the error's fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from provisioner.resolver import others
from provisioner.resolver.compat import (
    Coverage,
    GpuDriverFinding,
    constraint_applies,
    gpu_coverage,
    gpu_driver_constraints,
    gpu_driver_findings,
    variant_min_driver,
)
from provisioner.resolver.data import Release, Variant, WheelData, load_data
from provisioner.resolver.models import ErrorCode, Rejected, Resolution, ResolveError, ResolveRequest
from provisioner.resolver.versions import (
    CC,
    cc_from_text,
    cuda_tuple,
    driver_at_least,
    parse_glibc,
    parse_version_tuple,
)

# Order in which failure kinds name the error (first = most fundamental).
KIND_ORDER = ["driver_new", "driver_old", "mixed", "pin", "python", "glibc", "platform", "gpu"]


@dataclass(frozen=True)
class Candidate:
    release: Release
    variant: Variant
    patch: str
    pin_ok: bool
    synthetic: bool = False  # a pinned patch the data does not list

    @property
    def version(self) -> Version:
        return Version(self.patch)

    @property
    def verified(self) -> bool:
        return self.variant.verified and not self.synthetic

    @property
    def label(self) -> str:
        return f"{self.patch}+{self.variant.variant}"


@dataclass(frozen=True)
class Failure:
    kind: str  # pin | platform | python | glibc | driver_old | driver_new | gpu
    message: str
    short: str = ""  # condensed form for summaries, e.g. "needs driver ≥ 580"
    needs_driver: str | None = None
    uncovered: tuple[CC, ...] = ()


@dataclass
class Evaluation:
    candidate: Candidate
    failures: list[Failure]
    coverage: dict[CC, Coverage] = field(default_factory=dict)
    #: what fails although the build runs (a toolkit older than a GPU: its nvrtc cannot target it)
    limits: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def whole(self) -> bool:
        """Runs here and nothing in it is known to fail."""
        return not self.failures and not self.limits

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(f.kind for f in self.failures)


@dataclass(frozen=True)
class Host:
    request: ResolveRequest
    ccs: list[CC]  # one per GPU
    distinct: list[CC]
    driver: tuple[int, ...]
    pin: SpecifierSet | None
    findings: list[GpuDriverFinding]

    @classmethod
    def of(cls, request: ResolveRequest, data: WheelData) -> Host:
        ccs = request.ccs()
        driver = request.driver_tuple()
        return cls(
            request=request,
            ccs=ccs,
            distinct=sorted(set(ccs)),
            driver=driver,
            pin=SpecifierSet(request.torch) if request.torch else None,
            findings=gpu_driver_findings(ccs, driver, gpu_driver_constraints(data.gpu_driver_constraints)),
        )

    def gpu_summary(self) -> str:
        counts = Counter(self.ccs)
        return ", ".join(f"{n} × CC {cc}" for cc, n in sorted(counts.items()))


def _ccs(ccs: Iterable[CC]) -> str:
    return ", ".join(map(str, ccs))


def _manylinux(glibc: str) -> str:
    return "manylinux_" + glibc.replace(".", "_")


def _python_ok(release: Release, python: str, patch: str | None = None) -> tuple[bool, bool]:
    """(has wheels, experimental) for a normalized Python tag (of one patch release when given)."""
    for tag in release.python:
        if tag.version == python and (patch is None or tag.patches is None or patch in tag.patches):
            return True, tag.experimental
    return False, False


def _python_range(release: Release) -> str:
    tags = [t.version for t in release.python if not t.version.endswith("t") and not t.experimental]
    return f"{tags[0]}–{tags[-1]}" if tags else "?"


def _pin_matches(pin: SpecifierSet | None, patch: str, variant: str) -> bool:
    return pin is None or pin.contains(Version(f"{patch}+{variant}"), prereleases=True)


def _synthetic_patches(pin: SpecifierSet | None, release: Release) -> list[str]:
    """An exact pin on an unlisted patch of a known series (e.g. ==2.10.1) is assumed to exist."""
    if pin is None or len(pin) != 1:
        return []
    spec = next(iter(pin))
    if spec.operator not in ("==", "===") or "*" in spec.version:
        return []
    wanted = Version(spec.version)
    public = wanted.public
    if f"{wanted.major}.{wanted.minor}" != release.version or public in release.patches:
        return []
    return [public] if wanted > Version(release.patches[0]) else []


def candidates(data: WheelData, host: Host) -> list[Candidate]:
    """One candidate per (release, variant name): the newest patch that matches the pin."""
    out: list[Candidate] = []
    arch = host.request.arch
    for release in data.releases:
        synthetic = _synthetic_patches(host.pin, release)
        names: list[str] = []
        for v in release.variants:
            if v.variant not in names:
                names.append(v.variant)
        for name in names:
            own = [v for v in release.variants if v.variant == name and v.platform == arch]
            variant = own[0] if own else next(v for v in release.variants if v.variant == name)
            patches = list(variant.patches or release.patches)
            if variant.patches is None:
                patches += synthetic
            matching = [p for p in patches if _pin_matches(host.pin, p, name)]
            # a Python some patches lack (cp313t left with 2.12.1): the newest patch that has it
            matching = [p for p in matching if _python_ok(release, host.request.python, p)[0]] or matching
            if matching:
                patch = max(matching, key=Version)
                out.append(Candidate(release, variant, patch, True, synthetic=patch in synthetic))
            else:
                patch = max((p for p in patches if p not in synthetic), key=Version)
                out.append(Candidate(release, variant, patch, False))
    return out


def evaluate(candidate: Candidate, host: Host, data: WheelData) -> Evaluation:
    """Every check on one candidate; an empty failure list means it works on this host."""
    req = host.request
    variant, release = candidate.variant, candidate.release
    fails: list[Failure] = []
    if not candidate.pin_ok:
        fails.append(Failure("pin", f"does not match torch{req.torch}", "excluded by the torch requirement"))
    if variant.platform != req.arch:
        fails.append(
            Failure(
                "platform",
                f"{variant.variant} builds of torch {release.version} are {variant.platform}-only",
                f"{variant.platform}-only",
            )
        )
    has_py, _ = _python_ok(release, req.python, candidate.patch)
    if not has_py:
        fails.append(
            Failure(
                "python",
                f"no Python {req.python} wheels (torch {candidate.patch}: Python {_python_range(release)})",
                f"no Python {req.python} wheels",
            )
        )
    if req.glibc and parse_glibc(req.glibc) < parse_glibc(variant.min_glibc):
        fails.append(
            Failure(
                "glibc",
                f"needs glibc ≥ {variant.min_glibc} ({_manylinux(variant.min_glibc)}); host has {req.glibc}",
                f"needs glibc ≥ {variant.min_glibc}",
            )
        )
    floor, why = variant_min_driver(variant)
    needs, needs_why = floor, f"{variant.variant}: {', '.join(why)}"
    for finding in host.findings:
        c = finding.constraint
        if c.severity != "error":
            continue
        if c.min_driver is not None and parse_version_tuple(c.min_driver) > parse_version_tuple(needs):
            needs, needs_why = c.min_driver, c.message
        if c.max_driver_excl is not None:
            fails.append(
                Failure(
                    "driver_new",
                    f"driver {req.driver} is too new for CC {', '.join(map(str, finding.ccs))}: {c.message}",
                    f"driver too new for CC {', '.join(map(str, finding.ccs))}",
                )
            )
    if not driver_at_least(host.driver, needs):
        fails.append(
            Failure(
                "driver_old",
                f"needs driver ≥ {needs} ({needs_why}); host has {req.driver}",
                f"needs driver ≥ {needs}",
                needs_driver=needs,
            )
        )
    coverage = {cc: gpu_coverage(variant, candidate.patch, cc, host.driver, data.sass_compat) for cc in host.distinct}
    uncovered = tuple(cc for cc, cov in coverage.items() if not cov.ok and cov.jit_needs_driver is None)
    for cc, cov in coverage.items():
        if cov.jit_needs_driver is not None:
            fails.append(
                Failure(
                    "driver_old",
                    f"CC {cc} only runs via PTX JIT, which needs driver ≥ {cov.jit_needs_driver}",
                    f"needs driver ≥ {cov.jit_needs_driver} (PTX JIT)",
                    needs_driver=cov.jit_needs_driver,
                )
            )
    if uncovered:
        arch = " ".join(variant.arch_list)
        missing = ", ".join(map(str, uncovered))
        fails.append(
            Failure(
                "gpu",
                f"no kernels for CC {missing} (build has {arch})",
                f"no kernels for CC {missing}",
                uncovered=uncovered,
            )
        )
    return Evaluation(candidate, fails, coverage, nvrtc_limits(variant, coverage, data))


NVRTC_REPORT = "NVIDIA/Isaac-GR00T#474"


def nvrtc_limits(variant: Variant, coverage: dict[CC, Coverage], data: WheelData) -> list[Failure]:
    """GPUs the build runs on but whose CC its CUDA's nvrtc does not know (a toolkit older than the GPU):
    every kernel torch JIT-compiles at run time fails there."""
    reach = data.nvrtc_reach.get(variant.cuda)
    if reach is None:
        return []
    known = {cc_from_text(c) for c in reach.targets}
    aliases = {cc_from_text(a): cc_from_text(b) for a, b in data.cc_aliases.items()}
    aliases.update({b: a for a, b in list(aliases.items())})
    oldest = min(known)
    out: list[Failure] = []
    for cc, cov in coverage.items():
        if not cov.ok or cc in known or aliases.get(cc) in known or cc < oldest:
            continue
        out.append(
            Failure(
                "nvrtc",
                f"nvrtc of CUDA {variant.cuda} cannot target {cc.sm}: JIT-compiled kernels fail with "
                f"'invalid value for --gpu-architecture' ({NVRTC_REPORT}; CUDA {variant.cuda} targets up to "
                f"sm_{reach.newest.replace('.', '')})",
                f"nvrtc of CUDA {variant.cuda} cannot target {cc.sm}",
            )
        )
    return out


def _cuda_key(e: Evaluation) -> tuple[int, int]:
    return cuda_tuple(e.candidate.variant.cuda)


def rank(evals: list[Evaluation], prefer: str) -> list[Evaluation]:
    """Best first: newest torch, then verified, then lowest (or newest) CUDA."""
    sign = -1 if prefer == "newest-cuda" else 1

    def key(e: Evaluation) -> tuple[Version, int, int, int]:
        major, minor = _cuda_key(e)
        return (e.candidate.version, int(e.candidate.verified), -sign * major, -sign * minor)

    return sorted(evals, key=key, reverse=True)


def resolve(request: ResolveRequest, data: WheelData | None = None) -> Resolution | ResolveError:
    """Pick the wheel index and torch version for a host, or say why none can work and what would."""
    data = data or load_data()
    host = Host.of(request, data)
    evals = [evaluate(c, host, data) for c in candidates(data, host)]
    # a build that runs but whose toolkit predates a GPU is taken only when no whole one fits
    good = rank([e for e in evals if e.whole], request.prefer) or rank([e for e in evals if e.ok], request.prefer)
    if good:
        return _resolution(good[0], good, evals, host, data)
    return _error(evals, host, data)


# ---------------------------------------------------------------------------------------------
# success


def _host_line(host: Host) -> str:
    req = host.request
    glibc = f", glibc {req.glibc}" if req.glibc else ""
    pin = f", torch{req.torch}" if req.torch else ""
    return f"host: {host.gpu_summary()}; driver {req.driver}; Python {req.python}; {req.arch}{glibc}{pin}"


def _warnings(host: Host) -> list[str]:
    return [
        f"{f.constraint.family} (CC {', '.join(map(str, f.ccs))}): {f.constraint.message} — {f.constraint.fix}"
        for f in host.findings
        if f.constraint.severity == "warning"
    ]


def _resolution(
    best: Evaluation, good: list[Evaluation], evals: list[Evaluation], host: Host, data: WheelData
) -> Resolution:
    req = host.request
    cand = best.candidate
    variant, release = cand.variant, cand.release
    reasons = [_host_line(host)]
    pin = f" matching torch{req.torch}" if req.torch else ""
    reasons.append(
        f"torch {cand.patch}: newest release{pin} with a build for Python {req.python} on {req.arch} "
        f"that runs on every GPU with this driver"
    )
    same = [e.candidate.variant.variant for e in good if e.candidate.patch == cand.patch and e is not best]
    which = "newest" if req.prefer == "newest-cuda" else "lowest"
    also = f" (also compatible: {', '.join(same)})" if same else " (the only compatible variant)"
    reasons.append(f"{variant.variant}: {which} CUDA variant of torch {cand.patch} that works here{also}")
    for cc, cov in best.coverage.items():
        n = host.ccs.count(cc)
        if cov.jit:
            reasons.append(f"CC {cc} ×{n}: no matching SASS; runs via {cov.via} — first launch compiles kernels")
        else:
            reasons.append(f"CC {cc} ×{n}: runs the build's {cov.via} SASS")
    floor, why = variant_min_driver(variant)
    reasons.append(f"driver {req.driver} ≥ {floor} ({', '.join(why)})")
    for c in gpu_driver_constraints(data.gpu_driver_constraints):
        hit = [cc for cc in host.distinct if constraint_applies(c, cc)]
        if hit and c.severity == "error" and c.min_driver:
            reasons.append(f"driver {req.driver} ≥ {c.min_driver} required by {c.family} GPUs (CC {_ccs(hit)})")
        if hit and c.severity == "error" and c.max_driver_excl:
            reasons.append(
                f"driver {req.driver} < {c.max_driver_excl}: still supports {c.family} GPUs (CC {_ccs(hit)})"
            )
    if req.glibc:
        reasons.append(f"glibc {req.glibc} ≥ {variant.min_glibc} ({_manylinux(variant.min_glibc)})")
    else:
        reasons.append(f"glibc not given: the wheel needs glibc ≥ {variant.min_glibc}")
    _, experimental = _python_ok(release, req.python, cand.patch)
    warnings = _warnings(host)
    if best.limits:
        fix = _whole_after_driver(evals, cand)
        for limit in best.limits:
            warnings.append(f"partly broken: {limit.message}; no build whose toolkit knows this GPU fits here{fix}")
    if experimental:
        warnings.append(f"Python {req.python} wheels of torch {release.version} are experimental")
    if not cand.verified:
        why_unverified = "; ".join(n for n in variant.notes if "unverified" in n.lower()) or (
            f"source confidence {variant.confidence}"
        )
        if cand.synthetic:
            why_unverified = f"patch {cand.patch} is not in the data; assumed to have the builds of {release.version}"
        reasons.append(f"UNVERIFIED: this choice rests on unverified data ({why_unverified})")
    if not release.python_verified:
        reasons.append(f"UNVERIFIED: the Python list of torch {release.version} is assumed, not measured")
    torchvision = release.torchvision.get(cand.patch)
    if torchvision and not release.torchvision_verified:
        reasons.append(f"torchvision {torchvision} for torch {cand.patch} is inferred (unverified)")
    reasons += _newer_summary(cand, evals)
    rejected = [_rejected(e, best, req.prefer) for e in _relevance(evals) if e is not best]
    tools = others.compare(
        data, host.request, (variant.variant, cand.patch), lambda r, v, p: _works(r, v, p, host, data)
    )
    return Resolution(
        variant=variant.variant,
        cuda=variant.cuda,
        index_url=data.index_url(variant.variant),
        torch=cand.patch,
        torchvision=torchvision,
        reasons=reasons,
        rejected=rejected,
        verified=cand.verified,
        warnings=warnings,
        others=tools,
        data_version=data.data_version,
    )


def _whole_after_driver(evals: list[Evaluation], chosen: Candidate) -> str:
    """' (upgrade the driver to ≥ N: then X)' for the best whole build that only the driver keeps out."""
    near = [e for e in evals if not e.limits and e.kinds == {"driver_old"}
            and e.candidate.variant.platform == chosen.variant.platform]
    if not near:
        return ""
    best = rank(near, "lowest-cuda")[0]
    needs = max((f.needs_driver for f in best.failures if f.needs_driver), key=parse_version_tuple)
    return f" (upgrade the driver to ≥ {needs}: then {best.candidate.label})"


def _newer_summary(chosen: Candidate, evals: list[Evaluation]) -> list[str]:
    """Why newer releases were not taken, condensed (releases with the same story merged)."""
    newer: dict[str, list[Evaluation]] = {}
    for e in evals:
        if e.candidate.version > chosen.version and e.candidate.variant.platform == chosen.variant.platform:
            newer.setdefault(e.candidate.release.version, []).append(e)
    rows: list[tuple[list[str], str]] = []
    for rel, group in sorted(newer.items(), key=lambda kv: Version(kv[0])):
        if all("pin" in e.kinds for e in group):
            continue
        by_short: dict[str, list[str]] = {}
        for e in group:
            for f in [*e.failures, *e.limits]:
                if f.kind not in ("pin", "driver_new"):
                    by_short.setdefault(f.short, []).append(e.candidate.variant.variant)
        story = "; ".join(f"{', '.join(dict.fromkeys(vs))}: {short}" for short, vs in by_short.items())
        if rows and rows[-1][1] == story:
            rows[-1][0].append(rel)
        else:
            rows.append(([rel], story))
    lines = []
    for rels, story in reversed(rows):
        span = rels[0] if len(rels) == 1 else f"{rels[0]}–{rels[-1]}"
        lines.append(f"not torch {span}: {story}")
    return lines


def _relevance(evals: list[Evaluation]) -> list[Evaluation]:
    """Rejected-list order: candidates the pin allows first, newest torch first, then CUDA."""
    return sorted(evals, key=lambda e: ("pin" in e.kinds, -_release_rank(e), _cuda_key(e)))


def _release_rank(e: Evaluation) -> float:
    release = e.candidate.version.release
    return release[0] * 1e6 + release[1] * 1e3 + (release[2] if len(release) > 2 else 0)


def _rejected(e: Evaluation, best: Evaluation, prefer: str) -> Rejected:
    cand = e.candidate
    if e.failures:
        reason = "; ".join(f.message for f in [*e.failures, *e.limits])
    elif e.limits and not best.limits:
        reason = "; ".join(f.message for f in e.limits) + f" ({best.candidate.label} has a toolkit that does)"
        return Rejected(variant=cand.variant.variant, torch=cand.patch, reason=reason, kinds=["nvrtc"])
    elif cand.version < best.candidate.version:
        reason = f"compatible, not chosen: older than {best.candidate.patch}"
    elif cand.verified != best.candidate.verified:
        reason = "compatible, not chosen: rests on unverified data"
    else:
        reason = f"compatible, not chosen: {prefer} picks {best.candidate.variant.variant}"
    return Rejected(variant=cand.variant.variant, torch=cand.patch, reason=reason, kinds=sorted(e.kinds))


def _works(release: Release, variant: Variant, patch: str, host: Host, data: WheelData) -> tuple[bool, str]:
    e = evaluate(Candidate(release, variant, patch, True), host, data)
    return e.whole, "; ".join(f.message for f in [*e.failures, *e.limits])


# ---------------------------------------------------------------------------------------------
# no solution


@dataclass
class _Option:
    kinds: frozenset[str]  # what would have to change
    code: ErrorCode
    message: str
    fix: str
    last_resort: bool = False  # building from source / another host

    @property
    def order(self) -> int:
        return min(KIND_ORDER.index(k) for k in self.kinds)


_CODE: dict[str, ErrorCode] = {
    "driver_new": "driver_too_new",
    "driver_old": "driver_too_old",
    "mixed": "mixed_gpus",
    "pin": "pin_unsatisfiable",
    "python": "python_unsupported",
    "glibc": "glibc_too_old",
    "platform": "platform_unsupported",
    "gpu": "gpu_unsupported",
}


def _error(evals: list[Evaluation], host: Host, data: WheelData) -> ResolveError:
    req = host.request
    reasons = [_host_line(host), *_warnings(host)]
    rejected = [
        Rejected(
            variant=e.candidate.variant.variant,
            torch=e.candidate.patch,
            reason="; ".join(f.message for f in [*e.failures, *e.limits]),
            kinds=sorted(e.kinds),
        )
        for e in _relevance(evals)
    ]
    tools = others.compare(data, req, None, lambda r, v, p: _works(r, v, p, host, data))
    common = {"reasons": reasons, "rejected": rejected, "others": tools, "data_version": data.data_version}
    if host.pin is not None and not any(e.candidate.pin_ok for e in evals):
        known = f"{data.releases[0].patches[0]}–{data.releases[-1].patches[-1]}"
        return ResolveError(
            code="unknown_torch_version",
            message=f"no torch release in the resolver data ({known}) matches torch{req.torch}",
            fix=f"relax or correct the torch requirement (known releases: {known}), "
            "or update the data (docs/resolver-data.md)",
            **common,
        )
    option = _best_option(evals, host)
    return ResolveError(code=option.code, message=option.message, fix=option.fix, **common)


def _best_option(evals: list[Evaluation], host: Host) -> _Option:
    """The cheapest change that makes some candidate work: fewest failed checks, most fundamental first."""
    smallest = min(len(e.kinds) for e in evals)
    groups: dict[frozenset[str], list[Evaluation]] = {}
    for e in evals:
        if len(e.kinds) == smallest:
            groups.setdefault(e.kinds, []).append(e)
    options = [_option(kinds, group, evals, host) for kinds, group in groups.items()]
    options = [o for o in options if not o.last_resort] or options
    if host.pin is not None:  # with a pin, the pin option already explains platform gaps
        options = [o for o in options if o.kinds != frozenset({"platform"})] or options
    options.sort(key=lambda o: o.order)
    best = options[0]
    alternatives = [o.fix for o in options[1:3] if o.fix != best.fix]
    if alternatives:
        best = _Option(best.kinds, best.code, best.message, "; or ".join([best.fix, *alternatives]))
    return best


def _newest(group: list[Evaluation]) -> Evaluation:
    return rank(group, "lowest-cuda")[0]


def _option(kinds: frozenset[str], group: list[Evaluation], evals: list[Evaluation], host: Host) -> _Option:
    """Message and fix for 'everything would work if <kinds> changed' (group = those candidates)."""
    req = host.request
    messages: list[str] = []
    fixes: list[str] = []
    last_resort = False
    for kind in sorted(kinds, key=KIND_ORDER.index):
        if kind == "driver_old":
            needs = min((f.needs_driver for e in group for f in e.failures if f.needs_driver), key=parse_version_tuple)
            reachable = [
                e
                for e in group
                if all(
                    f.needs_driver is None or parse_version_tuple(f.needs_driver) <= parse_version_tuple(needs)
                    for f in e.failures
                )
            ]
            then = f" (then {_newest(reachable).candidate.label})" if reachable and len(kinds) == 1 else ""
            sample = next(
                f.message for e in group for f in e.failures if f.kind == "driver_old" and f.needs_driver == needs
            )
            messages.append(f"driver {req.driver} is too old: every build that fits {sample.split('; host')[0]}")
            fixes.append(f"upgrade the driver to ≥ {needs}{then}")
        elif kind == "driver_new":
            finding = next(
                f for f in host.findings if f.constraint.severity == "error" and f.constraint.max_driver_excl
            )
            messages.append(f"driver {req.driver} is too new for CC {_ccs(finding.ccs)}: {finding.constraint.message}")
            fixes.append(finding.constraint.fix)
        elif kind == "pin":
            messages.append(_pin_message(evals, host))
            alt = _newest(group).candidate
            fixes.append(f"relax the torch requirement '{req.torch}' ({alt.label} would work)")
        elif kind == "python":
            best = _newest(group).candidate
            messages.append(f"no build that fits has Python {req.python} wheels")
            fixes.append(f"use Python {_python_range(best.release)} (torch {best.patch} has wheels for them)")
        elif kind == "glibc":
            best = _newest(group).candidate
            messages.append(f"glibc {req.glibc} is older than every fitting build needs")
            fixes.append(f"use a distribution with glibc ≥ {best.variant.min_glibc} (then {best.label})")
        elif kind == "platform":
            best = _newest(group).candidate
            messages.append(f"the builds that fit are {best.variant.platform}-only; no {req.arch} wheel")
            fixes.append(f"use an {best.variant.platform} host (then {best.label})")
        elif kind == "gpu":
            split = _split_plan(evals, host, kinds)
            if split:
                kinds = (kinds - {"gpu"}) | {"mixed"}
                messages.append(f"no single build has kernels for every GPU ({_ccs(host.distinct)})")
                fixes.append(f"split GPUs into separate venvs (CUDA_VISIBLE_DEVICES per venv): {split}")
                continue
            last_resort = True
            missing = _ccs(sorted({cc for e in group for f in e.failures for cc in f.uncovered}))
            messages.append(f"no official {req.arch} PyTorch wheel has kernels for CC {missing}")
            fixes.append(
                f"build PyTorch from source with TORCH_CUDA_ARCH_LIST={missing} (or use the GPU vendor's wheels, "
                "e.g. NVIDIA's Jetson builds for Tegra GPUs)"
            )
    primary = min(kinds, key=KIND_ORDER.index)
    return _Option(kinds, _CODE[primary], "; ".join(messages), " and ".join(fixes), last_resort)


def _pin_message(evals: list[Evaluation], host: Host) -> str:
    """Why nothing matching the pin works, e.g. 'no build matching <2.7 has kernels for CC 12.0'."""
    req = host.request
    pinned = [e for e in evals if e.candidate.pin_ok]
    counts = Counter(f.kind for e in pinned for f in e.failures)
    if counts and counts.most_common(1)[0][0] == "gpu":
        missing = sorted({cc for e in pinned for f in e.failures for cc in f.uncovered})
        firsts = []
        for cc in missing:
            covering = [
                e
                for e in evals
                if e.candidate.variant.platform == req.arch and e.coverage.get(cc) and e.coverage[cc].ok
            ]
            if covering:
                first = min(covering, key=lambda e: (e.candidate.version, _cuda_key(e))).candidate
                firsts.append(f"CC {cc} first appears in {first.release.version} ({first.variant.variant})")
        tail = f" ({'; '.join(firsts)})" if firsts else ""
        return f"no build matching torch{req.torch} has kernels for CC {', '.join(map(str, missing))}{tail}"
    reasons = sorted({f.message for e in pinned for f in e.failures if f.kind != "pin"})
    return f"nothing matching torch{req.torch} works here: " + " | ".join(reasons[:3])


def _split_plan(evals: list[Evaluation], host: Host, allowed: frozenset[str]) -> str | None:
    """Mixed GPUs no single build covers: if each GPU alone is served (failing at most `allowed`
    checks, which the other fixes address), the per-GPU picks; else None."""
    if len(host.distinct) < 2:
        return None
    picks: list[str] = []
    for cc in host.distinct:
        fits = [e for e in evals if e.kinds <= allowed and e.coverage.get(cc) is not None and e.coverage[cc].ok]
        if not fits:
            return None
        picks.append(f"CC {cc} → {rank(fits, host.request.prefer)[0].candidate.label}")
    return "; ".join(picks)
