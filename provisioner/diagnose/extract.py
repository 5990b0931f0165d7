"""Pure readers of the values a log reveals (GPU arch, versions) to fill finding templates."""

from __future__ import annotations

from provisioner.burnin import xid as xid_table
from provisioner.diagnose.rules.common import DRIVER_ENTRY_NAME, GPU_EXTRA
from provisioner.diagnose.rx import Regex, compile_rx

_I = 0  # every field regex is case-insensitive and multi-line (rx.compile_rx)


def _rx(regex: str, _flags: int = 0) -> Regex:
    return compile_rx(regex)


_XID_RE = _rx(r"\bXid\s*(?:\(PCI:[^)\n]{0,40}\))?[\s:,=]*(\d{1,3})\b", _I)

# (field, regex with one group). The first regex that matches wins for each field.
_FIELD_PATTERNS: tuple[tuple[str, Regex], ...] = (
    ("gpu", _rx(r"(NVIDIA[^\n]{2,60}?|GeForce[^\n]{2,40}?|Tesla[^\n]{2,40}?)\s+with\s+CUDA\s+capability", _I)),
    ("gpu", _rx(r"Found\s+GPU\d+\s+(.{3,60}?)\s+which\s+is\s+of\s+(?:cuda|compute)", _I)),
    ("sm", _rx(r"CUDA\s+capability\s+sm_(\d{2,3})", _I)),
    ("sm", _rx(r"Unsupported\s+gpu\s+architecture\s+'compute_(\d{2,3})'", _I)),
    ("sm", _rx(r"Value\s+'sm_(\d{2,3})a?'\s+is\s+not\s+defined", _I)),
    ("cc", _rx(r"(?:cuda|compute)\s+capability(?:\s+\(CC\))?\s+(\d{1,2}\.\d)", _I)),
    ("archs", _rx(r"supports\s+CUDA\s+capabilities\s+((?:sm_\d+[a-z]?\s*)+)", _I)),
    ("driver", _rx(r"(?:Driver|KMD)\s+Version:\s*(\d{3}\.\d+(?:\.\d+)?)", _I)),
    ("module_version", _rx(r"Kernel\s+Module(?:\s+for\s+\S+)?\s+(\d{3}\.\d+(?:\.\d+)?)", _I)),
    ("module_version", _rx(r"kernel\s+module\s+has\s+(?:the\s+)?version\s+\"?(\d{3}\.\d+(?:\.\d+)?)", _I)),
    ("module_version", _rx(r"kernel\s+version\s+(?:is\s+)?(\d{3}\.\d+(?:\.\d+)?)\s+does\s+not\s+match", _I)),
    ("lib_version", _rx(r"NVML\s+library\s+version:\s*(\d{3}\.\d+(?:\.\d+)?)", _I)),
    (
        "lib_version",
        _rx(r"(?:driver\s+component|client)\s+has\s+(?:the\s+)?version\s+\"?(\d{3}\.\d+(?:\.\d+)?)", _I),
    ),
    ("lib_version", _rx(r"DSO\s+version\s+(\d{3}\.\d+(?:\.\d+)?)", _I)),
    ("driver_cuda", _rx(r"CUDA\s+(?:UMD\s+)?Version:\s*(\d{2}\.\d)", _I)),
    (
        "driver_cuda_raw",
        _rx(r"driver\s+on\s+your\s+system\s+is\s+too\s+old\s+\(found\s+version\s+(\d{4,5})\)", _I),
    ),
    ("required_cuda", _rx(r"unsatisfied\s+condition:\s*cuda\s*>=\s*(\d+\.\d+)", _I)),
    ("torch_version", _rx(r"PyTorch\s+version\s*:\s*(\d+\.\d+\S*)", _I)),
    ("torch_version", _rx(r"\btorch[-=]=?\s*(\d+\.\d+(?:\.\d+)?(?:\.dev\d+)?\+\w+)", _I)),
    ("torch_version", _rx(r"\btorch(?:==|-)(\d+\.\d+(?:\.\d+)?)\b", _I)),
    ("torch_cuda", _rx(r"CUDA\s+used\s+to\s+build\s+PyTorch\s*:\s*(\d+\.\d+)", _I)),
    ("torch_cuda_tag", _rx(r"\btorch[-=]=?\s*\d+\.\d+(?:\.\d+)?(?:\.dev\d+)?\+(cu\d{3})", _I)),
    ("library", _rx(r"\b(lib[\w.+-]+?\.so(?:\.[\d.]+)?):\s+cannot\s+open\s+shared\s+object", _I)),
    ("library", _rx(r"`((?:GLIBCXX|GLIBC|CXXABI)_[\d.]+)'\s+not\s+found", _I)),
    # macOS dyld: "Library not loaded: @rpath/libcudart.9.0.dylib"; cudarc: "Unable to find nvrtc lib under the names"
    ("library", _rx(r"Library\s+not\s+loaded:\s+(?:@rpath/|@loader_path/|@executable_path/|/\S*/)?([\w.+-]+\.dylib)", _I)),
    ("library", _rx(r"Unable\s+to\s+find\s+(\w+)\s+lib\s+under\s+the\s+names", _I)),
    ("library", _rx(r"Could\s+not\s+load\s+(?:dynamic\s+)?library\s+'?([\w.+-]+\.so[\d.]*)", _I)),
    # CTranslate2's loader, FFmpeg's nv-codec-headers loader, glibc's open_verify on a broken file
    ("library", _rx(r"\bLibrary\s+(lib[\w.+-]+?\.so(?:\.[\d.]+)?)\s+is\s+not\s+found", _I)),
    ("library", _rx(r"\bCannot\s+load\s+(lib[\w.+-]+?\.so(?:\.[\d.]+)?|nv[\w]+\.dll)", _I)),
    ("library", _rx(r"\b(lib[\w.+-]+?\.so(?:\.[\d.]+)?):\s+(?:file\s+too\s+short|invalid\s+ELF\s+header)", _I)),
    # a CUDA driver API / NVML entry point the driver's library lacks (case-sensitive: the upper-case letter after
    # `cu`/`nvml` is the driver API's, not libcudart's `cuda…` or cuFile's)
    ("symbol", _rx(r"undefined\s+symbol:\s+((?-i:cu(?:[A-EG-Z]|F[a-hj-z])\w*|nvml[A-Z]\w*))\b", _I)),
    ("symbol", _rx(rf"entry\s+point\s+(?:named\s+)?[\"'`]?((?-i:{DRIVER_ENTRY_NAME}))\b", _I)),
    # a GPU extra pip/uv say the version does not define
    ("extra", _rx(rf"does\s+not\s+(?:provide\s+the\s+extra|have\s+an\s+extra\s+named)\s*[\"'`]?({GPU_EXTRA}[\w.-]*)",
                  _I)),
    ("vmid", _rx(r"(?:container|CT)\s+[\"']?(\d{3,9})\b", _I)),
    ("package", _rx(r"No\s+matching\s+distribution\s+found\s+for\s+(\S+)", _I)),
    ("package", _rx(r"Distribution\s+`([^`\s]+)", _I)),
    ("package", _rx(r"there\s+is\s+no\s+version\s+of\s+(\S+?)(?:\s+and|,|\s*$)", _I)),
)


FIELD_REGEXES: tuple[str, ...] = (_XID_RE.pattern, *(rx.pattern for _, rx in _FIELD_PATTERNS))


def cuda_from_driver_int(raw: str) -> str:
    """12080 -> '12.8' (the number torch prints for the driver's CUDA version)."""
    n = int(raw)
    return f"{n // 1000}.{(n % 1000) // 10}"


def cuda_from_tag(tag: str) -> str:
    """'cu128' -> '12.8', 'cu118' -> '11.8', 'cu92' -> '9.2'."""
    digits = tag.lower().removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else digits


def sm_of_cc(cc: str) -> str:
    """'12.0' -> '120'."""
    major, _, minor = cc.partition(".")
    return f"{int(major)}{minor or '0'}"


def arch_fix(sm: str | None) -> str:
    """What build to install for a GPU of this sm (reference/torch-matrix.md §0, §8)."""
    if not sm or not sm.isdigit():
        return (
            "Install a PyTorch build whose arch list includes this GPU "
            "(`provisioner resolve --cc <cc> --driver <version> --python <x.y>` picks one)."
        )
    n = int(sm)
    cc = f"{n // 10}.{n % 10}"
    if n >= 100:
        return (
            f"Install a CUDA 12.8+ build (torch>=2.7 from the cu128/cu129/cu130 index) with a host "
            f"driver >= 570; e.g. `provisioner resolve --cc {cc} --driver <version> --python <x.y>`."
        )
    if n < 70:
        return (
            f"Install a cu126 build (the last variant with sm_50/sm_60 SASS) and keep the driver on "
            f"R580 or older; e.g. `provisioner resolve --cc {cc} --driver <version> --python <x.y>`."
        )
    if n < 75:
        return (
            f"Install a cu126 build (sm_70 is dropped from cu13x); e.g. "
            f"`provisioner resolve --cc {cc} --driver <version> --python <x.y>`."
        )
    return (
        f"Install a PyTorch CUDA build whose arch list includes sm_{sm} (check with "
        f"`torch.cuda.get_arch_list()`); e.g. `provisioner resolve --cc {cc} --driver <version> --python <x.y>`."
    )


def log_fields(text: str) -> dict[str, str]:
    """Values found anywhere in the cleaned log, keyed by template field name."""
    fields: dict[str, str] = {}
    for name, rx in _FIELD_PATTERNS:
        if name in fields:
            continue
        m = rx.search(text)
        if m:
            fields[name] = " ".join(m.group(1).split()).rstrip(".,;:'\"`")
    if "driver_cuda" not in fields and "driver_cuda_raw" in fields:
        fields["driver_cuda"] = cuda_from_driver_int(fields["driver_cuda_raw"])
    if "torch_cuda" not in fields and "torch_cuda_tag" in fields:
        fields["torch_cuda"] = cuda_from_tag(fields["torch_cuda_tag"])
    fields.update(xid_fields(text))
    if "sm" not in fields and "cc" in fields:
        fields["sm"] = sm_of_cc(fields["cc"])
    if "cc" not in fields and "sm" in fields:
        sm = int(fields["sm"])
        fields["cc"] = f"{sm // 10}.{sm % 10}"
    add_derived(fields)
    return fields


def xid_fields(text: str) -> dict[str, str]:
    """The most telling Xid in the log (a GPU/node fault before an application one) and the catalogue's
    meaning, likely cause and action for it (provisioner/burnin/xid.py)."""
    pick = xid_table.most_telling([int(m.group(1)) for m in _XID_RE.finditer(text)])
    if pick is None:
        return {}
    entry = xid_table.XIDS[pick]
    return {
        "xid": str(pick),
        "xid_meaning": entry.meaning,
        "xid_cause": entry.cause,
        "xid_advice": f"{entry.action}: {entry.advice}",
    }


def add_derived(fields: dict[str, str]) -> None:
    """Composite fields the templates use (`gpu_arch`, `gpu_cc`, `arch_fix`)."""
    gpu, sm, cc = fields.get("gpu"), fields.get("sm"), fields.get("cc")
    if gpu and sm:
        fields["gpu_arch"] = f"{gpu} (sm_{sm})"
    elif gpu or sm:
        fields["gpu_arch"] = gpu or f"this GPU (sm_{sm})"
    if gpu and cc:
        fields["gpu_cc"] = f"{gpu} (compute capability {cc})"
    elif gpu or cc:
        fields["gpu_cc"] = gpu or f"this GPU (compute capability {cc})"
    fields["arch_fix"] = arch_fix(sm)
