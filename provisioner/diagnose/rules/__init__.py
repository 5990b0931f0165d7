"""The log rules, as data, one module per family. See docs/diagnose-rules.md for how they are scored.

Conventions for `confidence`: 0.85-0.95 a message that names the cause; 0.6-0.8 a strong
signature with a few possible causes; <= 0.5 a generic symptom (mark `generic=True`).
A literal space in a pattern matches any whitespace run, line breaks included; patterns are
case-insensitive. Every rule carries real example lines; tests replay them all, and every
rule is also proven on a real public log in tests/fixtures/diagnose/ (URL in the fixture).
"""

from __future__ import annotations

from dataclasses import replace

from provisioner.diagnose.model import Rule
from provisioner.diagnose.rules import (
    arch,
    citations,
    container,
    cpu,
    driver,
    hardware,
    installer,
    libs,
    nccl,
    nodriver,
    plumbing,
    proxmox,
    resolver,
)
from provisioner.diagnose.rules.common import CONTAINER_CONTEXT, IN_CONTAINER

FAMILIES = (arch, driver, nodriver, container, plumbing, cpu, libs, nccl, installer, resolver, hardware, proxmox)

RULES: tuple[Rule, ...] = tuple(
    replace(rule, messages=rule.messages or citations.CITES.get(rule.name, ())) for family in FAMILIES for rule in family.RULES
)

__all__ = ["CONTAINER_CONTEXT", "IN_CONTAINER", "RULES"]
