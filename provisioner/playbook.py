"""Playbooks: YAML with `schema_version`, a target, secret references and ordered steps.

Loading validates the whole file before anything runs; every error names file, line and field.
The recorder writes exactly this format, and load → dump → load round-trips.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import time
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from provisioner import atomic, secrets, step_registry, validate

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
    user: validate.PveUserId = "root@pam"
    password: secrets.SecretRef | None = None  # env:NAME or file:PATH (in a secrets directory)
    token_name: validate.PveTokenName | None = None
    token_value: secrets.SecretRef | None = None
    verify_tls: bool = True
    ca_file: str | None = None
    fingerprint: validate.TlsFingerprint | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ApiSettings:
        # verify_tls: false alone would send the password to whoever answers: refused, not acknowledged.
        # Pin the certificate (`fingerprint`, what `pvenode cert info` prints) or name its CA (`ca_file`).
        if not self.verify_tls and self.fingerprint is None:
            raise ValueError("verify_tls: false needs a pinned certificate: give fingerprint (the SHA-256 "
                             "`pvenode cert info` prints) or keep verify_tls: true with ca_file")
        if (self.token_name is None) != (self.token_value is None):
            raise ValueError("token_name and token_value go together (the token id and a reference to its secret)")
        return self


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
    params: dict[str, object] = {}  # open: validated by the step kind's Params model when the step is built
    #: a recording's step that did not complete (interrupted, failed, edited or not run yet): resuming plans it
    #: again; a replay runs it like any other step (never dumped when unset)
    pending: bool | None = None


class Playbook(_Model):
    schema_version: Literal[1]
    name: str = ""
    description: str = ""
    target: Target
    steps: list[StepSpec]
    resolved: dict[str, object] = {}  # open: each step records its own section (read typed via payloads.Resolved)
    #: (site profile, the playbook as written) when a site profile was applied at run time (`provisioner.site`);
    #: never dumped: the recorder uses it to write back only what the user set
    _site: tuple[Any, Any] | None = PrivateAttr(default=None)


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


def line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """1-based line of the value at `loc` in a parsed YAML file (`parse_yaml`'s node tree), e.g. for inventories."""
    return _line_of(root, loc)


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _literal_secrets(data: Any) -> list[tuple[tuple[Any, ...], str]]:
    """Literal values under secret-named keys. Iterative and memoized on object identity: a value shared
    through YAML aliases is walked once (a billion-laughs file is linear, not exponential)."""
    found: list[tuple[tuple[Any, ...], str]] = []
    seen: set[int] = set()
    todo: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while todo:
        node, loc = todo.pop()
        if isinstance(node, dict | list):
            if id(node) in seen:
                continue
            seen.add(id(node))
        children: list[tuple[Any, tuple[Any, ...]]] = []
        if isinstance(node, dict):
            for key, value in node.items():
                if str(key).lower() in secrets.SECRET_FIELD_NAMES and isinstance(value, str | int) \
                        and not (isinstance(value, str) and secrets.is_ref(value)):
                    found.append(((*loc, key), "literal secret refused: reference it as env:NAME or file:PATH"))
                else:
                    children.append((value, (*loc, key)))
        elif isinstance(node, list):
            children = [(value, (*loc, i)) for i, value in enumerate(node)]
        todo += reversed(children)  # depth first in document order: a shared value is named where it is first
    return found


# --- bounded loading ------------------------------------------------------------------------------
# A playbook is a few kilobytes. These bounds keep a hostile or broken file (a billion laughs, 50 MB of
# steps, 100 000 nested brackets) from exhausting memory, CPU or the recursion limit: each one is
# checked on the event stream, before anything is composed, constructed or validated.

MAX_BYTES = 1 << 20          # 1 MiB of YAML
MAX_EVENTS = 200_000         # YAML events (scalars, collection starts/ends, aliases)
MAX_EXPANDED = 100_000       # values after expanding every alias (what validation and dumping walk)
MAX_ALIASES = 1_000          # `*name` references
MAX_DEPTH = 64               # nested collections
MAX_STEPS = 1_000            # steps in one playbook
MAX_SECONDS = 10.0           # wall-clock backstop for the whole pre-scan

_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _problem(filename: str, line: int, text: str) -> PlaybookError:
    return PlaybookError([f"{filename}:{line}: {text}"])


def _decode(raw: bytes, filename: str) -> str:
    """Strict UTF-8 (a BOM is allowed); invalid bytes name their line."""
    if len(raw) > MAX_BYTES:
        raise _problem(filename, 1, f"playbook is larger than {MAX_BYTES // 1024} KiB; refusing to load it")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise _problem(filename, line, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})") \
            from None


def _prescan(text: str, filename: str) -> None:
    """Walk the YAML event stream once: bound events, depth, aliases and the alias-expanded size."""
    deadline = time.monotonic() + MAX_SECONDS
    anchors: dict[str, int] = {}   # anchor -> expanded size of its value (known once it is closed)
    open_anchors: set[str] = set()
    stack: list[list[Any]] = []  # [expanded size so far, anchor or None]
    total = 0
    aliases = 0

    def add(size: int, line: int) -> None:
        nonlocal total
        if stack:
            stack[-1][0] += size
        else:
            total += size
        if total + sum(s[0] for s in stack) > MAX_EXPANDED:
            raise _problem(filename, line, f"playbook expands to more than {MAX_EXPANDED} values "
                                           "(YAML aliases or sheer size); refusing to load it")

    try:
        for count, event in enumerate(yaml.parse(text, Loader=_LOADER)):
            line = event.start_mark.line + 1 if event.start_mark is not None else 1
            if count >= MAX_EVENTS:
                raise _problem(filename, line, f"playbook has more than {MAX_EVENTS} YAML nodes; refusing to load it")
            if count % 4096 == 0 and time.monotonic() > deadline:
                raise _problem(filename, line, f"playbook took longer than {MAX_SECONDS:g} s to read; refusing it")
            if isinstance(event, yaml.CollectionStartEvent):
                if len(stack) >= MAX_DEPTH:
                    raise _problem(filename, line, f"nesting deeper than {MAX_DEPTH} levels; refusing to load it")
                if event.anchor:
                    open_anchors.add(event.anchor)
                stack.append([1, event.anchor])
            elif isinstance(event, yaml.CollectionEndEvent):
                size, anchor = stack.pop()
                if anchor:
                    open_anchors.discard(anchor)
                    anchors[anchor] = size
                add(size, line)
            elif isinstance(event, yaml.ScalarEvent):
                if event.anchor:
                    anchors[event.anchor] = 1
                add(1, line)
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise _problem(filename, line, f"more than {MAX_ALIASES} YAML aliases; refusing to load it")
                if event.anchor in open_anchors:
                    raise _problem(filename, line, f"alias *{event.anchor} refers to a collection that contains "
                                                   "it (a recursive structure)")
                if event.anchor not in anchors:
                    raise _problem(filename, line, f"found undefined alias *{event.anchor}")
                add(anchors[event.anchor], line)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, filename) from None


def _yaml_error(exc: yaml.YAMLError, filename: str) -> PlaybookError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else 1
    problem = getattr(exc, "problem", None) or str(exc)
    return _problem(filename, line, f"YAML syntax error: {_printable(str(problem))}")


def _printable(text: str) -> str:
    """No control characters from the file in our messages (they go to a terminal)."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)


def _duplicate_keys(root: yaml.Node, filename: str) -> list[str]:
    """Every mapping key given twice (YAML says keys are unique; PyYAML silently keeps the last)."""
    problems: list[tuple[int, str]] = []
    seen_nodes: set[int] = set()
    todo: list[yaml.Node] = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                todo += [key, value]
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                ident = (key.tag, key.value)
                line = key.start_mark.line + 1
                if ident in keys:
                    problems.append((line, f"{filename}:{line}: duplicate key {_printable(key.value)!r} "
                                           f"(first given on line {keys[ident]})"))
                else:
                    keys[ident] = line
        elif isinstance(node, yaml.SequenceNode):
            todo += node.value
    return [text for _, text in sorted(problems)]


def _bad_scalar_line(root: yaml.Node) -> int:
    """Line of the first scalar PyYAML cannot construct (e.g. a timestamp 2024-13-45), else 1."""
    todo: list[yaml.Node] = [root]
    seen: set[int] = set()
    while todo:
        node = todo.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            try:
                yaml.constructor.SafeConstructor().construct_document(node)
            except Exception:
                return int(node.start_mark.line) + 1
        elif isinstance(node, yaml.MappingNode):
            todo += [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            todo += node.value
    return int(root.start_mark.line) + 1


def parse_yaml(text: str | bytes, filename: str) -> tuple[yaml.Node, Any]:
    """Bounded, strict YAML: (the node tree for line numbers, the data). Raises PlaybookError naming
    file:line for anything malformed or too large (used for playbooks and fleet inventories)."""
    if isinstance(text, bytes):
        text = _decode(text, filename)
    elif len(text) > MAX_BYTES:  # characters, not bytes: a cheap first bound before encoding
        raise _problem(filename, 1, f"playbook is larger than {MAX_BYTES // 1024} KiB; refusing to load it")
    else:
        _decode(text.encode("utf-8", "surrogatepass"), filename)
    if "\x00" in text:
        raise _problem(filename, text[:text.index("\x00")].count("\n") + 1, "NUL character in the playbook")
    _prescan(text, filename)
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, filename) from None
    except RecursionError:
        raise _problem(filename, 1, "nesting too deep; refusing to load it") from None
    if root is None:
        raise _problem(filename, 1, "file is empty (a playbook is a mapping with schema_version, target and steps)")
    duplicates = _duplicate_keys(root, filename)
    if duplicates:
        raise PlaybookError(duplicates)
    try:
        data = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, filename) from None
    except Exception as exc:  # e.g. datetime's ValueError for an implicit timestamp 2024-13-45
        raise _problem(filename, _bad_scalar_line(root),
                       f"cannot read a value: {_printable(str(exc))}") from None
    return root, data


def read_yaml(path: str | Path) -> tuple[yaml.Node, Any]:
    """`parse_yaml` of a file: a regular file of at most MAX_BYTES (a FIFO or /dev/zero is refused)."""
    p = Path(path)
    return parse_yaml(_read_bounded(p), str(p))


def _read_bounded(p: Path) -> bytes:
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise PlaybookError([f"{p}: cannot read: {exc.strerror}"]) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PlaybookError([f"{p}:1: not a regular file; refusing to read it"])
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise PlaybookError([f"{p}: cannot read: {exc.strerror}"]) from None
    finally:
        os.close(fd)


def loads(text: str | bytes, filename: str = "<playbook>") -> Playbook:
    """Parse and validate a playbook; raise PlaybookError naming file:line and field (never anything else)."""
    root, data = parse_yaml(text, filename)
    problems: list[str] = []
    if not isinstance(data, dict):
        raise _problem(filename, int(root.start_mark.line) + 1,
                       "a playbook is a mapping with schema_version, target and steps")
    if isinstance(data.get("steps"), list) and len(data["steps"]) > MAX_STEPS:
        raise _problem(filename, _line_of(root, ("steps",)),
                       f"steps: more than {MAX_STEPS} steps; refusing to load it")

    for loc, msg in _literal_secrets(data):
        problems.append(f"{filename}:{_line_of(root, loc)}: {_fmt_loc(loc)}: {msg}")
    if problems:
        raise PlaybookError(problems)

    try:
        # strict: YAML gives native types, so `cores: true`, `memory: 1e30` or `vmid: "101"` are errors,
        # not silently converted.
        playbook = Playbook.model_validate(data, strict=True)
    except ValidationError as exc:
        raise PlaybookError(_validation_problems(exc, root, filename, (), Playbook)) from None
    except Exception as exc:  # a validator that raised something else: still a refusal with a place
        raise _problem(filename, 1, f"invalid playbook: {type(exc).__name__}: {_printable(str(exc))}") from None

    for loc, msg in target_file_problems(playbook.target):
        problems.append(f"{filename}:{_line_of(root, loc)}: {_fmt_loc(loc)}: {_printable(msg)}")

    kinds = step_registry.load_step_modules()
    for i, spec in enumerate(playbook.steps):
        cls = kinds.get(spec.kind)
        if cls is None:
            loc = ("steps", i, "kind")
            problems.append(f"{filename}:{_line_of(root, loc)}: {_fmt_loc(loc)}: unknown step kind "
                            f"{_printable(spec.kind)!r}{_did_you_mean(spec.kind, kinds)} "
                            f"(known: {', '.join(sorted(kinds))})")
            continue
        try:
            cls.Params.model_validate(spec.params, strict=True)
        except ValidationError as exc:
            problems += _validation_problems(exc, root, filename, ("steps", i, "params"), cls.Params, spec.kind)
        except Exception as exc:
            loc = ("steps", i, "params")
            problems.append(f"{filename}:{_line_of(root, loc)}: {_fmt_loc(loc)}: {type(exc).__name__}: "
                            f"{_printable(str(exc))}")
    if problems:
        raise PlaybookError(problems)
    return playbook


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The fields of the (nested) model that holds `loc`'s last key: what a misspelling is compared with."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        info = current.model_fields.get(part)
        if info is None:
            return []
        nested = [t for t in (info.annotation, *typing.get_args(info.annotation))
                  if isinstance(t, type) and issubclass(t, BaseModel)]
        args = [a for t in typing.get_args(info.annotation) for a in typing.get_args(t)]
        nested += [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        current = nested[0] if nested else None
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _validation_problems(exc: ValidationError, root: yaml.Node, filename: str, prefix: tuple[Any, ...],
                         model: type[BaseModel] | None = None, kind: str = "") -> list[str]:
    """pydantic's errors as `file:line: field: message`; a misspelled key is named with the closest field
    (`unknown field 'coers' in lxc.create (did you mean 'cores'?)`), not "Extra inputs are not permitted"."""
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = (*prefix, *err["loc"])
        msg = str(err["msg"])
        if err["type"] == "extra_forbidden" and err["loc"] and isinstance(err["loc"][-1], str):
            name = err["loc"][-1]
            known = _field_names(model, tuple(err["loc"])) if model is not None else []
            inner = _fmt_loc(tuple(err["loc"][:-1])) if len(err["loc"]) > 1 else ""
            where = " ".join(w for w in (kind, inner) if w) or "the playbook"
            guess = _did_you_mean(name, known)
            msg = f"unknown field {name!r} in {where}{guess}"
            if known and not guess:
                msg += f"; known: {', '.join(known)}"
        out.append(f"{filename}:{_line_of(root, loc)}: {_printable(_fmt_loc(loc))}: {_printable(msg)}")
    return out


def load(path: str | Path) -> Playbook:
    """Read a playbook file: a regular file of at most MAX_BYTES (a FIFO or /dev/zero is refused)."""
    p = Path(path)
    return loads(_read_bounded(p), str(p))


LOCAL_FILE_LIMITS = {"ssh.key_file": 1 << 20, "ssh.known_hosts": 64 << 20, "api.ca_file": 16 << 20}


def local_file_problems(target: Target) -> list[str]:
    """`target_file_problems` as `target.FIELD: message` lines (for a target built outside a file)."""
    return [f"{_fmt_loc(loc)}: {msg}" for loc, msg in target_file_problems(target)]


def target_file_problems(target: Target) -> list[tuple[tuple[str, ...], str]]:
    """The files of this machine a target names, checked before anything runs: the SSH key, known_hosts
    and CA must be regular files of sane size (`/dev/zero` or a FIFO would hang the run); an existing
    `key_file` must hold a private key; a `ca_file` used to verify TLS must exist and hold a PEM
    certificate. A missing key file or known_hosts is left to SSH (known_hosts is created on first trust)."""
    problems: list[tuple[tuple[str, ...], str]] = []
    api = target.api
    for field, path in (("ssh.key_file", target.ssh.key_file), ("ssh.known_hosts", target.ssh.known_hosts),
                        ("api.ca_file", api.ca_file if api else None)):
        if not path:
            continue
        loc = ("target", *field.split("."))
        p = Path(path).expanduser()
        try:
            info = os.stat(p)
        except FileNotFoundError:
            if field == "api.ca_file" and api is not None and api.verify_tls and api.fingerprint is None:
                problems.append((loc, f"{p} does not exist (the CA that signs the node's API certificate)"))
            continue
        except OSError as exc:
            problems.append((loc, f"cannot read {p}: {exc.strerror}"))
            continue
        if not stat.S_ISREG(info.st_mode):
            problems.append((loc, f"{p} is not a regular file"))
        elif info.st_size > LOCAL_FILE_LIMITS[field]:
            problems.append((loc, f"{p} is larger than {LOCAL_FILE_LIMITS[field] >> 20} MiB"))
        elif field != "ssh.known_hosts":
            problem = _content_problem(field, p)
            if problem:
                problems.append((loc, problem))
    return problems


def _content_problem(field: str, path: Path) -> str | None:
    """A key file holds a private key (OpenSSH/PEM `-----BEGIN ... PRIVATE KEY-----` or PuTTY); a CA
    file holds a PEM certificate. Only the verdict is reported, never the content."""
    try:
        text = secrets.read_bounded_text(path, LOCAL_FILE_LIMITS[field], field.split(".")[1])
    except secrets.SecretError as exc:
        return str(exc)
    if field == "ssh.key_file":
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        if not (_PRIVATE_KEY_RE.fullmatch(first) or first.startswith("PuTTY-User-Key-File-")):
            hint = " (that is the public key; give the private one)" if secrets.is_public_key_text(text) else ""
            return f"{path} is not a private key{hint}"
    elif "-----BEGIN CERTIFICATE-----" not in text:
        return f"{path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    return None


_PRIVATE_KEY_RE = re.compile(r"-----BEGIN (OPENSSH |RSA |EC |DSA |ENCRYPTED )?PRIVATE KEY-----")


def dumps(playbook: Playbook) -> str:
    """YAML text of a playbook in the canonical layout (what the recorder writes)."""
    data = playbook.model_dump(mode="json", exclude_none=True)
    header = "# gpu-provisioner playbook: replay with `provisioner replay FILE`\n"
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)


def dump(playbook: Playbook, path: str | Path) -> None:
    """Write atomically: a temporary file in the same directory, fsync, then rename over `path`.
    A crash or a full disk leaves the old file (or none), never half a playbook."""
    atomic.write_text(path, dumps(playbook))
