"""How a pydantic field becomes a form field, and form text back into values (no Textual here).

Forms are built generically from `Params.model_fields`: the annotation picks the widget (switch,
choice, number, text, comma-separated list, YAML for anything structured), the default fills it,
the description is its help. Validation runs on the whole model and is mapped back per field.
"""

from __future__ import annotations

import enum
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

FieldKind = Literal["bool", "choice", "int", "float", "text", "list", "yaml"]


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: FieldKind
    label: str
    help: str
    optional: bool
    required: bool
    choices: tuple[Any, ...] = ()


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


def field_spec(name: str, info: FieldInfo) -> FieldSpec:
    annotation, optional = _strip_optional(info.annotation)
    origin = typing.get_origin(annotation)
    kind: FieldKind = "yaml"
    choices: tuple[Any, ...] = ()
    if annotation is bool:
        kind = "bool"
    elif origin is Literal:
        kind, choices = "choice", typing.get_args(annotation)
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        kind, choices = "choice", tuple(m.value for m in annotation)
    elif annotation is int:
        kind = "int"
    elif annotation is float:
        kind = "float"
    elif annotation is str:
        kind = "text"
    elif origin in (list, tuple, set, frozenset):
        args = typing.get_args(annotation)
        inner = _strip_optional(args[0])[0] if args else str
        kind = "list" if inner in (str, int, float) else "yaml"
    label = name.replace("_", " ")
    return FieldSpec(name=name, kind=kind, label=label, help=info.description or "", optional=optional,
                     required=info.is_required(), choices=choices)


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
    if spec.kind == "list":
        return ", ".join(str(v) for v in value)
    if spec.kind == "yaml":
        return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return str(value)


def from_text(spec: FieldSpec, text: str) -> Any:
    """The raw value for `text` (pydantic coerces and validates it afterwards)."""
    text = text.strip()
    if text == "":
        return [] if spec.kind == "list" else None
    if spec.kind == "list":
        return [part.strip() for part in text.split(",") if part.strip()]
    if spec.kind == "yaml":
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text  # pydantic reports the type error on the field
    return text


def validate(model: type[BaseModel], values: dict[str, Any]) -> dict[str, str]:
    """Per-field error messages of validating the whole model ("" key: errors not tied to a field).

    A blank field that does not accept None is an error naming its default (never silently reset)."""
    errors: dict[str, str] = {}
    for name, value in values.items():
        if value is None and not _accepts_none(model, name):
            default = model.model_fields[name].get_default(call_default_factory=True)
            errors[name] = f"a value is required (default: {default})"
    try:
        model.model_validate(clean_values(model, values))
    except ValidationError as exc:
        for err in exc.errors():
            key = str(err["loc"][0]) if err["loc"] else ""
            errors.setdefault(key, err["msg"])
    return errors


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
