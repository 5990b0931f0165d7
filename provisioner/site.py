"""Site profiles: where a site fetches from and how it sizes its checks, applied at run time, never recorded.

A playbook says *what* a host gets (torch 2.9 for CUDA 12.8, driver 595, a burn-in); a site profile says
*where from* and *how big* on one site: its mirror of download.pytorch.org, of PyPI, of NVIDIA's driver
server, the burn-in sizes its hardware wants. The same playbook replays on another site with that site's
profile. A site profile is a YAML file the user names (`--site FILE`, or `site:` in an inventory entry)::

    name: berlin-dc
    steps:
      venv.build: {index_mirror: "https://mirror.example/pytorch-whl", pypi_mirror: "https://mirror.example/pypi/simple"}
      driver.userspace: {driver_mirror: "https://mirror.example/nvidia/XFree86"}

The running lab is one more site (its profile is built from its connection info by the CLI). Its values are
defaults of the steps of that kind (what the playbook sets itself wins); the recorder drops them again
(`strip_step`), so a playbook recorded on one site names no mirror, size or switch of that site.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provisioner.playbook import Playbook, PlaybookError, StepSpec, read_yaml


class SiteProfile(BaseModel):
    """A named site: step parameters by step kind, applied as defaults at run time."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    steps: dict[str, dict[str, object]] = {}  # step kind -> parameters (open: each kind validates its own)
    #: values the site imposes over the playbook's own (the lab: the one Python its index serves a torch for);
    #: on record, the playbook's own value comes back (or the key goes)
    force: dict[str, dict[str, object]] = {}

    def merged(self, other: SiteProfile | None) -> SiteProfile:
        """This profile with `other`'s values on top (a user's file over the lab's defaults)."""
        if other is None:
            return self
        steps = {kind: {**self.steps.get(kind, {}), **other.steps.get(kind, {})}
                 for kind in dict.fromkeys([*self.steps, *other.steps])}
        force = {kind: {**self.force.get(kind, {}), **other.force.get(kind, {})}
                 for kind in dict.fromkeys([*self.force, *other.force])}
        return SiteProfile(name=other.name, steps=steps, force=force)


def load_site(path: str | Path) -> SiteProfile:
    """Read and validate a site profile file: each kind must be a step kind, each key one of its parameters."""
    from provisioner.steps.base import load_step_kinds

    p = Path(path).expanduser()
    _, data = read_yaml(p)  # bounded like a playbook: size, aliases, depth, UTF-8, duplicate keys
    try:
        site = SiteProfile.model_validate(data)
    except ValidationError as exc:
        raise PlaybookError([f"{p}: {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]) from None
    kinds = load_step_kinds()
    problems = []
    for kind, params in site.steps.items():
        cls = kinds.get(kind)
        if cls is None:
            problems.append(f"{p}: steps.{kind}: unknown step kind")
            continue
        fields = cls.Params.model_fields
        problems += [f"{p}: steps.{kind}.{k}: not a parameter of {kind}" for k in params if k not in fields]
    if problems:
        raise PlaybookError(problems)
    return site


def apply_site(playbook: Playbook, site: SiteProfile | None, *, target_from: Playbook | None = None) -> Playbook:
    """`playbook` with the site's values as defaults of each step of their kind (the playbook's own win).
    The result remembers the playbook as the user wrote it (`origin_of`), for the recorder; `target_from`
    names the playbook whose target is the user's (when the caller replaced the target, as `--lab` does).
    A second profile applied on top of a first (a user's `--site` over the lab's) wins over it."""
    earlier = site_of(playbook)
    origin = origin_of(target_from or playbook)
    profile = earlier.merged(site) if earlier is not None else site
    written = origin_of(playbook).steps if earlier is not None else playbook.steps
    if profile is None:
        return playbook
    steps = [spec.model_copy(update={"params": {**profile.steps.get(spec.kind, {}), **spec.params,
                                                **profile.force.get(spec.kind, {})}})
             if spec.kind in profile.steps or spec.kind in profile.force else spec for spec in written]
    out = playbook.model_copy(update={"steps": steps})
    out._site = (profile, origin)
    return out


def site_of(playbook: Playbook) -> SiteProfile | None:
    """The site profile applied to this playbook at run time (None: none)."""
    applied = playbook._site
    return applied[0] if applied else None


def origin_of(playbook: Playbook) -> Playbook:
    """The playbook as the user wrote it, before a site profile or a lab target was applied."""
    applied = playbook._site
    return applied[1] if applied else playbook


def strip_step(spec: StepSpec, site: SiteProfile | None, written: StepSpec | None) -> StepSpec:
    """The step as the user set it: the site's values dropped unless the playbook (`written`) set that key."""
    if site is None or (spec.kind not in site.steps and spec.kind not in site.force):
        return spec
    own = written.params if written is not None and written.kind == spec.kind else {}
    defaults, forced = site.steps.get(spec.kind, {}), site.force.get(spec.kind, {})
    params = {k: v for k, v in spec.params.items()
              if k not in forced and (k in own or k not in defaults or defaults[k] != v)}
    params.update({k: own[k] for k in forced if k in own})  # the playbook's own value, not the site's
    return spec.model_copy(update={"params": params})
