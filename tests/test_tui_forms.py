"""Forms are built generically from the real step parameter models and validated as a whole."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provisioner.playbook import load
from provisioner.steps.base import load_step_kinds
from screens.form_fields import clean_values, field_specs, from_text, to_text, validate
from screens.plain_text import plain_line
from screens.wizard_session import PAGES, changed_params
from tests.support.tui import PLAYBOOK


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
    assert passthrough["gpus"].kind == "list" and passthrough["gpus"].keywords == ("all",)
    assert passthrough["gpus"].item == "int"
    assert create["memory"].kind == "size" and create["memory"].unit == "M"
    assert create["rootfs_size_gb"].kind == "size" and create["rootfs_size_gb"].unit == "G"
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
    assert errors["cores"] == "must be at least 1"
    assert "local:vztmpl" in errors["template"]
    assert errors["memory"] == "'lots' is not a size like 480G or 512M (a bare number is MiB)"
    assert validate(params, {"cores": "64", "memory": "491520"}) == {}


def test_blank_optional_fields_mean_none_and_blank_fields_with_a_default_are_errors() -> None:
    params = model("lxc.create")
    specs = specs_by_name("lxc.create")
    raw = {"vmid": from_text(specs["vmid"], ""), "cores": from_text(specs["cores"], "  ")}
    assert raw == {"vmid": None, "cores": None}
    assert clean_values(params, raw) == {"vmid": None}
    assert validate(params, raw) == {"cores": "a value is required (default: 8)"}
    assert validate(params, {"memory": None}) == {"memory": "a value is required (default: 64G)"}


def test_pattern_fields_are_checked_as_you_type() -> None:
    errors = validate(model("torch.resolve"), {"variant": "cuda12", "python": "3.12"})
    assert errors == {"variant": "'cuda12' is not a variant like cu128, cu130 or cpu"}
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


def test_gpus_are_all_or_a_comma_separated_list() -> None:
    spec = specs_by_name("lxc.gpu_passthrough")["gpus"]
    params = model("lxc.gpu_passthrough")
    assert to_text(spec, "all") == "all"  # not YAML's "all\n..." document
    assert to_text(spec, [0, 1]) == "0,1"
    for text, value in (("all", "all"), (" ALL ", "all"), ("0,1", [0, 1]), ("0, 1", [0, 1]), ("0 1", [0, 1]),
                        ("[0, 1]", [0, 1]), ("3", [3])):
        assert validate(params, {"gpus": from_text(spec, text)}) == {}, text
        assert params.model_validate({"gpus": from_text(spec, text)}).gpus == value, text
    message = validate(params, {"gpus": from_text(spec, "0,x")})["gpus"]
    assert message.startswith("0,x is not allowed") and "'all'" in message and "0,1" in message
    assert "list[int]" not in message and "literal" not in message.lower()


@pytest.mark.parametrize(("field", "text", "stored"), [
    ("memory", "480G", 491520), ("memory", "512M", 512), ("memory", "1.5G", 1536), ("memory", "1T", 1048576),
    ("memory", "2048", 2048), ("memory", "480GiB", 491520), ("memory", "480 gb", 491520),
    ("rootfs_size_gb", "200G", 200), ("rootfs_size_gb", "2T", 2048), ("rootfs_size_gb", "64", 64),
])
def test_sizes_are_written_as_people_write_them(field: str, text: str, stored: int) -> None:
    spec = specs_by_name("lxc.create")[field]
    assert from_text(spec, text) == stored
    assert from_text(spec, to_text(spec, stored)) == stored  # what is shown reads back as the same value
    assert validate(model("lxc.create"), {field: from_text(spec, text)}) == {}


@pytest.mark.parametrize(("field", "text"), [("memory", "lots"), ("memory", "1.3M"), ("rootfs_size_gb", "512M"),
                                             ("rootfs_size_gb", "-5G")])
def test_a_bad_size_says_what_a_size_looks_like(field: str, text: str) -> None:
    spec = specs_by_name("lxc.create")[field]
    message = validate(model("lxc.create"), {field: from_text(spec, text)})[field]
    assert message.startswith(f"'{text}' is not a size like "), message


def test_shown_values_of_the_reference_playbook_are_plain() -> None:
    playbook = load(PLAYBOOK)
    create = next(s for s in playbook.steps if s.kind == "lxc.create")
    specs = specs_by_name("lxc.create")
    assert to_text(specs["memory"], create.params["memory"]) == "480G"
    assert to_text(specs["net"], create.params["net"]) == "bridge=vmbr0,ip=192.0.2.200/24,gw=192.0.2.1"


def test_no_message_is_in_pydantics_words() -> None:
    bad = {"lxc.create": {"cores": "x", "memory": "y", "net": "z", "hostname": "bad_!", "unprivileged": "maybe"},
           "burnin.run": {"sizes": "big", "thresholds": "[1]", "duration_s": "-1"},
           "torch.resolve": {"python": "three"}}
    for kind, values in bad.items():
        for name, message in validate(model(kind), values).items():
            for words in ("Value error", "valid dictionary", "instance of", "Input should", "string_pattern"):
                assert words not in message, (kind, name, message)


# --- host addresses: the connect form's `host` (validate.HostAddress) against the standard library --------

def _accepted(text: str) -> bool:
    from screens.pages.connect import ConnectForm

    return "host" not in validate(ConnectForm, {"host": text, "key_file": "~/.ssh/id_ed25519"})


@given(st.lists(st.integers(0, 999), min_size=4, max_size=4), st.booleans())
def test_dotted_quads_are_addresses_exactly_when_ipaddress_says_so(octets: list[int], pad: bool) -> None:
    text = ".".join(f"{o:03d}" if pad else str(o) for o in octets)
    try:
        ipaddress.IPv4Address(text)
        valid = True
    except ValueError:
        valid = False
    assert _accepted(text) == valid, text


@given(st.integers(0, 2**128 - 1), st.sampled_from(["compressed", "exploded"]))
def test_every_ipv6_address_is_accepted(number: int, form: str) -> None:
    text = getattr(ipaddress.IPv6Address(number), form)
    assert _accepted(text), text


@given(st.text(alphabet="0123456789abcdef:.", min_size=1, max_size=45).filter(lambda t: ":" in t))
def test_text_with_colons_is_accepted_exactly_when_it_is_an_ipv6_address(text: str) -> None:
    try:
        ipaddress.IPv6Address(text)
        valid = True
    except ValueError:
        valid = False
    assert _accepted(text) == valid, text


_label = st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)


@given(st.lists(_label, min_size=1, max_size=4))
def test_dns_names_are_accepted(labels: list[str]) -> None:
    assert _accepted(".".join(labels))


@pytest.mark.parametrize("text", ["300.1.2.3", "1.2.3", "256.256.256.256", "1.2.3.4.5", "01.2.3.4", "pve_1",
                                  "-pve", "[fd00::1]", "fd00::1::2", "a..b", ""])
def test_not_hosts(text: str) -> None:
    assert not _accepted(text), text


def test_the_package_count_is_packages_only() -> None:
    from screens.pages.venv import installed_packages, packages_text

    log = (Path(__file__).parent / "fixtures" / "logs" / "clean-uv-torch-install.log").read_text().splitlines()
    installed = [line.removeprefix(" + ") for line in log if line.startswith(" + ")]
    freeze = ["Using Python 3.12.3 environment at: /opt/torch-venv", *installed]
    assert installed_packages(freeze) == installed
    assert f"installed ({len(installed)}):" in packages_text({}, None, freeze).plain


def test_variants_are_offered_in_order() -> None:
    from provisioner.resolver.models import Rejected, Resolution
    from screens.pages.pytorch import candidate_variants

    res = Resolution(variant="cu128", cuda="12.8", index_url="https://download.pytorch.org/whl/cu128",
                     torch="2.11.0", torchvision="0.26.0", reasons=[], verified=True,
                     rejected=[Rejected(variant=v, torch="2.11.0", reason="test")
                               for v in ("cu130", "cpu", "cu126", "cu128", "cu118")])
    assert candidate_variants(res) == ["cu118", "cu126", "cu128", "cu130", "cpu"]


# --- fields that speak Proxmox (issue #28 item 3) -------------------------------------------------------------


def test_gpu_ranges_are_accepted_in_the_form_and_the_playbook(tmp_path: Path) -> None:
    spec = specs_by_name("lxc.gpu_passthrough")["gpus"]
    params = model("lxc.gpu_passthrough")
    for text, value in (("0-3", [0, 1, 2, 3]), ("0,2-3", [0, 2, 3]), ("4-7 1", [1, 4, 5, 6, 7]), ("3-3", [3])):
        assert validate(params, {"gpus": from_text(spec, text)}) == {}, text
        assert params.model_validate({"gpus": from_text(spec, text)}).gpus == value, text
    assert "runs backwards" in validate(params, {"gpus": from_text(spec, "3-0")})["gpus"]
    book = tmp_path / "pb.yaml"
    text = Path(PLAYBOOK).read_text()
    assert "gpus: all" in text
    book.write_text(text.replace("gpus: all", 'gpus: "0-3"'))
    step = next(s for s in load(book).steps if s.kind == "lxc.gpu_passthrough")
    assert params.model_validate(step.params).gpus == [0, 1, 2, 3]


def test_net_in_pves_own_syntax_in_the_form_and_the_playbook(tmp_path: Path) -> None:
    create = model("lxc.create")
    spec = specs_by_name("lxc.create")["net"]
    pve = "bridge=vmbr0,ip=192.0.2.200/24,gw=192.0.2.1"
    assert validate(create, {"net": from_text(spec, pve)}) == {}
    net = create.model_validate({"net": from_text(spec, pve)}).net
    assert (net.bridge, net.ip, net.gw) == ("vmbr0", "192.0.2.200/24", "192.0.2.1")
    assert to_text(spec, net) == pve  # the field shows what the plan prints
    assert net.property_string() == "name=eth0,bridge=vmbr0,ip=192.0.2.200/24,gw=192.0.2.1,type=veth"
    # as `pct config` prints net0, name and type included
    assert create.model_validate({"net": "name=eth0,bridge=vmbr1,ip=dhcp,type=veth"}).net.bridge == "vmbr1"
    assert "unknown key 'hwaddr'" in validate(create, {"net": "bridge=vmbr0,hwaddr=x"})["net"]
    book = tmp_path / "pb.yaml"
    data = Path(PLAYBOOK).read_text()
    import yaml

    doc = yaml.safe_load(data)
    next(s for s in doc["steps"] if s["kind"] == "lxc.create")["params"]["net"] = pve
    book.write_text(yaml.safe_dump(doc, sort_keys=False))
    step = next(s for s in load(book).steps if s.kind == "lxc.create")
    assert create.model_validate(step.params).net.gw == "192.0.2.1"


def test_numbers_that_do_not_fit_are_refused_with_a_message_not_changed() -> None:
    create = model("lxc.create")
    spec = specs_by_name("lxc.create")["cores"]
    assert validate(create, {"cores": from_text(spec, "1.5")}) == {"cores": "'1.5' is not a whole number"}
    assert validate(create, {"cores": from_text(spec, "8x")}) == {"cores": "'8x' is not a whole number"}


def test_a_blank_field_names_the_playbooks_value_not_the_models_default() -> None:
    create = model("lxc.create")
    assert validate(create, {"cores": None}, {"cores": 64}) == {"cores": "a value is required (the playbook has 64)"}
    assert validate(create, {"cores": None}) == {"cores": "a value is required (default: 8)"}


def test_connect_form_checks_the_api_user_and_secret_reference() -> None:
    """The wizard's connect form takes the same PVE user id and `file:` rules as a playbook (issue 23)."""
    from screens.pages.connect import ConnectForm

    ok = {"host": "10.0.0.1", "key_file": "~/.ssh/id_ed25519"}
    assert "api_user" not in validate(ConnectForm, {**ok, "api_user": "provisioner@pve"})
    assert "api_user" in validate(ConnectForm, {**ok, "api_user": "root"})
    assert "api_password" in validate(ConnectForm, {**ok, "api_password": "file:/proc/self/environ"})
    assert "api_password" in validate(ConnectForm, {**ok, "api_password": "file:~/.ssh/id_ed25519"})


def test_every_field_label_fits_the_label_column_without_breaking() -> None:
    """The label column is LABEL_WIDTH wide (app.tcss `.field-label`: width 21 less its padding): a longer
    label broke mid-word at 100×30 (`apt lock backoff max` / `s`), so every step kind's labels must fit."""
    from screens.form_fields import LABEL_WIDTH

    for kind, cls in load_step_kinds().items():
        for spec in field_specs(cls.Params):
            assert len(spec.label) <= LABEL_WIDTH, f"{kind}.{spec.name}: {spec.label!r}"
    assert specs_by_name("driver.userspace")["apt_lock_backoff_max_s"].label == "apt lock backoff (s)"


def test_a_long_url_is_shortened_in_the_middle_and_other_text_is_untouched() -> None:
    from screens.fit import fit_urls, has_long_url, middle_ellipsis

    url = "https://download.nvidia.com/XFree86/Linux-x86_64/595.71.05/NVIDIA-Linux-x86_64-595.71.05.run"
    short = middle_ellipsis(url, 60)
    assert len(short) == 60 and short.startswith("https://download.nvidia.com/") and short.endswith("595.71.05.run")
    assert short.count("…") == 1
    line = f"install NVIDIA userspace 595.71.05 from {url}; apt-get install kmod"
    fitted = fit_urls(line, 60)
    assert fitted == f"install NVIDIA userspace 595.71.05 from {short}; apt-get install kmod"
    assert fit_urls(line, 200) == line and not has_long_url([line], 200) and has_long_url([line], 60)
