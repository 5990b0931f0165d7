"""Forms are built generically from the real step parameter models and validated as a whole."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.playbook import load
from provisioner.steps.base import load_step_kinds
from screens.form_fields import clean_values, field_specs, from_text, to_text, validate
from screens.plain_text import plain_line
from screens.wizard_session import PAGES, changed_params
from tests.test_tui_support import PLAYBOOK


def model(kind: str) -> Any:
    return load_step_kinds()[kind].Params


def specs_by_name(kind: str) -> dict[str, Any]:
    return {s.name: s for s in field_specs(model(kind))}


def test_every_page_kind_is_a_registered_step_with_a_model() -> None:
    kinds = load_step_kinds()
    for page in PAGES:
        for kind in page.kinds:
            assert kind in kinds, f"page {page.name} drives unknown step kind {kind}"
            assert kinds[kind].Params.model_fields is not None


def test_field_kinds_follow_the_annotations() -> None:
    create = specs_by_name("lxc.create")
    assert create["cores"].kind == "int" and not create["cores"].optional
    assert create["vmid"].kind == "int" and create["vmid"].optional
    assert create["unprivileged"].kind == "bool"
    assert create["template"].kind == "text"
    assert create["net"].kind == "yaml"  # a nested model is edited as YAML
    passthrough = specs_by_name("lxc.gpu_passthrough")
    assert passthrough["mode"].kind == "choice"
    assert passthrough["mode"].choices == ("auto", "dev", "raw")
    assert passthrough["gpus"].kind == "yaml"  # 'all' or a list of indices
    venv = specs_by_name("venv.build")
    assert venv["extra_packages"].kind == "list"
    assert "wheel index" in venv["index_url"].help


def test_text_round_trip_of_reference_values() -> None:
    playbook = load(PLAYBOOK)
    create = next(s for s in playbook.steps if s.kind == "lxc.create")
    specs = specs_by_name("lxc.create")
    values = {name: from_text(specs[name], to_text(specs[name], create.params[name]))
              for name in create.params if specs[name].kind not in ("bool", "choice")}
    validated = model("lxc.create").model_validate({**create.params, **values})
    assert validated.memory == 491520 and validated.cores == 64
    assert validated.net.ip == "192.0.2.200/24" and validated.net.gw == "192.0.2.1"


def test_validation_names_the_bad_fields() -> None:
    params = model("lxc.create")
    errors = validate(params, {"cores": "0", "template": "ubuntu.tar.zst", "memory": "lots"})
    assert set(errors) == {"cores", "template", "memory"}
    assert "greater than or equal to 1" in errors["cores"]
    assert "local:vztmpl" in errors["template"]
    assert validate(params, {"cores": "64", "memory": "491520"}) == {}


def test_blank_optional_fields_mean_none_and_blank_fields_with_a_default_are_errors() -> None:
    params = model("lxc.create")
    specs = specs_by_name("lxc.create")
    raw = {"vmid": from_text(specs["vmid"], ""), "cores": from_text(specs["cores"], "  ")}
    assert raw == {"vmid": None, "cores": None}
    assert clean_values(params, raw) == {"vmid": None}
    assert validate(params, raw) == {"cores": "a value is required (default: 8)"}


def test_pattern_fields_are_checked_as_you_type() -> None:
    errors = validate(model("torch.resolve"), {"variant": "cuda12", "python": "3.12"})
    assert list(errors) == ["variant"]
    assert validate(model("torch.resolve"), {"variant": "cu128"}) == {}


def test_changed_params_keeps_only_non_defaults_and_existing_keys() -> None:
    params = model("torch.resolve")
    out = changed_params(params, {"torch": "==2.11.0", "python": "3.12", "prefer": "lowest-cuda",
                                  "variant": "cu130"}, keep={"python"})
    assert out == {"python": "3.12", "variant": "cu130"}


@pytest.mark.parametrize("kind", sorted({k for p in PAGES for k in p.kinds}))
def test_an_empty_form_reports_exactly_the_required_fields(kind: str) -> None:
    specs = field_specs(model(kind))
    blank = {s.name: from_text(s, "") for s in specs if s.kind not in ("bool", "choice")}
    must_fill = {s.name for s in specs if s.kind not in ("bool", "choice", "list") and not s.optional}
    assert set(validate(model(kind), blank)) == must_fill


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[1;31mERROR:\x1b[0m nvidia-installer failed", "ERROR: nvidia-installer failed"),
    ("Downloading \x1b]8;;https://x\x1b\\link\x1b]8;;\x1b\\ 10%", "Downloading link 10%"),
    ("bell\x07 and \x9b C1", "bell� and � C1"),
    ("[bold]x[/]\tcol", "[bold]x[/]      col"),
])
def test_remote_lines_are_shown_as_plain_text(raw: str, shown: str) -> None:
    assert plain_line(raw) == shown
