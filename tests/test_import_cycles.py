"""No import circle among `provisioner` and `screens`, not even one hidden by an import inside a function,
under `if TYPE_CHECKING:` or `if False:` (issue #25). Counted as `scripts/import_cycles.py` counts them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "import_cycles.py"


def test_no_import_circle_loaded_or_hidden() -> None:
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    loaded, every = script.edges(SCRIPT.parent.parent)
    assert sum(map(len, every.values())) > 500  # the graph was read (not an empty one)
    assert script.circles(loaded) == []
    assert script.circles(every) == []
