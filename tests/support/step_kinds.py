"""Step kinds for tests: real steps over a real transport, registered per test (never at import).

    def test_x(monkeypatch): use_kinds(monkeypatch, FileStep)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from provisioner.events import Event
from provisioner.steps.base import STEP_KINDS, Params, Plan, StepFailed, StepKind, load_step_kinds
from provisioner.steps.context import StepContext


class FileParams(Params):
    path: str
    content: str
    fail_before_write: bool = False
    fail_after_write: bool = False


class FileStep(StepKind[FileParams]):
    """`test.file`: write `content` to `path` (idempotent: no change when it already holds it)."""

    kind = "test.file"
    title = "write a file"
    Params = FileParams

    async def check(self, ctx: StepContext) -> Plan:
        res = await ctx.node.run(["cat", self.params.path], quiet=True)
        if res.ok and res.output.rstrip("\n") == self.params.content:
            return Plan.no_change("content matches")
        return Plan(changes=[f"write {self.params.path}"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        if self.params.fail_before_write:
            raise StepFailed("simulated failure before writing")
        await ctx.node.run(["sh", "-c", 'printf %s "$1" > "$2"', "sh", self.params.content, self.params.path],
                           check=True)
        yield ctx.info("written")
        if self.params.fail_after_write:
            raise StepFailed("simulated failure after write", fix="replay")

    async def verify(self, ctx: StepContext) -> None:
        res = await ctx.node.run(["cat", self.params.path], quiet=True)
        if res.output.rstrip("\n") != self.params.content:
            raise StepFailed("content differs")


def use_kinds(monkeypatch: pytest.MonkeyPatch, *kinds: type[StepKind[Any]]) -> None:
    """Register `kinds` for the current test only (the global registry is restored after it)."""
    load_step_kinds()
    for kind in kinds:
        monkeypatch.setitem(STEP_KINDS, kind.kind, kind)
