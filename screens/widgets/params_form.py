"""A form built from a pydantic model's fields, validated (whole model) as you type.

Validation is off the key path: an edit only marks the form dirty and queues one validation
behind the keys already waiting, so a burst of keystrokes is applied in full and validated once.
`flush()` validates at once (the page calls it before running a step or leaving the page).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static, Switch

from screens.form_fields import FieldSpec, clean_values, field_specs, from_text, initial_value, to_text, validate
from screens.widgets.form_input import FormInput


class ParamsForm(Vertical):
    """One row per field: label, input, help and error line."""

    DEFAULT_CSS = """
    ParamsForm { height: auto; }
    ParamsForm .field { height: auto; }
    ParamsForm .field-label { width: 21; padding: 0 1 0 0; }
    ParamsForm .field-input { width: 1fr; }
    ParamsForm Input { width: 1fr; }
    ParamsForm .field-help { color: $text-muted; padding-left: 21; height: auto; }
    ParamsForm .field-help.-empty { display: none; }
    ParamsForm .field-help.-error { color: $error; }
    ParamsForm .form-error { color: $error; height: auto; display: none; }
    ParamsForm .form-error.shown { display: block; }
    ParamsForm Switch.field-input { width: 6; height: 1; border: none; padding: 0; }
    ParamsForm Switch:focus { border: none; background-tint: $foreground 10%; }
    ParamsForm .switch-state { width: auto; padding: 0 1; color: $text-muted; }
    """

    class Changed(Message):
        """Posted on every edit: the current values and the errors (empty when valid)."""

        def __init__(self, form: ParamsForm, values: dict[str, Any], errors: dict[str, str]) -> None:
            super().__init__()
            self.form = form
            self.values = values
            self.errors = errors

        @property
        def control(self) -> ParamsForm:
            return self.form

    def __init__(self, model: type[BaseModel], values: dict[str, Any], *, key: str,
                 exclude: tuple[str, ...] = (), id: str | None = None) -> None:
        super().__init__(id=id)
        self.model = model
        self.key = key
        self.specs: list[FieldSpec] = field_specs(model, exclude)
        self._initial = dict(values)
        self.errors: dict[str, str] = {}
        self._raw: dict[str, Any] = {}
        self._dirty = False
        #: checks a page adds beyond the model (what the host allows): the validated values → {field: message}
        self.checks: list[Callable[[BaseModel], dict[str, str]]] = []

    def _wid(self, name: str) -> str:
        return f"{self.key}--{name}"

    def compose(self) -> ComposeResult:
        for spec in self.specs:
            value = initial_value(self.model, spec.name, self._initial)
            with Horizontal(classes="field"):
                yield Label(spec.label, classes="field-label")
                yield self._input(spec, value)
                if spec.kind == "bool":
                    yield Static("on" if value else "off", id=f"{self._wid(spec.name)}--state",
                                 classes="switch-state", markup=False)
            # One line under the field: its help, or what is wrong with the value (one widget, not two).
            yield Static(spec.help, id=f"{self._wid(spec.name)}--error",
                         classes="field-help" if spec.help else "field-help -empty", markup=False)
        yield Static("", classes="form-error", markup=False)

    def _input(self, spec: FieldSpec, value: Any) -> Widget:
        wid = self._wid(spec.name)
        if spec.kind == "bool":
            return Switch(value=bool(value), id=wid, classes="field-input")
        if spec.kind == "choice":
            current = getattr(value, "value", value)
            options = [(str(c), c) for c in spec.choices]
            return Select(options, value=current if current in spec.choices else Select.NULL,
                          allow_blank=spec.optional, id=wid, classes="field-input", compact=True)
        # Numbers are typed as text and validated: an "integer" input silently drops what it cannot hold
        # ("1.5" became 15, letters vanished); a message is better than a different value.
        input_type = "text"
        placeholder = "(none)" if spec.optional else ("required" if spec.required else "")
        if spec.kind == "size":
            placeholder = "e.g. 480G" if spec.unit == "M" else "e.g. 200G"
        elif spec.kind == "list" and spec.keywords:
            placeholder = f"{spec.keywords[0]} or 0,1"
        return FormInput(to_text(spec, value), id=wid, type=input_type,  # type: ignore[arg-type]
                         placeholder=placeholder, classes="field-input", compact=True)

    def values(self) -> dict[str, Any]:
        """The raw values as entered (pydantic coerces them)."""
        out: dict[str, Any] = {}
        for spec in self.specs:
            widget = self.query_one(f"#{self._wid(spec.name)}")
            if isinstance(widget, Switch):
                out[spec.name] = widget.value
            elif isinstance(widget, Select):
                out[spec.name] = None if widget.value is Select.NULL else widget.value
            elif isinstance(widget, Input):
                out[spec.name] = from_text(spec, widget.value)
        self._raw = out
        return clean_values(self.model, out)

    def set_value(self, name: str, value: Any) -> None:
        spec = next(s for s in self.specs if s.name == name)
        widget = self.query_one(f"#{self._wid(name)}")
        if isinstance(widget, Switch):
            widget.value = bool(value)
            self._show_switch(name, bool(value))
        elif isinstance(widget, Select):
            widget.value = value if value in spec.choices else Select.NULL
        elif isinstance(widget, Input):
            widget.value = to_text(spec, value)

    def revalidate(self) -> dict[str, str]:
        values = self.values()
        self.errors = validate(self.model, self._raw, self._initial)
        if not self.errors and self.checks:
            try:
                validated = self.model.model_validate({**self._initial, **values})
            except ValidationError:
                pass
            else:
                for check in self.checks:
                    self.errors.update(check(validated))
        for spec in self.specs:
            line = self.query_one(f"#{self._wid(spec.name)}--error", Static)
            message = self.errors.get(spec.name, "")
            if message or line.has_class("-error"):
                line.update(f"✗ {message}" if message else spec.help)
                line.set_classes(["field-help", *(["-error"] if message else []),
                                  *(["-empty"] if not message and not spec.help else [])])
            widget = self.query_one(f"#{self._wid(spec.name)}")
            if widget.has_class("-invalid") != bool(message):
                widget.set_class(bool(message), "-invalid")
        other = "; ".join(m for k, m in self.errors.items() if k not in {s.name for s in self.specs})
        self.query_one(".form-error", Static).update(f"✗ {other}" if other else "")
        self.query_one(".form-error").set_class(bool(other), "shown")
        self.post_message(self.Changed(self, values, self.errors))
        return self.errors

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def dirty(self) -> bool:
        """Edited since the last validation."""
        return self._dirty

    def flush(self) -> None:
        """Validate now if an edit is waiting (before a run reads the values)."""
        if self._dirty and self.is_mounted:
            self._dirty = False
            self.revalidate()

    def _show_switch(self, name: str, value: bool) -> None:
        for state in self.query(f"#{self._wid(name)}--state").results(Static):
            state.update("on" if value else "off")

    @on(Input.Changed)
    @on(Switch.Changed)
    @on(Select.Changed)
    def _edited(self, event: Message) -> None:
        event.stop()
        if isinstance(event, Switch.Changed) and event.switch.id and event.switch.id.startswith(f"{self.key}--"):
            self._show_switch(event.switch.id.removeprefix(f"{self.key}--"), event.value)
        if not self.is_mounted or self._dirty:
            return  # a validation is already queued behind the pending keys
        self._dirty = True
        self.call_later(self.flush)
