"""How a pydantic field becomes a form field, and form text back into values (no Textual here).

Forms are built generically from `Params.model_fields`: the annotation picks the widget (switch,
choice, number, size, text, comma-separated list, YAML for anything structured), the default fills
it, the description is its help. Fields speak the user's language: a list is `0,1` or `all`, a
size is `480G` or `512M` (memory in MiB, disks in GiB underneath). Validation runs on the whole
model and is mapped back per field, in plain words (what is wrong, what is allowed).
"""

from __future__ import annotations

import enum
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

FieldKind = Literal["bool", "choice", "int", "float", "size", "text", "list", "yaml"]
SizeUnit = Literal["M", "G"]
UNIT_MIB: dict[str, int] = {"K": 0, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024 ** 3}
SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?$", re.IGNORECASE)
# Patterns of step parameters, said as examples (a regex is not plain words).
PATTERN_EXAMPLES: dict[str, str] = {
    r"^(cu[0-9]{3}|cpu)$": "a variant like cu128, cu130 or cpu",
    r"^3\.[0-9]{1,2}$": "a Python version like 3.12",
    r"^[0-9]+(B|K|KiB|M|MiB|G|GiB)?:[0-9]+(B|K|KiB|M|MiB|G|GiB)?$": "a size range like 8B:256MiB",
    r"^[0-9a-fA-F]{64}$": "64 hexadecimal digits (a SHA-256)",
    r"^0[0-7]{3}$": "an octal mode like 0666",
    r"^(lowest-cuda|newest-cuda)$": "lowest-cuda or newest-cuda",
    r"^[a-z,]+$": "names separated by commas, like preflight,gemm,collectives",
}


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: FieldKind
    label: str
    help: str
    optional: bool
    required: bool
    choices: tuple[Any, ...] = ()
    unit: SizeUnit | None = None  # kind "size": what a bare number means (and what the value is stored in)
    keywords: tuple[str, ...] = ()  # kind "list": words accepted instead of a list, e.g. "all"
    item: str = "str"  # kind "list": the item type ("int", "str", "float")
    pve_model: Any = None  # kind "yaml": a model written in PVE's key=value syntax (it has `pve_text`)


#: the label column holds LABEL_WIDTH columns; a field name longer than that gets a shorter label (its help
#: line, right under it, says the rest) instead of breaking mid-word
LABEL_WIDTH = 20
SHORT_LABELS = {"apt_lock_backoff_max_s": "apt lock backoff (s)", "extras_from_torch_index": "extras: torch index"}


def _strip_annotated(annotation: Any) -> Any:
    """`Annotated[str, AfterValidator(...)]` is edited as a `str` (pydantic runs the validators)."""
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) == 1:
            return _strip_annotated(args[0]), optional
        return annotation, optional
    return _strip_annotated(annotation), False


def _size_unit(name: str, info: FieldInfo) -> SizeUnit | None:
    """Integer fields that hold a size: "MiB" in the description, or a name ending in `_gb`."""
    if name.endswith("_gb"):
        return "G"
    if re.search(r"\bMiB\b", info.description or ""):
        return "M"
    return None


def _keyword_list(annotation: Any) -> tuple[tuple[str, ...], Any] | None:
    """`Literal["all"] | list[int]` → (("all",), int)."""
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return None
    keywords: list[str] = []
    item: Any = None
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is Literal and all(isinstance(a, str) for a in typing.get_args(arg)):
            keywords.extend(typing.get_args(arg))
        elif typing.get_origin(arg) in (list, tuple, set, frozenset) and typing.get_args(arg):
            item = _strip_optional(typing.get_args(arg)[0])[0]
        elif arg is not type(None):
            return None
    if not keywords or item not in (str, int, float):
        return None
    return tuple(keywords), item


def field_spec(name: str, info: FieldInfo) -> FieldSpec:
    annotation, optional = _strip_optional(info.annotation)
    origin = typing.get_origin(annotation)
    kind: FieldKind = "yaml"
    choices: tuple[Any, ...] = ()
    unit: SizeUnit | None = None
    keywords: tuple[str, ...] = ()
    item: Any = str
    if (keyword_list := _keyword_list(annotation)) is not None:
        kind = "list"
        keywords, item = keyword_list
    elif annotation is bool:
        kind = "bool"
    elif origin is Literal:
        kind, choices = "choice", typing.get_args(annotation)
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        kind, choices = "choice", tuple(m.value for m in annotation)
    elif annotation is int:
        unit = _size_unit(name, info)
        kind = "size" if unit else "int"
    elif annotation is float:
        kind = "float"
    elif annotation is str:
        kind = "text"
    elif origin in (list, tuple, set, frozenset):
        args = typing.get_args(annotation)
        item = _strip_optional(args[0])[0] if args else str
        kind = "list" if item in (str, int, float) else "yaml"
    label = SHORT_LABELS.get(name) or name.replace("_", " ")
    if unit == "G" and label.endswith(" gb"):
        label = label[:-3]
    help_text = info.description or ""
    if kind == "size":
        help_text = _size_help(unit, help_text)
    elif kind == "list":
        help_text = _list_help(keywords, item, help_text)
    pve_model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) \
        and hasattr(annotation, "pve_text") else None
    if pve_model is not None and not help_text:
        help_text = pve_model.__doc__.strip().splitlines()[0] if pve_model.__doc__ else ""
    return FieldSpec(name=name, kind=kind, label=label, help=help_text, optional=optional,
                     required=info.is_required(), choices=choices, unit=unit, keywords=keywords,
                     item=getattr(item, "__name__", "str"), pve_model=pve_model)


def _size_help(unit: SizeUnit | None, description: str) -> str:
    bare = "MiB" if unit == "M" else "GiB"
    extra = re.sub(r"^\s*(MiB|GiB|GB)\s*$", "", description)
    example = "480G or 512M" if unit == "M" else "200G or 2T"
    return (extra + "; " if extra else "") + f"a size like {example} (a bare number is {bare})"


def _list_help(keywords: tuple[str, ...], item: Any, description: str) -> str:
    example = "0,1" if item is int else "a,b"
    said = " or ".join(repr(k) for k in keywords)
    hint = f"{said} or a list like {example}" if keywords else f"comma-separated, like {example}"
    if description and keywords and "list" in description:
        return f"{hint} (separate items with commas)"
    return f"{description}: {hint}" if description else hint


def format_size(value: int, unit: SizeUnit) -> str:
    """491520 (MiB) → "480G"; 200 (GiB) → "200G"; 1536 (MiB) → "1536M"."""
    mib = value * UNIT_MIB[unit]
    for suffix in ("P", "T", "G"):
        if mib and mib % UNIT_MIB[suffix] == 0 and UNIT_MIB[suffix] >= UNIT_MIB[unit]:
            return f"{mib // UNIT_MIB[suffix]}{suffix}"
    return f"{value}{unit}"


def parse_size(text: str, unit: SizeUnit) -> int | None:
    """"480G" → 491520 (unit M); "2T" → 2048 (unit G); a bare number is `unit`. None: not a size."""
    match = SIZE_RE.match(text.strip())
    if match is None:
        return None
    number, suffix = float(match.group(1)), (match.group(2).upper() or unit)
    if suffix == "K":
        if unit != "M" or number % 1024:
            return None
        mib = number / 1024
    else:
        mib = number * UNIT_MIB[suffix]
    value = mib / UNIT_MIB[unit]
    return int(value) if value == int(value) else None


def field_specs(model: type[BaseModel], exclude: tuple[str, ...] = ()) -> list[FieldSpec]:
    return [field_spec(name, info) for name, info in model.model_fields.items() if name not in exclude]


def initial_value(model: type[BaseModel], name: str, values: dict[str, Any]) -> Any:
    if name in values:
        return values[name]
    info = model.model_fields[name]
    return None if info.is_required() else info.get_default(call_default_factory=True)


def to_text(spec: FieldSpec, value: Any) -> str:
    """What a text input shows for `value`."""
    if value is None:
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    if spec.pve_model is not None and isinstance(value, dict):
        try:
            value = spec.pve_model.model_validate(value)
        except ValidationError:
            pass
    if isinstance(value, BaseModel):
        pve_text = getattr(value, "pve_text", None)
        if callable(pve_text):
            return str(pve_text())  # PVE's own key=value syntax (net0), as the plan prints it
        value = value.model_dump(mode="json", exclude_none=True)
    if spec.kind == "list":
        if isinstance(value, str):
            return value  # a keyword such as "all"
        return ",".join(str(v) for v in value) if spec.item == "int" else ", ".join(str(v) for v in value)
    if spec.kind == "size" and isinstance(value, int) and spec.unit is not None:
        return format_size(value, spec.unit)
    if spec.kind == "yaml":
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000)
        return text.removesuffix("\n").removesuffix("\n...").strip()  # no YAML document-end marker
    return str(value)


def from_text(spec: FieldSpec, text: str) -> Any:
    """The raw value for `text` (pydantic coerces and validates it afterwards)."""
    text = text.strip()
    if text == "":
        return [] if spec.kind == "list" else None
    if spec.kind == "list":
        if text.lower() in spec.keywords:
            return text.lower()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]  # the YAML/Python spelling [0, 1] is accepted too
        separators = r"[,\s]+" if spec.item in ("int", "float") else r","
        return [part.strip() for part in re.split(separators, text) if part.strip()]
    if spec.kind == "size" and spec.unit is not None:
        size = parse_size(text, spec.unit)
        return text if size is None else size  # text: reported as "not a size" by `validate`
    if spec.kind == "yaml":
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text  # pydantic reports the type error on the field
    return text


def validate(model: type[BaseModel], values: dict[str, Any],
             playbook: dict[str, Any] | None = None) -> dict[str, str]:
    """Per-field error messages of validating the whole model ("" key: errors not tied to a field).

    A blank field that does not accept None is an error naming the value it had (the playbook's, else
    the default; never silently reset). Messages are plain words: what is wrong and what is allowed,
    never pydantic's type names."""
    specs = {s.name: s for s in field_specs(model)}
    errors: dict[str, str] = {}
    for name, value in values.items():
        if value is None and not _accepts_none(model, name):
            if playbook is not None and name in playbook:
                before, said = playbook[name], "the playbook has"
            else:
                before, said = model.model_fields[name].get_default(call_default_factory=True), "default:"
            shown = to_text(specs[name], before) if name in specs else before
            errors[name] = f"a value is required ({said} {shown})"
    try:
        model.model_validate(clean_values(model, values))
    except ValidationError as exc:
        for err in exc.errors():
            key = str(err["loc"][0]) if err["loc"] else ""
            errors.setdefault(key, plain_message(specs.get(key), dict(err), values.get(key)))
    return errors


def plain_message(spec: FieldSpec | None, err: dict[str, Any], value: Any) -> str:
    """One pydantic error said in plain words for the field `spec`."""
    kind, ctx = str(err.get("type", "")), dict(err.get("ctx") or {})
    if spec is not None and spec.kind == "size" and spec.unit is not None:
        if kind in ("int_parsing", "int_type", "int_from_float"):
            return f"{_shown(value)} is not {_size_help(spec.unit, '')}"
        bounds = _bounds_message(kind, ctx, lambda n: format_size(int(n), spec.unit))
        if bounds:
            return bounds
    if kind == "value_error":  # a validator's own words (a backwards GPU range, an unknown net0 key)
        return str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if spec is not None and spec.kind == "list" and spec.keywords:
        return f"{_shown(value)} is not allowed: use {spec.help}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"{_shown(value)} is not a whole number"
    if kind in ("float_parsing", "float_type"):
        return f"{_shown(value)} is not a number"
    if kind in ("bool_parsing", "bool_type"):
        return "must be on or off"
    bounds = _bounds_message(kind, ctx, str)
    if bounds:
        return bounds
    if kind == "string_pattern_mismatch":
        example = PATTERN_EXAMPLES.get(str(ctx.get("pattern", "")))
        return f"{_shown(value)} is not {example}" if example else f"{_shown(value)} is not in the expected form"
    if kind == "literal_error":
        allowed = ", ".join(repr(c) for c in (spec.choices if spec else ())) or str(ctx.get("expected", ""))
        return f"must be one of {allowed}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        if spec is not None and spec.name == "net":
            return "expected PVE's syntax like bridge=vmbr0,ip=192.0.2.200/24,gw=192.0.2.1 (or ip=dhcp)"
        return "expected key: value pairs in braces, like {key: value}"
    if kind in ("list_type", "tuple_type", "set_type"):
        return "expected a list of items separated by commas"
    if kind == "missing":
        return "a value is required"
    if kind == "extra_forbidden":
        return "is not a setting of this step"
    if kind in ("string_too_short", "too_short"):
        return "must not be empty"
    message = str(err.get("msg", "invalid value"))
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _bounds_message(kind: str, ctx: dict[str, Any], show: Any) -> str:
    for key, words in (("ge", "at least"), ("le", "at most"), ("gt", "more than"), ("lt", "less than")):
        name = {"ge": "greater_than_equal", "le": "less_than_equal", "gt": "greater_than", "lt": "less_than"}[key]
        if kind == name and key in ctx:
            return f"must be {words} {show(ctx[key])}"
    return ""


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return repr(value) if isinstance(value, str) else str(value)


def clean_values(model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """Values without blank entries for fields that do not accept None."""
    return {k: v for k, v in values.items() if not (v is None and not _accepts_none(model, k))}


def _accepts_none(model: type[BaseModel], name: str) -> bool:
    info = model.model_fields.get(name)
    if info is None:
        return True
    if info.is_required():
        return True  # let pydantic say "field required"/"none is not allowed"
    return _strip_optional(info.annotation)[1]
