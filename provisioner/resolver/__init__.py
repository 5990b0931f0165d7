"""PyTorch wheel resolver: which download.pytorch.org index and torch version fit this host.

    from provisioner.resolver import ResolveRequest, resolve
    result = resolve(ResolveRequest(cc=["12.0"] * 8, driver="595.71.05", python="3.12", torch="==2.11.0"))
    # -> Resolution(variant="cu128", index_url=".../whl/cu128", torch="2.11.0", ...) or ResolveError

Pure: no I/O apart from reading the packaged data file once (`load_data()`).
"""

from provisioner.resolver.api import resolve_dict
from provisioner.resolver.data import WheelData, load_data, parse_data
from provisioner.resolver.models import (
    OtherTool,
    Rejected,
    Resolution,
    ResolveError,
    ResolveRequest,
    normalize_torch_requirement,
)
from provisioner.resolver.solver import resolve

__all__ = [
    "OtherTool",
    "Rejected",
    "Resolution",
    "ResolveError",
    "ResolveRequest",
    "WheelData",
    "load_data",
    "normalize_torch_requirement",
    "parse_data",
    "resolve",
    "resolve_dict",
]
