"""PVE's own API schema (pve-docs apidata.js for 8.1, 8.4 and 9.x) and a validator that answers like PVE.

The schema files live next to this module in ``schema/*.subset.json`` (``endpoints``: path ->
METHOD -> {parameters: {properties, additionalProperties}, returns, allowtoken, ...}).

Validation follows pve-common ``PVE::JSONSchema`` (``check_object``/``check_prop``/``check_type``/
``parse_property_string``) and returns PVE's error dict ``{param: message}`` with PVE's wording,
e.g. ``type check ('integer') failed - got 'abc'`` or ``property is not defined in schema and the
schema does not allow additional properties``. Booleans on the wire are only ``1``/``0`` (JSON
``true``/``false`` in JSON bodies; the CLI — ``pvesh`` — also accepts ``yes/no/on/off/true/false``).

Used by the lab's API server and by our client to pre-validate requests before sending them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

SchemaVersion = Literal["8.1", "8.4", "9"]
Wire = Literal["form", "json", "cli"]

SCHEMA_DIR = Path(__file__).with_name("schema")
SCHEMA_FILES: dict[str, str] = {
    "8.1": "pve-8.1_2023-11-22.subset.json",
    "8.4": "pve-8.4_2025-04-09.subset.json",
    "9": "pve-9.x_2026-04-30.subset.json",
}
#: number of slots of PVE's collapsed indexed keys (``net[n]`` -> net0..net31 ...)
INDEX_LIMITS: dict[str, int] = {"net": 32, "mp": 256, "dev": 256, "unused": 256}

PARAM_FAILED = "Parameter verification failed.\n"
MSG_MISSING = "property is missing and it is not optional"
MSG_NOT_DEFINED = "property is not defined in schema and the schema does not allow additional properties"

_INT_RE = re.compile(r"^[+-]?\d+$")
_NUM_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_TRUE_RE = re.compile(r"^(1|on|yes|true)$", re.IGNORECASE)
_FALSE_RE = re.compile(r"^(0|off|no|false)$", re.IGNORECASE)


def schema_version_for(release: str) -> SchemaVersion:
    """Pick the saved schema for a PVE release string (``8.1``, ``8.3``, ``9.1``, ``9``)."""
    parts = release.strip().split(".")
    try:
        major = int(parts[0])
        minor = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    except ValueError as exc:
        raise ValueError(f"not a PVE release: {release!r}") from exc
    if major >= 9:
        return "9"
    if major == 8 and minor >= 2:
        return "8.4"
    if major == 8:
        return "8.1"
    raise ValueError(f"PVE {release} is older than the oldest saved schema (8.1)")


def parse_boolean(value: str) -> int | None:
    """PVE::JSONSchema::parse_boolean."""
    if _TRUE_RE.match(value):
        return 1
    if _FALSE_RE.match(value):
        return 0
    return None


# --------------------------------------------------------------------------------------------
# named formats (pve-common JSONSchema.pm / pve-storage / pve-container verifiers)
# --------------------------------------------------------------------------------------------
class FormatError(ValueError):
    """A named-format check failed; str() is PVE's die text (with its trailing newline)."""


_DNS_LABEL = r"([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)"
_DNS_RE = re.compile(rf"^({_DNS_LABEL}\.)*{_DNS_LABEL}$")
_NODE_RE = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$")
_STORAGE_ID_RE = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.IGNORECASE)
_VOLID_RE = re.compile(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$", re.IGNORECASE | re.DOTALL)
_CONFIGID_RE = re.compile(r"^[a-z][a-z0-9_-]+$", re.IGNORECASE)
_DISK_SIZE_RE = re.compile(r"^(\d+(\.\d+)?)([KMGT])?$")
_MAC_RE = re.compile(r"^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$", re.IGNORECASE)
_CONTENT_TYPES = {"images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import"}


def _fail(msg: str) -> None:
    raise FormatError(msg + "\n")


def _f_vmid(v: str) -> None:
    if not re.match(r"^[1-9][0-9]{2,8}$", v):
        _fail("value does not look like a valid VM ID")


def _f_node(v: str) -> None:
    if not _NODE_RE.match(v):
        _fail("value does not look like a valid node name")


def _f_dns(v: str) -> None:
    if not _DNS_RE.match(v):
        _fail("value does not look like a valid DNS name")


def _f_dns_list(v: str) -> None:
    for part in re.split(r"[,;\s]+", v.strip()):
        if part and not _DNS_RE.match(part):
            _fail("value does not look like a valid DNS name list")


def _f_storage_id(v: str) -> None:
    if not _STORAGE_ID_RE.match(v):
        _fail(f"storage ID '{v}' contains illegal characters")


def _f_volume_id(v: str) -> None:
    if not _VOLID_RE.match(v):
        _fail(f"unable to parse volume ID '{v}'")


def _f_lxc_mp_string(v: str) -> None:
    if re.search(r"/\.\.?/", v) or re.search(r"/\.\.?$", v) or re.match(r"^\.\.?/", v):
        _fail(f"{v} contains illegal character sequences")


def _f_lxc_dev_string(v: str) -> None:
    # pve-container verify_lxc_dev_string: no /./ or /../ components, must start with /dev/
    if re.search(r"/\.\.?(?:/|$)", v) or not v.startswith("/dev/"):
        _fail(f"{v} is not a valid device path")


def _f_disk_size(v: str) -> None:
    if not _DISK_SIZE_RE.match(v):
        _fail("value does not look like a valid disk size")


def _f_ipv4(v: str) -> None:
    try:
        ipaddress.IPv4Address(v)
    except ValueError:
        _fail("value does not look like a valid IPv4 address")


def _f_ipv6(v: str) -> None:
    try:
        ipaddress.IPv6Address(v)
    except ValueError:
        _fail("value does not look like a valid IPv6 address")


def _f_mac(v: str) -> None:
    if not _MAC_RE.match(v):
        _fail("value does not look like a valid unicast MAC address")


def _cidr_ok(v: str, version: int) -> bool:
    if "/" not in v:
        return False
    try:
        net = ipaddress.ip_interface(v)
    except ValueError:
        return False
    return net.version == version


def _f_ipv4_config(v: str) -> None:
    if v not in ("dhcp", "manual") and not _cidr_ok(v, 4):
        _fail("value does not look like a valid IPv4 network configuration")


def _f_ipv6_config(v: str) -> None:
    if v not in ("auto", "dhcp", "manual") and not _cidr_ok(v, 6):
        _fail("value does not look like a valid IPv6 network configuration")


def _f_configid(v: str) -> None:
    if not _CONFIGID_RE.match(v):
        _fail(f"invalid configuration ID '{v}'")


def _f_configid_list(v: str) -> None:
    for part in re.split(r"[,;\s]+", v.strip()):
        if part:
            _f_configid(part)


def _f_content(v: str) -> None:
    if v not in _CONTENT_TYPES:
        _fail(f"invalid content type '{v}'")


def _f_content_list(v: str) -> None:
    for part in re.split(r"[,;\s]+", v.strip()):
        if part:
            _f_content(part)


def _f_tag_list(v: str) -> None:
    for tag in re.split(r"[,;\s]+", v.strip()):
        if tag and not re.match(r"^[a-z0-9_][a-z0-9_\-+.]*$", tag, re.IGNORECASE):
            _fail(f"invalid characters in tag '{tag}'")


def _f_startup(v: str) -> None:
    for part in v.split(","):
        if part and not re.match(r"^((order=)?\d+|up=\d+|down=\d+)$", part):
            _fail("unable to parse startup options")


def _f_ip_list(v: str) -> None:
    for part in re.split(r"[,;\s]+", v.strip()):
        if not part:
            continue
        try:
            ipaddress.ip_address(part.split("%", 1)[0])
        except ValueError:
            _fail(f"unable to parse IP address '{part}'")


def _f_realm(v: str) -> None:
    if not re.match(r"^[A-Za-z][A-Za-z.\-_\d]+$", v):
        _fail("value does not look like a valid realm")


def _f_poolid(v: str) -> None:
    if not re.match(r"^[A-Za-z0-9\-_]+$", v):
        _fail(f"invalid pool ID '{v}'")


FORMATS: dict[str, Callable[[str], None]] = {
    "pve-vmid": _f_vmid,
    "pve-node": _f_node,
    "dns-name": _f_dns,
    "dns-name-list": _f_dns_list,
    "pve-storage-id": _f_storage_id,
    "pve-volume-id": _f_volume_id,
    "pve-lxc-mp-string": _f_lxc_mp_string,
    "pve-lxc-dev-string": _f_lxc_dev_string,
    "disk-size": _f_disk_size,
    "ipv4": _f_ipv4,
    "ipv6": _f_ipv6,
    "mac-addr": _f_mac,
    "pve-ipv4-config": _f_ipv4_config,
    "pve-ipv6-config": _f_ipv6_config,
    "pve-configid": _f_configid,
    "pve-configid-list": _f_configid_list,
    "pve-storage-content": _f_content,
    "pve-storage-content-list": _f_content_list,
    "pve-tag-list": _f_tag_list,
    "pve-startup-order": _f_startup,
    "lxc-ip-with-ll-iface-list": _f_ip_list,
    "pve-realm": _f_realm,
    "pve-poolid": _f_poolid,
}


# --------------------------------------------------------------------------------------------
# the validator
# --------------------------------------------------------------------------------------------
def _add_error(errors: dict[str, str], path: str, msg: str) -> None:
    path = path or "_root"
    errors[path] = f"{errors[path]}\\n{msg}" if path in errors else msg


def _lookup(props: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """Find a property schema, expanding collapsed indexed keys (``dev7`` -> ``dev[n]``)."""
    if key in props and not key.endswith("[n]"):
        schema: dict[str, Any] = props[key]
        return schema
    m = re.match(r"^([a-z][a-z_\-]*?)(\d+)$", key)
    if m and f"{m.group(1)}[n]" in props:
        limit = INDEX_LIMITS.get(m.group(1), 256)
        if int(m.group(2)) < limit and (m.group(2) == "0" or not m.group(2).startswith("0")):
            indexed: dict[str, Any] = props[f"{m.group(1)}[n]"]
            return indexed
    return None


def lookup_property(props: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """Public form of the indexed-key-aware property lookup (``net7`` -> ``net[n]``'s schema)."""
    return _lookup(props, key)


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _num_text(limit: Any) -> str:
    if isinstance(limit, float) and limit.is_integer():
        return str(int(limit))
    return str(limit)


def _check_type(path: str, type_: str | None, value: Any, wire: Wire, errors: dict[str, str]) -> Any:
    """Return the typed value, or None after recording PVE's type error."""
    if type_ is None or type_ == "string":
        return _as_text(value) if not isinstance(value, (dict, list)) else value
    if isinstance(value, bool):
        if type_ == "boolean" and wire == "json":
            return value
        if wire == "json":
            _add_error(errors, path, f"type check ('{type_}') failed - got JSON::PP::Boolean")
            return None
    text = _as_text(value)
    if type_ == "boolean":
        if text in ("1", "0"):
            return text == "1"
        if wire == "cli" and (parsed := parse_boolean(text)) is not None:
            return bool(parsed)
        _add_error(errors, path, f"type check ('boolean') failed - got '{text}'")
        return None
    if type_ == "integer":
        if isinstance(value, float) and not value.is_integer():
            text = repr(value)
        if not _INT_RE.match(text):
            _add_error(errors, path, f"type check ('integer') failed - got '{text}'")
            return None
        return int(text)
    if type_ == "number":
        if not _NUM_RE.match(text):
            _add_error(errors, path, f"type check ('number') failed - got '{text}'")
            return None
        return float(text)
    if type_ in ("array", "object", "null"):
        return value
    return text


def _check_format(fmt: Any, text: str, path: str) -> None:
    """Raise FormatError with PVE's text; dict formats are property strings."""
    if isinstance(fmt, dict):
        _parse_property_string(fmt, text, path)
        return
    checker = FORMATS.get(str(fmt))
    if checker is not None:
        checker(text)


def _parse_property_string(fmt: Mapping[str, Any], data: str, path: str) -> dict[str, Any]:
    res: dict[str, Any] = {}
    default_key: str | None = None
    for part in data.split(","):
        if not part.strip():
            continue
        if m := re.match(r"^([^=]+)=(.+)$", part, re.DOTALL):
            k, v = m.group(1), m.group(2)
            if k in res:
                raise FormatError(f"duplicate key in comma-separated list property: {k}\n")
            sub = fmt.get(k)
            if isinstance(sub, dict) and sub.get("type") == "boolean":
                parsed = parse_boolean(v)
                v = str(parsed) if parsed is not None else v
            res[k] = v
        elif "=" not in part:
            if default_key is not None:
                raise FormatError(f"duplicate key in comma-separated list property: {default_key}\n")
            for key, sub in fmt.items():
                if isinstance(sub, dict) and sub.get("default_key"):
                    default_key = key
                    if key in res:
                        raise FormatError(f"duplicate key in comma-separated list property: {key}\n")
                    res[key] = part
                    break
            if default_key is None:
                raise FormatError("value without key, but schema does not define a default key\n")
        else:
            raise FormatError("missing key in comma-separated list property\n")
    errors: dict[str, str] = {}
    typed = _check_object(path, fmt, 0, res, "form", errors)
    if errors:
        nested = "".join(f"{k}: {v.rstrip(chr(10))}\n" for k, v in sorted(errors.items()))
        raise FormatError("format error\n" + nested)
    return typed


def _check_prop(value: Any, schema: Mapping[str, Any], path: str, wire: Wire, errors: dict[str, str]) -> Any:
    if value is None:
        if not schema.get("optional") and schema.get("type") != "null":
            _add_error(errors, path, MSG_MISSING)
        return None
    typed = _check_type(path, schema.get("type"), value, wire, errors)
    if typed is None:
        return None
    if isinstance(typed, (dict, list)):
        return typed
    text = _as_text(value)  # PVE checks the value as sent ("0100" stays "0100")
    if (fmt := schema.get("format")) is not None:
        try:
            _check_format(fmt, text, path)
        except FormatError as exc:
            _add_error(errors, path, f"invalid format - {exc}")
            return None
    if (pattern := schema.get("pattern")) is not None:
        py_pattern = str(pattern).replace("(?^:", "(?:")
        if not re.match(f"^(?:{py_pattern})$", text):
            _add_error(errors, path, "value does not match the regex pattern")
            return None
    if (max_len := schema.get("maxLength")) is not None and len(text) > int(max_len):
        _add_error(errors, path, f"value may only be {max_len} characters long")
        return None
    if (min_len := schema.get("minLength")) is not None and len(text) < int(min_len):
        _add_error(errors, path, f"value must be at least {min_len} characters long")
        return None
    if _NUM_RE.match(text):
        num = float(text)
        if (maximum := schema.get("maximum")) is not None and num > float(maximum):
            _add_error(errors, path, f"value must have a maximum value of {_num_text(maximum)}")
            return None
        if (minimum := schema.get("minimum")) is not None and num < float(minimum):
            _add_error(errors, path, f"value must have a minimum value of {_num_text(minimum)}")
            return None
    if (enum := schema.get("enum")) and text not in [str(e) for e in enum]:
        _add_error(
            errors, path, f"value '{text}' does not have a value in the enumeration '{', '.join(map(str, enum))}'"
        )
        return None
    return typed


def _check_object(
    path: str,
    props: Mapping[str, Any],
    additional: Any,
    value: Mapping[str, Any],
    wire: Wire,
    errors: dict[str, str],
) -> dict[str, Any]:
    typed: dict[str, Any] = {}
    for key, sub in props.items():
        if key.endswith("[n]") or not isinstance(sub, dict):
            continue
        if key not in value:
            _check_prop(None, sub, f"{path}.{key}" if path else key, wire, errors)
    for key, raw in value.items():
        newpath = f"{path}.{key}" if path else key
        sub = _lookup(props, key)
        if sub is not None:
            checked = _check_prop(raw, sub, newpath, wire, errors)
            if checked is not None:
                typed[key] = checked
            requires = sub.get("requires")
            if isinstance(requires, str) and requires not in value:
                req_path = f"{path}.{requires}" if path else requires
                _add_error(errors, req_path, f"missing property - '{newpath}' requires this property")
            continue
        if additional is not None and not additional:
            _add_error(errors, newpath, MSG_NOT_DEFINED)
            continue
        if isinstance(additional, dict):
            checked = _check_prop(raw, additional, newpath, wire, errors)
            if checked is not None:
                typed[key] = checked
        else:
            typed[key] = raw
    return typed


def validate_params(
    parameters: Mapping[str, Any], params: Mapping[str, Any], wire: Wire = "form"
) -> tuple[dict[str, Any], dict[str, str]]:
    """Validate `params` against a method's ``parameters`` schema: (typed values, errors)."""
    errors: dict[str, str] = {}
    props = parameters.get("properties") or {}
    additional = parameters.get("additionalProperties", 1)
    present = {k: v for k, v in params.items() if v is not None}
    typed = _check_object("", props, additional, present, wire, errors)
    return typed, errors


def parse_property_string(fmt: Mapping[str, Any], value: str, path: str = "") -> dict[str, Any]:
    """Parse and check a property string against a format dict; raises FormatError like PVE."""
    return _parse_property_string(fmt, value, path)


@dataclass(frozen=True)
class MethodSchema:
    """One method of one schema path."""

    path: str
    method: str
    info: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.info.get("name", ""))

    @property
    def parameters(self) -> Mapping[str, Any]:
        params: Mapping[str, Any] = self.info.get("parameters") or {}
        return params

    @property
    def properties(self) -> Mapping[str, Any]:
        props: Mapping[str, Any] = self.parameters.get("properties") or {}
        return props

    @property
    def allowtoken(self) -> bool:
        return bool(self.info.get("allowtoken", 1))

    @property
    def returns(self) -> Mapping[str, Any]:
        ret: Mapping[str, Any] = self.info.get("returns") or {}
        return ret

    def property_schema(self, key: str) -> dict[str, Any] | None:
        return _lookup(self.properties, key)


@dataclass
class Validation:
    """Outcome of validating one request."""

    schema_path: str | None
    method: MethodSchema | None
    path_params: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def found(self) -> bool:
        return self.method is not None

    @property
    def ok(self) -> bool:
        return self.method is not None and not self.errors


class ApiSchema:
    """The endpoints of one PVE version."""

    def __init__(self, version: SchemaVersion, endpoints: Mapping[str, Mapping[str, Any]], source: Mapping[str, Any]):
        self.version = version
        self.endpoints = endpoints
        self.source = source
        self._templates = [(p, p.strip("/").split("/")) for p in endpoints]

    def match(self, path: str) -> tuple[str, dict[str, str]] | None:
        """Match a concrete path (``/nodes/pve/lxc/200``) to a schema path and its URI params."""
        segs = [s for s in path.strip("/").split("/")] if path.strip("/") else []
        best: tuple[int, str, dict[str, str]] | None = None
        for template, tsegs in self._templates:
            tsegs = tsegs if template.strip("/") else []
            if len(tsegs) != len(segs):
                continue
            params: dict[str, str] = {}
            literal = 0
            for t, s in zip(tsegs, segs, strict=True):
                if t.startswith("{") and t.endswith("}"):
                    if not s:
                        break
                    params[t[1:-1]] = s
                elif t == s:
                    literal += 1
                else:
                    break
            else:
                if best is None or literal > best[0]:
                    best = (literal, template, params)
        return (best[1], best[2]) if best else None

    def method(self, method: str, path: str) -> tuple[MethodSchema, dict[str, str]] | None:
        matched = self.match(path)
        if matched is None:
            return None
        template, params = matched
        info = self.endpoints[template].get(method.upper())
        if info is None:
            return None
        return MethodSchema(template, method.upper(), info), params

    def validate(self, method: str, path: str, params: Mapping[str, Any], wire: Wire = "form") -> Validation:
        """Validate a request; URI params (``node``, ``vmid``...) are checked like body params."""
        found = self.method(method, path)
        if found is None:
            return Validation(None, None)
        ms, path_params = found
        merged: dict[str, Any] = dict(params)
        errors: dict[str, str] = {}
        for key, value in path_params.items():
            if key in merged and _as_text(merged[key]) != value:
                errors[key] = "duplicate parameter (already defined in URI) with conflicting values!"
            merged[key] = value
        typed, verrors = validate_params(ms.parameters, merged, wire)
        errors.update(verrors)
        return Validation(ms.path, ms, path_params, typed, errors)


@cache
def load_schema(version: str = "8.4") -> ApiSchema:
    """Load a saved schema: ``"8.1"``, ``"8.4"`` or ``"9"`` (``"9.x"``/``"9.1"`` mean ``"9"``)."""
    key: SchemaVersion = schema_version_for(version.replace("x", "0"))
    data = json.loads((SCHEMA_DIR / SCHEMA_FILES[key]).read_text())
    return ApiSchema(key, data["endpoints"], data.get("source", {}))
