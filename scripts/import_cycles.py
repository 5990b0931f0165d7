"""Count the import circles among the modules of `provisioner` and `screens`.

    uv run python scripts/import_cycles.py [--list] [--max-loaded N] [--max-hidden N]

The import graph is grimp's (the library import-linter builds its contracts on, so both read the same
imports). A circle is a strongly connected component of more than one module. Two graphs are counted:

- **loaded**: only the imports Python runs when the module is loaded (module level, including a top-level
  `try:`), i.e. the circles that can break an import;
- **all**: every import, including those hidden inside a function or under `if TYPE_CHECKING:` / `if False:`.
  A circle in "all" that is absent from "loaded" is hidden: it only works because an import was moved.

`--max-loaded` / `--max-hidden` make the script exit 1 when there are more circles than that (for CI).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

import grimp

ROOTS = ("provisioner", "screens")


def _guard(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:`, `if typing.TYPE_CHECKING:`, `if False:`."""
    if isinstance(test, ast.Constant) and test.value is False:
        return True
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return True
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def loaded_lines(source: str) -> set[int]:
    """Line numbers of the import statements that run when the module is loaded."""
    lines: set[int] = set()

    def walk(body: Iterable[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
            elif isinstance(node, ast.If):
                if not _guard(node.test):
                    walk(node.body)
                    walk(node.orelse)
            elif isinstance(node, ast.Try):
                walk(node.body)
                for handler in node.handlers:
                    walk(handler.body)
                walk(node.orelse)
                walk(node.finalbody)
            elif isinstance(node, ast.With):
                walk(node.body)

    walk(ast.parse(source).body)
    return lines


def _path(module: str, root: Path) -> Path:
    base = root.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def edges(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(loaded, all): importer -> imported, within ROOTS."""
    graph = grimp.build_graph(*ROOTS)
    loaded: dict[str, set[str]] = {m: set() for m in graph.modules}
    every: dict[str, set[str]] = {m: set() for m in graph.modules}
    cache: dict[str, set[int]] = {}
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported.split(".")[0] not in ROOTS:
                continue
            every[importer].add(imported)
            if importer not in cache:
                cache[importer] = loaded_lines(_path(importer, root).read_text())
            details = graph.get_import_details(importer=importer, imported=imported)
            if any(d["line_number"] in cache[importer] for d in details):
                loaded[importer].add(imported)
    return loaded, every


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print the modules of each circle")
    ap.add_argument("--max-loaded", type=int, default=None)
    ap.add_argument("--max-hidden", type=int, default=None)
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    loaded, every = edges(root)
    load_circles = circles(loaded)
    all_circles = circles(every)
    loaded_sets = [set(c) for c in load_circles]
    hidden = [c for c in all_circles if set(c) not in loaded_sets]
    print(f"circles when loaded: {len(load_circles)}; counting imports hidden in functions/TYPE_CHECKING/if False: "
          f"{len(all_circles)} ({len(hidden)} hidden)")
    if args.list:
        for title, group in (("loaded", load_circles), ("hidden", hidden)):
            for comp in group:
                print(f"  {title}: {' '.join(comp)}")
    too_many = (args.max_loaded is not None and len(load_circles) > args.max_loaded) or \
        (args.max_hidden is not None and len(hidden) > args.max_hidden)
    return 1 if too_many else 0


if __name__ == "__main__":
    raise SystemExit(main())
