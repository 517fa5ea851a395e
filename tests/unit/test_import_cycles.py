"""No import cycles inside pyqueue_sql or bench/: each module depends only on modules below it.

The graph is read from the source (ast), relative imports resolved, an import of a name from a
package counted as an import of the package's module that defines it when that is a module.
Imports under `if TYPE_CHECKING:` count too: a cycle of type annotations is still two modules
that cannot be understood one without the other."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Cycles through `if TYPE_CHECKING:` imports only (the runtime graph has none, checked below):
# none either, each module depending only downward; an entry here would be a known exception.
KNOWN_TYPE_ONLY_CYCLES: list[list[str]] = []


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under an `if TYPE_CHECKING:`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                found |= {id(n) for n in ast.walk(inner) if isinstance(n, ast.Import | ast.ImportFrom)}
    return found


def import_graph(
    sources: dict[str, tuple[str | ast.AST, bool]], with_type_checking: bool
) -> dict[str, set[str]]:
    """module -> the modules of the same tree it imports; sources: module -> (its text or parsed
    tree, is a package)."""
    graph = {}
    for module, (text, is_package) in sources.items():
        tree = text if isinstance(text, ast.AST) else ast.parse(text)
        skip = set() if with_type_checking else type_checking_only(tree)
        edges = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    if f"{target}.{alias.name}" in sources:
                        edges.add(f"{target}.{alias.name}")
                    elif target in sources:
                        edges.add(target)
            elif isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names if alias.name in sources}
        graph[module] = edges - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


@functools.cache
def sources_of(folder: str) -> dict[str, tuple[ast.AST, bool]]:
    return {
        module_name(p): (ast.parse(p.read_text(encoding="utf-8")), p.name == "__init__.py")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if "node_modules" not in p.parts and ".venv-oban" not in p.parts
    }


def test_the_package_has_no_import_cycle_at_run_time():
    assert cycles(import_graph(sources_of("pyqueue_sql"), with_type_checking=False)) == []


def test_the_package_has_no_new_import_cycle_through_type_annotations():
    assert cycles(import_graph(sources_of("pyqueue_sql"), with_type_checking=True)) == KNOWN_TYPE_ONLY_CYCLES


def test_bench_has_no_import_cycle():
    assert cycles(import_graph(sources_of("bench"), with_type_checking=True)) == []


def test_a_cycle_is_found():
    """Two modules importing each other, directly or through `from . import`, or under
    TYPE_CHECKING only (found only when those count)."""
    sources = {
        "p": ("", True),
        "p.a": ("from .b import x\n", False),
        "p.b": ("from . import c\n", False),
        "p.c": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import y\n", False),
        "p.d": ("import p.e\n", False),
        "p.e": ("from .d import z\n", False),
    }
    assert cycles(import_graph(sources, with_type_checking=True)) == [["p.a", "p.b", "p.c"], ["p.d", "p.e"]]
    assert cycles(import_graph(sources, with_type_checking=False)) == [["p.d", "p.e"]]
