"""Playbooks: YAML with `schema_version`, a target, secret references and ordered steps.

Loading validates the whole file before anything runs; every error names file, line and field.
The recorder writes exactly this format, and load → dump → load round-trips.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from provisioner import secrets, validate

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SshSettings(_Model):
    user: validate.UserName = "root"
    port: int = Field(22, ge=1, le=65535)
    key_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"


class ApiSettings(_Model):
    port: int = Field(8006, ge=1, le=65535)
    user: str = "root@pam"
    password: secrets.SecretRef | None = None  # env:NAME or file:PATH
    token_name: str | None = None
    token_value: secrets.SecretRef | None = None
    verify_tls: bool = True
    ca_file: str | None = None
    fingerprint: str | None = None


class Target(_Model):
    host: validate.HostAddress
    node: validate.HostName = "pve"
    container: int | None = None
    ssh: SshSettings = SshSettings()
    api: ApiSettings | None = None
    local: bool = False  # the tool runs on the node itself

    @field_validator("container")
    @classmethod
    def _ct(cls, v: int | None) -> int | None:
        return None if v is None else validate.vmid(v)


class StepSpec(_Model):
    kind: str
    name: str | None = None
    params: dict[str, Any] = {}


class Playbook(_Model):
    schema_version: Literal[1]
    name: str = ""
    description: str = ""
    target: Target
    steps: list[StepSpec]
    resolved: dict[str, Any] = {}


class PlaybookError(ValueError):
    """One or more problems, each `file:line: field: message`."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid playbook:\n  " + "\n  ".join(problems))


# --- loading with line numbers -------------------------------------------------------------------

def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """1-based line of the YAML node at `loc` (deepest existing ancestor)."""
    line = node.start_mark.line + 1 if node is not None else 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    line = key.start_mark.line + 1
                    node = value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _literal_secrets(data: Any, loc: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    found: list[tuple[tuple[Any, ...], str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if str(key).lower() in secrets.SECRET_FIELD_NAMES and isinstance(value, str | int) \
                    and not (isinstance(value, str) and secrets.is_ref(value)):
                found.append(((*loc, key), "literal secret refused: reference it as env:NAME or file:PATH"))
            else:
                found += _literal_secrets(value, (*loc, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += _literal_secrets(value, (*loc, i))
    return found


def loads(text: str, filename: str = "<playbook>") -> Playbook:
    """Parse and validate a playbook; raise PlaybookError naming file:line and field."""
    from provisioner.steps.base import STEP_KINDS, load_step_kinds

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise PlaybookError([f"{filename}:{line}: YAML syntax error: {problem}"]) from None
    if not isinstance(data, dict):
        raise PlaybookError([f"{filename}:1: a playbook is a mapping with schema_version, target and steps"])

    problems: list[str] = []
    for loc, msg in _literal_secrets(data):
        problems.append(f"{filename}:{_line_of(root, loc)}: {_fmt_loc(loc)}: {msg}")
    if problems:
        raise PlaybookError(problems)

    try:
        playbook = Playbook.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(err["loc"])
            problems.append(f"{filename}:{_line_of(root, loc)}: {_fmt_loc(loc)}: {err['msg']}")
        raise PlaybookError(problems) from None

    kinds = load_step_kinds() or STEP_KINDS
    for i, spec in enumerate(playbook.steps):
        cls = kinds.get(spec.kind)
        if cls is None:
            loc = ("steps", i, "kind")
            problems.append(f"{filename}:{_line_of(root, loc)}: {_fmt_loc(loc)}: unknown step kind "
                            f"{spec.kind!r} (known: {', '.join(sorted(kinds))})")
            continue
        try:
            cls.Params.model_validate(spec.params)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ("steps", i, "params", *err["loc"])
                problems.append(f"{filename}:{_line_of(root, loc)}: {_fmt_loc(loc)}: {err['msg']}")
    if problems:
        raise PlaybookError(problems)
    return playbook


def load(path: str | Path) -> Playbook:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise PlaybookError([f"{p}: cannot read: {exc.strerror}"]) from None
    return loads(text, str(p))


def dumps(playbook: Playbook) -> str:
    """YAML text of a playbook in the canonical layout (what the recorder writes)."""
    data = playbook.model_dump(mode="json", exclude_none=True)
    header = "# gpu-provisioner playbook: replay with `provisioner replay FILE`\n"
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)


def dump(playbook: Playbook, path: str | Path) -> None:
    Path(path).write_text(dumps(playbook))
